package network

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// DefaultHostPortsTable is the nftables table (family ip) that holds the pods' host ports.
const DefaultHostPortsTable = "flotilla-hostports"

// Chains of the host ports table. prerouting catches traffic from other hosts and from pods,
// output the host's own connections; both jump to hostports only for packets addressed to
// one of this host's addresses. postrouting masquerades hairpin traffic.
const (
	hpChainPrerouting  = "prerouting"
	hpChainOutput      = "output"
	hpChainPostrouting = "postrouting"
	hpChainDNAT        = "hostports"
)

// HostPort is one containers[].ports[] entry with a hostPort: connections to Port on HostIP
// (on any address of the host when HostIP is empty) go to ContainerPort on the pod.
type HostPort struct {
	Protocol      corev1.Protocol // TCP, UDP or SCTP; empty is TCP
	HostIP        string
	Port          int32
	ContainerPort int32
}

// PodHostPorts are the host ports of one pod and the address they lead to.
type PodHostPorts struct {
	Pod   string // namespace/name, shown as the comment of the pod's rules
	IP    netip.Addr
	Ports []HostPort
}

// HostPortsOf lists the host ports a pod asks for, from its init and app containers. A pod
// on the host network listens on the host itself and needs none.
func HostPortsOf(pod *corev1.Pod) []HostPort {
	if pod.Spec.HostNetwork {
		return nil
	}
	var out []HostPort
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				out = append(out, HostPort{Protocol: proto, HostIP: p.HostIP, Port: p.HostPort, ContainerPort: p.ContainerPort})
			}
		}
	}
	return out
}

// HostPortsConfig configures HostPorts.
type HostPortsConfig struct {
	Table string // default DefaultHostPortsTable
	// NetNS, when set, is the path of the network namespace to program instead of the
	// caller's (tests, simulated hosts).
	NetNS string
	Log   *logrus.Entry
}

// HostPorts programs the pods' host ports of one host: DNAT in an nftables table of its own,
// without iptables (the portmap CNI plugin needs iptables). Connections to a host port on one
// of the host's addresses, from other hosts, from pods and from the host itself, are sent to
// the pod; 127.0.0.1 is not, as with the kubelet (it would need route_localnet). A pod
// reaching its own host port is masqueraded so that its answer comes back through the host.
//
// The pods are set one by one as their sandboxes become ready (SetPod) and removed as they
// are torn down (RemovePod); Sync reconciles the whole set with the pods the agent runs, at
// start and periodically. Nothing reaches the kernel before the first Sync: after an agent
// restart the table of the previous run keeps working until the new one knows every pod.
// Every change rebuilds the table in one transaction (host ports are few); the rules stay
// when the agent stops.
type HostPorts struct {
	table string
	tbl   *nftables.Table
	nsFd  int // -1: the caller's namespace
	log   *logrus.Entry

	mu      sync.Mutex
	seq     uint64
	entries map[string]*hpEntry // pod UID
	removed map[string]uint64   // pod UID -> seq of its RemovePod, so that Sync does not bring it back
	synced  bool
	applied *hpRuleset // what the kernel holds; nil: unknown
}

type hpEntry struct {
	PodHostPorts
	seq   uint64 // last SetPod or Sync that changed it
	order uint64 // when the pod got its ports first: the older pod keeps a contested port
}

// NewHostPorts returns the host ports of the caller's network namespace (or cfg.NetNS);
// nothing touches the kernel before the first Sync.
func NewHostPorts(cfg HostPortsConfig) (*HostPorts, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultHostPortsTable
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	h := &HostPorts{table: cfg.Table, tbl: &nftables.Table{Name: cfg.Table, Family: nftables.TableFamilyIPv4}, nsFd: -1,
		log: cfg.Log.WithField("table", "ip "+cfg.Table), entries: map[string]*hpEntry{}, removed: map[string]uint64{}}
	if cfg.NetNS != "" {
		fd, err := unix.Open(cfg.NetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("host ports: open network namespace %s: %w", cfg.NetNS, err)
		}
		h.nsFd = fd
	}
	return h, nil
}

// Close releases the namespace handle; the rules stay.
func (h *HostPorts) Close() error {
	if h.nsFd >= 0 {
		err := unix.Close(h.nsFd)
		h.nsFd = -1
		return err
	}
	return nil
}

