package services

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/internal/nftconn"
	"golang.org/x/sys/unix"
)

// Backend programs a DesiredState into the kernel.
type Backend interface {
	// Apply makes the kernel state match ds, touching only what changed when it can.
	Apply(ds DesiredState) error
	// Cleanup removes everything the backend created.
	Cleanup() error
}

// Resyncer is a Backend that can find and repair drift (someone deleted our table).
type Resyncer interface {
	Resync(ds DesiredState) error
}

// NftablesOptions configure the nftables backend.
type NftablesOptions struct {
	Table       string       // default "flotilla"; family ip
	ClusterCIDR netip.Prefix // pod CIDR: sources outside it are masqueraded towards ClusterIPs
	// NetNSFd, when > 0, is a network namespace file descriptor to program instead of the
	// caller's namespace (tests and simulated hosts); the caller keeps it open.
	NetNSFd int
	Log     *logrus.Entry
}

// Nftables is the nftables backend: one `ip` table holding NAT chains, the flat sets and maps
// that serve most ClusterIP frontends with elements alone, verdict maps keyed by (address,
// protocol, port) and chains for the other Service ports (see renderPort), updated
// incrementally.
type Nftables struct {
	opts NftablesOptions
	tbl  *nftables.Table

	mu      sync.Mutex
	applied *ruleset // what the kernel holds; nil forces a full rebuild
	// refs and ports remember which Service port put what into applied, so that a change
	// renders and sends only the ports that changed. refs is nil when applied was not built
	// port by port, or holds conflicts (two ports claiming one frontend) that only a full
	// render settles as it always did.
	refs  *rulesetRefs
	ports map[string]portState // by ServicePort.Key
	send  sender
}

// portState is one Service port as last applied and what it rendered to.
type portState struct {
	sp ServicePort
	f  *fragment
}

var _ Backend = (*Nftables)(nil)
var _ Resyncer = (*Nftables)(nil)

// NewNftables returns the backend; nothing touches the kernel before Apply.
func NewNftables(o NftablesOptions) *Nftables {
	if o.Table == "" {
		o.Table = "flotilla"
	}
	if !o.ClusterCIDR.IsValid() {
		o.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Nftables{opts: o, tbl: &nftables.Table{Name: o.Table, Family: nftables.TableFamilyIPv4}, send: sender{netns: o.NetNSFd}}
}

func (n *Nftables) conn() (*nftables.Conn, error) { return nftconn.New(n.opts.NetNSFd) }

// Apply programs ds: incrementally against what was applied last, or as one atomic rebuild of
// the whole table when nothing is known yet or the incremental batch failed.
//
// The incremental path compares ds port by port with what was applied and renders only the
// ports that differ, so one changed Service costs a walk over the ports (no rendering, no
// allocation for the unchanged ones) plus a batch proportional to the change; ApplyChanged
// skips the walk.
func (n *Nftables) Apply(ds DesiredState) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.apply(ds, nil)
}

// ApplyChanged is Apply for a caller that knows which ports may differ from the previous
// call (keys, by ServicePort.Key; ds.Services sorted by Key as Compile makes it): it looks at
// those alone instead of comparing every port.
func (n *Nftables) ApplyChanged(ds DesiredState, keys []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if keys == nil {
		keys = []string{} // nil means "unknown" to apply
	}
	return n.apply(ds, keys)
}

// apply is Apply; keys, when not nil, are the only ports that may have changed.
func (n *Nftables) apply(ds DesiredState, keys []string) error {
	if n.applied != nil && n.refs != nil && n.refs.conflicts == 0 {
		var changes []portChange
		if keys != nil {
			changes = n.changesOf(ds, keys)
		} else {
			changes = n.changes(ds)
		}
		d, e, ok := n.patch(ds, changes)
		if ok {
			if d.empty() && e.empty() {
				return nil
			}
			err := n.applyDiff(d, e, n.applied)
			if err == nil {
				return nil
			}
			n.opts.Log.WithError(err).Warn("incremental nftables update failed; rebuilding the whole table")
		}
		// patch already turned applied into ds: rebuild the kernel from it.
		want := n.applied
		n.applied = nil
		if err := n.applyFull(want); err != nil {
			n.refs, n.ports = nil, nil
			return fmt.Errorf("rebuild nftables table ip %s: %w", n.opts.Table, err)
		}
		n.applied = want
		return nil
	}
	want, refs, ports := renderPorts(ds, n.opts.ClusterCIDR)
	n.refs, n.ports = nil, nil
	if n.applied != nil {
		err := n.applyIncremental(n.applied, want)
		if err == nil {
			n.applied, n.refs, n.ports = want, refs, ports
			return nil
		}
		n.opts.Log.WithError(err).Warn("incremental nftables update failed; rebuilding the whole table")
	}
	n.applied = nil
	if err := n.applyFull(want); err != nil {
		return fmt.Errorf("rebuild nftables table ip %s: %w", n.opts.Table, err)
	}
	n.applied, n.refs, n.ports = want, refs, ports
	return nil
}

// renderPorts is render keeping each port's fragment and the reference counts, the starting
// point of later incremental updates.
func renderPorts(ds DesiredState, podCIDR netip.Prefix) (*ruleset, *rulesetRefs, map[string]portState) {
	frags := make([]*fragment, len(ds.Services))
	var flatEPs, hairpin int
	for i, sp := range ds.Services {
		frags[i] = renderPort(sp, podCIDR)
		for _, ff := range frags[i].flat {
			flatEPs += len(ff.eps)
		}
		hairpin += len(frags[i].hairpin)
	}
	// Sized up front: at 10,000 Services, growing these maps costs a tenth of a full sync.
	rs, refs := newRuleset(), newRulesetRefs()
	n := len(ds.Services)
	rs.flatVIPs, refs.flatVIPs = make(map[vipKey]bool, n), make(map[vipKey]int, n)
	rs.flatEPs, refs.flatEPs = make(map[flatKey]netip.AddrPort, flatEPs), make(map[flatKey]int, flatEPs)
	rs.hairpin, refs.hairpin = make(map[netip.Addr]bool, hairpin), make(map[netip.Addr]int, hairpin)
	rs.clusterIPs, refs.clusterIPs = make(map[netip.Addr]bool, n), make(map[netip.Addr]int, n)
	ports := make(map[string]portState, len(ds.Services))
	for _, ip := range ds.NodeIPs {
		rs.nodeIPs[ip] = true
	}
	for i, sp := range ds.Services {
		frags[i].mergeInto(rs, refs)
		ports[sp.Key] = portState{sp: sp, f: frags[i]}
	}
	return rs, refs, ports
}

