package validation

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CronSchedule is a parsed five-field cron schedule (standard cron syntax): one bit per allowed
// value of each field.
type CronSchedule struct {
	Minute, Hour, DayOfMonth, Month, DayOfWeek uint64
	// DayOfMonthStar and DayOfWeekStar record a field written as "*" or "?": when both day fields
	// are restricted they combine with OR, otherwise with AND.
	DayOfMonthStar, DayOfWeekStar bool
}

// Matches reports whether the schedule fires at t's minute (in t's location).
func (s *CronSchedule) Matches(t time.Time) bool {
	if s.Minute&(1<<uint(t.Minute())) == 0 || s.Hour&(1<<uint(t.Hour())) == 0 || s.Month&(1<<uint(t.Month())) == 0 {
		return false
	}
	dom := s.DayOfMonth&(1<<uint(t.Day())) != 0
	dow := s.DayOfWeek&(1<<uint(t.Weekday())) != 0
	if s.DayOfMonthStar || s.DayOfWeekStar {
		return dom && dow
	}
	return dom || dow
}

type cronField struct {
	name     string
	min, max uint
	names    map[string]uint
}

var (
	cronMinute = cronField{name: "minute", min: 0, max: 59}
	cronHour   = cronField{name: "hour", min: 0, max: 23}
	cronDom    = cronField{name: "day of month", min: 1, max: 31}
	cronMonth  = cronField{name: "month", min: 1, max: 12, names: map[string]uint{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	// Day of week accepts 7 as Sunday; parse folds it onto 0.
	cronDow = cronField{name: "day of week", min: 0, max: 7, names: map[string]uint{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
)

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// ParseCronSchedule parses a standard five-field cron expression (minute hour day-of-month month
// day-of-week) with lists, ranges, steps and the names JAN-DEC and SUN-SAT, or one of the macros
// @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly. Time zones are not part
// of the schedule: CronJob has spec.timeZone for that.
func ParseCronSchedule(spec string) (*CronSchedule, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("empty spec string")
	}
	if strings.HasPrefix(spec, "@") {
		expanded, ok := cronMacros[strings.ToLower(spec)]
		if !ok {
			return nil, fmt.Errorf("unrecognized descriptor: %s (supported: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)", spec)
		}
		spec = expanded
	}
	fields := strings.Fields(spec)
	if len(fields) != 5 {
		return nil, fmt.Errorf("expected exactly 5 fields (minute hour day-of-month month day-of-week), found %d: %s", len(fields), spec)
	}
	var s CronSchedule
	var err error
	if s.Minute, _, err = parseCronField(fields[0], cronMinute); err != nil {
		return nil, err
	}
	if s.Hour, _, err = parseCronField(fields[1], cronHour); err != nil {
		return nil, err
	}
	if s.DayOfMonth, s.DayOfMonthStar, err = parseCronField(fields[2], cronDom); err != nil {
		return nil, err
	}
	if s.Month, _, err = parseCronField(fields[3], cronMonth); err != nil {
		return nil, err
	}
	if s.DayOfWeek, s.DayOfWeekStar, err = parseCronField(fields[4], cronDow); err != nil {
		return nil, err
	}
	if s.DayOfWeek&(1<<7) != 0 {
		s.DayOfWeek = s.DayOfWeek&^(1<<7) | 1
	}
	return &s, nil
}

// parseCronField parses one comma-separated field; star is true when the field is "*" or "?".
func parseCronField(text string, f cronField) (bits uint64, star bool, err error) {
	for _, item := range strings.Split(text, ",") {
		b, st, err := parseCronItem(item, f)
		if err != nil {
			return 0, false, err
		}
		bits |= b
		star = star || st
	}
	return bits, star, nil
}

func parseCronItem(item string, f cronField) (uint64, bool, error) {
	if item == "" {
		return 0, false, fmt.Errorf("empty item in %s field", f.name)
	}
	rangePart, stepPart, hasStep := strings.Cut(item, "/")
	var lo, hi uint
	star := false
	switch {
	case rangePart == "*" || rangePart == "?":
		lo, hi, star = f.min, f.max, true
		if f.name == cronDow.name {
			hi = 6 // "*" means every day once; 7 would duplicate Sunday.
		}
	default:
		a, b, isRange := strings.Cut(rangePart, "-")
		var err error
		if lo, err = parseCronValue(a, f); err != nil {
			return 0, false, err
		}
		hi = lo
		if isRange {
			if hi, err = parseCronValue(b, f); err != nil {
				return 0, false, err
			}
		} else if hasStep {
			// "N/step" means from N to the end of the range.
			hi = f.max
		}
	}
	if lo > hi {
		return 0, false, fmt.Errorf("beginning of range (%d) beyond end of range (%d) in %s field: %s", lo, hi, f.name, item)
	}
	step := uint(1)
	if hasStep {
		n, err := strconv.ParseUint(stepPart, 10, 8)
		if err != nil || n == 0 {
			return 0, false, fmt.Errorf("step of range should be a positive number in %s field: %s", f.name, item)
		}
		step = uint(n)
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << v
	}
	return bits, star, nil
}

func parseCronValue(s string, f cronField) (uint, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		if f.names != nil {
			return 0, fmt.Errorf("invalid value %q in %s field: use a number from %d to %d or a name such as %s", s, f.name, f.min, f.max, exampleName(f))
		}
		return 0, fmt.Errorf("invalid value %q in %s field: use a number from %d to %d", s, f.name, f.min, f.max)
	}
	if uint(n) < f.min || uint(n) > f.max {
		return 0, fmt.Errorf("value %d out of range %d-%d in %s field", n, f.min, f.max, f.name)
	}
	return uint(n), nil
}

func exampleName(f cronField) string {
	if f.name == cronMonth.name {
		return "JAN"
	}
	return "MON"
}