// Generation marks a point in the sequence of SetPod and RemovePod calls; take it before
// listing the pods handed to Sync.
func (h *HostPorts) Generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// SetPod maps the host ports of the pod uid to its address p.IP; a pod without host ports is
// removed. It fails, and maps nothing, when another pod holds one of the ports.
func (h *HostPorts) SetPod(uid string, p PodHostPorts) error {
	if len(p.Ports) == 0 {
		return h.RemovePod(uid)
	}
	if !p.IP.Is4() {
		return fmt.Errorf("host ports of %s: the pod has no IPv4 address (%s); only IPv4 host ports are supported", p.Pod, p.IP)
	}
	for _, hp := range p.Ports {
		if _, err := hp.key(); err != nil {
			return fmt.Errorf("host ports of %s: %w", p.Pod, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.conflict(uid, p); err != nil {
		return err
	}
	prev := h.entries[uid]
	h.seq++
	e := &hpEntry{PodHostPorts: p, seq: h.seq, order: h.seq}
	if prev != nil {
		e.order = prev.order
	}
	h.entries[uid] = e
	delete(h.removed, uid)
	if err := h.applyLocked(); err != nil {
		if prev != nil {
			h.entries[uid] = prev
		} else {
			delete(h.entries, uid)
		}
		return err
	}
	return nil
}

// conflict reports a port of p that another pod holds: same protocol and port on the same
// address, or either on every address (the scheduler's rule).
func (h *HostPorts) conflict(uid string, p PodHostPorts) error {
	for other, e := range h.entries {
		if other == uid {
			continue
		}
		for _, a := range p.Ports {
			for _, b := range e.Ports {
				if portsClash(a, b) {
					return fmt.Errorf("host port %s is already used by pod %s", a, e.Pod)
				}
			}
		}
	}
	return nil
}

func portsClash(a, b HostPort) bool {
	if a.Port != b.Port || protoOf(a.Protocol) != protoOf(b.Protocol) {
		return false
	}
	wa, wb := anyAddress(a.HostIP), anyAddress(b.HostIP)
	return wa || wb || a.HostIP == b.HostIP
}

func anyAddress(ip string) bool { return ip == "" || ip == "0.0.0.0" }

// RemovePod unmaps the host ports of the pod uid; a pod without any is fine.
func (h *HostPorts) RemovePod(uid string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.removed[uid] = h.seq
	prev, ok := h.entries[uid]
	if !ok {
		return nil
	}
	delete(h.entries, uid)
	if err := h.applyLocked(); err != nil {
		h.entries[uid] = prev
		return err
	}
	return nil
}

// Sync reconciles the host ports with pods, the pods the agent runs that have host ports
// (keyed by UID; an invalid IP when the sandbox is not known), listed after Generation
// returned since. A pod set or removed after since keeps what it was given; otherwise a pod
// that is not in pods loses its host ports and one that is gets them, unless it was removed
// and still has no new sandbox. Sync also repairs the kernel's table when it drifted (the
// table or a chain was deleted, rules are missing).
func (h *HostPorts) Sync(pods map[string]PodHostPorts, since uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid, e := range h.entries {
		if _, ok := pods[uid]; !ok && e.seq <= since {
			delete(h.entries, uid)
		}
	}
	for uid, seq := range h.removed {
		if _, ok := pods[uid]; !ok && seq <= since {
			delete(h.removed, uid)
		}
	}
	uids := make([]string, 0, len(pods))
	for uid := range pods {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		p := pods[uid]
		if _, ok := h.entries[uid]; ok || h.removed[uid] != 0 || len(p.Ports) == 0 || !p.IP.Is4() {
			continue
		}
		if err := h.conflict(uid, p); err != nil {
			h.log.WithError(err).WithField("pod", p.Pod).Warn("host ports not mapped")
			continue
		}
		h.seq++
		h.entries[uid] = &hpEntry{PodHostPorts: p, seq: h.seq, order: h.seq}
	}
	h.synced = true
	if h.applied != nil {
		drift, err := h.drift(h.applied)
		if err != nil {
			return fmt.Errorf("host ports: check the table: %w", err)
		}
		if drift != "" {
			h.log.WithField("drift", drift).Warn("host ports table drifted; rebuilding it")
			h.applied = nil
		}
	}
	return h.applyLocked()
}

// Cleanup deletes the table and forgets every pod.
func (h *HostPorts) Cleanup() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries, h.removed, h.applied, h.synced = map[string]*hpEntry{}, map[string]uint64{}, nil, false
	c, err := h.conn()
	if err != nil {
		return err
	}
	if _, err := c.ListTableOfFamily(h.table, nftables.TableFamilyIPv4); err != nil {
		return nil
	}
	c.DelTable(h.tbl)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables table ip %s: %w", h.table, err)
	}
	return nil
}

func (h *HostPorts) conn() (*nftables.Conn, error) {
	if h.nsFd >= 0 {
		return nftables.New(nftables.WithNetNSFd(h.nsFd))
	}
	return nftables.New()
}

// applyLocked rebuilds the table when what it should hold changed or is unknown.
func (h *HostPorts) applyLocked() error {
	if !h.synced {
		return nil
	}
	want := renderHostPorts(h.entryList())
	if h.applied != nil && h.applied.equal(want) {
		return nil
	}
	if err := h.applyFull(want); err != nil {
		h.applied = nil
		return fmt.Errorf("host ports: rebuild nftables table ip %s: %w", h.table, err)
	}
	old := h.applied
	h.applied = want
	h.forgetUDP(old, want)
	return nil
}

func (h *HostPorts) entryList() []hpEntry {
	out := make([]hpEntry, 0, len(h.entries))
	for _, e := range h.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].order < out[j].order })
	return out
}

