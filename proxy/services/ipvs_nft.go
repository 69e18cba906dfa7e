package services

import (
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flotilla-dev/flotilla/internal/nftconn"
)

// The IPVS companion table: IPVS forwards but neither masquerades nor refuses, so a small
// nftables table marks the connections to masquerade before IPVS sees them (prerouting/output
// at mangle priority), masquerades them (and hairpin connections) in postrouting, and rejects
// frontends that have no endpoint at all, and drops the sources a load-balancer address's
// source ranges leave out. Set names below are the table's whole vocabulary.
const (
	ipvsSetMasq     = "vips-masquerade" // frontends whose traffic is always masqueraded
	ipvsSetCluster  = "vips-cluster"    // ClusterIP frontends: masquerade sources outside the pod CIDR
	ipvsSetReject   = "vips-reject"     // frontends without endpoints
	ipvsSetFirewall = "vips-firewall"   // frontends only their source ranges may reach
	ipvsSetAllow    = "firewall-allow"  // frontend . source range: who may reach a firewalled frontend
	ipvsSetHairpin  = "hairpin"         // real server address pairs (a pod reaching itself)
)

// fwAllow is an element of the allow set: src may reach the firewalled frontend vip.
type fwAllow struct {
	vip vipKey
	src netip.Prefix
}

// ipvsNftState is the content of the companion table.
type ipvsNftState struct {
	masq, cluster, reject map[vipKey]bool
	firewall              map[vipKey]bool
	allow                 map[fwAllow]bool
	hairpin               map[netip.Addr]bool
	clusterCIDR           netip.Prefix
}

// ipvsNftDelta is a change of the companion table's sets.
type ipvsNftDelta struct {
	add, del               [4][]vipKey // by ipvsVIPSets
	allowAdd, allowDel     []fwAllow
	hairpinAdd, hairpinDel []netip.Addr
}

// ipvsVIPSets are the companion table's frontend sets, in ipvsNftDelta's order.
var ipvsVIPSets = [4]string{ipvsSetMasq, ipvsSetCluster, ipvsSetReject, ipvsSetFirewall}

func (s *ipvsNftState) vipSets() [4]map[vipKey]bool {
	return [4]map[vipKey]bool{s.masq, s.cluster, s.reject, s.firewall}
}

func (d *ipvsNftDelta) empty() bool {
	n := len(d.hairpinAdd) + len(d.hairpinDel) + len(d.allowAdd) + len(d.allowDel)
	for i := range d.add {
		n += len(d.add[i]) + len(d.del[i])
	}
	return n == 0
}

// diffNft is the delta that turns prev into s.
func diffNft(prev, s *ipvsNftState) ipvsNftDelta {
	var d ipvsNftDelta
	old, cur := prev.vipSets(), s.vipSets()
	for i := range old {
		var add map[vipKey]bool
		d.del[i], add = diffMap(old[i], cur[i])
		for k := range add {
			d.add[i] = append(d.add[i], k)
		}
	}
	var allow map[fwAllow]bool
	d.allowDel, allow = diffMap(prev.allow, s.allow)
	for k := range allow {
		d.allowAdd = append(d.allowAdd, k)
	}
	var add map[netip.Addr]bool
	d.hairpinDel, add = diffMap(prev.hairpin, s.hairpin)
	d.hairpinAdd = sortedAddrs(add)
	return d
}

// apply changes s by d.
func (s *ipvsNftState) apply(d ipvsNftDelta) {
	for i, m := range s.vipSets() {
		for _, k := range d.del[i] {
			delete(m, k)
		}
		for _, k := range d.add[i] {
			m[k] = true
		}
	}
	for _, k := range d.allowDel {
		delete(s.allow, k)
	}
	for _, k := range d.allowAdd {
		s.allow[k] = true
	}
	for _, a := range d.hairpinDel {
		delete(s.hairpin, a)
	}
	for _, a := range d.hairpinAdd {
		s.hairpin[a] = true
	}
}

