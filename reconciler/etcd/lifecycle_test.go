package etcd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeCluster is an etcd cluster seen through the client: a member list, and the updates made.
type fakeCluster struct {
	mu      sync.Mutex
	members []*etcdserverpb.Member
	listErr error
	updates map[uint64][]string
	dialed  []string
}

func (f *fakeCluster) MemberList(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	return &clientv3.MemberListResponse{Members: f.members}, nil
}

func (f *fakeCluster) MemberUpdate(_ context.Context, id uint64, urls []string) (*clientv3.MemberUpdateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.updates == nil {
		f.updates = map[uint64][]string{}
	}
	f.updates[id] = urls
	return &clientv3.MemberUpdateResponse{}, nil
}

func (f *fakeCluster) Close() error { return nil }

func newLifecycle(t *testing.T, cluster *fakeCluster, peers []Peer) *Lifecycle {
	dir := t.TempDir()
	return &Lifecycle{
		Name: "host-2", EtcdDir: filepath.Join(dir, "etcd"),
		PeerURL: "https://10.0.0.22:2380", ClientURL: "https://10.0.0.22:2379", Voters: 3,
		Peers: func() []Peer { return peers },
		Dial: func(urls []string) (Cluster, error) {
			cluster.dialed = append(cluster.dialed, urls...)
			return cluster, nil
		},
		Poll: 10 * time.Millisecond,
	}
}

func joined(time.Duration) error { return nil }

var sitePeers = []Peer{
	{Name: "host-1", Alive: true, APIURL: "https://10.0.0.1:6443", EtcdClientURL: "https://10.0.0.1:2379"},
	{Name: "host-2", Alive: true, APIURL: "https://10.0.0.22:6443"},
	{Name: "host-3", Alive: true, APIURL: "https://10.0.0.3:6443", EtcdClientURL: "https://10.0.0.3:2379"},
}

func TestPlanRestart(t *testing.T) {
	const now = "https://10.0.0.22:2380"
	for _, tc := range []struct {
		name string
		st   ClusterState
		want RestartPlan
	}{
		{"standby refreshes the voters", ClusterState{Member: false, PeerURL: now}, PlanRefreshVoters},
		{"voter at a new address moves its peer URL", ClusterState{Member: true, PeerURL: "https://10.0.0.2:2380"}, PlanMovePeerURL},
		{"voter at the same address checks it was not replaced", ClusterState{Member: true, PeerURL: now}, PlanCheckRemoved},
		{"voter of an older state file starts", ClusterState{Member: true}, PlanStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanRestart(tc.st, now); got != tc.want {
				t.Fatalf("PlanRestart = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRestartAddressChangeUpdatesPeerURL(t *testing.T) {
	cluster := &fakeCluster{members: []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 2, Name: "host-2"}, {ID: 3, Name: "host-3"}}}
	l := newLifecycle(t, cluster, sitePeers)
	st := &ClusterState{Member: true, PeerURL: "https://10.0.0.2:2380"}
	if err := l.Restart(context.Background(), st, joined); err != nil {
		t.Fatal(err)
	}
	if got := cluster.updates[2]; len(got) != 1 || got[0] != l.PeerURL {
		t.Fatalf("member host-2 peer URLs updated to %v, want [%s]", got, l.PeerURL)
	}
	if len(cluster.updates) != 1 {
		t.Fatalf("other members were updated too: %v", cluster.updates)
	}
	if st.PeerURL != l.PeerURL || !st.Member {
		t.Fatalf("state after restart = %+v", st)
	}
	for _, u := range cluster.dialed {
		if strings.Contains(u, "10.0.0.22") {
			t.Fatalf("dialed its own etcd (%s) to record its new address", u)
		}
	}
}

func TestRestartAddressChangeWhenRemovedSaysWhatToDo(t *testing.T) {
	cluster := &fakeCluster{members: []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 3, Name: "host-3"}}}
	l := newLifecycle(t, cluster, sitePeers)
	err := l.Restart(context.Background(), &ClusterState{Member: true, PeerURL: "https://10.0.0.2:2380"}, joined)
	if err == nil || !strings.Contains(err.Error(), "no member named host-2") || !strings.Contains(err.Error(), "cluster.json") {
		t.Fatalf("error = %v, want one naming the host and what to delete", err)
	}
}