// forgetUDP deletes the conntrack entries of UDP host ports whose mapping changed: a client
// that kept sending to the port would otherwise keep its old destination (the host, or a
// pod that is gone) for as long as it sends. TCP connections end on their own.
func (h *HostPorts) forgetUDP(old, cur *hpRuleset) {
	changed := map[uint16]bool{}
	if old == nil {
		old = &hpRuleset{}
	}
	prev := map[string]bool{}
	for _, r := range old.dnat {
		prev[r.String()] = true
	}
	now := map[string]bool{}
	for _, r := range cur.dnat {
		now[r.String()] = true
		if r.proto == unix.IPPROTO_UDP && !prev[r.String()] {
			changed[r.port] = true
		}
	}
	for _, r := range old.dnat {
		if r.proto == unix.IPPROTO_UDP && !now[r.String()] {
			changed[r.port] = true
		}
	}
	if len(changed) == 0 {
		return
	}
	ns := netns.None()
	if h.nsFd >= 0 {
		ns = netns.NsHandle(h.nsFd)
	}
	nl, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		h.log.WithError(err).Warn("forget UDP conntrack entries of changed host ports")
		return
	}
	defer nl.Close()
	for port := range changed {
		f := &netlink.ConntrackFilter{}
		if err := f.AddProtocol(unix.IPPROTO_UDP); err == nil {
			err = f.AddPort(netlink.ConntrackOrigDstPort, port)
		}
		if _, err := nl.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			h.log.WithError(err).WithField("port", port).Warn("forget UDP conntrack entries of a changed host port")
		}
	}
}

// ---- rules ----

// hpRule is one rule of the table in a comparable form; String renders it in nft syntax.
type hpRule struct {
	daddr netip.Addr // DNAT: only to this host address when valid
	proto uint8
	port  uint16
	to    netip.AddrPort // DNAT target; for masquerade, the pod address
	pod   string         // comment
}

func (r hpRule) String() string {
	var b strings.Builder
	if r.daddr.IsValid() {
		fmt.Fprintf(&b, "ip daddr %s ", r.daddr)
	}
	fmt.Fprintf(&b, "meta l4proto %s th dport %d dnat to %s", protoName(r.proto), r.port, r.to)
	if r.pod != "" {
		fmt.Fprintf(&b, " comment %q", r.pod)
	}
	return b.String()
}

// hpMasq masquerades a pod's connections to itself through a host port.
type hpMasq struct {
	ip  netip.Addr
	pod string
}

func (m hpMasq) String() string {
	return fmt.Sprintf("ip saddr %s ip daddr %s masquerade comment %q", m.ip, m.ip, m.pod)
}