// portChange is one port that changed, came (old nil) or went (sp nil).
type portChange struct {
	key string
	old *portState
	sp  *ServicePort
}

// changesOf lists the ports among keys that differ between n.ports and ds.
func (n *Nftables) changesOf(ds DesiredState, keys []string) []portChange {
	var changes []portChange
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		var sp *ServicePort
		if i, found := searchPorts(ds.Services, k); found {
			sp = &ds.Services[i]
		}
		old, found := n.ports[k]
		switch {
		case found && sp != nil && sameServicePort(old.sp, *sp):
		case found:
			changes = append(changes, portChange{key: k, old: &old, sp: sp})
		case sp != nil:
			changes = append(changes, portChange{key: k, sp: sp})
		}
	}
	return changes
}

// changes compares every port of ds with n.ports.
func (n *Nftables) changes(ds DesiredState) []portChange {
	type change = portChange
	var changes []change
	matched := 0
	for i := range ds.Services {
		sp := &ds.Services[i]
		old, found := n.ports[sp.Key]
		if found {
			matched++
			if sameServicePort(old.sp, *sp) {
				continue
			}
			changes = append(changes, change{key: sp.Key, old: &old, sp: sp})
			continue
		}
		changes = append(changes, change{key: sp.Key, sp: sp})
	}
	if matched < len(n.ports) {
		seen := make(map[string]bool, len(ds.Services))
		for i := range ds.Services {
			seen[ds.Services[i].Key] = true
		}
		for k, ps := range n.ports {
			if !seen[k] {
				ps := ps
				changes = append(changes, change{key: k, old: &ps})
			}
		}
	}
	return changes
}

// patch turns n.applied into the ruleset of ds by taking out the fragments of the ports that
// changed or went and merging in those of the ports that changed or came. It returns the
// chain and element changes for the kernel; ok is false when the result holds a conflict, and
// then only a full rebuild from n.applied is right.
func (n *Nftables) patch(ds DesiredState, changes []portChange) (d rulesetDiff, e elemDelta, ok bool) {
	rs, refs := n.applied, n.refs
	nodeIPs := map[netip.Addr]bool{}
	for _, ip := range ds.NodeIPs {
		nodeIPs[ip] = true
	}
	nodeDel, nodeAdd := diffMap(rs.nodeIPs, nodeIPs)
	if len(changes) == 0 && len(nodeDel) == 0 && len(nodeAdd) == 0 {
		return d, e, true
	}
	e.nodeIPsDel, e.nodeIPsAdd = nodeDel, nodeAdd
	rs.nodeIPs = nodeIPs

	// Record the elements every touched port holds before and after, then move the
	// fragments, then compare: an element another port still holds does not change.
	tr := newTracker(rs)
	oldPart, newPart := newRuleset(), newRuleset()
	frags := make([]*fragment, len(changes))
	for i, c := range changes {
		if c.old != nil {
			tr.touch(c.old.f)
			c.old.f.mergeInto(oldPart, nil)
		}
		if c.sp != nil {
			frags[i] = renderPort(*c.sp, n.opts.ClusterCIDR)
			tr.touch(frags[i])
			frags[i].mergeInto(newPart, nil)
		}
	}
	for _, c := range changes {
		if c.old != nil {
			c.old.f.removeFrom(rs, refs)
		}
	}
	for i, c := range changes {
		if c.sp != nil {
			frags[i].mergeInto(rs, refs)
			n.ports[c.key] = portState{sp: *c.sp, f: frags[i]}
		} else {
			delete(n.ports, c.key)
		}
	}
	if refs.conflicts > 0 {
		return d, e, false
	}
	d = diffRulesets(oldPart, newPart)
	tr.delta(&e)
	return d, e, true
}

// sameServicePort reports whether two versions of a Service port render the same rules.
func sameServicePort(a, b ServicePort) bool {
	return a.Key == b.Key && a.Namespace == b.Namespace && a.Name == b.Name && a.PortName == b.PortName &&
		a.Protocol == b.Protocol && a.ClusterIP == b.ClusterIP && a.Port == b.Port && a.NodePort == b.NodePort &&
		a.Affinity == b.Affinity && a.InternalLocal == b.InternalLocal && a.ExternalLocal == b.ExternalLocal &&
		a.Scheduler == b.Scheduler && slices.Equal(a.ExternalIPs, b.ExternalIPs) &&
		slices.Equal(a.FirewallIPs, b.FirewallIPs) && slices.Equal(a.SourceRanges, b.SourceRanges) &&
		slices.Equal(a.ClusterEndpoints, b.ClusterEndpoints) && slices.Equal(a.LocalEndpoints, b.LocalEndpoints)
}

// Resync rebuilds the table when the kernel no longer holds what we applied: the table or one
// of our chains is gone, or the service map lost elements. Otherwise it applies ds normally.
func (n *Nftables) Resync(ds DesiredState) error {
	n.mu.Lock()
	drift := ""
	if n.applied != nil {
		if d, err := n.drift(n.applied); err != nil {
			drift = err.Error()
		} else {
			drift = d
		}
	}
	if drift != "" {
		n.opts.Log.WithField("drift", drift).Warn("nftables state drifted; rebuilding the table")
		n.applied = nil
	}
	n.mu.Unlock()
	return n.Apply(ds)
}

