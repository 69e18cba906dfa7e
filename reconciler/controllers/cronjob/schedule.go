package cronjob

import (
	"time"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// MaxMissedStarts is upstream's limit: with more missed start times than this the controller
// refuses to guess which run to start.
const MaxMissedStarts = 100

// TooManyMissedMessage is upstream's exact event message for more than MaxMissedStarts.
const TooManyMissedMessage = "Cannot determine if job needs to be started. Too many missed start time (> 100). Set or decrease .spec.startingDeadlineSeconds or check clock skew."

// maxScan bounds the minutes a schedule search steps through (a little over four years, so
// that even @yearly on 29 February is found).
const maxScan = 4*366*24*60 + 1

// Schedule is a parsed schedule evaluated in a location.
type Schedule struct {
	cron *validation.CronSchedule
	loc  *time.Location
}

// ParseSchedule parses spec (five fields or a macro) for evaluation in loc (nil: UTC).
func ParseSchedule(spec string, loc *time.Location) (*Schedule, error) {
	s, err := validation.ParseCronSchedule(spec)
	if err != nil {
		return nil, err
	}
	if loc == nil {
		loc = time.UTC
	}
	return &Schedule{cron: s, loc: loc}, nil
}

// Next returns the first scheduled time strictly after t, or the zero time when none is found
// within the bounded search.
func (s *Schedule) Next(t time.Time) time.Time {
	m := t.In(s.loc).Truncate(time.Minute).Add(time.Minute)
	for i := 0; i < maxScan; i++ {
		if s.cron.Matches(m) {
			return m
		}
		m = m.Add(time.Minute)
	}
	return time.Time{}
}

// MostRecent returns the latest scheduled time in (earliest, now] and how many scheduled times
// that window holds (counting stops just past MaxMissedStarts). A nil time means none is due.
func (s *Schedule) MostRecent(earliest, now time.Time) (*time.Time, int) {
	var last *time.Time
	n := 0
	// Count forward from earliest; past the limit, search backward from now for the latest.
	for t := s.Next(earliest); !t.IsZero() && !t.After(now); t = s.Next(t) {
		tt := t
		last = &tt
		n++
		if n > MaxMissedStarts {
			m := now.In(s.loc).Truncate(time.Minute)
			for !s.cron.Matches(m) {
				m = m.Add(-time.Minute)
			}
			return &m, n
		}
	}
	return last, n
}
