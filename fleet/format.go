package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// StaleAfter is how many heartbeat periods (statusInterval) a site may miss before its
// report is stale.
const StaleAfter = 3

// Report is the fleet as `fleet status` shows it: the JSON output, and what the table and
// markdown outputs are printed from.
type Report struct {
	// Time is the "now" ages are measured from.
	Time time.Time `json:"time"`
	// Sites are on the newest revision of their track first, then the ones behind, each
	// part sorted by site.
	Sites []SiteReport `json:"sites"`
	// Errors are the refs that could not be read.
	Errors []string `json:"errors,omitempty"`
}

// SiteReport is a site's status and what the reader concludes from it.
type SiteReport struct {
	Status
	// Stale is set when the report is older than StaleAfter heartbeat periods.
	Stale bool `json:"stale"`
	// Behind is set when another site of the same track (same source and ref) reports a
	// revision it first applied later than this site's: NewestRevision.
	Behind         bool   `json:"behind"`
	NewestRevision string `json:"newestRevision,omitempty"`
}

// Summarize marks stale sites and sites behind the newest revision of their track. A
// track is the source and the ref of the revision ("flotilla-system/site", "main"): sites
// deploying different branches or sources are not compared. The newest revision of a
// track is the one with the latest revisionTime (ties: the greater revision string).
func Summarize(statuses []Status, errs []error, now time.Time) Report {
	rep := Report{Time: now, Sites: make([]SiteReport, 0, len(statuses))}
	newest := map[string]Status{}
	for _, st := range statuses {
		if st.Revision == "" {
			continue
		}
		k := track(st)
		n, ok := newest[k]
		if !ok || st.RevisionTime.After(n.RevisionTime) || (st.RevisionTime.Equal(n.RevisionTime) && st.Revision > n.Revision) {
			newest[k] = st
		}
	}
	for _, st := range statuses {
		sr := SiteReport{Status: st, Stale: now.Sub(st.Time) > StaleAfter*st.Interval()}
		if n, ok := newest[track(st)]; ok && st.Revision != "" {
			sr.NewestRevision = n.Revision
			sr.Behind = st.Revision != n.Revision
		}
		rep.Sites = append(rep.Sites, sr)
	}
	sort.SliceStable(rep.Sites, func(i, j int) bool {
		a, b := rep.Sites[i], rep.Sites[j]
		if a.Behind != b.Behind {
			return !a.Behind
		}
		return a.Site < b.Site
	})
	for _, err := range errs {
		rep.Errors = append(rep.Errors, err.Error())
	}
	return rep
}

// track is what revisions are compared within: the source and the revision's ref.
func track(st Status) string {
	ref, _ := splitRevision(st.Revision)
	return st.Source + "\x00" + ref
}

// splitRevision splits "<ref>@<algo>:<hex>" into the ref and the commit ("" and the whole
// for a commit revision).
func splitRevision(rev string) (ref, commit string) {
	if i := strings.LastIndex(rev, "@"); i >= 0 {
		return rev[:i], rev[i+1:]
	}
	return "", rev
}

// ShortRevision shortens the commit of a revision to 7 hex digits: main@sha1:0123456.
func ShortRevision(rev string) string {
	ref, commit := splitRevision(rev)
	if algo, hex, ok := strings.Cut(commit, ":"); ok && len(hex) > 7 {
		commit = algo + ":" + hex[:7]
	}
	if ref == "" {
		return commit
	}
	return ref + "@" + commit
}

// Age formats how long ago t was: 45s, 12m, 5h, 3d ("-" for no time; a time in the future,
// from a clock ahead of ours, is 0s).
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

var header = []string{"SITE", "LABELS", "REVISION", "AGE", "HEALTH", "HOSTS", "WORKLOADS", "LAST REPORT"}

