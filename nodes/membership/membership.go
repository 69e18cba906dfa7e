// Package membership is the gossip layer of a site (hashicorp/memberlist): which hosts exist,
// which are alive, and what each says about itself (roles, API and etcd URLs) in its metadata.
// Gossip is encrypted with a key derived from the join token, so a host with another token
// can neither read nor inject gossip.
package membership

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/sirupsen/logrus"
)

// Meta is what a host publishes about itself. Its JSON must fit memberlist's 512-byte limit.
type Meta struct {
	Roles         []string `json:"r,omitempty"`
	APIURL        string   `json:"a,omitempty"`
	EtcdClientURL string   `json:"c,omitempty"`
	EtcdPeerURL   string   `json:"p,omitempty"`
	LabelsHash    string   `json:"l,omitempty"`
}

// State of a member as gossip sees it.
type State string

const (
	Alive   State = "alive"
	Suspect State = "suspect"
	Dead    State = "dead"
	Left    State = "left"
)

// Member is one host of the site.
type Member struct {
	Name  string
	Addr  string
	Port  int
	Meta  Meta
	State State
	// Since is when the member entered State.
	Since time.Time
}

// EventType says what happened to a member.
type EventType string

const (
	EventJoin   EventType = "join"
	EventLeave  EventType = "leave"
	EventFail   EventType = "fail"
	EventUpdate EventType = "update"
)

// Event reports a change of a member.
type Event struct {
	Type   EventType
	Member Member
}

// Config configures gossip; DefaultConfig fills the timeouts.
type Config struct {
	Name          string
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int
	// Token is the site's join token; the gossip key is derived from it unless Key is set.
	Token string
	// Key is the gossip key (32 bytes), as a rotated join token carries it.
	Key  []byte
	Meta Meta
	// ProbeInterval, ProbeTimeout, SuspicionMult and GossipInterval tune failure detection.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
	// JoinRetry is the pause between join attempts.
	JoinRetry time.Duration
}

// DefaultConfig returns LAN timeouts tuned for small sites: a dead host is detected in ~5 s.
func DefaultConfig() Config {
	return Config{BindPort: 7946, ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond,
		SuspicionMult: 3, GossipInterval: 200 * time.Millisecond, JoinRetry: 2 * time.Second}
}

// GossipKey derives the AES-256 gossip key from a join token's secret (HKDF-SHA256), so the
// key on the wire reveals nothing usable to join.
func GossipKey(token string) []byte {
	key, err := hkdf.Key(sha256.New, []byte(token), []byte("flotilla"), "flotilla gossip key v2", 32)
	if err != nil {
		// Only for a length hkdf cannot produce; 32 bytes of SHA-256 it always can.
		panic(err)
	}
	return key
}

// Membership is a running gossip member.
type Membership struct {
	cfg    Config
	ml     *memberlist.Memberlist
	events chan Event

	leaveOnce sync.Once
	banned    atomic.Pointer[func(name string) bool]
	// refused counts the alive messages of banned hosts ignored.
	refused atomic.Int64
	mu      sync.Mutex
	meta    []byte
	members map[string]*Member
}

// New starts gossip on the configured address (without joining anyone).
func New(cfg Config) (*Membership, error) {
	if cfg.Token == "" && cfg.Key == nil {
		return nil, errors.New("membership: a join token is required (it keys gossip encryption)")
	}
	m := &Membership{cfg: cfg, events: make(chan Event, 256), members: map[string]*Member{}}
	if err := m.setMeta(cfg.Meta); err != nil {
		return nil, err
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = cfg.BindPort
	}
	mc.SecretKey = cfg.Key
	if mc.SecretKey == nil {
		mc.SecretKey = GossipKey(cfg.Token)
	}
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
	}
	if cfg.ProbeTimeout > 0 {
		mc.ProbeTimeout = cfg.ProbeTimeout
	}
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	if cfg.GossipInterval > 0 {
		mc.GossipInterval = cfg.GossipInterval
	}
	mc.DeadNodeReclaimTime = 10 * time.Second
	mc.Delegate = (*delegate)(m)
	mc.Events = (*eventDelegate)(m)
	mc.Alive = (*aliveDelegate)(m)
	mc.Logger = log.New(logWriter{}, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("start gossip on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	m.ml = ml
	running.Store(m)
	return m, nil
}

// Join contacts the given host:port addresses until one answers or stop is closed. It
// returns the number of hosts contacted.
func (m *Membership) Join(addrs []string, stop <-chan struct{}) (int, error) {
	retry := m.cfg.JoinRetry
	if retry == 0 {
		retry = 2 * time.Second
	}
	for {
		n, err := m.ml.Join(addrs)
		if n > 0 {
			return n, nil
		}
		logrus.WithError(err).WithField("join", addrs).Warn("gossip join failed; retrying (a wrong --token-file shows as 'No installed keys could decrypt the message')")
		select {
		case <-stop:
			return 0, fmt.Errorf("join %v: %w", addrs, err)
		case <-time.After(retry):
		}
	}
}

// Members returns every member seen, alive or not, sorted by name.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		if !m.isBanned(mem.Name) {
			out = append(out, *mem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Alive reports whether gossip sees the host alive now (not suspect, dead, gone or banned).
func (m *Membership) Alive(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[name]
	return ok && mem.State == Alive && !m.isBanned(name)
}

// Events delivers member changes.
func (m *Membership) Events() <-chan Event { return m.events }

// UpdateMeta publishes new metadata for this host.
func (m *Membership) UpdateMeta(meta Meta) error {
	if err := m.setMeta(meta); err != nil {
		return err
	}
	return m.ml.UpdateNode(5 * time.Second)
}

// Reconnect tries, every interval until stop closes, to join again the members gossip saw
// die or leave in the last forget period. After a partition longer than memberlist's
// gossip-to-the-dead time (30 s) both sides have dropped each other and would never merge
// again on their own; this is Serf's reconnect.
func (m *Membership) Reconnect(interval, forget time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, addr := range m.reconnectTargets(time.Now(), forget) {
			n, err := m.ml.Join([]string{addr})
			countReconnect(n > 0)
			if n > 0 {
				logrus.WithField("addr", addr).Info("gossip: reconnected to a member seen dead")
			} else {
				logrus.WithField("addr", addr).WithError(err).Debug("gossip: reconnect")
			}
		}
	}
}

// reconnectTargets are the gossip addresses of members dead or left for less than forget.
func (m *Membership) reconnectTargets(now time.Time, forget time.Duration) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name, mem := range m.members {
		if name == m.cfg.Name || (mem.State != Dead && mem.State != Left) || now.Sub(mem.Since) > forget || m.isBanned(name) {
			continue
		}
		out = append(out, HostPort(mem.Addr, mem.Port))
	}
	sort.Strings(out)
	return out
}