func (b *IPVS) nftConn() (*nftables.Conn, func(), error) {
	if b.opts.NetNS == "" {
		c, err := nftables.New()
		return c, func() {}, err
	}
	f, err := os.Open(b.opts.NetNS)
	if err != nil {
		return nil, nil, fmt.Errorf("open network namespace %s: %w", b.opts.NetNS, err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, func() { f.Close() }, nil
}

// applyNft makes the companion table hold s: when the last applied content is known, by
// sending only the set elements that changed (the table's rules never change with Services),
// else, or when that fails, by replacing the table in one transaction.
func (b *IPVS) applyNft(s *ipvsNftState) error {
	if prev := b.nftApplied; prev != nil && prev.clusterCIDR == s.clusterCIDR {
		b.nftApplied = nil
		err := b.patchNft(prev, s)
		if err == nil {
			b.nftApplied = s
			return nil
		}
		b.opts.Log.WithError(err).Warn("incremental update of the IPVS companion table failed; rebuilding it")
	}
	b.nftApplied = nil
	if err := b.replaceNft(s); err != nil {
		return err
	}
	b.nftApplied = s
	return nil
}

// patchNft sends the element changes that turn the companion table from prev into s.
func (b *IPVS) patchNft(prev, s *ipvsNftState) error {
	return b.sendNft(diffNft(prev, s))
}

// sendNft sends d's element changes in one transaction.
func (b *IPVS) sendNft(d ipvsNftDelta) error {
	if d.empty() {
		return nil
	}
	c, done, err := b.nftConn()
	if err != nil {
		return err
	}
	defer done()
	bt := nftconn.NewBatch(c, &nftables.Table{Name: b.opts.Table, Family: nftables.TableFamilyIPv4})
	for i, name := range ipvsVIPSets {
		bt.Elems(name, vipElems(d.del[i], nil), true)
		bt.Elems(name, vipElems(d.add[i], nil), false)
	}
	bt.Elems(ipvsSetAllow, allowElems(d.allowDel), true)
	bt.Elems(ipvsSetAllow, allowElems(d.allowAdd), false)
	bt.Elems(ipvsSetHairpin, addrElems(d.hairpinDel, true), true)
	bt.Elems(ipvsSetHairpin, addrElems(d.hairpinAdd, true), false)
	return bt.Flush()
}

// patchNftDelta applies d to the companion table last applied, keeping nftApplied in step;
// on failure the next Apply rebuilds the table.
func (b *IPVS) patchNftDelta(d ipvsNftDelta) error {
	prev := b.nftApplied
	b.nftApplied = nil
	if err := b.sendNft(d); err != nil {
		return err
	}
	prev.apply(d)
	b.nftApplied = prev
	return nil
}

// replaceNft replaces the companion table in one transaction.
func (b *IPVS) replaceNft(s *ipvsNftState) error {
	c, done, err := b.nftConn()
	if err != nil {
		return err
	}
	defer done()
	tbl := &nftables.Table{Name: b.opts.Table, Family: nftables.TableFamilyIPv4}
	c.AddTable(tbl)
	c.DelTable(tbl)
	c.AddTable(tbl)
	sets := map[string]*nftables.Set{}
	allow := make([]fwAllow, 0, len(s.allow))
	for k := range s.allow {
		allow = append(allow, k)
	}
	for _, d := range []struct {
		name     string
		typ      nftables.SetDatatype
		els      []nftables.SetElement
		interval bool
	}{
		{ipvsSetMasq, vipType, vipSetElems(s.masq), false},
		{ipvsSetCluster, vipType, vipSetElems(s.cluster), false},
		{ipvsSetReject, vipType, vipSetElems(s.reject), false},
		{ipvsSetFirewall, vipType, vipSetElems(s.firewall), false},
		{ipvsSetAllow, allowType, allowElems(allow), true},
		{ipvsSetHairpin, pairType, addrElems(sortedAddrs(s.hairpin), true), false},
	} {
		set := &nftables.Set{Table: tbl, Name: d.name, KeyType: d.typ, Concatenation: true, Interval: d.interval}
		if err := c.AddSet(set, nil); err != nil {
			return fmt.Errorf("set %s: %w", d.name, err)
		}
		sets[d.name] = set
		for i := 0; i < len(d.els); i += 256 {
			if err := c.SetAddElements(set, d.els[i:min(i+256, len(d.els))]); err != nil {
				return fmt.Errorf("elements of set %s: %w", d.name, err)
			}
		}
	}
	setMark := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: native32(^uint32(masqMark)), Xor: native32(masqMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}
	// A firewalled frontend's first rule, before IPVS sees the packet: a source outside its
	// ranges is dropped (ip daddr . meta l4proto . th dport . ip saddr != @firewall-allow).
	al := sets[ipvsSetAllow]
	firewallRule := cat(lookupVIP(sets[ipvsSetFirewall], false), []expr.Any{loadSaddr(reg34),
		&expr.Lookup{SourceRegister: reg1, SetName: al.Name, SetID: al.ID, Invert: true},
		&expr.Verdict{Kind: expr.VerdictDrop}})
	markRules := [][]expr.Any{
		firewallRule,
		cat(lookupVIP(sets[ipvsSetMasq], false), setMark),
		cat(saddrIn(s.clusterCIDR, true), lookupVIP(sets[ipvsSetCluster], false), setMark),
	}
	hp := sets[ipvsSetHairpin]
	chains := []struct {
		name  string
		typ   nftables.ChainType
		hook  *nftables.ChainHook
		prio  nftables.ChainPriority
		rules [][]expr.Any
	}{
		// Mangle priority: before IPVS (which runs after DNAT priority) sees the packet.
		{"mark-prerouting", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, *nftables.ChainPriorityMangle, markRules},
		{"mark-output", nftables.ChainTypeFilter, nftables.ChainHookOutput, *nftables.ChainPriorityMangle, markRules},
		{"reject-input", nftables.ChainTypeFilter, nftables.ChainHookInput, *nftables.ChainPriorityFilter, [][]expr.Any{
			cat(lookupVIP(sets[ipvsSetReject], false), l4protoIs(protoTCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
			cat(lookupVIP(sets[ipvsSetReject], false), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3 /* port unreachable */}}),
		}},
		{"masq-postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, *nftables.ChainPriorityNATSource, masqueradeRules(hp, false)},
	}
	for _, ch := range chains {
		prio := ch.prio
		chain := c.AddChain(&nftables.Chain{Name: ch.name, Table: tbl, Type: ch.typ, Hooknum: ch.hook, Priority: &prio})
		for _, r := range ch.rules {
			c.AddRule(&nftables.Rule{Table: tbl, Chain: chain, Exprs: r})
		}
	}
	return c.Flush()
}

// deleteNft removes the companion table if present.
func (b *IPVS) deleteNft() error {
	c, done, err := b.nftConn()
	if err != nil {
		return err
	}
	defer done()
	if _, err := c.ListTableOfFamily(b.opts.Table, nftables.TableFamilyIPv4); err != nil {
		return nil
	}
	c.DelTable(&nftables.Table{Name: b.opts.Table, Family: nftables.TableFamilyIPv4})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables table ip %s: %w", b.opts.Table, err)
	}
	return nil
}

// allowType is ip daddr . meta l4proto . th dport . ip saddr, an interval in its last field.
var allowType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeIPAddr)

// allowElems are the allow set's elements: the frontend, then the source range from its first
// address (key) to its last (key end).
func allowElems(keys []fwAllow) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(keys))
	for _, k := range keys {
		first, last := k.src.Masked().Addr().As4(), nftconn.LastAddr(k.src).As4()
		v := vipBytes(k.vip)
		out = append(out, nftables.SetElement{Key: append(slices.Clip(v), first[:]...), KeyEnd: append(slices.Clip(v), last[:]...)})
	}
	return out
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
