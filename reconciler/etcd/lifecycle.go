package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Peer is another host of the site as gossip shows it.
type Peer struct {
	Name  string
	Alive bool
	// APIURL is where the host serves the API (and the join endpoint); empty until it does.
	APIURL string
	// EtcdClientURL is set while the host is an etcd voter.
	EtcdClientURL string
}

// Cluster is the part of the etcd client the voter lifecycle uses.
type Cluster interface {
	MemberList(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.MemberListResponse, error)
	MemberUpdate(ctx context.Context, id uint64, peerAddrs []string) (*clientv3.MemberUpdateResponse, error)
	Close() error
}

// Lifecycle decides and carries out this host's place in the site's etcd cluster: joining
// the site, coming back after a restart (moved address, replaced while away), and waiting as
// a standby until the site lacks a voter. Its seams (Peers, Dial, Join) make every decision
// testable without gossip or a running etcd.
type Lifecycle struct {
	// Name is this host's name, its identity in etcd.
	Name string
	// EtcdDir is the member's data directory (<data-dir>/etcd).
	EtcdDir string
	// PeerURL and ClientURL are this host's etcd URLs now.
	PeerURL, ClientURL string
	Token              Token
	// Voters is the site's voter target (1, 3 or 5).
	Voters int
	// Peers lists the site's hosts as gossip shows them now.
	Peers func() []Peer
	// Dial opens a client to etcd client URLs with the site's client certificate.
	Dial func(urls []string) (Cluster, error)
	// Join asks the host serving apiURL to let this one in (RequestJoin when nil).
	Join func(ctx context.Context, apiURL string, token Token, req JoinRequest) (*JoinResponse, error)
	// Poll is the pause between attempts (1 s when zero); tests shorten it.
	Poll time.Duration
	Log  *logrus.Entry
}

// RestartPlan is what a host that has been in the site before does before starting etcd.
type RestartPlan int

const (
	// PlanStart starts as recorded: nothing to check.
	PlanStart RestartPlan = iota
	// PlanMovePeerURL: a voter whose address changed tells the other members its new peer
	// URL first (its identity is its name; the others would not reach the old address).
	PlanMovePeerURL
	// PlanCheckRemoved: a voter at the same address checks it is still a member; a standby
	// may have taken its place while it was away, and then it must not start on its old data.
	PlanCheckRemoved
	// PlanRefreshVoters: a standby uses the voters gossip knows now, not those of its first join.
	PlanRefreshVoters
)

func (p RestartPlan) String() string {
	return [...]string{"start", "move-peer-url", "check-removed", "refresh-voters"}[p]
}

// PlanRestart decides what a restarting host does, from what it recorded (st) and the peer
// URL it has now.
func PlanRestart(st ClusterState, peerURL string) RestartPlan {
	switch {
	case !st.Member:
		return PlanRefreshVoters
	case st.PeerURL != "" && st.PeerURL != peerURL:
		return PlanMovePeerURL
	case st.PeerURL == peerURL:
		return PlanCheckRemoved
	}
	return PlanStart
}

// StandbyTurn reports whether self should join etcd now: the cluster has fewer members than
// the voter target and self is the first alive non-member (by name) that serves the API, so
// two standbys never race for the same seat.
func StandbyTurn(self string, members []string, voters int, peers []Peer) bool {
	if len(members) >= voters {
		return false
	}
	in := map[string]bool{}
	for _, m := range members {
		in[m] = true
	}
	var candidates []string
	for _, p := range peers {
		if p.Alive && !in[p.Name] && p.APIURL != "" {
			candidates = append(candidates, p.Name)
		}
	}
	sort.Strings(candidates)
	return len(candidates) > 0 && candidates[0] == self
}

func (l *Lifecycle) log() *logrus.Entry {
	if l.Log != nil {
		return l.Log
	}
	return logrus.WithField("component", "etcd")
}

func (l *Lifecycle) poll() time.Duration {
	if l.Poll > 0 {
		return l.Poll
	}
	return time.Second
}