// hpRuleset is the dynamic part of the table.
type hpRuleset struct {
	dnat []hpRule
	masq []hpMasq
}

func (a *hpRuleset) equal(b *hpRuleset) bool {
	if len(a.dnat) != len(b.dnat) || len(a.masq) != len(b.masq) {
		return false
	}
	for i := range a.dnat {
		if a.dnat[i] != b.dnat[i] {
			return false
		}
	}
	for i := range a.masq {
		if a.masq[i] != b.masq[i] {
			return false
		}
	}
	return true
}

func protoOf(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolUDP:
		return unix.IPPROTO_UDP
	case corev1.ProtocolSCTP:
		return unix.IPPROTO_SCTP
	}
	return unix.IPPROTO_TCP
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	}
	return "tcp"
}

func (hp HostPort) String() string {
	s := fmt.Sprintf("%d/%s", hp.Port, protoName(protoOf(hp.Protocol)))
	if !anyAddress(hp.HostIP) {
		s = net.JoinHostPort(hp.HostIP, fmt.Sprint(hp.Port)) + "/" + protoName(protoOf(hp.Protocol))
	}
	return s
}

// key checks the mapping and returns its DNAT rule without target.
func (hp HostPort) key() (hpRule, error) {
	r := hpRule{proto: protoOf(hp.Protocol)}
	switch hp.Protocol {
	case "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		return r, fmt.Errorf("host port %d: unknown protocol %q", hp.Port, hp.Protocol)
	}
	if hp.Port < 1 || hp.Port > 65535 || hp.ContainerPort < 1 || hp.ContainerPort > 65535 {
		return r, fmt.Errorf("host port %d to container port %d: ports are 1-65535", hp.Port, hp.ContainerPort)
	}
	r.port = uint16(hp.Port)
	if !anyAddress(hp.HostIP) {
		ip, err := netip.ParseAddr(hp.HostIP)
		if err != nil || !ip.Is4() {
			return r, fmt.Errorf("host port %d: hostIP %q is not an IPv4 address", hp.Port, hp.HostIP)
		}
		r.daddr = ip
	}
	return r, nil
}

// renderHostPorts turns the pods (oldest first) into rules: one DNAT rule per host port, those
// bound to one host address before those on every address (a pod may have both for the same
// port), and one masquerade rule per pod address. A port already taken by an older pod is
// left out.
func renderHostPorts(entries []hpEntry) *hpRuleset {
	rs := &hpRuleset{}
	var specific, wildcard []hpRule
	var taken []HostPort
	for _, e := range entries {
		mapped := false
		for _, hp := range e.Ports {
			r, err := hp.key()
			if err != nil {
				continue
			}
			clash := false
			for _, t := range taken {
				clash = clash || portsClash(hp, t)
			}
			if clash {
				continue
			}
			r.to = netip.AddrPortFrom(e.IP, uint16(hp.ContainerPort))
			r.pod = e.Pod
			if r.daddr.IsValid() {
				specific = append(specific, r)
			} else {
				wildcard = append(wildcard, r)
			}
			mapped = true
		}
		// After the pod's own ports: within one pod the same port may be on two addresses.
		taken = append(taken, e.Ports...)
		if mapped {
			rs.masq = append(rs.masq, hpMasq{ip: e.IP, pod: e.Pod})
		}
	}
	rs.dnat = append(specific, wildcard...)
	sort.SliceStable(rs.masq, func(i, j int) bool { return rs.masq[i].ip.Less(rs.masq[j].ip) })
	return rs
}

// ---- kernel ----

type hpStaticChain struct {
	name     string
	hook     *nftables.ChainHook
	priority nftables.ChainPriority
}

func hpStaticChains() []hpStaticChain {
	return []hpStaticChain{
		{hpChainPrerouting, nftables.ChainHookPrerouting, *nftables.ChainPriorityNATDest},
		{hpChainOutput, nftables.ChainHookOutput, *nftables.ChainPriorityNATDest},
		{hpChainPostrouting, nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource},
		{hpChainDNAT, nil, 0},
	}
}

