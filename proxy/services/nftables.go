package services

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
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

// Nftables is the nftables backend: one `ip` table holding NAT chains, verdict maps keyed by
// (address, protocol, port) and one chain per Service port, updated incrementally.
type Nftables struct {
	opts NftablesOptions
	tbl  *nftables.Table

	mu      sync.Mutex
	applied *ruleset // what the kernel holds; nil forces a full rebuild
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
	return &Nftables{opts: o, tbl: &nftables.Table{Name: o.Table, Family: nftables.TableFamilyIPv4}}
}

func (n *Nftables) conn() (*nftables.Conn, error) { return nftconn.New(n.opts.NetNSFd) }

// Apply programs ds: incrementally against what was applied last, or as one atomic rebuild of
// the whole table when nothing is known yet or the incremental batch failed.
func (n *Nftables) Apply(ds DesiredState) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	want := render(ds, n.opts.ClusterCIDR)
	if n.applied != nil {
		err := n.applyIncremental(n.applied, want)
		if err == nil {
			n.applied = want
			return nil
		}
		n.opts.Log.WithError(err).Warn("incremental nftables update failed; rebuilding the whole table")
	}
	n.applied = nil
	if err := n.applyFull(want); err != nil {
		return fmt.Errorf("rebuild nftables table ip %s: %w", n.opts.Table, err)
	}
	n.applied = want
	return nil
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
	for _, s := range staticChains() {
		rules, err := c.GetRules(n.tbl, s.chain(n.tbl))
		if err != nil {
			return "", fmt.Errorf("list rules of chain %s: %w", s.name, err)
		}
		if want := len(s.rules(probe)); len(rules) != want {
			return fmt.Sprintf("chain %s has %d rules, want %d", s.name, len(rules), want), nil
		}
	}
	els, err := c.GetSetElements(&nftables.Set{Table: n.tbl, Name: mapServiceIPs})
	if err != nil {
		return "map " + mapServiceIPs + " is missing", nil
	}
	if len(els) != len(rs.serviceIPs) {
		return fmt.Sprintf("map %s has %d elements, want %d", mapServiceIPs, len(els), len(rs.serviceIPs)), nil
	}
	return "", nil
}

// Cleanup deletes our table (and with it every chain, map and set).
func (n *Nftables) Cleanup() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applied = nil
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
type batch struct{ *nftconn.Batch }

func newBatch(c *nftables.Conn, tbl *nftables.Table) *batch { return &batch{nftconn.NewBatch(c, tbl)} }

var (
	vipType  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	portType = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	pairType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)
)

func (b *batch) addStaticSets() {
	for _, s := range []*nftables.Set{
		{Name: mapServiceIPs, IsMap: true, KeyType: vipType, DataType: nftables.TypeVerdict, Concatenation: true},
		{Name: mapNodePorts, IsMap: true, KeyType: portType, DataType: nftables.TypeVerdict, Concatenation: true},
		{Name: setNoEPServices, KeyType: vipType, Concatenation: true},
		{Name: setNoEPNodePorts, KeyType: portType, Concatenation: true},
		{Name: setNodePortIPs, KeyType: nftables.TypeIPAddr},
		{Name: setClusterIPs, KeyType: nftables.TypeIPAddr},
		{Name: setHairpin, KeyType: pairType, Concatenation: true},
	} {
		b.AddSet(s, nil)
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

// elementOps queues the element changes of every map and set from old to cur.
func (b *batch) elementOps(old, cur *ruleset) {
	{
		del, add := diffMap(old.serviceIPs, cur.serviceIPs)
		b.Elems(mapServiceIPs, vipElems(del, nil), true)
		b.Elems(mapServiceIPs, vipElems(nil, add), false)
	}
	{
		del, add := diffMap(old.nodePorts, cur.nodePorts)
		b.Elems(mapNodePorts, portElems(del, nil), true)
		b.Elems(mapNodePorts, portElems(nil, add), false)
	}
	{
		del, add := diffMap(old.noEPServices, cur.noEPServices)
		b.Elems(setNoEPServices, vipElems(del, nil), true)
		b.Elems(setNoEPServices, vipSetElems(add), false)
	}
	{
		del, add := diffMap(old.noEPNodePorts, cur.noEPNodePorts)
		b.Elems(setNoEPNodePorts, portElems(del, nil), true)
		b.Elems(setNoEPNodePorts, portSetElems(add), false)
	}
	for _, p := range []struct {
		name     string
		old, cur map[netip.Addr]bool
		hairpin  bool
	}{
		{setNodePortIPs, old.nodeIPs, cur.nodeIPs, false},
		{setClusterIPs, old.clusterIPs, cur.clusterIPs, false},
		{setHairpin, old.hairpin, cur.hairpin, true},
	} {
		del, add := diffMap(p.old, p.cur)
		addrs := make([]netip.Addr, 0, len(add))
		for a := range add {
			addrs = append(addrs, a)
		}
		b.Elems(p.name, addrElems(del, p.hairpin), true)
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
	var out []nftables.SetElement
	for _, a := range addrs {
		k := nftconn.IPv4Bytes(a)
		if pair {
			k = append(k, nftconn.IPv4Bytes(a)...)
		}
		out = append(out, nftables.SetElement{Key: k})
	}
	return out
}

// applyFull replaces the whole table in one transaction: packets see either the old rules or
// the new ones, never an empty table.
func (n *Nftables) applyFull(rs *ruleset) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	b := newBatch(c, n.tbl)
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
	b.elementOps(newRuleset(), rs)
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

// applyIncremental queues only the differences between old and cur, in an order the kernel
// accepts within one transaction: new sets and chains first, then rewritten chains, then map
// elements, and last the chains and sets nothing references any more.
func (n *Nftables) applyIncremental(old, cur *ruleset) error {
	d := diffRulesets(old, cur)
	c, err := n.conn()
	if err != nil {
		return err
	}
	b := newBatch(c, n.tbl)
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
	b.elementOps(old, cur)
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
	return []expr.Any{loadDaddr(reg1), loadL4proto(reg32), loadDport(reg33), l}
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
		{name: chainReject, rules: func(*batch) [][]expr.Any {
			return [][]expr.Any{
				cat(l4protoIs(protoTCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
				{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3 /* port unreachable */}},
			}
		}},
	}
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