func TestRestartReplacedVoterRejoinsAsStandby(t *testing.T) {
	cluster := &fakeCluster{members: []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 3, Name: "host-3"}, {ID: 4, Name: "host-4"}}}
	l := newLifecycle(t, cluster, sitePeers)
	if err := os.MkdirAll(filepath.Join(l.EtcdDir, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	st := &ClusterState{Member: true, PeerURL: l.PeerURL}
	if err := l.Restart(context.Background(), st, joined); err != nil {
		t.Fatal(err)
	}
	if st.Member {
		t.Fatal("a voter removed while away still starts as a member")
	}
	if _, err := os.Stat(l.EtcdDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old etcd data still in place: %v", err)
	}
	aside, _ := filepath.Glob(l.EtcdDir + ".removed-*")
	if len(aside) != 1 {
		t.Fatalf("old data kept aside in %v, want one directory", aside)
	}
	if got := strings.Join(st.ClientURLs, ","); got != "https://10.0.0.1:2379,https://10.0.0.3:2379" {
		t.Fatalf("as a standby it uses etcd servers %s, want the voters gossip shows", got)
	}
}

// TestSetAsideIfRemovedAfterTheMemberStopped: asked again once the member stopped on its own
// (the check before its start could not tell), a removed host becomes a standby; a member
// the others still list, or a question nobody answers, leaves the data where it is.
func TestSetAsideIfRemovedAfterTheMemberStopped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster *fakeCluster
		removed bool
	}{
		{"removed", &fakeCluster{members: []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 3, Name: "host-3"}, {ID: 4, Name: "host-4"}}}, true},
		{"still a member", &fakeCluster{members: []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 2, Name: "host-2"}, {ID: 3, Name: "host-3"}}}, false},
		{"nobody answers", &fakeCluster{listErr: errors.New("context deadline exceeded")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLifecycle(t, tc.cluster, sitePeers)
			if err := os.MkdirAll(filepath.Join(l.EtcdDir, "member"), 0o700); err != nil {
				t.Fatal(err)
			}
			st := &ClusterState{Member: true, PeerURL: l.PeerURL}
			removed, err := l.SetAsideIfRemoved(context.Background(), st, joined)
			if err != nil || removed != tc.removed {
				t.Fatalf("SetAsideIfRemoved = %v, %v; want %v", removed, err, tc.removed)
			}
			_, statErr := os.Stat(l.EtcdDir)
			if st.Member == tc.removed || errors.Is(statErr, os.ErrNotExist) != tc.removed {
				t.Fatalf("member %v, data in place: %v; want member %v", st.Member, statErr, !tc.removed)
			}
			if tc.removed && strings.Join(st.ClientURLs, ",") != "https://10.0.0.1:2379,https://10.0.0.3:2379" {
				t.Fatalf("standby etcd servers %v, want the voters gossip shows", st.ClientURLs)
			}
		})
	}
}

func TestRestartVoterStillMemberStarts(t *testing.T) {
	cluster := &fakeCluster{members: []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 2, Name: "host-2"}, {ID: 3, Name: "host-3"}}}
	l := newLifecycle(t, cluster, sitePeers)
	st := &ClusterState{Member: true, PeerURL: l.PeerURL}
	if err := l.Restart(context.Background(), st, joined); err != nil {
		t.Fatal(err)
	}
	if !st.Member || len(cluster.updates) != 0 {
		t.Fatalf("state %+v, updates %v: a voter that is still a member must start unchanged", st, cluster.updates)
	}
}

func TestRestartNobodyAnswersKeepsVoter(t *testing.T) {
	cluster := &fakeCluster{listErr: errors.New("context deadline exceeded")}
	l := newLifecycle(t, cluster, sitePeers)
	st := &ClusterState{Member: true, PeerURL: l.PeerURL}
	if err := l.Restart(context.Background(), st, joined); err != nil {
		t.Fatal(err)
	}
	if !st.Member {
		t.Fatal("a voter that cannot ask the others whether it was removed must not give up its seat")
	}
}

