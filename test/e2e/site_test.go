// Package e2e holds the multi-host tests: hosts are network namespaces on a private bridge
// (internal/devsite), each running the real bin/flotilla agent.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// newSite creates n hosts (not started) and removes them when the test ends.
func newSite(t testing.TB, n int) *devsite.Site {
	t.Helper()
	if err := devsite.Preflight(); err != nil {
		if framework.InCI() {
			t.Fatalf("multi-host tests cannot run: %v", err)
		}
		t.Skipf("multi-host tests cannot run: %v", err)
	}
	dir := t.TempDir()
	s, err := devsite.New(devsite.Options{Hosts: n, Dir: dir, Bin: framework.FlotillaBin(t), Kubectl: framework.KubectlBin(t)})
	if err != nil {
		t.Fatalf("create site: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keep := os.Getenv("FLOTILLA_E2E_LOGS") // a folder to copy the hosts' whole logs to
			for _, h := range s.Hosts {
				t.Logf("---- %s log (tail) ----\n%s", h.Name, tailLines(h.Logs(), 40))
				if keep != "" {
					f := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_")+"-"+h.Name+".log")
					if err := os.MkdirAll(keep, 0o755); err == nil {
						if err = os.WriteFile(f, []byte(h.Logs()), 0o644); err == nil {
							t.Logf("%s's whole log: %s", h.Name, f)
						}
					}
				}
			}
		}
		s.Close()
	})
	return s
}

// startSite starts host 1, then the others joining it, and waits for every API.
func startSite(t testing.TB, s *devsite.Site, extra ...string) time.Duration {
	t.Helper()
	return startHosts(t, s.Hosts, extra...)
}