// drift describes the first difference found between the kernel and rs, or "".
func (n *Nftables) drift(rs *ruleset) (string, error) {
	c, err := n.conn()
	if err != nil {
		return "", err
	}
	if _, err := c.ListTableOfFamily(n.opts.Table, nftables.TableFamilyIPv4); err != nil {
		return "table ip " + n.opts.Table + " is missing", nil
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return "", fmt.Errorf("list chains: %w", err)
	}
	have := map[string]bool{}
	for _, ch := range chains {
		if ch.Table.Name == n.opts.Table {
			have[ch.Name] = true
		}
	}
	for _, s := range staticChains() {
		if !have[s.name] {
			return "chain " + s.name + " is missing", nil
		}
	}
	for name := range rs.chains {
		if !have[name] {
			return "chain " + name + " is missing", nil
		}
	}
	if want := len(staticChains()) + len(rs.chains); len(have) != want {
		return fmt.Sprintf("table has %d chains, want %d", len(have), want), nil
	}
	// The static chains are few and hold the hooks: count their rules too (a flushed
	// "services" chain disables every Service while leaving the table in place).
	probe := newBatch(nil, n.tbl)
	probe.podCIDR = n.opts.ClusterCIDR
	for _, s := range staticChains() {
		rules, err := c.GetRules(n.tbl, s.chain(n.tbl))
		if err != nil {
			return "", fmt.Errorf("list rules of chain %s: %w", s.name, err)
		}
		if want := len(s.rules(probe)); len(rules) != want {
			return fmt.Sprintf("chain %s has %d rules, want %d", s.name, len(rules), want), nil
		}
	}
	for _, m := range []struct {
		name string
		want int
	}{
		{mapServiceIPs, len(rs.serviceIPs)},
		{setFlatVIPs, len(rs.flatVIPs)},
	} {
		els, err := c.GetSetElements(&nftables.Set{Table: n.tbl, Name: m.name})
		if err != nil {
			return "map " + m.name + " is missing", nil
		}
		if len(els) != m.want {
			return fmt.Sprintf("map %s has %d elements, want %d", m.name, len(els), m.want), nil
		}
	}
	return "", nil
}

// release closes the backend's netlink socket, leaving the kernel state in place; the next
// Apply opens another. The socket holds its network namespace alive.
func (n *Nftables) release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.send.close()
}

// Cleanup deletes our table (and with it every chain, map and set).
func (n *Nftables) Cleanup() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applied = nil
	n.send.close()
	c, err := n.conn()
	if err != nil {
		return err
	}
	if _, err := c.ListTableOfFamily(n.opts.Table, nftables.TableFamilyIPv4); err != nil {
		return nil // already gone
	}
	c.DelTable(n.tbl)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables table ip %s: %w", n.opts.Table, err)
	}
	return nil
}

// batch accumulates one netlink transaction on the Service table, with the helpers that
// know its sets and rules.
type batch struct {
	*nftconn.Batch
	// out receives the messages the library would have sent, when the batch is sent by
	// sendBatch rather than by the library (see newBatch).
	out  *[]netlink.Message
	send *sender
	// podCIDR: sources outside it are masqueraded towards ClusterIPs (flat-class chains).
	podCIDR netip.Prefix
}

func newBatch(c *nftables.Conn, tbl *nftables.Table) *batch {
	return &batch{Batch: nftconn.NewBatch(c, tbl)}
}

// newBatch starts a transaction on the Service table. The library encodes the messages but
// does not send them: it asks the kernel to echo every rule back and acknowledge every
// message, which at 10,000 Services is a hundred thousand replies for the kernel to build
// and for us to read, more than a third of a full sync. sendBatch sends the same messages
// asking only for the errors and one acknowledgement.
func (n *Nftables) newBatch() (*batch, error) {
	out := &[]netlink.Message{}
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		*out = append(*out, req...)
		return nil, nil
	}))
	if err != nil {
		return nil, err
	}
	b := newBatch(c, n.tbl)
	b.out, b.send, b.podCIDR = out, &n.send, n.opts.ClusterCIDR
	return b, nil
}

// Flush sends the transaction, or returns the first error met while queuing it (then
// nothing is sent).
func (b *batch) Flush() error {
	if b.out == nil {
		return b.Batch.Flush()
	}
	if b.Err != nil {
		return b.Err
	}
	if err := b.C.Flush(); err != nil {
		return err
	}
	msgs := *b.out
	*b.out = nil
	return b.send.batch(msgs)
}

// sizeBuffers gives conn the socket buffers of the library's connections (internal/nftconn):
// a full sync is one send of tens of megabytes.
func sizeBuffers(conn *netlink.Conn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 1<<30); serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 1<<28)
		}
	}); err != nil {
		return err
	}
	return serr
}

// sender sends transactions over one netlink socket, opened at the first and kept: closing a
// netfilter socket costs 7-15 ms (more than a one-Service change costs the kernel), opening
// one in another network namespace a fraction of a millisecond. Used under Nftables.mu.
type sender struct {
	netns int // 0: ours
	conn  *netlink.Conn
}

// batch sends one transaction; after a failure the socket is closed, so that no answer left
// unread in it is taken for the answer to the next one.
func (s *sender) batch(msgs []netlink.Message) error {
	if s.conn == nil {
		conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: s.netns})
		if err != nil {
			return fmt.Errorf("open netfilter netlink socket: %w", err)
		}
		if err := sizeBuffers(conn); err != nil {
			conn.Close()
			return fmt.Errorf("size netfilter netlink socket buffers: %w", err)
		}
		s.conn = conn
	}
	err := sendBatch(s.conn, msgs)
	if err != nil {
		s.close()
	}
	return err
}

func (s *sender) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// sendBatch sends one nftables transaction (msgs starts with the batch begin message and ends
// with the batch end) over conn and waits for its outcome.
//
// The kernel processes the whole batch while the send call runs and queues its answers:
// an error for each message that failed, or one error for the batch when the commit failed,
// and an acknowledgement for the messages that ask for one. Only the last message asks, so
// its acknowledgement (or an error before it) ends the wait.
func sendBatch(conn *netlink.Conn, msgs []netlink.Message) error {
	last := -1
	for i := range msgs {
		h := &msgs[i].Header
		h.Flags &^= netlink.Acknowledge | unix.NLM_F_ECHO
		// Numbered and addressed again by the connection that sends them.
		h.Sequence, h.PID = 0, 0
		if t := h.Type; t != netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) && t != netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	msgs[last].Header.Flags |= netlink.Acknowledge
	sent, err := conn.SendMessages(msgs)
	if err != nil {
		return fmt.Errorf("send nftables batch: %w", err)
	}
	seq := sent[last].Header.Sequence
	// The answers are queued by the time the send returns; the deadline only guards against
	// waiting forever on a kernel that behaves otherwise.
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		return err
	}
	for {
		replies, err := conn.Receive()
		if err != nil {
			return fmt.Errorf("nftables batch: %w", err)
		}
		for _, r := range replies {
			if r.Header.Type == netlink.Error && r.Header.Sequence == seq {
				return nil
			}
		}
	}
}