// JoinSite asks the site's hosts (as gossip shows them) to let this host in, until one does.
// A refused token or a CA that does not match the pin ends it at once: retrying cannot help.
func (l *Lifecycle) JoinSite(ctx context.Context, wantMember bool) (*JoinResponse, error) {
	return l.join(ctx, JoinRequest{Name: l.Name, PeerURL: l.PeerURL, ClientURL: l.ClientURL, WantMember: wantMember})
}

// JoinAsWorker asks the site to let this host in as a worker (no etcd, no site CA key, no
// admin token): the site signs csrs (PEM certificate requests by purpose, see
// WorkerCertificates) and returns the certificates with the CA certificate.
func (l *Lifecycle) JoinAsWorker(ctx context.Context, csrs map[string][]byte) (*JoinResponse, error) {
	return l.join(ctx, JoinRequest{Name: l.Name, Worker: true, CSRs: csrs})
}

func (l *Lifecycle) join(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	join := l.Join
	if join == nil {
		join = RequestJoin
	}
	for {
		var lastErr error
		for _, p := range l.Peers() {
			if p.Name == l.Name || !p.Alive || p.APIURL == "" {
				continue
			}
			resp, err := join(ctx, p.APIURL, l.Token, req)
			if err == nil {
				return resp, nil
			}
			lastErr = err
			l.log().WithError(err).WithField("via", p.Name).Warn("join attempt failed")
			// A wrong token, a removed host or a CA the token does not pin: no retry helps.
			if strings.Contains(err.Error(), "(401)") || strings.Contains(err.Error(), "(403)") || strings.Contains(err.Error(), "pins") {
				return nil, err
			}
		}
		if lastErr == nil {
			l.log().Info("waiting for gossip to show a host that serves the API")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.poll()):
		}
	}
}

// Restart prepares a host that has been in the site before (st is what it recorded) for
// starting etcd, per PlanRestart. gossipJoined waits up to a timeout for the gossip join
// started at boot. st is updated in place; the caller saves it once etcd runs.
func (l *Lifecycle) Restart(ctx context.Context, st *ClusterState, gossipJoined func(timeout time.Duration) error) error {
	plan := PlanRestart(*st, l.PeerURL)
	switch plan {
	case PlanMovePeerURL:
		if err := gossipJoined(2 * time.Minute); err != nil {
			return err
		}
		if err := l.movePeerURL(ctx); err != nil {
			return err
		}
		l.log().WithFields(logrus.Fields{"from": st.PeerURL, "to": l.PeerURL}).Info("etcd peer URL updated after an address change")
	case PlanCheckRemoved:
		if _, err := l.SetAsideIfRemoved(ctx, st, gossipJoined); err != nil {
			return err
		}
	case PlanRefreshVoters:
		if gossipJoined(15*time.Second) == nil {
			if urls := l.voterURLs(ctx, 5*time.Second); len(urls) > 0 {
				st.ClientURLs = urls
			}
		}
	}
	st.PeerURL = l.PeerURL
	return nil
}

// SetAsideIfRemoved asks the other hosts' etcd whether this host's member is still one of
// theirs. When it is not (a standby took its seat while it was away), the member's data is
// moved aside, st becomes a standby's (the voters gossip shows as its etcd servers) and it
// returns true. When nobody answers it cannot tell and returns false: starting on the old
// data is the safe guess then, and a removed member stops as soon as a peer tells it
// (ErrStopped), when the caller asks again.
func (l *Lifecycle) SetAsideIfRemoved(ctx context.Context, st *ClusterState, gossipJoined func(timeout time.Duration) error) (bool, error) {
	if gossipJoined(15*time.Second) != nil || !l.removed(ctx) {
		return false, nil
	}
	aside := fmt.Sprintf("%s.removed-%d", l.EtcdDir, time.Now().Unix())
	if err := os.Rename(l.EtcdDir, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("keep the etcd data of a removed member aside: %w", err)
	}
	st.Member = false
	l.log().WithField("oldData", aside).Warn("this host's etcd member was removed while it was away; it rejoins as a standby (old data kept aside)")
	if urls := l.voterURLs(ctx, 5*time.Second); len(urls) > 0 {
		st.ClientURLs = urls
	}
	return true, nil
}

