package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	oldRev = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	newRev = "main@sha1:89abcdef0123456789abcdef0123456789abcdef"
)

// fleetStatuses is a fleet of four sites at now = t0: paris and tokyo on the newest
// revision (tokyo's report is stale: 4 minutes for an interval of 60s), berlin rolled back
// to the older one, oslo still on it.
func fleetStatuses() []Status {
	paris := sampleStatus("paris")
	paris.Revision, paris.RevisionTime = newRev, t0.Add(-10*time.Minute)
	paris.Time = t0.Add(-20 * time.Second)

	tokyo := sampleStatus("tokyo")
	tokyo.Labels = map[string]string{"region": "ap", "tier": "edge"}
	tokyo.Revision, tokyo.RevisionTime = newRev, t0.Add(-8*time.Minute)
	tokyo.Time = t0.Add(-4 * time.Minute)
	tokyo.Health = "Progressing"
	tokyo.Hosts = Hosts{Ready: 2, Total: 3}
	tokyo.Workloads = Workloads{Available: 10, Total: 12}

	berlin := sampleStatus("berlin")
	berlin.Revision, berlin.RevisionTime = oldRev, t0.Add(-3*24*time.Hour)
	berlin.Health, berlin.Ready, berlin.Reason = "Healthy", false, "RolledBack"
	berlin.RolledBack = &RolledBack{Revision: newRev, To: oldRev, Reason: "Deployment web/api: ProgressDeadlineExceeded"}

	oslo := sampleStatus("oslo")
	oslo.Labels = nil
	oslo.Revision, oslo.RevisionTime = oldRev, t0.Add(-5*time.Hour)
	return []Status{berlin, oslo, paris, tokyo}
}

