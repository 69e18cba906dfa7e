package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/fleet"
	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

var fleetNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fleetRepo is a bare repository three sites reported to: paris and tokyo on the newest
// revision (tokyo stale), oslo on an older one; plus a ref that is not a status document.
func fleetRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "site.git")
	if out, err := exec.Command("git", "init", "--bare", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	remote := gitremote.Remote{URL: "file://" + dir}
	const newRev, oldRev = "main@sha1:89abcdef0123456789abcdef0123456789abcdef", "main@sha1:0123456789abcdef0123456789abcdef01234567"
	for _, s := range []struct {
		site, rev string
		revAge    time.Duration
		reported  time.Duration
	}{
		{"paris", newRev, 10 * time.Minute, 20 * time.Second},
		{"tokyo", newRev, 8 * time.Minute, 4 * time.Minute},
		{"oslo", oldRev, 5 * time.Hour, 30 * time.Second},
	} {
		st := fleet.Status{
			Site: s.site, Labels: map[string]string{"region": "eu"}, Source: "flotilla-system/site",
			Revision: s.rev, RevisionTime: fleetNow.Add(-s.revAge), Health: "Healthy", Ready: true,
			Hosts: fleet.Hosts{Ready: 3, Total: 3}, Workloads: fleet.Workloads{Available: 5, Total: 5},
			Time: fleetNow.Add(-s.reported), StatusInterval: 60, Version: "test",
		}
		if err := fleet.Write(context.Background(), remote, st); err != nil {
			t.Fatal(err)
		}
	}
	// A status ref that holds no status document.
	work := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "not a status"},
		{"push", "-q", dir, "HEAD:refs/flotilla/status/broken"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func runFleet(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newFleetCommandAt(func() time.Time { return fleetNow })
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"status"}, args...))
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestFleetStatusText(t *testing.T) {
	dir := fleetRepo(t)
	out, errOut, err := runFleet(t, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	want := `SITE   LABELS     REVISION           AGE  HEALTH   HOSTS  WORKLOADS  LAST REPORT
paris  region=eu  main@sha1:89abcde  10m  Healthy  3/3    5/5        20s
tokyo  region=eu  main@sha1:89abcde  8m   Healthy  3/3    5/5        4m STALE

Still on an older revision:
SITE  LABELS     REVISION           AGE  HEALTH   HOSTS  WORKLOADS  LAST REPORT
oslo  region=eu  main@sha1:0123456  5h   Healthy  3/3    5/5        30s
`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(errOut, "warning: refs/flotilla/status/broken:") || !strings.Contains(errOut, "has no status.json") {
		t.Errorf("stderr %q: want a warning naming the broken ref", errOut)
	}

	// A directory: the bare repository itself, and a clone of it (read through its origin).
	if out2, _, err := runFleet(t, dir); err != nil || out2 != want {
		t.Errorf("REPO as a directory: %v\n%s", err, out2)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	if o, err := exec.Command("git", "clone", "-q", dir, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, o)
	}
	if out3, _, err := runFleet(t, clone); err != nil || out3 != want {
		t.Errorf("REPO as a clone: %v\n%s", err, out3)
	}
}

func TestFleetStatusMarkdownAndJSON(t *testing.T) {
	dir := fleetRepo(t)
	md, _, err := runFleet(t, "file://"+dir, "--output", "markdown")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| tokyo | region=eu | main@sha1:89abcde | 8m | Healthy | 3/3 | 5/5 | 4m STALE |",
		"**Still on an older revision:**",
		"| oslo | region=eu | main@sha1:0123456 | 5h |",
		"- refs/flotilla/status/broken: commit ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	js, _, err := runFleet(t, "file://"+dir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Sites []struct {
			Site   string `json:"site"`
			Stale  bool   `json:"stale"`
			Behind bool   `json:"behind"`
		} `json:"sites"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	var got []string
	for _, s := range rep.Sites {
		got = append(got, s.Site+map[bool]string{true: " stale", false: ""}[s.Stale]+map[bool]string{true: " behind", false: ""}[s.Behind])
	}
	if strings.Join(got, ",") != "paris,tokyo stale,oslo behind" || len(rep.Errors) != 1 {
		t.Errorf("sites %v, errors %v\n%s", got, rep.Errors, js)
	}
}

func TestFleetStatusFailures(t *testing.T) {
	missing := "file://" + filepath.Join(t.TempDir(), "missing.git")
	if _, _, err := runFleet(t, missing); err == nil || !strings.Contains(err.Error(), "read the fleet status from") {
		t.Errorf("unreachable repository: %v, want an error (exit 1)", err)
	}
	for args, want := range map[string]string{
		"file:///x --output yaml":                                "want text, markdown or json",
		"http://git.example/a.git":                               "--insecure",
		"http://git.example/a.git --password-file=/etc/hostname": "never sent over http://",
		"ssh://git@git.example/a.git":                            "--ssh-key",
		"https://git.example/a.git --ssh-key=/x":                 "--ssh-key is for ssh URLs",
		"file:///x --username u":                                 "credentials are for https:// and ssh://",
	} {
		_, _, err := runFleet(t, strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", args, err, want)
		}
	}
}