var (
	vipType  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	portType = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	pairType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)
	// The fourth field of a flat-endpoints key is numgen's result, a host-order u32 (type mark:
	// nft cannot list a concatenation with a field of type integer).
	flatEPKeyType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeMark)
	addrPortType  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)
)

func (b *batch) addStaticSets() {
	for _, s := range []*nftables.Set{
		{Name: mapServiceIPs, IsMap: true, KeyType: vipType, DataType: nftables.TypeVerdict, Concatenation: true},
		{Name: mapNodePorts, IsMap: true, KeyType: portType, DataType: nftables.TypeVerdict, Concatenation: true},
		{Name: setFlatVIPs, KeyType: vipType, Concatenation: true},
		{Name: setNoEPServices, KeyType: vipType, Concatenation: true},
		{Name: setNoEPNodePorts, KeyType: portType, Concatenation: true},
		{Name: setNodePortIPs, KeyType: nftables.TypeIPAddr},
		{Name: setClusterIPs, KeyType: nftables.TypeIPAddr},
		{Name: setHairpin, KeyType: pairType, Concatenation: true},
	} {
		b.AddSet(s, nil)
	}
	for n := uint32(1); n <= maxFlatEndpoints; n++ {
		b.AddSet(&nftables.Set{Name: flatMap(n), IsMap: true, KeyType: flatEPKeyType, DataType: addrPortType, Concatenation: true}, nil)
	}
}

func (b *batch) addAffinitySet(name string, timeout time.Duration) {
	b.AddSet(&nftables.Set{Name: name, KeyType: nftables.TypeIPAddr, HasTimeout: true, Timeout: timeout, Dynamic: true}, nil)
}

func vipBytes(k vipKey) []byte {
	ip := k.ip.As4()
	return []byte{ip[0], ip[1], ip[2], ip[3], k.proto, 0, 0, 0, byte(k.port >> 8), byte(k.port), 0, 0}
}

func portBytes(k portKey) []byte {
	return []byte{k.proto, 0, 0, 0, byte(k.port >> 8), byte(k.port), 0, 0}
}

func gotoData(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }

// elemDelta is the element changes of every map and set: keys to delete, entries to add (a
// key whose value changed is in both).
type elemDelta struct {
	serviceIPsDel                      []vipKey
	serviceIPsAdd                      map[vipKey]string
	nodePortsDel                       []portKey
	nodePortsAdd                       map[portKey]string
	flatVIPsDel                        []vipKey
	flatVIPsAdd                        map[vipKey]bool
	flatEPsDel                         []flatKey
	flatEPsAdd                         map[flatKey]netip.AddrPort
	noEPServicesDel                    []vipKey
	noEPServicesAdd                    map[vipKey]bool
	noEPNodePortsDel                   []portKey
	noEPNodePortsAdd                   map[portKey]bool
	nodeIPsDel, clusterIPsDel, hairDel []netip.Addr
	nodeIPsAdd, clusterIPsAdd, hairAdd map[netip.Addr]bool
}

func (e elemDelta) empty() bool {
	return len(e.serviceIPsDel)+len(e.serviceIPsAdd)+len(e.nodePortsDel)+len(e.nodePortsAdd)+
		len(e.flatVIPsDel)+len(e.flatVIPsAdd)+len(e.flatEPsDel)+len(e.flatEPsAdd)+
		len(e.noEPServicesDel)+len(e.noEPServicesAdd)+len(e.noEPNodePortsDel)+len(e.noEPNodePortsAdd)+
		len(e.nodeIPsDel)+len(e.nodeIPsAdd)+len(e.clusterIPsDel)+len(e.clusterIPsAdd)+len(e.hairDel)+len(e.hairAdd) == 0
}

func (d rulesetDiff) empty() bool {
	return len(d.addChains)+len(d.rewriteChains)+len(d.delChains)+len(d.addSets)+len(d.delSets) == 0
}

// allElems is every element of rs, to add to empty sets: diffElems from an empty ruleset
// without copying rs's maps.
func allElems(rs *ruleset) elemDelta {
	return elemDelta{
		serviceIPsAdd: rs.serviceIPs, nodePortsAdd: rs.nodePorts, flatVIPsAdd: rs.flatVIPs, flatEPsAdd: rs.flatEPs,
		noEPServicesAdd: rs.noEPServices, noEPNodePortsAdd: rs.noEPNodePorts,
		nodeIPsAdd: rs.nodeIPs, clusterIPsAdd: rs.clusterIPs, hairAdd: rs.hairpin,
	}
}

// diffElems compares the elements of every map and set of two whole rulesets.
func diffElems(old, cur *ruleset) elemDelta {
	var e elemDelta
	e.serviceIPsDel, e.serviceIPsAdd = diffMap(old.serviceIPs, cur.serviceIPs)
	e.nodePortsDel, e.nodePortsAdd = diffMap(old.nodePorts, cur.nodePorts)
	e.flatVIPsDel, e.flatVIPsAdd = diffMap(old.flatVIPs, cur.flatVIPs)
	e.flatEPsDel, e.flatEPsAdd = diffMap(old.flatEPs, cur.flatEPs)
	e.noEPServicesDel, e.noEPServicesAdd = diffMap(old.noEPServices, cur.noEPServices)
	e.noEPNodePortsDel, e.noEPNodePortsAdd = diffMap(old.noEPNodePorts, cur.noEPNodePorts)
	e.nodeIPsDel, e.nodeIPsAdd = diffMap(old.nodeIPs, cur.nodeIPs)
	e.clusterIPsDel, e.clusterIPsAdd = diffMap(old.clusterIPs, cur.clusterIPs)
	e.hairDel, e.hairAdd = diffMap(old.hairpin, cur.hairpin)
	return e
}

