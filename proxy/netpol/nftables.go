package netpol

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/internal/nftconn"
	"golang.org/x/sys/unix"
)

// DefaultTable is the nftables table (family ip) the policies live in.
const DefaultTable = "flotilla-netpol"

// Static objects of the table.
const (
	mapIngress = "ingress-pods" // destination address of a local pod -> its ingress chain
	mapEgress  = "egress-pods"  // source address of a local pod -> its egress chain
	setHosts   = "site-hosts"   // addresses of the site's hosts
	chainDeny  = "deny"

	reg1 = 1
)

// Hooks. Forward sees traffic between pods and from other hosts, after the Service DNAT
// (prerouting, priority -100). Output sees what IPVS forwards (it sends a resolved packet
// out through the local-out hook, with the client pod's address as source); what the host
// itself sends there (probes, the host's own connections) is always allowed. Egress runs
// first: an accept in one base chain does not skip the next one, a drop ends both.
var baseChains = []struct {
	name     string
	hook     *nftables.ChainHook
	priority int32
	dir      Direction
}{
	{"forward-egress", nftables.ChainHookForward, 10, Egress},
	{"forward-ingress", nftables.ChainHookForward, 20, Ingress},
	{"output-egress", nftables.ChainHookOutput, 10, Egress},
	{"output-ingress", nftables.ChainHookOutput, 20, Ingress},
}

// Options configure Table.
type Options struct {
	Table string // default DefaultTable
	// NetNSFd, when > 0, is a network namespace to program instead of the caller's (tests,
	// simulated hosts); the caller keeps it open.
	NetNSFd int
	Log     *logrus.Entry
}

// Table keeps one nftables table equal to the last Ruleset applied.
type Table struct {
	opts Options
	tbl  *nftables.Table

	mu      sync.Mutex
	applied *Ruleset // what the kernel holds; nil forces a full rebuild
}

// NewTable returns the backend; nothing touches the kernel before Apply.
func NewTable(o Options) *Table {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Table{opts: o, tbl: &nftables.Table{Name: o.Table, Family: nftables.TableFamilyIPv4}}
}

func (t *Table) conn() (*nftables.Conn, error) { return nftconn.New(t.opts.NetNSFd) }

// Apply makes the table hold rs: by element and chain updates against what was applied
// last when it can (one transaction), else by replacing the whole table in one transaction.
func (t *Table) Apply(rs *Ruleset) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.applied != nil {
		err := t.applyIncremental(t.applied, rs)
		if err == nil {
			t.applied = rs
			return nil
		}
		if !errors.Is(err, errNeedsRebuild) {
			t.opts.Log.WithError(err).Warn("incremental network policy update failed; rebuilding the whole table")
		}
	}
	t.applied = nil
	if err := t.applyFull(rs); err != nil {
		return fmt.Errorf("rebuild nftables table ip %s: %w", t.opts.Table, err)
	}
	t.applied = rs
	return nil
}

// Drift describes how the kernel's table differs from what was applied last ("" when it
// does not, as far as table, chains and map sizes tell); the next Apply then rebuilds.
func (t *Table) Drift() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.applied == nil {
		return "", nil
	}
	c, err := t.conn()
	if err != nil {
		return "", err
	}
	d := ""
	if _, err := c.ListTableOfFamily(t.opts.Table, nftables.TableFamilyIPv4); err != nil {
		d = "table ip " + t.opts.Table + " is missing"
	} else if chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4); err != nil {
		return "", fmt.Errorf("list chains: %w", err)
	} else {
		n := 0
		for _, ch := range chains {
			if ch.Table.Name == t.opts.Table {
				n++
			}
		}
		if want := len(baseChains) + 1 + len(t.applied.Chains); n != want {
			d = fmt.Sprintf("table has %d chains, want %d", n, want)
		}
		for _, m := range []struct {
			name string
			want int
		}{{mapIngress, len(t.applied.Ingress)}, {mapEgress, len(t.applied.Egress)}} {
			if d != "" {
				break
			}
			els, err := c.GetSetElements(&nftables.Set{Table: t.tbl, Name: m.name})
			if err != nil || len(els) != m.want {
				d = fmt.Sprintf("map %s has %d elements, want %d", m.name, len(els), m.want)
			}
		}
	}
	if d != "" {
		t.applied = nil
	}
	return d, nil
}

// Cleanup deletes the table: no pod is isolated any more.
func (t *Table) Cleanup() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.applied = nil
	c, err := t.conn()
	if err != nil {
		return err
	}
	if _, err := c.ListTableOfFamily(t.opts.Table, nftables.TableFamilyIPv4); err != nil {
		return nil
	}
	c.DelTable(t.tbl)
	return c.Flush()
}

var errNeedsRebuild = errors.New("structure changed")

// batch is one transaction on the policy table, with the policy-specific helpers.
type batch struct{ *nftconn.Batch }

func newBatch(c *nftables.Conn, tbl *nftables.Table) *batch { return &batch{nftconn.NewBatch(c, tbl)} }

