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
// frontends that have no endpoint at all. Set names below are the table's whole vocabulary.
const (
	ipvsSetMasq    = "vips-masquerade" // frontends whose traffic is always masqueraded
	ipvsSetCluster = "vips-cluster"    // ClusterIP frontends: masquerade sources outside the pod CIDR
	ipvsSetReject  = "vips-reject"     // frontends without endpoints
	ipvsSetHairpin = "hairpin"         // real server address pairs (a pod reaching itself)
)

// ipvsNftState is the content of the companion table.
type ipvsNftState struct {
	masq, cluster, reject map[vipKey]bool
	hairpin               map[netip.Addr]bool
	clusterCIDR           netip.Prefix
}

// renderIPVSNft computes the companion table for st; sources outside clusterCIDR are
// masqueraded towards ClusterIPs. ClusterIP frontends are the unmasqueraded
// virtual servers inside serviceCIDR; the others without Masquerade follow
// externalTrafficPolicy Local and keep the client's address.
func renderIPVSNft(st IPVSState, serviceCIDR, clusterCIDR netip.Prefix) *ipvsNftState {
	// Sized up front: growing maps of 100,000 real servers costs more than filling them.
	rs := 0
	for _, vs := range st.VirtualServers {
		rs += len(vs.RealServers)
	}
	s := &ipvsNftState{masq: map[vipKey]bool{}, cluster: make(map[vipKey]bool, len(st.VirtualServers)), reject: map[vipKey]bool{},
		hairpin: make(map[netip.Addr]bool, rs), clusterCIDR: clusterCIDR}
	for _, vs := range st.VirtualServers {
		k := vipKey{ip: vs.Address, proto: protoNum(vs.Protocol), port: vs.Port}
		switch {
		case vs.Masquerade:
			s.masq[k] = true
		case serviceCIDR.Contains(vs.Address):
			s.cluster[k] = true
		}
		for _, r := range vs.RealServers {
			s.hairpin[r.Address] = true
		}
	}
	for _, vs := range st.Reject {
		s.reject[vipKey{ip: vs.Address, proto: protoNum(vs.Protocol), port: vs.Port}] = true
	}
	return s
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
	tbl := &nftables.Table{Name: b.opts.Table, Family: nftables.TableFamilyIPv4}
	var ops []func(*nftconn.Batch)
	for _, d := range []struct {
		name      string
		old, want map[vipKey]bool
	}{{ipvsSetMasq, prev.masq, s.masq}, {ipvsSetCluster, prev.cluster, s.cluster}, {ipvsSetReject, prev.reject, s.reject}} {
		del, add := diffMap(d.old, d.want)
		if len(del)+len(add) > 0 {
			ops = append(ops, func(bt *nftconn.Batch) {
				bt.Elems(d.name, vipElems(del, nil), true)
				bt.Elems(d.name, vipSetElems(add), false)
			})
		}
	}
	if del, add := diffMap(prev.hairpin, s.hairpin); len(del)+len(add) > 0 {
		ops = append(ops, func(bt *nftconn.Batch) {
			bt.Elems(ipvsSetHairpin, addrElems(del, true), true)
			bt.Elems(ipvsSetHairpin, addrElems(sortedAddrs(add), true), false)
		})
	}
	if len(ops) == 0 {
		return nil
	}
	c, done, err := b.nftConn()
	if err != nil {
		return err
	}
	defer done()
	bt := nftconn.NewBatch(c, tbl)
	for _, op := range ops {
		op(bt)
	}
	return bt.Flush()
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
	for _, d := range []struct {
		name string
		typ  nftables.SetDatatype
		els  []nftables.SetElement
	}{
		{ipvsSetMasq, vipType, vipSetElems(s.masq)},
		{ipvsSetCluster, vipType, vipSetElems(s.cluster)},
		{ipvsSetReject, vipType, vipSetElems(s.reject)},
		{ipvsSetHairpin, pairType, addrElems(sortedAddrs(s.hairpin), true)},
	} {
		set := &nftables.Set{Table: tbl, Name: d.name, KeyType: d.typ, Concatenation: true}
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
	markRules := [][]expr.Any{
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

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