// before is a key's value in a map before a change, and whether it was there.
type before[V comparable] struct {
	v  V
	ok bool
}

// touched remembers the values that keys of one map had before fragments moved.
type touched[K comparable, V comparable] struct {
	m    map[K]V
	prev map[K]before[V]
}

func newTouched[K comparable, V comparable](m map[K]V) *touched[K, V] {
	return &touched[K, V]{m: m, prev: map[K]before[V]{}}
}

func (t *touched[K, V]) touch(k K) {
	if _, ok := t.prev[k]; !ok {
		v, ok := t.m[k]
		t.prev[k] = before[V]{v, ok}
	}
}

// delta compares the touched keys now with before, as diffMap does for whole maps.
func (t *touched[K, V]) delta() (del []K, add map[K]V) {
	add = map[K]V{}
	for k, p := range t.prev {
		v, ok := t.m[k]
		if ok && (!p.ok || v != p.v) {
			add[k] = v
		}
		if p.ok && (!ok || v != p.v) {
			del = append(del, k)
		}
	}
	return del, add
}

// tracker is touched for every element map of a ruleset.
type tracker struct {
	serviceIPs    *touched[vipKey, string]
	nodePorts     *touched[portKey, string]
	flatVIPs      *touched[vipKey, bool]
	flatEPs       *touched[flatKey, netip.AddrPort]
	noEPServices  *touched[vipKey, bool]
	noEPNodePorts *touched[portKey, bool]
	clusterIPs    *touched[netip.Addr, bool]
	hairpin       *touched[netip.Addr, bool]
}

func newTracker(rs *ruleset) *tracker {
	return &tracker{
		serviceIPs: newTouched(rs.serviceIPs), nodePorts: newTouched(rs.nodePorts),
		flatVIPs: newTouched(rs.flatVIPs), flatEPs: newTouched(rs.flatEPs),
		noEPServices: newTouched(rs.noEPServices), noEPNodePorts: newTouched(rs.noEPNodePorts),
		clusterIPs: newTouched(rs.clusterIPs), hairpin: newTouched(rs.hairpin),
	}
}

func (t *tracker) touch(f *fragment) {
	for _, e := range f.serviceIPs {
		t.serviceIPs.touch(e.k)
	}
	for _, e := range f.nodePorts {
		t.nodePorts.touch(e.k)
	}
	for _, ff := range f.flat {
		t.flatVIPs.touch(ff.k)
		for i := range ff.eps {
			t.flatEPs.touch(flatKey{ff.k, uint32(len(ff.eps)), uint32(i)})
		}
	}
	for _, k := range f.noEPServices {
		t.noEPServices.touch(k)
	}
	for _, k := range f.noEPNodePorts {
		t.noEPNodePorts.touch(k)
	}
	for _, a := range f.clusterIPs {
		t.clusterIPs.touch(a)
	}
	for _, a := range f.hairpin {
		t.hairpin.touch(a)
	}
}

func (t *tracker) delta(e *elemDelta) {
	e.serviceIPsDel, e.serviceIPsAdd = t.serviceIPs.delta()
	e.nodePortsDel, e.nodePortsAdd = t.nodePorts.delta()
	e.flatVIPsDel, e.flatVIPsAdd = t.flatVIPs.delta()
	e.flatEPsDel, e.flatEPsAdd = t.flatEPs.delta()
	e.noEPServicesDel, e.noEPServicesAdd = t.noEPServices.delta()
	e.noEPNodePortsDel, e.noEPNodePortsAdd = t.noEPNodePorts.delta()
	e.clusterIPsDel, e.clusterIPsAdd = t.clusterIPs.delta()
	e.hairDel, e.hairAdd = t.hairpin.delta()
}

// elementOps queues the element changes of every map and set.
func (b *batch) elementOps(e elemDelta) {
	b.Elems(mapServiceIPs, vipElems(e.serviceIPsDel, nil), true)
	b.Elems(mapServiceIPs, vipElems(nil, e.serviceIPsAdd), false)
	b.Elems(mapNodePorts, portElems(e.nodePortsDel, nil), true)
	b.Elems(mapNodePorts, portElems(nil, e.nodePortsAdd), false)
	b.Elems(setFlatVIPs, vipElems(e.flatVIPsDel, nil), true)
	b.Elems(setFlatVIPs, vipSetElems(e.flatVIPsAdd), false)
	del, add := flatEPElems(e.flatEPsDel, e.flatEPsAdd)
	for n := uint32(1); n <= maxFlatEndpoints; n++ {
		b.Elems(flatMap(n), del[n], true)
		b.Elems(flatMap(n), add[n], false)
	}
	b.Elems(setNoEPServices, vipElems(e.noEPServicesDel, nil), true)
	b.Elems(setNoEPServices, vipSetElems(e.noEPServicesAdd), false)
	b.Elems(setNoEPNodePorts, portElems(e.noEPNodePortsDel, nil), true)
	b.Elems(setNoEPNodePorts, portSetElems(e.noEPNodePortsAdd), false)
	for _, p := range []struct {
		name    string
		del     []netip.Addr
		add     map[netip.Addr]bool
		hairpin bool
	}{
		{setNodePortIPs, e.nodeIPsDel, e.nodeIPsAdd, false},
		{setClusterIPs, e.clusterIPsDel, e.clusterIPsAdd, false},
		{setHairpin, e.hairDel, e.hairAdd, true},
	} {
		addrs := make([]netip.Addr, 0, len(p.add))
		for a := range p.add {
			addrs = append(addrs, a)
		}
		b.Elems(p.name, addrElems(p.del, p.hairpin), true)
		b.Elems(p.name, addrElems(addrs, p.hairpin), false)
	}
}

func vipElems(keys []vipKey, m map[vipKey]string) []nftables.SetElement {
	var out []nftables.SetElement
	for _, k := range keys {
		out = append(out, nftables.SetElement{Key: vipBytes(k)})
	}
	for k, ch := range m {
		out = append(out, nftables.SetElement{Key: vipBytes(k), VerdictData: gotoData(ch)})
	}
	return out
}