// addSet queues the address set of a rule peer (an interval set holds its ranges at once).
func (b *batch) addSet(name string, spec SetSpec) {
	s := &nftables.Set{Name: name, KeyType: nftables.TypeIPAddr, Interval: spec.Interval}
	var els []nftables.SetElement
	if spec.Interval {
		els = rangeElems(spec.Ranges)
	}
	b.AddSet(s, els)
}

// rangeElems are the elements of an interval set: each range's first address, and the
// address after its last one as an interval end (none when the range ends the space).
func rangeElems(rs []Range) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range rs {
		out = append(out, nftables.SetElement{Key: nftconn.IPv4Bytes(r.First)})
		if next := r.Last.Next(); next.IsValid() {
			out = append(out, nftables.SetElement{Key: nftconn.IPv4Bytes(next), IntervalEnd: true})
		}
	}
	return out
}

func addrElems(m map[netip.Addr]bool) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(m))
	for a := range m {
		out = append(out, nftables.SetElement{Key: nftconn.IPv4Bytes(a)})
	}
	return out
}

func mapElems(m map[netip.Addr]string, keysOnly bool) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(m))
	for a, ch := range m {
		e := nftables.SetElement{Key: nftconn.IPv4Bytes(a)}
		if !keysOnly {
			e.VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: ch}
		}
		out = append(out, e)
	}
	return out
}

func (t *Table) applyFull(rs *Ruleset) error {
	c, err := t.conn()
	if err != nil {
		return err
	}
	b := newBatch(c, t.tbl)
	b.ReplaceTable()
	for _, m := range []string{mapIngress, mapEgress} {
		b.AddSet(&nftables.Set{Name: m, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}, nil)
	}
	b.addSet(setHosts, SetSpec{})
	b.Elems(setHosts, addrElems(rs.Hosts), false)
	for _, name := range nftconn.SortedKeys(rs.Sets) {
		b.addSet(name, rs.Sets[name])
		if !rs.Sets[name].Interval {
			b.Elems(name, addrElems(rs.Addrs[name]), false)
		}
	}
	c.AddChain(b.Chain(chainDeny))
	chains := nftconn.SortedKeys(rs.Chains)
	for _, name := range chains {
		c.AddChain(b.Chain(name))
	}
	b.Elems(mapIngress, mapElems(rs.Ingress, false), false)
	b.Elems(mapEgress, mapElems(rs.Egress, false), false)
	b.addDenyRules()
	for _, name := range chains {
		b.addRules(name, rs.Chains[name])
	}
	accept := nftables.ChainPolicyAccept
	for _, bc := range baseChains {
		prio := nftables.ChainPriority(bc.priority)
		ch := c.AddChain(&nftables.Chain{Name: bc.name, Table: t.tbl, Type: nftables.ChainTypeFilter,
			Hooknum: bc.hook, Priority: &prio, Policy: &accept})
		for _, r := range b.baseRules(bc.hook == nftables.ChainHookOutput, bc.dir) {
			c.AddRule(&nftables.Rule{Table: t.tbl, Chain: ch, Exprs: r})
		}
	}
	return b.Flush()
}

// applyIncremental turns old into cur in one transaction: new sets and chains, element
// changes, rewritten chains, map changes, then what is gone. A changed interval set (an
// edited ipBlock) is errNeedsRebuild.
func (t *Table) applyIncremental(old, cur *Ruleset) error {
	for name, spec := range cur.Sets {
		if o, ok := old.Sets[name]; ok && (o.Interval != spec.Interval || !slices.Equal(o.Ranges, spec.Ranges)) {
			return errNeedsRebuild
		}
	}
	c, err := t.conn()
	if err != nil {
		return err
	}
	b := newBatch(c, t.tbl)
	// 1. New sets and chains.
	for _, name := range nftconn.SortedKeys(cur.Sets) {
		if _, ok := old.Sets[name]; !ok {
			b.addSet(name, cur.Sets[name])
		}
	}
	var added, changed, removed []string
	for _, name := range nftconn.SortedKeys(cur.Chains) {
		o, ok := old.Chains[name]
		switch {
		case !ok:
			added = append(added, name)
			c.AddChain(b.Chain(name))
		case !slices.Equal(o.Rules, cur.Chains[name].Rules) || o.Dir != cur.Chains[name].Dir:
			changed = append(changed, name)
		}
	}
	for _, name := range nftconn.SortedKeys(old.Chains) {
		if _, ok := cur.Chains[name]; !ok {
			removed = append(removed, name)
		}
	}
	// 2. Elements the new rules may rely on.
	hostsAdd, hostsDel := diffAddrs(old.Hosts, cur.Hosts)
	b.Elems(setHosts, addrElems(hostsAdd), false)
	for _, name := range nftconn.SortedKeys(cur.Addrs) {
		add, _ := diffAddrs(old.Addrs[name], cur.Addrs[name])
		b.Elems(name, addrElems(add), false)
	}
	// 3. Chains.
	for _, name := range changed {
		c.FlushChain(b.Chain(name))
		b.addRules(name, cur.Chains[name])
	}
	for _, name := range added {
		b.addRules(name, cur.Chains[name])
	}
	// 4. Maps: changed keys are deleted and added again.
	for _, m := range []struct {
		name     string
		old, cur map[netip.Addr]string
	}{{mapIngress, old.Ingress, cur.Ingress}, {mapEgress, old.Egress, cur.Egress}} {
		del := map[netip.Addr]string{}
		add := map[netip.Addr]string{}
		for a, ch := range m.old {
			if nc, ok := m.cur[a]; !ok || nc != ch {
				del[a] = ch
			}
		}
		for a, ch := range m.cur {
			if oc, ok := m.old[a]; !ok || oc != ch {
				add[a] = ch
			}
		}
		b.Elems(m.name, mapElems(del, true), true)
		b.Elems(m.name, mapElems(add, false), false)
	}
	// 5. What is gone: chains (emptied first, so no jump holds another), sets, elements.
	for _, name := range removed {
		c.FlushChain(b.Chain(name))
	}
	for _, name := range removed {
		c.DelChain(b.Chain(name))
	}
	for _, name := range nftconn.SortedKeys(old.Sets) {
		if _, ok := cur.Sets[name]; !ok {
			c.DelSet(b.Set(name))
		}
	}
	for _, name := range nftconn.SortedKeys(cur.Addrs) {
		if _, ok := old.Sets[name]; !ok {
			continue
		}
		_, del := diffAddrs(old.Addrs[name], cur.Addrs[name])
		b.Elems(name, addrElems(del), true)
	}
	b.Elems(setHosts, addrElems(hostsDel), true)
	return b.Flush()
}