func TestFormatText(t *testing.T) {
	rep := Summarize(fleetStatuses(), nil, t0)
	var b bytes.Buffer
	if err := WriteText(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `SITE   LABELS               REVISION           AGE  HEALTH       HOSTS  WORKLOADS  LAST REPORT
paris  region=eu            main@sha1:89abcde  10m  Healthy      3/3    12/12      20s
tokyo  region=ap,tier=edge  main@sha1:89abcde  8m   Progressing  2/3    10/12      4m STALE

Still on an older revision:
SITE    LABELS     REVISION           AGE  HEALTH                                                               HOSTS  WORKLOADS  LAST REPORT
berlin  region=eu  main@sha1:0123456  3d   Healthy (rolled back: Deployment web/api: ProgressDeadlineExceeded)  3/3    12/12      0s
oslo    -          main@sha1:0123456  5h   Healthy                                                              3/3    12/12      0s
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// fold folds runs of spaces into one.
func fold(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

func TestFormatMarkdown(t *testing.T) {
	sts := fleetStatuses()
	sts[2].Message = "x"
	sts[3].Labels["tier"] = "edge"
	rep := Summarize(sts, []error{&RefError{Ref: "refs/flotilla/status/bad", Err: errors.New("status.json is not a status document: <b>|x|")}}, t0)
	var b bytes.Buffer
	if err := WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `**Fleet status** (4 sites, 2026-03-01T12:00:00Z)

| SITE | LABELS | REVISION | AGE | HEALTH | HOSTS | WORKLOADS | LAST REPORT |
| --- | --- | --- | --- | --- | --- | --- | --- |
| paris | region=eu | main@sha1:89abcde | 10m | Healthy | 3/3 | 12/12 | 20s |
| tokyo | region=ap,tier=edge | main@sha1:89abcde | 8m | Progressing | 2/3 | 10/12 | 4m STALE |

**Still on an older revision:**

| SITE | LABELS | REVISION | AGE | HEALTH | HOSTS | WORKLOADS | LAST REPORT |
| --- | --- | --- | --- | --- | --- | --- | --- |
| berlin | region=eu | main@sha1:0123456 | 3d | Healthy (rolled back: Deployment web/api: ProgressDeadlineExceeded) | 3/3 | 12/12 | 0s |
| oslo | - | main@sha1:0123456 | 5h | Healthy | 3/3 | 12/12 | 0s |

**Reports that could not be read:**

- refs/flotilla/status/bad: status.json is not a status document: &lt;b&gt;\|x\|
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestFormatJSON(t *testing.T) {
	rep := Summarize(fleetStatuses(), nil, t0)
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Time  time.Time `json:"time"`
		Sites []struct {
			Site           string `json:"site"`
			Revision       string `json:"revision"`
			Stale          bool   `json:"stale"`
			Behind         bool   `json:"behind"`
			NewestRevision string `json:"newestRevision"`
			Hosts          Hosts  `json:"hosts"`
			RolledBack     *RolledBack
		} `json:"sites"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	summary := []string{}
	for _, s := range got.Sites {
		summary = append(summary, s.Site+" stale="+boolStr(s.Stale)+" behind="+boolStr(s.Behind)+" newest="+ShortRevision(s.NewestRevision))
	}
	want := []string{
		"paris stale=false behind=false newest=main@sha1:89abcde",
		"tokyo stale=true behind=false newest=main@sha1:89abcde",
		"berlin stale=false behind=true newest=main@sha1:89abcde",
		"oslo stale=false behind=true newest=main@sha1:89abcde",
	}
	if strings.Join(summary, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s\n(JSON %s)", strings.Join(summary, "\n"), strings.Join(want, "\n"), b.String())
	}
	if !got.Time.Equal(t0) || got.Sites[2].RolledBack == nil || got.Sites[0].Hosts.Total != 3 {
		t.Errorf("JSON misses fields: %s", b.String())
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestSummarizeTracks(t *testing.T) {
	// A site on another branch is not behind the sites of main.
	a := sampleStatus("a")
	a.Revision, a.RevisionTime = newRev, t0
	b := sampleStatus("b")
	b.Revision, b.RevisionTime = "staging@sha1:"+strings.Repeat("e", 40), t0.Add(-time.Hour)
	c := sampleStatus("c")
	c.Revision, c.RevisionTime = "", time.Time{}
	rep := Summarize([]Status{a, b, c}, nil, t0)
	for _, s := range rep.Sites {
		if s.Behind {
			t.Errorf("site %s is behind %s, want no site behind", s.Site, s.NewestRevision)
		}
	}
	var out bytes.Buffer
	if err := WriteText(&out, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fold(out.String()), "c region=eu - - Healthy") {
		t.Errorf("a site without a revision: got\n%s", out.String())
	}
}

func TestFormatSanitizes(t *testing.T) {
	st := sampleStatus("evil")
	st.RolledBack = &RolledBack{Revision: newRev, To: oldRev, Reason: "\x1b]0;owned\x07\x1b[2J"}
	var b bytes.Buffer
	if err := WriteText(&b, Summarize([]Status{st}, nil, t0)); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("escape sequences reach the terminal: %q", b.String())
	}
}

func TestAgeAndShortRevision(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Minute: "0s", 45 * time.Second: "45s", 12 * time.Minute: "12m", 5 * time.Hour: "5h", 47 * time.Hour: "47h", 72 * time.Hour: "3d",
	} {
		if got := Age(t0, t0.Add(-d)); got != want {
			t.Errorf("Age(%v) = %s, want %s", d, got, want)
		}
	}
	for in, want := range map[string]string{
		oldRev: "main@sha1:0123456", "sha1:" + strings.Repeat("a", 40): "sha1:aaaaaaa", "v1.2.3@sha1:abc": "v1.2.3@sha1:abc",
	} {
		if got := ShortRevision(in); got != want {
			t.Errorf("ShortRevision(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestFormatHeld: a site holding a revision back says which and why, in the table and in
// the document (which refuses a held entry without its revision).
func TestFormatHeld(t *testing.T) {
	oslo := sampleStatus("oslo")
	oslo.Revision, oslo.RevisionTime = oldRev, t0.Add(-5*time.Hour)
	oslo.HealthySince = t0.Add(-4 * time.Hour)
	oslo.Held = &Held{Revision: newRev, Reason: "site paris rolled it back"}
	var b bytes.Buffer
	if err := WriteText(&b, Summarize([]Status{oslo}, nil, t0)); err != nil {
		t.Fatal(err)
	}
	if want := "Healthy (holding main@sha1:89abcde: site paris rolled it back)"; !strings.Contains(b.String(), want) {
		t.Errorf("table %q does not say %q", b.String(), want)
	}
	doc, err := Encode(oslo)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(doc)
	if err != nil || back.Held == nil || back.Held.Revision != newRev || !back.HealthySince.Equal(oslo.HealthySince) {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	oslo.Held.Revision = ""
	if _, err := Encode(oslo); err == nil || !strings.Contains(err.Error(), "held: revision must be set") {
		t.Errorf("held without a revision: %v", err)
	}
}