func (s hpStaticChain) chain(t *nftables.Table) *nftables.Chain {
	c := &nftables.Chain{Name: s.name, Table: t}
	if s.hook != nil {
		c.Type, c.Hooknum, c.Priority = nftables.ChainTypeNAT, s.hook, nftables.ChainPriorityRef(s.priority)
	}
	return c
}

// hookRules are the fixed rules of the base chains: only packets to an address of this host
// look for a host port, and from the host itself not those to 127.0.0.0/8.
func hookRules(chain string) [][]expr.Any {
	local := []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
	jump := &expr.Verdict{Kind: expr.VerdictJump, Chain: hpChainDNAT}
	switch chain {
	case hpChainPrerouting:
		return [][]expr.Any{append(local, jump)}
	case hpChainOutput:
		notLoopback := []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127, 0, 0, 0}},
		}
		return [][]expr.Any{append(append(notLoopback, local...), jump)}
	}
	return nil
}

func ip4(a netip.Addr) []byte { b := a.As4(); return b[:] }

func comment(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }

func (r hpRule) exprs() []expr.Any {
	var out []expr.Any
	if r.daddr.IsValid() {
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4(r.daddr)})
	}
	return append(out,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{r.proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.port)},
		&expr.Immediate{Register: 1, Data: ip4(r.to.Addr())},
		&expr.Immediate{Register: 9, Data: binaryutil.BigEndian.PutUint16(r.to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 9, Specified: true},
	)
}

func (m hpMasq) exprs() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4(m.ip)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4(m.ip)},
		&expr.Masq{},
	}
}

// applyFull replaces the whole table in one transaction: packets see the old rules or the
// new ones, never none.
func (h *HostPorts) applyFull(rs *hpRuleset) error {
	c, err := h.conn()
	if err != nil {
		return err
	}
	c.AddTable(h.tbl)
	c.DelTable(h.tbl)
	c.AddTable(h.tbl)
	chains := map[string]*nftables.Chain{}
	for _, s := range hpStaticChains() {
		chains[s.name] = c.AddChain(s.chain(h.tbl))
	}
	for _, s := range hpStaticChains() {
		for _, ex := range hookRules(s.name) {
			c.AddRule(&nftables.Rule{Table: h.tbl, Chain: chains[s.name], Exprs: ex})
		}
	}
	for _, r := range rs.dnat {
		c.AddRule(&nftables.Rule{Table: h.tbl, Chain: chains[hpChainDNAT], Exprs: r.exprs(), UserData: comment(r.pod)})
	}
	for _, m := range rs.masq {
		c.AddRule(&nftables.Rule{Table: h.tbl, Chain: chains[hpChainPostrouting], Exprs: m.exprs(), UserData: comment(m.pod)})
	}
	return c.Flush()
}

// drift describes the first difference between the kernel's table and rs, or "".
func (h *HostPorts) drift(rs *hpRuleset) (string, error) {
	c, err := h.conn()
	if err != nil {
		return "", err
	}
	if _, err := c.ListTableOfFamily(h.table, nftables.TableFamilyIPv4); err != nil {
		return "table ip " + h.table + " is missing", nil
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return "", fmt.Errorf("list chains: %w", err)
	}
	have := map[string]*nftables.Chain{}
	for _, ch := range chains {
		if ch.Table.Name == h.table {
			have[ch.Name] = ch
		}
	}
	want := map[string]int{
		hpChainPrerouting:  len(hookRules(hpChainPrerouting)),
		hpChainOutput:      len(hookRules(hpChainOutput)),
		hpChainPostrouting: len(rs.masq),
		hpChainDNAT:        len(rs.dnat),
	}
	if len(have) != len(want) {
		return fmt.Sprintf("table has %d chains, want %d", len(have), len(want)), nil
	}
	for _, s := range hpStaticChains() {
		ch, ok := have[s.name]
		if !ok {
			return "chain " + s.name + " is missing", nil
		}
		rules, err := c.GetRules(h.tbl, ch)
		if err != nil {
			return "", fmt.Errorf("list rules of chain %s: %w", s.name, err)
		}
		if len(rules) != want[s.name] {
			return fmt.Sprintf("chain %s has %d rules, want %d", s.name, len(rules), want[s.name]), nil
		}
	}
	return "", nil
}