func diffAddrs(old, cur map[netip.Addr]bool) (add, del map[netip.Addr]bool) {
	add, del = map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for a := range cur {
		if !old[a] {
			add[a] = true
		}
	}
	for a := range old {
		if !cur[a] {
			del[a] = true
		}
	}
	return add, del
}

func native32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

func accept() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }

func loadAddr(dir Direction, peer bool) expr.Any {
	// The peer of an ingress rule is the source; of an egress rule the destination.
	off := uint32(16)
	if (dir == Ingress) == peer {
		off = 12
	}
	return &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4}
}

func (b *batch) lookup(set string) expr.Any {
	s := b.Set(set)
	return &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID}
}

// baseRules: established and related traffic passes; in output, what the host itself sends
// passes; towards a pod, what the site's hosts send passes (this one's in output, the others'
// in forward: the Ingress proxy and NodePorts reach pods of every host); then the local
// pod's chain, by address.
func (b *batch) baseRules(output bool, dir Direction) [][]expr.Any {
	rules := [][]expr.Any{{
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: native32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: native32(0)},
		accept(),
	}}
	if output {
		rules = append(rules, []expr.Any{
			&expr.Fib{Register: reg1, FlagSADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: native32(unix.RTN_LOCAL)},
			accept(),
		})
	}
	if dir == Ingress {
		rules = append(rules, []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			b.lookup(setHosts),
			accept(),
		})
	}
	m := mapIngress
	if dir == Egress {
		m = mapEgress
	}
	s := b.Set(m)
	// The pod's own address: the destination for ingress, the source for egress.
	rules = append(rules, []expr.Any{
		loadAddr(dir, false),
		&expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID, DestRegister: 0, IsDestRegSet: true},
	})
	return rules
}

// addDenyRules fills the chain every pod chain ends in: TCP is reset, the rest refused with
// ICMP administratively prohibited, so that clients of a pod's address fail at once instead
// of timing out. (A client of a Service address on another host may still time out: the
// reset leaves the backend's host with the backend's address.)
func (b *batch) addDenyRules() {
	ch := b.Chain(chainDeny)
	b.C.AddRule(&nftables.Rule{Table: b.Table, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{protoTCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	}})
	b.C.AddRule(&nftables.Rule{Table: b.Table, Chain: ch, Exprs: []expr.Any{
		&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 13 /* communication administratively prohibited */},
	}})
}

func (b *batch) addRules(name string, ch Chain) {
	c := b.Chain(name)
	for _, r := range ch.Rules {
		b.C.AddRule(&nftables.Rule{Table: b.Table, Chain: c, Exprs: b.exprs(ch.Dir, r)})
	}
}

func (b *batch) exprs(dir Direction, r Rule) []expr.Any {
	if r.Jump != "" {
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: r.Jump}}
	}
	if r.Drop {
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: chainDeny}}
	}
	var ex []expr.Any
	if r.PeerSet != "" {
		ex = append(ex, loadAddr(dir, true), b.lookup(r.PeerSet))
	}
	if r.NamedSet != "" {
		ex = append(ex, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}, b.lookup(r.NamedSet))
	}
	if r.Proto != 0 {
		ex = append(ex, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{r.Proto}})
	}
	if r.PortLo != 0 {
		ex = append(ex, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
		if r.PortHi > r.PortLo {
			ex = append(ex, &expr.Range{Op: expr.CmpOpEq, Register: reg1,
				FromData: binaryutil.BigEndian.PutUint16(r.PortLo), ToData: binaryutil.BigEndian.PutUint16(r.PortHi)})
		} else {
			ex = append(ex, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(r.PortLo)})
		}
	}
	return append(ex, accept())
}