// startHosts starts hosts[0], then the others joining it, and waits for every API. The
// tests' GitSources poll every few seconds: the API accepts intervals down to 1s.
func startHosts(t testing.TB, hosts []*devsite.Host, extra ...string) time.Duration {
	t.Helper()
	extra = append([]string{"--git-min-interval=1s"}, extra...)
	s := struct{ Hosts []*devsite.Host }{hosts}
	start := time.Now()
	if err := s.Hosts[0].Start(extra...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Hosts[0].WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range s.Hosts[1:] {
		if err := h.StartJoining(s.Hosts[:1], extra...); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range s.Hosts[1:] {
		if err := h.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start)
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s; last: %s", what, timeout, last)
}

func readyNodes(h *devsite.Host) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := h.Kubectl(ctx, "", "get", "nodes", "--no-headers")
	if err != nil {
		return 0, err.Error()
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[1] == "Ready" {
			n++
		}
	}
	return n, out
}

func TestThreeHostSite(t *testing.T) {
	s := newSite(t, 3)
	took := startSite(t, s)
	framework.Figure(t, "3 hosts formed (all APIs ready) in %s", took.Round(10*time.Millisecond))

	t.Run("every host lists all three nodes Ready", func(t *testing.T) {
		for _, h := range s.Hosts {
			waitFor(t, 60*time.Second, h.Name+" sees 3 Ready nodes", func() (bool, string) {
				n, out := readyNodes(h)
				return n == 3, out
			})
		}
	})

	t.Run("three etcd voters", func(t *testing.T) {
		for _, h := range s.Hosts {
			b, err := os.ReadFile(filepath.Join(h.DataDir, "cluster.json"))
			if err != nil || !strings.Contains(string(b), `"member": true`) {
				t.Errorf("%s is not an etcd member: %s %v", h.Name, b, err)
			}
		}
		cli := etcdClient(t, s.Hosts[0])
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		waitFor(t, 60*time.Second, "3 voters", func() (bool, string) {
			l, err := cli.MemberList(ctx)
			if err != nil {
				return false, err.Error()
			}
			voters := 0
			for _, m := range l.Members {
				if !m.IsLearner {
					voters++
				}
			}
			return voters == 3, fmt.Sprint(l.Members)
		})
	})

	t.Run("the kubeconfig of one host works against another", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := s.Hosts[0].Kubectl(ctx, "", "--server", "https://"+s.Hosts[2].IP+":6443", "get", "ns", "kube-system", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "namespace/kube-system" {
			t.Errorf("host-1's kubeconfig against host-3: %q %v", out, err)
		}
	})

	t.Run("kill -9 a voter: acknowledged writes survive", func(t *testing.T) {
		w := startWriter(t, s.Hosts[0])
		time.Sleep(3 * time.Second) // load generator: writes acknowledged with all voters up
		victim := s.Hosts[2]
		killed := time.Now()
		victim.Kill()
		time.Sleep(8 * time.Second) // let the site settle after the kill before the measured window
		before := w.acked()
		time.Sleep(4 * time.Second) // the measured window: writes must progress within it
		if after := w.acked(); after <= before {
			t.Errorf("writes stopped with one voter down: %d acknowledged before, %d after", before, after)
		}
		if err := victim.Restart(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		waitFor(t, 90*time.Second, "restarted voter answers", func() (bool, string) {
			_, err := victim.Kubectl(ctx, "", "get", "ns", "default")
			return err == nil, fmt.Sprint(err)
		})
		framework.Figure(t, "voter down for %s; %d writes acknowledged, %d failed", time.Since(killed).Round(time.Second), w.acked(), w.failed())
		acked := w.stop()
		// Every acknowledged write is on the restarted host.
		waitFor(t, 60*time.Second, "restarted host has every acknowledged write", func() (bool, string) {
			out, err := victim.Kubectl(ctx, "", "get", "cm", "-n", "default", "-l", "stream=counter", "-o", "name")
			if err != nil {
				return false, err.Error()
			}
			have := map[string]bool{}
			for _, l := range strings.Fields(out) {
				have[strings.TrimPrefix(l, "configmap/")] = true
			}
			var missing []string
			for _, name := range acked {
				if !have[name] {
					missing = append(missing, name)
				}
			}
			return len(missing) == 0, fmt.Sprintf("%d of %d missing, e.g. %v", len(missing), len(acked), first(missing, 5))
		})
	})

	t.Run("partition: the minority refuses writes, the majority goes on, heal converges", func(t *testing.T) {
		iso := s.Hosts[1]
		if err := iso.Partition(); err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				iso.Heal()
			}
		}()
		start := time.Now()
		waitFor(t, 20*time.Second, "partitioned host refuses writes", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
			defer cancel()
			_, err := iso.Kubectl(ctx, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: minority-"+fmt.Sprint(time.Now().UnixNano())+"\n", "create", "-f", "-")
			return err != nil, "write accepted"
		})
		framework.Figure(t, "partitioned host refused writes %s after the partition", time.Since(start).Round(100*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := s.Hosts[0].Kubectl(ctx, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: majority\n", "create", "-f", "-"); err != nil {
			t.Fatalf("majority write: %v", err)
		}
		iso.Heal()
		healed = true
		waitFor(t, 60*time.Second, "healed host converges", func() (bool, string) {
			out, err := iso.Kubectl(ctx, "", "get", "cm", "majority", "-o", "name")
			return err == nil && strings.TrimSpace(out) == "configmap/majority", fmt.Sprint(out, err)
		})
	})
}

func TestAddressChangeKeepsIdentity(t *testing.T) {
	s := newSite(t, 3)
	startSite(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := s.Hosts[0].Kubectl(ctx, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: before-move\n", "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	mover := s.Hosts[2]
	if err := mover.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	newIP := s.Subnet() + ".100"
	if err := mover.MoveTo(newIP); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(mover.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	if err := mover.StartJoining(s.Hosts[:1]); err != nil {
		t.Fatal(err)
	}
	if err := mover.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	framework.Figure(t, "host back with its new address in %s", time.Since(moved).Round(100*time.Millisecond))
	waitFor(t, 60*time.Second, "the moved host sees objects written before the move and accepts writes", func() (bool, string) {
		if _, err := mover.Kubectl(ctx, "", "get", "cm", "before-move"); err != nil {
			return false, err.Error()
		}
		_, err := mover.Kubectl(ctx, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after-move\n", "apply", "-f", "-")
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, 60*time.Second, "same Node, new InternalIP", func() (bool, string) {
		out, err := s.Hosts[0].Kubectl(ctx, "", "get", "node", mover.Name, "-o", "jsonpath={.status.addresses[?(@.type=='InternalIP')].address}")
		return err == nil && strings.TrimSpace(out) == newIP, fmt.Sprint(out, err)
	})
	cli := etcdClient(t, s.Hosts[0])
	waitFor(t, 30*time.Second, "etcd member keeps its name with the new peer URL", func() (bool, string) {
		l, err := cli.MemberList(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range l.Members {
			if m.Name == mover.Name {
				return len(m.PeerURLs) == 1 && m.PeerURLs[0] == "https://"+newIP+":2380" && !m.IsLearner, fmt.Sprint(m.PeerURLs)
			}
		}
		return false, fmt.Sprint(l.Members)
	})
	n, out := readyNodes(s.Hosts[0])
	if n != 3 {
		t.Errorf("after the move %d Ready nodes:\n%s", n, out)
	}
}

func TestWrongTokenCannotJoin(t *testing.T) {
	s := newSite(t, 2)
	if err := s.Hosts[0].Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Hosts[0].WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "token")
	good, _ := os.ReadFile(s.Hosts[0].TokenFile())
	tok := strings.TrimSpace(string(good))
	// A guessable secret is refused before anything is sent.
	if err := os.WriteFile(bad, []byte(tok[:strings.LastIndex(tok, ":")+1]+"not-the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Hosts[1].Start("--token-file", bad, "--join", s.Hosts[0].GossipAddr()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a host with a weak token exits saying why", func() (bool, string) {
		return !s.Hosts[1].Running() && strings.Contains(s.Hosts[1].Logs(), "bits of entropy, at least 128 are needed"), tailLines(s.Hosts[1].Logs(), 5)
	})
	// Same CA pin, another (strong) secret.
	wrong := tok[:strings.LastIndex(tok, ":")+1] + "5e8d2b7a9c4f1e3d6b0a8c2f7e4d9b1a3c5f7e2d"
	if err := os.WriteFile(bad, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Hosts[1].Start("--token-file", bad, "--join", s.Hosts[0].GossipAddr()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the joiner reports why it cannot join", func() (bool, string) {
		return strings.Contains(s.Hosts[1].Logs(), "No installed keys could decrypt the message") ||
			strings.Contains(s.Hosts[1].Logs(), "token does not match"), tailLines(s.Hosts[1].Logs(), 5)
	})
	waitFor(t, 30*time.Second, "the site logs the rejected gossip", func() (bool, string) {
		return strings.Contains(s.Hosts[0].Logs(), "decrypt"), tailLines(s.Hosts[0].Logs(), 5)
	})
	// Both sides saw an attempt fail; the joiner retries every 2 s, so 5 s span two more.
	holdsFor(t, 5*time.Second, "the host with a wrong token stays out", func() (bool, string) {
		n, out := readyNodes(s.Hosts[0])
		return n == 1 && !strings.Contains(out, "host-2"), "a host with a wrong token got in:\n" + out
	})
	if _, err := os.Stat(s.Hosts[1].Kubeconfig()); err == nil {
		t.Errorf("the host with a wrong token has a kubeconfig")
	}
}

// writer creates ConfigMaps counter-0, counter-1, ... through one host and records which
// creates were acknowledged.
type writer struct {
	mu     sync.Mutex
	ok     []string
	errs   int
	cancel context.CancelFunc
	done   chan struct{}
}

func startWriter(t testing.TB, h *devsite.Host) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	// Writers of one site must not collide: each names its objects after its start.
	prefix := fmt.Sprintf("counter-%x-", time.Now().UnixNano()&0xffffff)
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("%s%d", prefix, i)
			cctx, c := context.WithTimeout(ctx, 10*time.Second)
			_, err := h.Kubectl(cctx, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  labels:\n    stream: counter\ndata:\n  n: %q\n", name, fmt.Sprint(i)), "create", "-f", "-")
			c()
			w.mu.Lock()
			if err == nil {
				w.ok = append(w.ok, name)
			} else {
				w.errs++
			}
			w.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *writer) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ok)
}

func (w *writer) failed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

func (w *writer) stop() []string {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ok...)
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func tailLines(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if len(l) > 5 && (l[0] == 'I' || l[0] == 'W') && l[1] >= '0' && l[1] <= '9' {
			continue
		}
		// A client's retries while etcd is away say nothing about why.
		if strings.Contains(l, "retrying of unary invoker failed") || strings.Contains(l, `"Unhandled Error"`) {
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

func TestDeadVoterIsReplaced(t *testing.T) {
	s := newSite(t, 5)
	startSite(t, s, "--voter-replace-after", "10s")
	cli := etcdClient(t, s.Hosts[0])
	voters := func() (map[string]bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := cli.MemberList(ctx)
		if err != nil {
			return nil, err.Error()
		}
		out := map[string]bool{}
		for _, m := range l.Members {
			if !m.IsLearner && m.Name != "" {
				out[m.Name] = true
			}
		}
		return out, fmt.Sprint(l.Members)
	}
	waitFor(t, 60*time.Second, "3 voters of 5 hosts", func() (bool, string) {
		v, s := voters()
		return len(v) == 3, s
	})
	waitFor(t, 60*time.Second, "5 Ready nodes", func() (bool, string) {
		n, out := readyNodes(s.Hosts[0])
		return n == 5, out
	})
	v, _ := voters()
	var victim *devsite.Host
	for _, h := range s.Hosts[1:] {
		if v[h.Name] {
			victim = h
			break
		}
	}
	if victim == nil {
		t.Fatalf("no voter besides host-1: %v", v)
	}
	killed := time.Now()
	victim.Kill()
	waitFor(t, 30*time.Second, "the dead host's Node goes Ready=Unknown with the unreachable taints", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := s.Hosts[0].Kubectl(ctx, "", "get", "node", victim.Name, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}/{.spec.taints[*].effect}`)
		return err == nil && strings.HasPrefix(out, "Unknown ") && strings.Count(out, "node.kubernetes.io/unreachable") == 2 &&
			strings.Contains(out, "NoSchedule") && strings.Contains(out, "NoExecute"), fmt.Sprint(out, err)
	})
	framework.Figure(t, "dead host's Node Ready=Unknown and tainted %s after the kill (gossip detection; Lease grace is 40s)", time.Since(killed).Round(100*time.Millisecond))
	waitFor(t, 90*time.Second, "another host replaces the dead voter", func() (bool, string) {
		v, s := voters()
		return len(v) == 3 && !v[victim.Name], s
	})
	framework.Figure(t, "dead voter %s replaced %s after the kill (replace delay 10s)", victim.Name, time.Since(killed).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Hosts[0].Kubectl(ctx, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after-replace\n", "create", "-f", "-"); err != nil {
		t.Fatalf("write after the replacement: %v", err)
	}

	// The replaced host comes back with its old data: it keeps that aside and rejoins as a
	// standby; the site keeps its 3 voters.
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, victim.Name+" back as a Ready standby", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := s.Hosts[0].Kubectl(ctx, "", "get", "node", victim.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == "True" && strings.Contains(victim.Logs(), "rejoins as a standby"), fmt.Sprint(out, err)
	})
	if v, state := voters(); len(v) != 3 || v[victim.Name] {
		t.Fatalf("voters after the comeback: %s", state)
	}
	if old, _ := filepath.Glob(filepath.Join(victim.DataDir, "etcd.removed-*")); len(old) != 1 {
		t.Fatalf("the removed member's data should be kept aside once: %v", old)
	}
}

// startPodSite starts a site of n hosts with the example images side-loaded and waits until
// every Node is Ready; it returns the site and an admin client of its first host.
func startPodSite(t testing.TB, n int, extra ...string) (*devsite.Site, kubernetes.Interface) {
	t.Helper()
	s := newSite(t, n)
	sideLoad(t, s)
	startSite(t, s, extra...)
	waitFor(t, 2*time.Minute, fmt.Sprintf("%d Ready nodes", n), func() (bool, string) {
		got, out := readyNodes(s.Hosts[0])
		return got == n, out
	})
	return s, clientOf(t, s.Hosts[0])
}
