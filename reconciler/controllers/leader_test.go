package controllers

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/etcdtest"
)

func startEtcd(t *testing.T) *clientv3.Client {
	_, c := etcdtest.Start(t)
	return c
}

// candidate runs RunWhileLeader for one host and reports on leading when it starts and
// stops leading.
type candidate struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
}

type event struct {
	host    string
	leading bool
}

func campaign(t *testing.T, etcd *clientv3.Client, kube *fake.Clientset, name string, lc LeaderConfig, leading chan<- event) *candidate {
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = RunWhileLeader(ctx, etcd, kube, "test-lease", name, lc, func(ctx context.Context) {
			leading <- event{name, true}
			<-ctx.Done()
			leading <- event{name, false}
		})
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// waitCampaignKey waits until host has a campaign key in the election named lease.
func waitCampaignKey(t *testing.T, etcd *clientv3.Client, lease, host string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := etcd.Get(context.Background(), ElectionPrefix+lease+"/", clientv3.WithPrefix())
		if err == nil {
			for _, kv := range resp.Kvs {
				if string(kv.Value) == host && kv.Lease != 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no campaign key after 10s (%v)", host, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func next(t *testing.T, ch <-chan event, within time.Duration) event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(within):
		t.Fatalf("no change of leader within %s", within)
	}
	return event{}
}

func TestLeaderElectionOnEtcdLease(t *testing.T) {
	etcd := startEtcd(t)
	kube := fake.NewClientset()
	ctx := context.Background()
	lc := LeaderConfig{TTL: 5 * time.Second}
	events := make(chan event, 16)

	// An earlier incarnation of host-a (a crash: its campaign key outlives it for the TTL of
	// its etcd lease, 60 s here).
	stale, err := etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, ElectionPrefix+"test-lease/stale", "host-a", clientv3.WithLease(stale.ID)); err != nil {
		t.Fatal(err)
	}

	b := campaign(t, etcd, kube, "host-b", lc, events)
	// host-b is in line (its campaign key is written) before host-a starts.
	waitCampaignKey(t, etcd, "test-lease", "host-b")
	// host-b waits behind the stale key; host-a, restarting, revokes its own earlier campaign
	// and host-b, first in line, leads well before the stale lease would have expired.
	start := time.Now()
	a := campaign(t, etcd, kube, "host-a", lc, events)
	if e := next(t, events, 15*time.Second); e != (event{"host-b", true}) {
		t.Fatalf("got %+v, want host-b leading", e)
	}
	t.Logf("host-b leads %s after host-a restarted", time.Since(start).Round(time.Millisecond))

	// The leader is recorded in the Lease kube-system/test-lease.
	waitHolder(t, kube, "host-b", 0)

	// host-b stops: it resigns (revokes its lease) and host-a takes over at once, not after
	// the TTL.
	start = time.Now()
	b.cancel()
	if e := next(t, events, 5*time.Second); e != (event{"host-b", false}) {
		t.Fatalf("got %+v, want host-b stopping", e)
	}
	if e := next(t, events, 3*time.Second); e != (event{"host-a", true}) {
		t.Fatalf("got %+v, want host-a leading", e)
	}
	t.Logf("host-a leads %s after host-b stopped", time.Since(start).Round(time.Millisecond))
	waitHolder(t, kube, "host-a", 1)

	// The leader's etcd lease disappears (as when it expires while the host cannot reach
	// etcd): host-a stops leading, campaigns again with a new lease and leads again.
	resp, err := etcd.Get(ctx, ElectionPrefix+"test-lease/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("campaign keys: %v %v", resp, err)
	}
	if _, err := etcd.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if e := next(t, events, 5*time.Second); e != (event{"host-a", false}) {
		t.Fatalf("got %+v, want host-a stopping when its lease is gone", e)
	}
	if e := next(t, events, 5*time.Second); e != (event{"host-a", true}) {
		t.Fatalf("got %+v, want host-a leading again", e)
	}
	a.cancel()
	<-a.done
	if e := next(t, events, 5*time.Second); e != (event{"host-a", false}) {
		t.Fatalf("got %+v, want host-a stopping", e)
	}
	// Resigning left no campaign key behind.
	if resp, err := etcd.Get(ctx, ElectionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("campaign keys left after every host stopped: %v %v", resp, err)
	}
}

// TestLeaderStepsDownWithoutKeepalives: a leader cut off from etcd (its connections stay
// open, nothing gets through) stops leading within StepDown, before etcd can expire its
// lease and let another host lead.
func TestLeaderStepsDownWithoutKeepalives(t *testing.T) {
	direct := startEtcd(t)
	hole := newBlackhole(t, direct.Endpoints()[0])
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{hole.url}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	kube := fake.NewClientset()
	events := make(chan event, 16)
	lc := LeaderConfig{TTL: 6 * time.Second, StepDown: 3 * time.Second}
	campaign(t, etcd, kube, "host-a", lc, events)
	if e := next(t, events, 10*time.Second); e != (event{"host-a", true}) {
		t.Fatalf("got %+v", e)
	}
	// Let a keepalive through, then nothing.
	time.Sleep(2500 * time.Millisecond)
	hole.freeze(true)
	start := time.Now()
	if e := next(t, events, lc.TTL); e != (event{"host-a", false}) {
		t.Fatalf("got %+v, want host-a stepping down", e)
	}
	t.Logf("stepped down %s after etcd stopped answering", time.Since(start).Round(time.Millisecond))
	// etcd still holds host-a's key: it stepped down before its lease expired.
	if resp, err := direct.Get(context.Background(), ElectionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
		t.Fatalf("campaign keys when host-a stepped down: %v %v, want host-a's still there", resp, err)
	}
	hole.freeze(false)
	if e := next(t, events, 15*time.Second); e != (event{"host-a", true}) {
		t.Fatalf("got %+v, want host-a leading again once etcd answers", e)
	}
}

// blackhole forwards TCP connections to an address; frozen, it holds what it reads.
type blackhole struct {
	url    string
	mu     sync.Mutex
	frozen bool
}

func newBlackhole(t *testing.T, target string) *blackhole {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	b := &blackhole{url: "http://" + l.Addr().String()}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = in.Close()
				continue
			}
			t.Cleanup(func() { _ = in.Close(); _ = out.Close() })
			go b.copy(out, in)
			go b.copy(in, out)
		}
	}()
	return b
}

func (b *blackhole) freeze(f bool) {
	b.mu.Lock()
	b.frozen = f
	b.mu.Unlock()
}

func (b *blackhole) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for {
			b.mu.Lock()
			f := b.frozen
			b.mu.Unlock()
			if !f {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func waitHolder(t *testing.T, kube *fake.Clientset, holder string, transitions int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := kube.CoordinationV1().Leases(metav1.NamespaceSystem).Get(context.Background(), "test-lease", metav1.GetOptions{})
		if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == holder && ptr.Deref(l.Spec.LeaseTransitions, -1) == transitions {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lease kube-system/test-lease: %+v %v, want holder %s after %d transitions", l, err, holder, transitions)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