// row is the cells of a site, as written by the site: the callers sanitize them.
func (rep *Report) row(s SiteReport) []string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	labels := make([]string, len(keys))
	for i, k := range keys {
		labels[i] = k + "=" + s.Labels[k]
	}
	health := s.Health
	if s.RolledBack != nil {
		reason := s.RolledBack.Reason
		if reason == "" {
			reason = "from " + ShortRevision(s.RolledBack.Revision)
		}
		health += " (rolled back: " + truncate(reason, 80) + ")"
	}
	if s.Held != nil {
		health += " (holding " + ShortRevision(s.Held.Revision) + ": " + truncate(s.Held.Reason, 80) + ")"
	}
	last := Age(rep.Time, s.Time)
	if s.Stale {
		last += " STALE"
	}
	rev, age := ShortRevision(s.Revision), Age(rep.Time, s.RevisionTime)
	if s.Revision == "" {
		rev = "-"
	}
	return []string{
		s.Site, orDash(strings.Join(labels, ",")), rev, age, health,
		fmt.Sprintf("%d/%d", s.Hosts.Ready, s.Hosts.Total),
		fmt.Sprintf("%d/%d", s.Workloads.Available, s.Workloads.Total),
		last,
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// split returns the sites on the newest revision of their track and those behind it.
func (rep *Report) split() (current, behind []SiteReport) {
	for _, s := range rep.Sites {
		if s.Behind {
			behind = append(behind, s)
		} else {
			current = append(current, s)
		}
	}
	return current, behind
}

// WriteText prints the report as a table, the sites behind in a second table under
// "Still on an older revision:". Everything a site wrote is printed with control
// characters replaced, so a report cannot drive the terminal.
func WriteText(w io.Writer, rep Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	current, behind := rep.split()
	table := func(sites []SiteReport) {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, s := range sites {
			cells := rep.row(s)
			for i := range cells {
				cells[i] = Plain(cells[i])
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
	}
	if len(rep.Sites) == 0 {
		fmt.Fprintln(tw, "No site has reported its status to this repository.")
	} else if len(current) > 0 {
		table(current)
	}
	if len(behind) > 0 {
		if len(current) > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw, "Still on an older revision:")
		table(behind)
	}
	return tw.Flush()
}

// Plain replaces control characters (and tabs, which would break the columns) by spaces.
func Plain(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return ' '
		}
		return r
	}, s)
}

// WriteMarkdown prints the report as GitHub-flavoured markdown, for a pull request comment:
// one table, the sites behind in a second one, then the refs that could not be read.
func WriteMarkdown(w io.Writer, rep Report) error {
	var b strings.Builder
	current, behind := rep.split()
	table := func(sites []SiteReport) {
		b.WriteString("| " + strings.Join(header, " | ") + " |\n")
		b.WriteString("|" + strings.Repeat(" --- |", len(header)) + "\n")
		for _, s := range sites {
			cells := rep.row(s)
			for i := range cells {
				cells[i] = mdCell(cells[i])
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	b.WriteString(fmt.Sprintf("**Fleet status** (%d sites, %s)\n\n", len(rep.Sites), rep.Time.UTC().Format(time.RFC3339)))
	if len(rep.Sites) == 0 {
		b.WriteString("No site has reported its status to this repository.\n")
	} else if len(current) > 0 {
		table(current)
	}
	if len(behind) > 0 {
		b.WriteString("\n**Still on an older revision:**\n\n")
		table(behind)
	}
	if len(rep.Errors) > 0 {
		b.WriteString("\n**Reports that could not be read:**\n\n")
		for _, e := range rep.Errors {
			b.WriteString("- " + mdCell(e) + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell escapes what would end a table cell or be read as markup: pipes, backslashes,
// HTML, emphasis and code marks; newlines become spaces.
func mdCell(s string) string {
	var b strings.Builder
	for _, r := range Plain(s) {
		switch r {
		case '|', '\\', '*', '_', '`', '[', ']', '~':
			b.WriteRune('\\')
			b.WriteRune(r)
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// WriteJSON prints the report as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
