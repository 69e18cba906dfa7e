package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

// bareRepo creates an empty bare repository with the git binary and returns its file:// URL.
func bareRepo(tb testing.TB) (dir, url string) {
	tb.Helper()
	dir = filepath.Join(tb.TempDir(), "source.git")
	gitCmd(tb, "", "init", "--bare", "-q", dir)
	return dir, "file://" + dir
}

// gitCmd runs git in dir and returns its trimmed output.
func gitCmd(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sampleStatus(site string) Status {
	return Status{
		Site:           site,
		Labels:         map[string]string{"region": "eu"},
		Source:         "flotilla-system/site",
		Revision:       "main@sha1:0123456789abcdef0123456789abcdef01234567",
		RevisionTime:   t0.Add(-time.Hour),
		Health:         "Healthy",
		Ready:          true,
		Reason:         "Succeeded",
		Message:        "applied 12 objects",
		Hosts:          Hosts{Ready: 3, Total: 3},
		Workloads:      Workloads{Available: 12, Total: 12},
		Time:           t0,
		StatusInterval: 60,
		Version:        "v0.9.0",
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, url := bareRepo(t)
	remote := gitremote.Remote{URL: url}
	a := sampleStatus("paris")
	a.RolledBack = &RolledBack{Revision: "main@sha1:1111111111111111111111111111111111111111", To: a.Revision, Reason: "Deployment web/api: ProgressDeadlineExceeded"}
	a.Health, a.Ready, a.Reason = "Degraded", false, "RolledBack"
	b := sampleStatus("tokyo")
	b.Labels = nil
	if err := Write(ctx, remote, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteBranch(ctx, remote, b); err != nil {
		t.Fatal(err)
	}
	got, errs := Read(ctx, remote)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(got) != 2 {
		t.Fatalf("read %d statuses, want 2: %+v", len(got), got)
	}
	for i, want := range []Status{a, b} {
		g := got[i]
		if g.Site != want.Site || g.Revision != want.Revision || !g.Time.Equal(want.Time) || !g.RevisionTime.Equal(want.RevisionTime) ||
			g.Health != want.Health || g.Ready != want.Ready || g.Hosts != want.Hosts || g.Workloads != want.Workloads ||
			g.StatusInterval != want.StatusInterval || g.Version != want.Version || g.Labels["region"] != want.Labels["region"] ||
			(want.RolledBack != nil) != (g.RolledBack != nil) || (g.RolledBack != nil && *g.RolledBack != *want.RolledBack) {
			t.Errorf("site %s: read\n%+v\nwant\n%+v", want.Site, g, want)
		}
	}
}

func TestWriteReplaces(t *testing.T) {
	ctx := context.Background()
	dir, url := bareRepo(t)
	remote := gitremote.Remote{URL: url}
	st := sampleStatus("paris")
	for i := range 3 {
		st.Time = t0.Add(time.Duration(i) * time.Minute)
		st.Workloads.Available = 10 + i
		if err := Write(ctx, remote, st); err != nil {
			t.Fatal(err)
		}
	}
	// The same report again is the same commit: a no-op.
	if err := Write(ctx, remote, st); err != nil {
		t.Fatal(err)
	}
	if n := gitCmd(t, dir, "rev-list", "--count", RefPrefix+"paris"); n != "1" {
		t.Errorf("refs/flotilla/status/paris holds %s commits, want 1 (a parentless commit replaced each time)", n)
	}
	if files := gitCmd(t, dir, "ls-tree", "--name-only", RefPrefix+"paris"); files != FileName {
		t.Errorf("the status commit holds %q, want only %s", files, FileName)
	}
	got, errs := Read(ctx, remote)
	if len(errs) > 0 || len(got) != 1 || got[0].Workloads.Available != 12 || !got[0].Time.Equal(st.Time) {
		t.Fatalf("read %+v, %v: want the last report only", got, errs)
	}
}

func TestWriteRefusesBadStatus(t *testing.T) {
	_, url := bareRepo(t)
	remote := gitremote.Remote{URL: url}
	for name, mutate := range map[string]func(*Status){
		"upper-case site":   func(s *Status) { s.Site = "Paris" },
		"slash in site":     func(s *Status) { s.Site = "eu/paris" },
		"long site":         func(s *Status) { s.Site = strings.Repeat("a", 64) },
		"empty site":        func(s *Status) { s.Site = "" },
		"health":            func(s *Status) { s.Health = "Fine" },
		"hosts":             func(s *Status) { s.Hosts = Hosts{Ready: 4, Total: 3} },
		"interval":          func(s *Status) { s.StatusInterval = 0 },
		"no time":           func(s *Status) { s.Time = time.Time{} },
		"source":            func(s *Status) { s.Source = "site" },
		"label":             func(s *Status) { s.Labels = map[string]string{"bad key!": "x"} },
		"control in reason": func(s *Status) { s.Reason = "a\x1b[31mred" },
		"huge document": func(s *Status) {
			s.Labels = map[string]string{}
			for i := range 32 {
				s.Labels[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 63)
			}
			s.Message = strings.Repeat("m", MaxMessage)
			s.RolledBack = &RolledBack{Revision: strings.Repeat("r", 512), To: strings.Repeat("t", 512), Reason: strings.Repeat("x", MaxMessage)}
			s.Revision = strings.Repeat("r", 512)
			s.Version = strings.Repeat("v", 256)
			s.Reason = strings.Repeat("v", 256)
			// Still under 16 KiB: the caps keep every valid document small.
		},
	} {
		st := sampleStatus("paris")
		mutate(&st)
		err := Write(context.Background(), remote, st)
		if name == "huge document" {
			if err != nil {
				t.Errorf("%s: %v (the field caps alone must keep a document under %d bytes)", name, err, MaxDocument)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: written, want a refusal", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// A long message is cut, not refused: the report matters more than its last words.
	st := sampleStatus("lyon")
	st.Message = strings.Repeat("é", MaxMessage)
	if err := Write(context.Background(), remote, st); err != nil {
		t.Fatal(err)
	}
	got, errs := Read(context.Background(), remote)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range got {
		if g.Site == "lyon" && (len(g.Message) > MaxMessage || !strings.HasSuffix(g.Message, "...")) {
			t.Errorf("message of %d bytes, want it cut to %d ending in ...", len(g.Message), MaxMessage)
		}
	}
}

// pushRaw commits files to ref of the bare repository dir with the git binary, as a
// careless or hostile writer would.
func pushRaw(t *testing.T, dir, ref string, files map[string]string) {
	t.Helper()
	work := t.TempDir()
	gitCmd(t, work, "init", "-q")
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "--allow-empty", "-m", "raw")
	gitCmd(t, work, "push", "-q", "-f", dir, "HEAD:"+ref)
}

func TestReadReportsBrokenDocumentsPerRef(t *testing.T) {
	ctx := context.Background()
	dir, url := bareRepo(t)
	remote := gitremote.Remote{URL: url}
	if err := Write(ctx, remote, sampleStatus("paris")); err != nil {
		t.Fatal(err)
	}
	pushRaw(t, dir, RefPrefix+"broken", map[string]string{FileName: "{not json"})
	pushRaw(t, dir, RefPrefix+"empty", map[string]string{"README": "hi"})
	pushRaw(t, dir, BranchPrefix+"impostor", map[string]string{FileName: mustEncode(t, sampleStatus("tokyo"))})
	pushRaw(t, dir, RefPrefix+"Bad_Name", map[string]string{FileName: "{}"})
	// Unrelated refs are not read.
	pushRaw(t, dir, "refs/heads/main", map[string]string{"kustomization.yaml": "resources: []\n"})

	got, errs := Read(ctx, remote)
	if len(got) != 1 || got[0].Site != "paris" {
		t.Errorf("read %+v, want the one good report (paris)", got)
	}
	want := map[string]string{
		RefPrefix + "broken":      "not a status document",
		RefPrefix + "empty":       "has no status.json",
		BranchPrefix + "impostor": `status of site "tokyo", not of "impostor"`,
		RefPrefix + "Bad_Name":    "is not a site name",
	}
	for _, err := range errs {
		var re *RefError
		if !errors.As(err, &re) {
			t.Errorf("error %v is not a *RefError", err)
			continue
		}
		if w, ok := want[re.Ref]; !ok || !strings.Contains(err.Error(), w) {
			t.Errorf("error for %s: %v, want it to say %q", re.Ref, err, w)
		}
		delete(want, re.Ref)
	}
	for ref := range want {
		t.Errorf("no error for %s", ref)
	}
}

func mustEncode(t *testing.T, st Status) string {
	t.Helper()
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadEmptyAndUnreachable(t *testing.T) {
	ctx := context.Background()
	_, url := bareRepo(t)
	if got, errs := Read(ctx, gitremote.Remote{URL: url}); len(got) != 0 || len(errs) != 0 {
		t.Errorf("empty repository: read %v, %v; want nothing", got, errs)
	}
	_, errs := Read(ctx, gitremote.Remote{URL: "file://" + filepath.Join(t.TempDir(), "missing.git")})
	var re *RefError
	if len(errs) != 1 || errors.As(errs[0], &re) {
		t.Errorf("missing repository: %v, want one error that is not a *RefError", errs)
	}
	if _, errs := Read(ctx, gitremote.Remote{URL: "http://example.invalid/x.git"}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "in the clear") {
		t.Errorf("http without insecure: %v, want a refusal", errs)
	}
}

func TestRepoURL(t *testing.T) {
	dir, url := bareRepo(t)
	if got, err := RepoURL(dir); err != nil || got != url {
		t.Errorf("bare repository: %q, %v; want %q", got, err, url)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	gitCmd(t, "", "clone", "-q", dir, clone)
	if got, err := RepoURL(clone); err != nil || (got != dir && got != url) {
		t.Errorf("clone: %q, %v; want its origin %q", got, err, dir)
	}
	if got, err := RepoURL("https://git.example/a.git"); err != nil || got != "https://git.example/a.git" {
		t.Errorf("URL: %q, %v", got, err)
	}
	if _, err := RepoURL(t.TempDir()); err == nil {
		t.Error("a directory that is no repository: want an error")
	}
}

// writeConcurrently has n sites write their status to url at once and returns the errors.
func writeConcurrently(ctx context.Context, url string, n int, at time.Time) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			st := sampleStatus(fmt.Sprintf("site-%03d", i))
			st.Time = at
			errs[i] = Write(ctx, gitremote.Remote{URL: url}, st)
		})
	}
	wg.Wait()
	return errs
}

func TestConcurrentWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("100 git-receive-pack processes")
	}
	ctx := context.Background()
	_, url := bareRepo(t)
	const n = 100
	for round := range 2 {
		start := time.Now()
		for _, err := range writeConcurrently(ctx, url, n, t0.Add(time.Duration(round)*time.Minute)) {
			if err != nil {
				t.Error(err)
			}
		}
		took := time.Since(start)
		start = time.Now()
		got, errs := Read(ctx, gitremote.Remote{URL: url})
		t.Logf("round %d: %d sites wrote at once in %v (pushes retried so far: %d); one Read of them took %v", round, n, took.Round(time.Millisecond), retries.Load(), time.Since(start).Round(time.Millisecond))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if len(got) != n {
			t.Fatalf("read %d reports, want %d", len(got), n)
		}
		for _, st := range got {
			if !st.Time.Equal(t0.Add(time.Duration(round) * time.Minute)) {
				t.Errorf("site %s: report of %v, want the one of round %d", st.Site, st.Time, round)
			}
		}
	}
}

// TestWriteRefusedCustomRef: a host that accepts branches only (a pre-receive hook here)
// refuses Write with a hint to write branches, and WriteBranch lands.
func TestWriteRefusedCustomRef(t *testing.T) {
	dir, url := bareRepo(t)
	hook := "#!/bin/sh\nwhile read old new ref; do case $ref in refs/heads/*) ;; *) echo \"refusing $ref\"; exit 1;; esac; done\n"
	if err := os.WriteFile(filepath.Join(dir, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := Write(ctx, gitremote.Remote{URL: url}, sampleStatus("paris"))
	if err == nil || !strings.Contains(err.Error(), "fleet.WriteBranch") {
		t.Fatalf("Write to a host that refuses custom refs: %v, want a hint to WriteBranch", err)
	}
	t.Log(err)
	if err := WriteBranch(ctx, gitremote.Remote{URL: url}, sampleStatus("paris")); err != nil {
		t.Fatal(err)
	}
	if got, errs := Read(ctx, gitremote.Remote{URL: url}); len(errs) > 0 || len(got) != 1 {
		t.Fatalf("read %+v, %v", got, errs)
	}
}