func TestRestartStandbyTakesVotersFromGossip(t *testing.T) {
	l := newLifecycle(t, &fakeCluster{}, sitePeers)
	st := &ClusterState{Member: false, ClientURLs: []string{"https://10.0.0.9:2379"}}
	if err := l.Restart(context.Background(), st, joined); err != nil {
		t.Fatal(err)
	}
	want := "https://10.0.0.1:2379,https://10.0.0.3:2379"
	if got := strings.Join(st.ClientURLs, ","); got != want {
		t.Fatalf("standby etcd servers = %s, want %s", got, want)
	}
}

func TestStandbyTurn(t *testing.T) {
	peers := []Peer{
		{Name: "host-5", Alive: true, APIURL: "u"},
		{Name: "host-4", Alive: true, APIURL: "u"},
		{Name: "host-3", Alive: false, APIURL: "u"},
		{Name: "host-1", Alive: true, APIURL: "u"},
	}
	members := []string{"host-1", "host-2"}
	for _, tc := range []struct {
		self   string
		voters int
		peers  []Peer
		want   bool
	}{
		{"host-4", 3, peers, true},                                  // first alive non-member by name
		{"host-5", 3, peers, false},                                 // host-4 goes first
		{"host-4", 2, peers, false},                                 // the site has its voters
		{"host-4", 3, []Peer{{Name: "host-4", Alive: true}}, false}, // does not serve the API yet
		{"host-3", 3, peers, false},                                 // dead in gossip
	} {
		if got := StandbyTurn(tc.self, members, tc.voters, tc.peers); got != tc.want {
			t.Errorf("StandbyTurn(%s, voters %d) = %v, want %v", tc.self, tc.voters, got, tc.want)
		}
	}
}

func TestReplaceable(t *testing.T) {
	now := time.Now()
	members := []*etcdserverpb.Member{{ID: 1, Name: "host-1"}, {ID: 2, Name: "host-2"}, {ID: 3, Name: "host-3"}}
	dead := map[string]time.Time{"host-2": now.Add(-2 * time.Minute), "host-3": now.Add(-10 * time.Second)}
	names := func(ms []*etcdserverpb.Member) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(Replaceable(members, 1, dead, []string{"host-1", "host-4"}, true, time.Minute, now)); got != "host-2" {
		t.Fatalf("with a standby: replaceable = %q, want host-2 (host-3 not dead long enough)", got)
	}
	if got := names(Replaceable(members, 1, dead, []string{"host-1"}, true, time.Minute, now)); got != "" {
		t.Fatalf("without a standby: replaceable = %q, want none (a 3-host site keeps its dead voter)", got)
	}
	if got := names(Replaceable(members, 2, dead, []string{"host-4"}, true, time.Minute, now)); got != "" {
		t.Fatalf("the asking leader itself was offered for removal: %q", got)
	}
}

func TestJoinSiteStopsOnRefusedToken(t *testing.T) {
	calls := 0
	l := newLifecycle(t, &fakeCluster{}, sitePeers)
	l.Join = func(ctx context.Context, apiURL string, token Token, req JoinRequest) (*JoinResponse, error) {
		calls++
		return nil, errors.New("join through " + apiURL + " refused (401): bad token")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.JoinSite(ctx, true); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("JoinSite = %v, want the refusal", err)
	}
	if calls != 1 {
		t.Fatalf("asked %d hosts after a refused token, want 1", calls)
	}
}

func TestDeadTracker(t *testing.T) {
	tr := NewDeadTracker()
	t0 := time.Now()
	tr.Observe("host-2", true, t0)
	tr.Observe("host-2", true, t0.Add(time.Minute))
	if got := tr.Since()["host-2"]; !got.Equal(t0) {
		t.Fatalf("dead since %v, want the first report %v", got, t0)
	}
	tr.Observe("host-2", false, t0.Add(2*time.Minute))
	if _, ok := tr.Since()["host-2"]; ok {
		t.Fatal("a host back alive is still reported dead")
	}
}