// flatEPElems are the elements to delete and to add, by endpoint count (map). A key is the
// frontend (as vipBytes) then the index as numgen writes it (host byte order); a value the
// endpoint's address then its port in network order, padded to a register, where dnat reads
// them. Their bytes share one allocation: a full sync has a hundred thousand of them.
func flatEPElems(keys []flatKey, m map[flatKey]netip.AddrPort) (del, add map[uint32][]nftables.SetElement) {
	del, add = map[uint32][]nftables.SetElement{}, map[uint32][]nftables.SetElement{}
	arena := make([]byte, 0, 16*len(keys)+24*len(m))
	key := func(k flatKey) []byte {
		ip := k.vip.ip.As4()
		i := native32(k.i)
		arena = append(arena, ip[0], ip[1], ip[2], ip[3], k.vip.proto, 0, 0, 0, byte(k.vip.port>>8), byte(k.vip.port), 0, 0, i[0], i[1], i[2], i[3])
		return arena[len(arena)-16 : len(arena) : len(arena)]
	}
	for _, k := range keys {
		del[k.n] = append(del[k.n], nftables.SetElement{Key: key(k)})
	}
	for k, ap := range m {
		kb := key(k)
		ip := ap.Addr().As4()
		arena = append(arena, ip[0], ip[1], ip[2], ip[3], byte(ap.Port()>>8), byte(ap.Port()), 0, 0)
		add[k.n] = append(add[k.n], nftables.SetElement{Key: kb, Val: arena[len(arena)-8 : len(arena) : len(arena)]})
	}
	return del, add
}

func vipSetElems(m map[vipKey]bool) []nftables.SetElement {
	var out []nftables.SetElement
	for k := range m {
		out = append(out, nftables.SetElement{Key: vipBytes(k)})
	}
	return out
}

func portElems(keys []portKey, m map[portKey]string) []nftables.SetElement {
	var out []nftables.SetElement
	for _, k := range keys {
		out = append(out, nftables.SetElement{Key: portBytes(k)})
	}
	for k, ch := range m {
		out = append(out, nftables.SetElement{Key: portBytes(k), VerdictData: gotoData(ch)})
	}
	return out
}

func portSetElems(m map[portKey]bool) []nftables.SetElement {
	var out []nftables.SetElement
	for k := range m {
		out = append(out, nftables.SetElement{Key: portBytes(k)})
	}
	return out
}

func addrElems(addrs []netip.Addr, pair bool) []nftables.SetElement {
	size := 4
	if pair {
		size = 8
	}
	out := make([]nftables.SetElement, 0, len(addrs))
	arena := make([]byte, 0, size*len(addrs)) // one allocation for every key
	for _, a := range addrs {
		ip := a.As4()
		arena = append(arena, ip[:]...)
		if pair {
			arena = append(arena, ip[:]...)
		}
		out = append(out, nftables.SetElement{Key: arena[len(arena)-size : len(arena) : len(arena)]})
	}
	return out
}

// applyFull replaces the whole table in one transaction: packets see either the old rules or
// the new ones, never an empty table.
func (n *Nftables) applyFull(rs *ruleset) error {
	b, err := n.newBatch()
	if err != nil {
		return err
	}
	c := b.C
	b.ReplaceTable()
	b.addStaticSets()
	for _, s := range staticChains() {
		c.AddChain(s.chain(n.tbl))
	}
	names := nftconn.SortedKeys(rs.affinity)
	for _, name := range names {
		b.addAffinitySet(name, rs.affinity[name])
	}
	chains := nftconn.SortedKeys(rs.chains)
	for _, name := range chains {
		c.AddChain(b.Chain(name))
	}
	// Elements after the chains they name (verdict maps) and before the rules that bind the
	// maps, so no element is checked against a rule it cannot affect.
	b.elementOps(allElems(rs))
	for _, s := range staticChains() {
		for _, r := range s.rules(b) {
			c.AddRule(&nftables.Rule{Table: n.tbl, Chain: b.Chain(s.name), Exprs: r})
		}
	}
	for _, name := range chains {
		b.addRules(name, rs.chains[name])
	}
	return b.Flush()
}

// applyIncremental queues only the differences between old and cur.
func (n *Nftables) applyIncremental(old, cur *ruleset) error {
	return n.applyDiff(diffRulesets(old, cur), diffElems(old, cur), cur)
}

// applyDiff queues chain changes d and element changes e towards cur, in an order the kernel
// accepts within one transaction: new sets and chains first, then rewritten chains, then map
// elements, and last the chains and sets nothing references any more.
func (n *Nftables) applyDiff(d rulesetDiff, e elemDelta, cur *ruleset) error {
	b, err := n.newBatch()
	if err != nil {
		return err
	}
	c := b.C
	for _, name := range d.addSets {
		b.addAffinitySet(name, cur.affinity[name])
	}
	for _, name := range d.addChains {
		c.AddChain(b.Chain(name))
	}
	added := map[string]bool{}
	for _, name := range d.addChains {
		added[name] = true
	}
	for _, name := range d.rewriteChains {
		if !added[name] {
			c.FlushChain(b.Chain(name))
		}
		b.addRules(name, cur.chains[name])
	}
	b.elementOps(e)
	for _, name := range d.delChains {
		c.FlushChain(b.Chain(name))
	}
	for _, name := range d.delChains {
		c.DelChain(b.Chain(name))
	}
	for _, name := range d.delSets {
		c.DelSet(b.Set(name))
	}
	return b.Flush()
}

// ---- expressions ----

const (
	reg1  = 1 // NFT_REG_1: 16 bytes, also NFT_REG32_00..03
	reg32 = 9 // NFT_REG32_01: the second 4-byte slot of a concatenation
	reg33 = 10
	reg34 = 11 // NFT_REG32_03: the fourth 4-byte slot
)

func native32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

func loadSaddr(reg uint32) expr.Any {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

func loadDaddr(reg uint32) expr.Any {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
}

func loadL4proto(reg uint32) expr.Any { return &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg} }

