package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// restartRounds is how many times TestVoterRestartLoop restarts each voter
// (FLOTILLA_RESTART_ROUNDS overrides the default 10).
func restartRounds(t *testing.T) int {
	if v := os.Getenv("FLOTILLA_RESTART_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FLOTILLA_RESTART_ROUNDS=%q: want a positive number", v)
		}
		return n
	}
	return 10
}

// TestVoterRestartLoop restarts each voter of a 3-host site ten times in a row, SIGTERM and
// kill -9 alternating, and after every restart requires the site healthy: the restarted
// host's etcd member answers and is a voter of a 3-voter cluster with a leader, a write
// through its API is acknowledged and read back through another host, its Node is Ready
// with a heartbeat from the new agent, and a new pod bound to it becomes Ready.
func TestVoterRestartLoop(t *testing.T) {
	s, c := startPodSite(t, 3)
	rounds := restartRounds(t)
	var took []time.Duration
	for round := range rounds {
		for i, h := range s.Hosts {
			how := "SIGTERM"
			if (round+i)%2 == 1 {
				how = "kill -9"
			}
			start := time.Now()
			if how == "SIGTERM" {
				if err := h.Stop(15 * time.Second); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			} else {
				h.Kill()
			}
			if err := h.Restart(); err != nil {
				t.Fatalf("round %d: restart %s: %v", round, h.Name, err)
			}
			siteHealthy(t, s, c, h, fmt.Sprintf("r%d-%s", round, h.Name), start)
			d := time.Since(start)
			took = append(took, d)
			t.Logf("round %d: %s restarted (%s), site healthy after %s", round, h.Name, how, d.Round(100*time.Millisecond))
		}
	}
	// A member that replays a refused membership change after a restart dials a member that
	// never existed; etcd says so in these words.
	logs := map[string]string{}
	for _, h := range s.Hosts {
		logs[h.Name] = h.Logs()
	}
	for name, n := range membershipErrors(logs) {
		t.Errorf("%s: %s: etcd's membership is not what its members dial", name, n)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	framework.Figure(t, "%d voter restarts (SIGTERM and kill -9 alternating); site healthy again after p50 %s, max %s",
		len(took), took[len(took)/2].Round(100*time.Millisecond), took[len(took)-1].Round(100*time.Millisecond))
}

var (
	ownMemberID = regexp.MustCompile(`local-member-id=([0-9a-f]+)`)
	unknownPeer = regexp.MustCompile(`failed to find remote peer.*remote-peer-id-from=([0-9a-f]+)`)
)

// membershipErrors counts, per host, etcd's words for a membership its members disagree on:
// "ID mismatch", a refused configuration change, and a stream from a peer that is not one of
// the site's members ("failed to find remote peer" naming an ID no host's member has). A
// stream from a real member that this one does not know yet is not counted: a member that
// joined a moment ago dials the others before they all have applied its addition (etcd's
// case of a member that "falls behind of the cluster").
func membershipErrors(logs map[string]string) map[string]string {
	members := map[string]bool{}
	for _, l := range logs {
		for _, m := range ownMemberID.FindAllStringSubmatch(l, -1) {
			members[m[1]] = true
		}
	}
	out := map[string]string{}
	for name, l := range logs {
		var found []string
		for _, bad := range []string{"ID mismatch", "Validation on configuration change failed"} {
			if n := strings.Count(l, bad); n > 0 {
				found = append(found, fmt.Sprintf("%q %d times", bad, n))
			}
		}
		strangers := 0
		for _, m := range unknownPeer.FindAllStringSubmatch(l, -1) {
			if !members[m[1]] {
				strangers++
			}
		}
		if strangers > 0 {
			found = append(found, fmt.Sprintf("\"failed to find remote peer\" naming no member %d times", strangers))
		}
		if len(found) > 0 {
			out[name] = strings.Join(found, ", ")
		}
	}
	return out
}

// siteHealthy waits until the site is healthy again after h restarted at since (see
// TestVoterRestartLoop); tag names the objects it creates.
func siteHealthy(t *testing.T, s *devsite.Site, c kubernetes.Interface, h *devsite.Host, tag string, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := h.WaitReady(ctx); err != nil {
		t.Fatalf("%s: API not ready: %v\n%s", tag, err, tailLines(h.Logs(), 40))
	}
	cli := etcdClient(t, h)
	waitFor(t, 2*time.Minute, tag+": the restarted member answers, 3 voters and a leader", func() (bool, string) {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := cli.Status(sctx, "https://"+h.IP+":2379")
		if err != nil {
			return false, "status: " + err.Error()
		}
		if st.Leader == 0 || len(st.Errors) > 0 || st.IsLearner {
			return false, fmt.Sprintf("leader %x, learner %v, errors %v", st.Leader, st.IsLearner, st.Errors)
		}
		l, err := cli.MemberList(sctx)
		if err != nil {
			return false, "member list: " + err.Error()
		}
		voters := 0
		for _, m := range l.Members {
			if !m.IsLearner && m.Name != "" {
				voters++
			}
		}
		return voters == 3, fmt.Sprint(l.Members)
	})
	waitFor(t, time.Minute, tag+": a write through the restarted host's API", func() (bool, string) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := h.Kubectl(wctx, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "+tag+", namespace: default}\ndata: {host: "+h.Name+"}\n", "apply", "-f", "-")
		return err == nil, fmt.Sprint(out, err)
	})
	other := s.Hosts[0]
	if other == h {
		other = s.Hosts[1]
	}
	waitFor(t, 30*time.Second, tag+": the write read back through "+other.Name, func() (bool, string) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := other.Kubectl(rctx, "", "get", "cm", tag, "-o", "jsonpath={.data.host}")
		return err == nil && strings.TrimSpace(out) == h.Name, fmt.Sprint(out, err)
	})
	waitFor(t, 2*time.Minute, tag+": Node "+h.Name+" Ready with a heartbeat of the new agent", func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(since.Add(-time.Second)),
					fmt.Sprintf("Ready=%s heartbeat %s", cond.Status, cond.LastHeartbeatTime.Format(time.RFC3339))
			}
		}
		return false, "no Ready condition"
	})
	p := newPod("rs-"+strings.ToLower(tag), h.Name, corev1.RestartPolicyAlways, tool("web", "serve", "8080"))
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	create(t, c, p)
	waitPod(t, c, p.Name, 2*time.Minute, "Ready on the restarted host", podReady)
	if err := c.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", p.Name, err)
	}
}

// membershipErrors tells a stream from a member that joined a moment ago (not counted) from
// one naming an ID no host's member has, and counts etcd's other words for a membership the
// members disagree on.
func TestMembershipErrors(t *testing.T) {
	logs := map[string]string{
		"host-1": `level=info msg="added member" local-member-id=aaaa1111
level=warning msg="failed to find remote peer in cluster" local-member-id=aaaa1111 remote-peer-id-stream-handler=aaaa1111 remote-peer-id-from=cccc3333 cluster-id=f00d
`,
		"host-2": `level=info msg=started local-member-id=bbbb2222
level=warning msg="failed to find remote peer in cluster" local-member-id=bbbb2222 remote-peer-id-stream-handler=bbbb2222 remote-peer-id-from=dead0000 cluster-id=f00d
level=warning msg="failed to find remote peer in cluster" local-member-id=bbbb2222 remote-peer-id-stream-handler=bbbb2222 remote-peer-id-from=dead0000 cluster-id=f00d
`,
		"host-3": `level=info msg=started local-member-id=cccc3333
level=error msg="request cluster ID mismatch" local-member-id=cccc3333
`,
	}
	got := membershipErrors(logs)
	want := map[string]string{
		"host-2": `"failed to find remote peer" naming no member 2 times`,
		"host-3": `"ID mismatch" 1 times`,
	}
	if len(got) != len(want) || got["host-2"] != want["host-2"] || got["host-3"] != want["host-3"] {
		t.Errorf("membershipErrors = %q, want %q", got, want)
	}
}
