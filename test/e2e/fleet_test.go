package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/fleet"
	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// fleetSite is one single-host site of the fleet test.
type fleetSite struct {
	name, tier, after string
	host              *devsite.Host
	dyn               dynamic.Interface
}

// root reads the site's GitSource kube-system/root.
func (f *fleetSite) root(t testing.TB) *v1alpha1.GitSource {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := f.dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system").Get(ctx, "root", metav1.GetOptions{})
	if err != nil {
		return &v1alpha1.GitSource{}
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
		t.Fatal(err)
	}
	return &gs
}

func condition(gs *v1alpha1.GitSource, typ string) metav1.Condition {
	for _, c := range gs.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// serveGit serves the bare repositories under root over plain http (git's own
// git-http-backend, pushes allowed) on addr, until the test ends.
func serveGit(t testing.TB, addr, root string) string {
	t.Helper()
	const backend = "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git-http-backend (Debian package git) is needed: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}},
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// fleetStatus runs `flotilla fleet status --output json` against url.
func fleetStatus(t testing.TB, url string) fleet.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, framework.FlotillaBin(t), "fleet", "status", "--insecure", "--output", "json", url).Output()
	if err != nil {
		t.Fatalf("flotilla fleet status: %v", err)
	}
	var rep fleet.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("flotilla fleet status --output json: %v\n%s", err, out)
	}
	return rep
}

func siteOf(rep fleet.Report, name string) fleet.SiteReport {
	for _, s := range rep.Sites {
		if s.Site == name {
			return s
		}
	}
	return fleet.SiteReport{}
}

// fleetText runs `flotilla fleet status` (text) for the log.
func fleetText(t testing.TB, url string) string {
	t.Helper()
	out, _ := exec.Command(framework.FlotillaBin(t), "fleet", "status", "--insecure", url).CombinedOutput()
	return string(out)
}