func loadDport(reg uint32) expr.Any {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

func verdict(kind expr.VerdictKind, chain string) expr.Any {
	return &expr.Verdict{Kind: kind, Chain: chain}
}

// saddrIn matches (or with neg, does not match) the source address against a prefix.
func saddrIn(p netip.Prefix, neg bool) []expr.Any {
	mask := make([]byte, 4)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	op := expr.CmpOpEq
	if neg {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		loadSaddr(reg1),
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: reg1, Data: nftconn.IPv4Bytes(p.Masked().Addr())},
	}
}

func fibSaddrLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: reg1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(unix.RTN_LOCAL)},
	}
}

func l4protoIs(p uint8) []expr.Any {
	return []expr.Any{loadL4proto(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}}}
}

func ctStateNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(expr.CtStateBitNEW), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)},
	}
}

func lookupVIP(set *nftables.Set, vmap bool) []expr.Any {
	l := &expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID}
	if vmap {
		l.IsDestRegSet, l.DestRegister = true, 0
	}
	return append(lookupVIPKey(), l)
}

// lookupVIPKey loads the packet's frontend, ip daddr . meta l4proto . th dport, into the
// first three slots of register 1.
func lookupVIPKey() []expr.Any {
	return []expr.Any{loadDaddr(reg1), loadL4proto(reg32), loadDport(reg33)}
}

func lookupPort(set *nftables.Set, vmap bool) []expr.Any {
	l := &expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID}
	if vmap {
		l.IsDestRegSet, l.DestRegister = true, 0
	}
	return []expr.Any{loadL4proto(reg1), loadDport(reg32), l}
}

func daddrInSet(set *nftables.Set) []expr.Any {
	return []expr.Any{loadDaddr(reg1), &expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID}}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// staticChain is a chain that exists in every ruleset.
type staticChain struct {
	name     string
	typ      nftables.ChainType
	hook     *nftables.ChainHook
	priority int32
	rules    func(b *batch) [][]expr.Any
}

func (s staticChain) chain(t *nftables.Table) *nftables.Chain {
	c := &nftables.Chain{Name: s.name, Table: t}
	if s.hook != nil {
		c.Type, c.Hooknum, c.Priority = s.typ, s.hook, nftables.ChainPriorityRef(nftables.ChainPriority(s.priority))
	}
	return c
}

// staticChains lists the base chains (hooked) and helper chains. Filter chains run at -110,
// before DNAT (-100), so they still see the Service address; the cluster-IP check runs after
// DNAT (-90), so only traffic to a ClusterIP port we do not serve is still addressed to one.
func staticChains() []staticChain {
	jump := func(ch string) func(*batch) [][]expr.Any {
		return func(*batch) [][]expr.Any { return [][]expr.Any{{verdict(expr.VerdictJump, ch)}} }
	}
	epCheck := func(*batch) [][]expr.Any {
		return [][]expr.Any{cat(ctStateNew(), []expr.Any{verdict(expr.VerdictJump, chainEPCheck)})}
	}
	return []staticChain{
		{name: "nat-prerouting", typ: nftables.ChainTypeNAT, hook: nftables.ChainHookPrerouting, priority: -100, rules: jump(chainServices)},
		{name: "nat-output", typ: nftables.ChainTypeNAT, hook: nftables.ChainHookOutput, priority: -100, rules: jump(chainServices)},
		{name: "nat-postrouting", typ: nftables.ChainTypeNAT, hook: nftables.ChainHookPostrouting, priority: 100, rules: jump(chainMasquerading)},
		{name: "filter-input", typ: nftables.ChainTypeFilter, hook: nftables.ChainHookInput, priority: -110, rules: epCheck},
		{name: "filter-forward", typ: nftables.ChainTypeFilter, hook: nftables.ChainHookForward, priority: -110, rules: epCheck},
		{name: "filter-output", typ: nftables.ChainTypeFilter, hook: nftables.ChainHookOutput, priority: -110, rules: epCheck},
		{name: "filter-forward-post-dnat", typ: nftables.ChainTypeFilter, hook: nftables.ChainHookForward, priority: -90, rules: jump(chainClusterCheck)},
		{name: "filter-output-post-dnat", typ: nftables.ChainTypeFilter, hook: nftables.ChainHookOutput, priority: -90, rules: jump(chainClusterCheck)},
		{name: chainServices, rules: func(b *batch) [][]expr.Any {
			return [][]expr.Any{
				cat(lookupVIP(b.Set(setFlatVIPs), false), []expr.Any{verdict(expr.VerdictGoto, chainFlat)}),
				lookupVIP(b.Set(mapServiceIPs), true),
				cat(daddrInSet(b.Set(setNodePortIPs)), lookupPort(b.Set(mapNodePorts), true)),
			}
		}},
		{name: chainMarkMasq, rules: func(*batch) [][]expr.Any {
			return [][]expr.Any{{
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^uint32(masqMark)), Xor: native32(masqMark)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
			}}
		}},
		{name: chainMasquerading, rules: func(b *batch) [][]expr.Any {
			hp := b.Set(setHairpin)
			return masqueradeRules(hp, true)
		}},
		{name: chainEPCheck, rules: func(b *batch) [][]expr.Any {
			return [][]expr.Any{
				cat(lookupVIP(b.Set(setNoEPServices), false), []expr.Any{verdict(expr.VerdictGoto, chainReject)}),
				cat(daddrInSet(b.Set(setNodePortIPs)), lookupPort(b.Set(setNoEPNodePorts), false), []expr.Any{verdict(expr.VerdictGoto, chainReject)}),
			}
		}},
		{name: chainClusterCheck, rules: func(b *batch) [][]expr.Any {
			return [][]expr.Any{cat(daddrInSet(b.Set(setClusterIPs)), []expr.Any{verdict(expr.VerdictGoto, chainReject)})}
		}},
		{name: chainFlat, rules: flatRules},
		{name: chainReject, rules: func(*batch) [][]expr.Any {
			return [][]expr.Any{
				cat(l4protoIs(protoTCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
				{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3 /* port unreachable */}},
			}
		}},
	}
}