// Leave announces a graceful departure and stops gossip; later calls do nothing.
func (m *Membership) Leave(timeout time.Duration) error {
	var err error
	m.leaveOnce.Do(func() {
		running.CompareAndSwap(m, nil)
		err = m.ml.Leave(timeout)
		if serr := m.ml.Shutdown(); err == nil {
			err = serr
		}
	})
	return err
}

func (m *Membership) setMeta(meta Meta) error {
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if len(b) > memberlist.MetaMaxSize {
		return fmt.Errorf("gossip metadata is %d bytes, over memberlist's %d-byte limit", len(b), memberlist.MetaMaxSize)
	}
	m.mu.Lock()
	m.meta = b
	m.mu.Unlock()
	return nil
}

func (m *Membership) record(n *memberlist.Node, typ EventType) {
	var meta Meta
	_ = json.Unmarshal(n.Meta, &meta)
	state := Alive
	switch n.State {
	case memberlist.StateSuspect:
		state = Suspect
	case memberlist.StateDead:
		state = Dead
	case memberlist.StateLeft:
		state = Left
	}
	if typ == EventLeave && state == Dead {
		typ = EventFail
	}
	if typ == EventLeave && state == Alive {
		state = Left
	}
	m.mu.Lock()
	prev := m.members[n.Name]
	mem := &Member{Name: n.Name, Addr: n.Addr.String(), Port: int(n.Port), Meta: meta, State: state, Since: time.Now()}
	if prev != nil && prev.State == state {
		mem.Since = prev.Since
	}
	m.members[n.Name] = mem
	m.mu.Unlock()
	select {
	case m.events <- Event{Type: typ, Member: *mem}:
	default:
		logrus.WithField("member", n.Name).Warn("gossip event dropped: nobody reads Events()")
	}
}

type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.meta...)
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// SetBanned makes gossip ignore the hosts banned reports (the hosts removed from the site):
// their alive messages are refused and Members leaves them out.
func (m *Membership) SetBanned(banned func(name string) bool) { m.banned.Store(&banned) }

func (m *Membership) isBanned(name string) bool {
	f := m.banned.Load()
	return f != nil && name != m.cfg.Name && (*f)(name)
}

type aliveDelegate Membership

func (a *aliveDelegate) NotifyAlive(n *memberlist.Node) error {
	if (*Membership)(a).isBanned(n.Name) {
		a.refused.Add(1)
		return fmt.Errorf("%s was removed from the site", n.Name)
	}
	return nil
}

type eventDelegate Membership

func (e *eventDelegate) NotifyJoin(n *memberlist.Node)   { (*Membership)(e).record(n, EventJoin) }
func (e *eventDelegate) NotifyLeave(n *memberlist.Node)  { (*Membership)(e).record(n, EventLeave) }
func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).record(n, EventUpdate) }

// logWriter sends memberlist's log lines to logrus at debug level, warnings and errors above.
type logWriter struct{}

var memberlistLog = logrus.WithField("component", "memberlist")

func (logWriter) Write(p []byte) (int, error) {
	s := string(p)
	switch {
	case len(s) > 7 && s[:7] == "[ERR] m":
		memberlistLog.Warn(s[6:])
	case len(s) > 8 && s[:8] == "[WARN] m":
		memberlistLog.Debug(s[7:])
	default:
		memberlistLog.Debug(s)
	}
	return len(p), nil
}

var _ io.Writer = logWriter{}

// HostPort joins an address and port.
func HostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }
