package membership

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
)

func startMember(t *testing.T, name string) *Membership {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := DefaultConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.Token = name, "127.0.0.1", port, "metrics-test"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(time.Second) })
	return m
}

func membersText(alive, left int) string {
	return fmt.Sprintf(`
# HELP flotilla_membership_members [ALPHA] Hosts in this host's gossip membership table (itself included), by state: alive, suspect, dead, left.
# TYPE flotilla_membership_members gauge
flotilla_membership_members{state="alive"} %d
flotilla_membership_members{state="dead"} 0
flotilla_membership_members{state="left"} %d
flotilla_membership_members{state="suspect"} 0
`, alive, left)
}

// TestGossipMetrics runs two gossip members on loopback: the running member's table and
// health score are reported, reconnect attempts are counted by result, and nothing is
// reported once gossip stops.
func TestGossipMetrics(t *testing.T) {
	a := startMember(t, "a")
	b := startMember(t, "b")
	if _, err := b.Join([]string{HostPort("127.0.0.1", a.cfg.BindPort)}, nil); err != nil {
		t.Fatal(err)
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = testutil.CustomCollectAndCompare(&gossipCollector{}, strings.NewReader(membersText(2, 0)), "flotilla_membership_members"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	reg := testutil.NewFakeKubeRegistry("1.37.0")
	reg.CustomMustRegister(&gossipCollector{})
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	health := false
	for _, mf := range got {
		health = health || (mf.GetName() == "flotilla_membership_health_score" && len(mf.GetMetric()) == 1)
	}
	if !health {
		t.Error("flotilla_membership_health_score not reported while gossip runs")
	}

	value := func(result string) float64 {
		v, err := testutil.GetCounterMetricValue(reconnectAttempts.WithLabelValues(result))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	joined, failed := value("joined"), value("failed")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	now := time.Now()
	b.mu.Lock()
	b.members["gone"] = &Member{Name: "gone", Addr: "127.0.0.1", Port: closed, State: Left, Since: now}
	b.members["back"] = &Member{Name: "back", Addr: "127.0.0.1", Port: a.cfg.BindPort, State: Left, Since: now}
	b.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); b.Reconnect(50*time.Millisecond, time.Hour, stop) }()
	for deadline := time.Now().Add(10 * time.Second); value("joined") == joined || value("failed") == failed; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reconnect attempts: joined +%v, failed +%v; want both to grow", value("joined")-joined, value("failed")-failed)
		}
	}
	close(stop)
	<-done

	if err := b.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CustomCollectAndCompare(&gossipCollector{}, strings.NewReader(""), "flotilla_membership_members", "flotilla_membership_health_score"); err != nil {
		t.Errorf("after Leave: %v", err)
	}
}