// flatRules are the rules of chain flat-services (see renderPort): masquerade sources outside
// the pod CIDR, as a svc- chain does, then one DNAT per endpoint count n, to endpoint `numgen
// random mod n` of the frontend in flat-endpoints-<n>. The key fills register 1 (address,
// protocol, port, index); the endpoint's address and port land in its first two 4-byte slots,
// where dnat reads them. A frontend with another count is not in the map: it falls through.
func flatRules(b *batch) [][]expr.Any {
	rules := [][]expr.Any{cat(saddrIn(b.podCIDR, true), []expr.Any{verdict(expr.VerdictJump, chainMarkMasq)})}
	for n := 1; n <= maxFlatEndpoints; n++ {
		eps := b.Set(flatMap(uint32(n)))
		rules = append(rules, cat(lookupVIPKey(), []expr.Any{
			&expr.Numgen{Register: reg34, Modulus: uint32(n), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: reg1, SetName: eps.Name, SetID: eps.ID, IsDestRegSet: true, DestRegister: reg1},
			dnat(),
		}))
	}
	return rules
}

// addRules queues the rules of one dynamic chain.
func (b *batch) addRules(chain string, rules []rule) {
	ch := b.Chain(chain)
	for _, r := range rules {
		ex, err := b.exprs(r)
		if err != nil {
			b.Fail(fmt.Errorf("chain %s: %s: %w", chain, r, err))
			return
		}
		b.C.AddRule(&nftables.Rule{Table: b.Table, Chain: ch, Exprs: ex})
	}
}

func (b *batch) exprs(r rule) ([]expr.Any, error) {
	switch r.kind {
	case rMasqUnlessFrom:
		return cat(saddrIn(r.cidr, true), []expr.Any{verdict(expr.VerdictJump, chainMarkMasq)}), nil
	case rJump:
		return []expr.Any{verdict(expr.VerdictJump, r.chain)}, nil
	case rGoto:
		return []expr.Any{verdict(expr.VerdictGoto, r.chain)}, nil
	case rGotoIfFrom:
		return cat(saddrIn(r.cidr, false), []expr.Any{verdict(expr.VerdictGoto, r.chain)}), nil
	case rFibLocalJump:
		return cat(fibSaddrLocal(), []expr.Any{verdict(expr.VerdictJump, r.chain)}), nil
	case rFibLocalGoto:
		return cat(fibSaddrLocal(), []expr.Any{verdict(expr.VerdictGoto, r.chain)}), nil
	case rAffinityGoto:
		s := b.Set(r.set)
		return []expr.Any{loadSaddr(reg1), &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID}, verdict(expr.VerdictGoto, r.chain)}, nil
	case rGotoOneIn:
		return cat(oneIn(r.n), []expr.Any{verdict(expr.VerdictGoto, r.chain)}), nil
	case rUpdateSet:
		s := b.Set(r.set)
		return []expr.Any{loadSaddr(reg1), &expr.Dynset{SrcRegKey: reg1, SetName: s.Name, SetID: s.ID, Operation: unix.NFT_DYNSET_OP_UPDATE}}, nil
	case rDNAT:
		return cat(l4protoIs(r.proto), []expr.Any{
			&expr.Immediate{Register: reg1, Data: nftconn.IPv4Bytes(r.ep.IP)},
			&expr.Immediate{Register: reg32, Data: binaryutil.BigEndian.PutUint16(r.ep.Port)},
			dnat(),
		}), nil
	case rDNATOneIn:
		return cat(l4protoIs(r.proto), oneIn(r.n), []expr.Any{
			&expr.Immediate{Register: reg1, Data: nftconn.IPv4Bytes(r.ep.IP)},
			&expr.Immediate{Register: reg32, Data: binaryutil.BigEndian.PutUint16(r.ep.Port)},
			dnat(),
		}), nil
	case rDrop:
		return []expr.Any{verdict(expr.VerdictDrop, "")}, nil
	case rReturnIfFrom:
		return cat(saddrIn(r.cidr, false), []expr.Any{verdict(expr.VerdictReturn, "")}), nil
	}
	return nil, fmt.Errorf("unknown rule kind %d", r.kind)
}

// dnat rewrites the destination to the address in register 1 and the port in register 9.
func dnat() expr.Any {
	return &expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg32, Specified: true}
}

// oneIn matches with probability 1/n.
func oneIn(n int) []expr.Any {
	return []expr.Any{
		&expr.Numgen{Register: reg1, Modulus: uint32(n), Type: unix.NFT_NG_RANDOM},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(0)},
	}
}

// masqueradeRules SNAT hairpin traffic (a pod that reached itself through a Service would
// otherwise answer itself directly and drop the reply) and packets marked for masquerade,
// clearing the mark. Both dataplanes (nftables and IPVS's companion table) use them.
//
// With onlyDNAT the hairpin rule applies only to connections this table DNATed: an endpoint
// may be a host address (the `kubernetes` Service lists every host's API), and the host's own
// connections from that address to itself (the API server to its etcd) must keep their source.
// IPVS rewrites destinations outside conntrack's NAT, so its companion table cannot ask.
func masqueradeRules(hp *nftables.Set, onlyDNAT bool) [][]expr.Any {
	hairpin := []expr.Any{loadSaddr(reg1), loadDaddr(reg32), &expr.Lookup{SourceRegister: reg1, SetName: hp.Name, SetID: hp.ID}, &expr.Masq{FullyRandom: true}}
	if onlyDNAT {
		hairpin = append([]expr.Any{
			&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(ctStatusDstNAT), Xor: native32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)},
		}, hairpin...)
	}
	return [][]expr.Any{
		hairpin,
		{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(masqMark), Xor: native32(0)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(0)},
			verdict(expr.VerdictReturn, ""),
		},
		{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^uint32(0)), Xor: native32(masqMark)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
		},
		{&expr.Masq{FullyRandom: true}},
	}
}

// ctStatusDstNAT is conntrack's IPS_DST_NAT status bit: the connection's destination was
// rewritten by NAT (here, a Service's DNAT to an endpoint).
const ctStatusDstNAT = 1 << 5