// voterURLs returns the etcd client URLs alive hosts publish, waiting up to timeout for
// gossip to show at least one.
func (l *Lifecycle) voterURLs(ctx context.Context, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var urls []string
		for _, p := range l.Peers() {
			if p.Name != l.Name && p.Alive && p.EtcdClientURL != "" {
				urls = append(urls, p.EtcdClientURL)
			}
		}
		if len(urls) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return urls
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// removed reports whether the other hosts' etcd answers and has no member named like this
// host. When nobody answers it cannot tell, and says no: starting on the old data is then
// the safe guess (a removed member's etcd stops by itself once it learns).
func (l *Lifecycle) removed(ctx context.Context) bool {
	urls := l.voterURLs(ctx, 5*time.Second)
	if len(urls) == 0 {
		return false
	}
	cli, err := l.Dial(urls)
	if err != nil {
		return false
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(cctx)
	if err != nil {
		return false
	}
	return findMember(list.Members, l.Name) == nil
}

// movePeerURL records this member's new peer URL through the other members.
func (l *Lifecycle) movePeerURL(ctx context.Context) error {
	urls := l.voterURLs(ctx, time.Minute)
	if len(urls) == 0 {
		return errors.New("address changed, but gossip shows no other etcd member to record the new peer URL with")
	}
	cli, err := l.Dial(urls)
	if err != nil {
		return err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := cli.MemberList(cctx)
	if err != nil {
		return fmt.Errorf("list etcd members to update the peer URL: %w", err)
	}
	m := findMember(list.Members, l.Name)
	if m == nil {
		return fmt.Errorf("etcd has no member named %s (removed while away?): move %s aside and delete %s to rejoin as a new host",
			l.Name, l.EtcdDir, filepath.Join(filepath.Dir(l.EtcdDir), "cluster.json"))
	}
	if _, err := cli.MemberUpdate(cctx, m.ID, []string{l.PeerURL}); err != nil {
		return fmt.Errorf("update peer URL of %s: %w", l.Name, err)
	}
	return nil
}

// Standby waits until it is this host's turn (StandbyTurn), joins etcd as a learner through
// the site, starts the member with start and returns it once promoted (waitVoter).
func (l *Lifecycle) Standby(ctx context.Context, cluster Cluster, start func(ctx context.Context, initialCluster string) (*Member, error), waitVoter func(ctx context.Context, m *Member) error) (*Member, error) {
	wait := 3 * l.poll()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		list, err := cluster.MemberList(lctx)
		cancel()
		if err != nil {
			continue
		}
		names := make([]string, 0, len(list.Members))
		for _, m := range list.Members {
			names = append(names, m.Name)
		}
		if !StandbyTurn(l.Name, names, l.Voters, l.Peers()) {
			continue
		}
		resp, err := l.JoinSite(ctx, true)
		if err != nil {
			return nil, err
		}
		if !resp.Member {
			continue
		}
		_ = os.RemoveAll(l.EtcdDir)
		m, err := start(ctx, resp.InitialCluster)
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = waitVoter(wctx, m)
		cancel()
		if err != nil {
			m.Close()
			return nil, err
		}
		return m, nil
	}
}

func findMember(members []*etcdserverpb.Member, name string) *etcdserverpb.Member {
	for _, m := range members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// DeadTracker remembers since when each host has been dead or gone, from gossip events.
type DeadTracker struct {
	mu   sync.Mutex
	dead map[string]time.Time
}

// NewDeadTracker returns an empty tracker.
func NewDeadTracker() *DeadTracker {
	return &DeadTracker{dead: map[string]time.Time{}}
}

// Observe records a host's new state at now: dead (or left) starts its clock once, anything
// else clears it.
func (t *DeadTracker) Observe(name string, dead bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !dead {
		delete(t.dead, name)
		return
	}
	if _, ok := t.dead[name]; !ok {
		t.dead[name] = now
	}
}

// Since returns a copy: host name -> since when it is dead.
func (t *DeadTracker) Since() map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(t.dead))
	for k, v := range t.dead {
		out[k] = v
	}
	return out
}