// TestFleetStagedRollout: three single-host sites (canary, early, late) deploy
// examples/fleet from one repository served over http, each publishing its status to the
// repository and waiting for the previous wave: a commit reaches canary, then early once
// canary ran it healthy for the soak, then late; a commit that crash-loops is rolled back by
// canary and never applied by early and late; a site cut off from git keeps serving and
// reports again when it is back. `flotilla fleet status` shows each step.
func TestFleetStagedRollout(t *testing.T) {
	const (
		soak          = 15 * time.Second
		healthTimeout = 25 * time.Second
	)
	s := newSite(t, 3)
	sideLoad(t, s)
	repo, err := devsite.NewGitRepo(t.TempDir(), filepath.Join(framework.RepoRoot(), "examples", "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	tree := map[string]string{}
	root := filepath.Join(framework.RepoRoot(), "examples", "fleet")
	if err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		tree[rel] = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Commit("the fleet", tree); err != nil {
		t.Fatal(err)
	}
	// Sites publish their status by pushing to the repository.
	if out, err := exec.Command("git", "-C", repo.Bare, "config", "http.receivepack", "true").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	gitPort := framework.FreePort(t)
	base := serveGit(t, fmt.Sprintf("%s.254:%d", s.Subnet(), gitPort), filepath.Dir(repo.Bare))
	url := base + "/" + filepath.Base(repo.Bare)

	sites := []*fleetSite{
		{name: "shop-lisbon", tier: "canary"},
		{name: "shop-berlin", tier: "early", after: "tier=canary"},
		{name: "factory-porto", tier: "late", after: "tier=early"},
	}
	var wg sync.WaitGroup
	for i, fs := range sites {
		fs.host = s.Hosts[i]
		args := []string{"--site=" + fs.name, "--site-labels=tier=" + fs.tier, "--git-url=" + url, "--git-insecure",
			"--git-path=sites/" + fs.name, "--git-min-interval=1s", "--git-interval=2s",
			"--git-status-push", "--git-status-interval=10s", "--git-rollback-health-timeout=" + healthTimeout.String()}
		if fs.after != "" {
			args = append(args, "--git-rollout-after="+fs.after, "--git-rollout-soak="+soak.String())
		}
		if err := fs.host.Start(args...); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := fs.host.WaitReady(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, fs := range sites {
		cfg, err := clientcmd.BuildConfigFromFlags("", fs.host.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		fs.dyn = dynamic.NewForConfigOrDie(cfg)
		// The site's identity is on its Node.
		waitFor(t, time.Minute, fs.name+"'s Node labelled with the site", func() (bool, string) {
			out, err := fs.host.Kubectl(context.Background(), "", "get", "nodes", "-L", gitsync.SiteLabel+",tier", "--no-headers")
			return err == nil && strings.Contains(out, fs.name) && strings.Contains(out, fs.tier), out
		})
	}

	// rollout commits files and follows the commit through the waves: it returns when
	// every site runs it healthy, checking that each applied it only after the sites it
	// waits for ran it healthy for the soak.
	rollout := func(t *testing.T, msg string, files map[string]string, cut *fleetSite) string {
		rev, err := repo.Commit(msg, files)
		if err != nil {
			t.Fatal(err)
		}
		pushed := time.Now()
		applied := map[string]time.Time{}
		healthy := map[string]time.Time{}
		steps := map[string]bool{}
		waitFor(t, 4*time.Minute, "every site running "+rev[:7]+" healthy", func() (bool, string) {
			var state []string
			done := true
			for _, fs := range sites {
				if fs == cut {
					continue
				}
				gs := fs.root(t)
				if strings.HasSuffix(gs.Status.LastAppliedRevision, rev) {
					if _, ok := applied[fs.name]; !ok && gs.Status.LastAppliedTime != nil {
						applied[fs.name] = gs.Status.LastAppliedTime.Time
					}
					if gs.Status.HealthySince != nil && gs.Status.Health == v1alpha1.HealthHealthy {
						healthy[fs.name] = gs.Status.HealthySince.Time
					}
				}
				_, ok := healthy[fs.name]
				done = done && ok
				rc := condition(gs, v1alpha1.ConditionRollout)
				state = append(state, fmt.Sprintf("%s: applied %s health %s rollout %s %s", fs.name, gs.Status.LastAppliedRevision, gs.Status.Health, rc.Reason, rc.Message))
			}
			// fleet status as the first wave lands: canary on the commit, the others behind.
			// (shop-berlin's report says it holds the commit once it fetched it: within the soak)
			if _, ok := healthy["shop-lisbon"]; ok && !steps["canary"] && applied["shop-berlin"].IsZero() {
				rep := fleetStatus(t, url)
				c, b := siteOf(rep, "shop-lisbon"), siteOf(rep, "shop-berlin")
				if strings.HasSuffix(c.Revision, rev) && !c.Behind && b.Behind && b.Held != nil && strings.HasSuffix(b.Held.Revision, rev) {
					steps["canary"] = true
					t.Logf("fleet status, canary wave:\n%s", fleetText(t, url))
				}
			}
			return done, strings.Join(state, "\n")
		})
		for i, fs := range sites[1:] {
			prev := sites[i]
			if fs == cut || prev == cut {
				continue
			}
			if gap := applied[fs.name].Sub(healthy[prev.name]); gap < soak-time.Second {
				t.Errorf("%s applied %s %s after %s ran it healthy, want at least the soak %s", fs.name, rev[:7], gap, prev.name, soak)
			}
			t.Logf("%s applied %s %s after it was pushed (%s after %s ran it healthy)", fs.name, rev[:7],
				applied[fs.name].Sub(pushed).Round(time.Second), applied[fs.name].Sub(healthy[prev.name]).Round(time.Second), prev.name)
		}
		if !steps["canary"] {
			t.Errorf("fleet status never showed %s on canary alone, shop-berlin behind and holding it", rev[:7])
		}
		// The sites publish what they run as soon as it changes.
		waitFor(t, time.Minute, "fleet status: the sites on "+rev[:7]+" healthy", func() (bool, string) {
			rep := fleetStatus(t, url)
			var state []string
			done := true
			for _, fs := range sites {
				if fs == cut {
					continue
				}
				sr := siteOf(rep, fs.name)
				done = done && strings.HasSuffix(sr.Revision, rev) && sr.Health == v1alpha1.HealthHealthy && sr.Workloads.Available == sr.Workloads.Total && !sr.Stale
				state = append(state, fmt.Sprintf("%s %s %s %d/%d", fs.name, sr.Revision, sr.Health, sr.Workloads.Available, sr.Workloads.Total))
			}
			return done, strings.Join(state, "; ")
		})
		return rev
	}

	// The first commit rolls out in waves too.
	first := time.Now()
	waitFor(t, 5*time.Minute, "every site running the fleet's first commit healthy", func() (bool, string) {
		var state []string
		done := true
		for _, fs := range sites {
			gs := fs.root(t)
			rc := condition(gs, v1alpha1.ConditionRollout)
			done = done && gs.Status.LastAppliedRevision != "" && gs.Status.Health == v1alpha1.HealthHealthy
			state = append(state, fmt.Sprintf("%s: applied %s health %s rollout %s %s", fs.name, gs.Status.LastAppliedRevision, gs.Status.Health, rc.Reason, rc.Message))
		}
		return done, strings.Join(state, "\n")
	})
	t.Logf("the first commit ran healthy on the 3 sites %s after they started", time.Since(first).Round(time.Second))

	var good string
	t.Run("a good commit reaches canary, then early after the soak, then late", func(t *testing.T) {
		deployment := tree["base/deployment.yaml"]
		v2 := strings.Replace(deployment, `{name: VERSION, value: "v1"}`, `{name: VERSION, value: "v2"}`, 1)
		if v2 == deployment {
			t.Fatal(`examples/fleet/base/deployment.yaml no longer sets VERSION "v1"`)
		}
		good = rollout(t, "hello v2", map[string]string{"base/deployment.yaml": v2}, nil)
		rep := fleetStatus(t, url)
		for _, fs := range sites {
			sr := siteOf(rep, fs.name)
			if !strings.HasSuffix(sr.Revision, good) || sr.Health != v1alpha1.HealthHealthy || sr.Behind || sr.Stale ||
				sr.Labels["tier"] != fs.tier || sr.Hosts != (fleet.Hosts{Ready: 1, Total: 1}) || sr.Workloads.Total != 1 || sr.Workloads.Available != 1 {
				t.Errorf("fleet status of %s: %+v", fs.name, sr)
			}
			code, body, err := get("http://"+fs.host.IP+"/", "")
			if code != 200 || !strings.Contains(body, "version v2") {
				t.Errorf("%s answers %d %q %v, want version v2", fs.name, code, body, err)
			}
		}
		t.Logf("fleet status, every site on the commit:\n%s", fleetText(t, url))
	})
	if good == "" {
		t.FailNow()
	}

	t.Run("a commit that crash-loops is rolled back by canary and never applied by early and late", func(t *testing.T) {
		deployment, err := repo.Read("base/deployment.yaml")
		if err != nil {
			t.Fatal(err)
		}
		// toolbox without a command prints its usage and exits: the pods crash-loop.
		crash := strings.Replace(deployment, "image: flotilla.local/hello:latest", "image: flotilla.local/toolbox:latest", 1)
		if crash == deployment {
			t.Fatal("examples/fleet/base/deployment.yaml no longer runs flotilla.local/hello:latest")
		}
		bad, err := repo.Commit("hello: an image that crash-loops", map[string]string{"base/deployment.yaml": crash})
		if err != nil {
			t.Fatal(err)
		}
		canary, early, late := sites[0], sites[1], sites[2]
		waitFor(t, healthTimeout+2*time.Minute, "canary rolled back and early holding", func() (bool, string) {
			c, e := canary.root(t), early.root(t)
			for _, fs := range []*fleetSite{early, late} {
				if applied := fs.root(t).Status.LastAppliedRevision; strings.HasSuffix(applied, bad) {
					t.Fatalf("%s applied the crash-looping commit %s", fs.name, applied)
				}
			}
			ec := condition(e, v1alpha1.ConditionRollout)
			return c.Status.RolledBack != nil && strings.HasSuffix(c.Status.RolledBack.Revision, bad) &&
					ec.Reason == gitsync.ReasonRolloutHeld && strings.Contains(ec.Message, "shop-lisbon rolled it back"),
				fmt.Sprintf("canary rolledBack %+v; early rollout %s %s", c.Status.RolledBack, ec.Reason, ec.Message)
		})
		var rep fleet.Report
		waitFor(t, time.Minute, "fleet status: canary rolled back with the reason, early and late holding", func() (bool, string) {
			rep = fleetStatus(t, url)
			c, e, l := siteOf(rep, canary.name), siteOf(rep, early.name), siteOf(rep, late.name)
			ok := c.RolledBack != nil && strings.HasSuffix(c.RolledBack.Revision, bad) && strings.Contains(c.RolledBack.Reason, "Deployment hello/hello") &&
				strings.HasSuffix(c.Revision, good) &&
				e.Held != nil && strings.HasSuffix(e.Held.Revision, bad) && strings.Contains(e.Held.Reason, "rolled it back") && strings.HasSuffix(e.Revision, good) &&
				l.Held != nil && strings.HasSuffix(l.Held.Revision, bad) && strings.HasSuffix(l.Revision, good)
			b, _ := json.Marshal(rep.Sites)
			return ok, string(b)
		})
		t.Logf("fleet status after canary rolled back:\n%s", fleetText(t, url))
		for _, fs := range sites {
			code, body, err := get("http://"+fs.host.IP+"/", "")
			if code != 200 || !strings.Contains(body, "version v2") {
				t.Errorf("%s answers %d %q %v, want the good version v2", fs.name, code, body, err)
			}
		}
		// A fix (the crash reverted) is a new commit: it rolls out normally.
		good = rollout(t, "hello: back to the hello image", map[string]string{"base/deployment.yaml": deployment}, nil)
	})

	t.Run("a site cut off from git keeps serving and reports when it is back", func(t *testing.T) {
		late := sites[2]
		// Every connection from late to the git server is refused: fetches and status
		// pushes fail, everything else (its pods, its Ingress) goes on.
		rules := filepath.Join(t.TempDir(), "cut.nft")
		if err := os.WriteFile(rules, []byte(fmt.Sprintf("table inet flotilla-e2e-cut {\n chain out {\n  type filter hook output priority 0;\n  ip daddr %s.254 tcp dport %d reject with tcp reset\n }\n}\n",
			s.Subnet(), gitPort)), 0o644); err != nil {
			t.Fatal(err)
		}
		nft := func(args ...string) error {
			out, err := exec.Command("ip", append([]string{"netns", "exec", late.host.NetNS, "nft"}, args...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("nft %v: %v %s", args, err, out)
			}
			return nil
		}
		if err := nft("-f", rules); err != nil {
			t.Fatal(err)
		}
		healed := false
		heal := func() {
			if !healed {
				healed = true
				if err := nft("delete", "table", "inet", "flotilla-e2e-cut"); err != nil {
					t.Error(err)
				}
			}
		}
		defer heal()
		cutAt := time.Now()

		deployment, err := repo.Read("base/deployment.yaml")
		if err != nil {
			t.Fatal(err)
		}
		v3 := strings.Replace(deployment, `{name: VERSION, value: "v2"}`, `{name: VERSION, value: "v3"}`, 1)
		if v3 == deployment {
			t.Fatal(`base/deployment.yaml no longer sets VERSION "v2"`)
		}
		before := late.root(t).Status.LastAppliedRevision
		rev := rollout(t, "hello v3 while late is cut off", map[string]string{"base/deployment.yaml": v3}, late)
		waitFor(t, 2*time.Minute, "late's fetch failing and its report stale in fleet status", func() (bool, string) {
			gs := late.root(t)
			ready := condition(gs, v1alpha1.ConditionReady)
			l := siteOf(fleetStatus(t, url), late.name)
			code, body, err := get("http://"+late.host.IP+"/", "")
			if code != 200 || !strings.Contains(body, "version v2") {
				t.Fatalf("late, cut off from git, answers %d %q %v; want version v2 as before", code, body, err)
			}
			return ready.Reason == gitsync.ReasonFetchFailed && l.Stale && gs.Status.LastAppliedRevision == before,
				fmt.Sprintf("ready %s %s; applied %s; report stale %v (%s old)", ready.Reason, ready.Message, gs.Status.LastAppliedRevision, l.Stale, fleet.Age(time.Now(), l.Time))
		})
		t.Logf("fleet status with late cut off from git for %s:\n%s", time.Since(cutAt).Round(time.Second), fleetText(t, url))
		heal()
		healedAt := time.Now()
		waitFor(t, 2*time.Minute, "late back: the commit applied and reported", func() (bool, string) {
			l := siteOf(fleetStatus(t, url), late.name)
			code, body, _ := get("http://"+late.host.IP+"/", "")
			return strings.HasSuffix(l.Revision, rev) && l.Health == v1alpha1.HealthHealthy && !l.Stale && code == 200 && strings.Contains(body, "version v3"),
				fmt.Sprintf("report %s %s stale %v; answers %d %q", l.Revision, l.Health, l.Stale, code, body)
		})
		framework.Figure(t, "a site cut off from git for %s reported the new revision healthy %s after it was back",
			healedAt.Sub(cutAt).Round(time.Second), time.Since(healedAt).Round(time.Second))
		t.Logf("fleet status, late back:\n%s", fleetText(t, url))
	})
}
