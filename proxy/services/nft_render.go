package services

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Names of the static objects of our nftables table. Dynamic chains and sets are named
// "<kind>-<hash>-<readable>", the hash keeping them unique and the rest readable in `nft list`.
const (
	chainServices     = "services"
	chainMarkMasq     = "mark-for-masquerade"
	chainMasquerading = "masquerading"
	chainEPCheck      = "endpoints-check"
	chainReject       = "reject-chain"
	chainClusterCheck = "cluster-ips-check"

	mapServiceIPs    = "service-ips"
	mapNodePorts     = "service-nodeports"
	setNoEPServices  = "no-endpoint-services"
	setNoEPNodePorts = "no-endpoint-nodeports"
	setNodePortIPs   = "nodeport-ips"
	setClusterIPs    = "cluster-ips"
	setHairpin       = "hairpin"
	setFlatVIPs      = "flat-vips"
	mapFlatEndpoints = "flat-endpoints-" // + endpoint count n
	chainFlat        = "flat-services"
	// maxFlatEndpoints is the largest endpoint count served by the flat path (see
	// renderPort): chain flat-services has one DNAT rule per count 1..max.
	maxFlatEndpoints  = 64
	masqMark          = 0x4000
	maxNftNameLen     = 200 // the kernel allows 255; leave room
	protoTCP          = 6
	protoUDP          = 17
	protoSCTP         = 132
	ruleDNATSingleFmt = "meta l4proto %d dnat to %s"
)

// ruleKind is one shape of rule in a dynamic chain.
type ruleKind int

const (
	rMasqUnlessFrom ruleKind = iota // ip saddr != cidr jump mark-for-masquerade
	rJump                           // jump chain
	rGoto                           // goto chain
	rGotoIfFrom                     // ip saddr cidr goto chain
	rFibLocalJump                   // fib saddr type local jump chain
	rFibLocalGoto                   // fib saddr type local goto chain
	rAffinityGoto                   // ip saddr @set goto chain
	rGotoOneIn                      // numgen random mod n == 0 goto chain
	rUpdateSet                      // update @set { ip saddr }
	rDNAT                           // meta l4proto P dnat to ep
	rDNATOneIn                      // meta l4proto P numgen random mod n == 0 dnat to ep
	rDrop                           // drop
	rReturnIfFrom                   // ip saddr cidr return
)

// rule is one rule of a dynamic chain, in a comparable, printable form; the nftables backend
// turns it into expressions.
//
// On the chain path (see renderPort) a random pick among N endpoints is a cascade of N rules,
// rule i taking its endpoint with probability 1/(N-i) (uniform overall), as iptables'
// statistic match does. It needs no per-Service set: anonymous maps cost the kernel a walk of
// the whole transaction per map. Only the first packet of a connection runs these chains.
type rule struct {
	kind  ruleKind
	chain string
	cidr  netip.Prefix
	set   string
	proto uint8
	ep    Endpoint // rDNAT, rDNATOneIn
	n     int      // rGotoOneIn, rDNATOneIn: modulus
}

// String renders the rule in nft syntax; it is also the identity used to diff chains.
func (r rule) String() string {
	switch r.kind {
	case rMasqUnlessFrom:
		return fmt.Sprintf("ip saddr != %s jump %s", r.cidr, chainMarkMasq)
	case rJump:
		return "jump " + r.chain
	case rGoto:
		return "goto " + r.chain
	case rGotoIfFrom:
		return fmt.Sprintf("ip saddr %s goto %s", r.cidr, r.chain)
	case rFibLocalJump:
		return "fib saddr type local jump " + r.chain
	case rFibLocalGoto:
		return "fib saddr type local goto " + r.chain
	case rAffinityGoto:
		return fmt.Sprintf("ip saddr @%s goto %s", r.set, r.chain)
	case rGotoOneIn:
		return fmt.Sprintf("numgen random mod %d == 0 goto %s", r.n, r.chain)
	case rUpdateSet:
		return fmt.Sprintf("update @%s { ip saddr }", r.set)
	case rDNAT:
		return fmt.Sprintf(ruleDNATSingleFmt, r.proto, r.ep)
	case rDNATOneIn:
		return fmt.Sprintf("meta l4proto %d numgen random mod %d == 0 dnat to %s", r.proto, r.n, r.ep)
	case rDrop:
		return "drop"
	case rReturnIfFrom:
		return fmt.Sprintf("ip saddr %s return", r.cidr)
	}
	return fmt.Sprintf("unknown rule kind %d", r.kind)
}

// vipKey is a (destination address, protocol, port) frontend.
type vipKey struct {
	ip    netip.Addr
	proto uint8
	port  uint16
}

// portKey is a (protocol, port) frontend on every NodePort address.
type portKey struct {
	proto uint8
	port  uint16
}

// flatKey is endpoint i of a flat frontend with n endpoints: key vip . i of map
// flat-endpoints-<n>.
type flatKey struct {
	vip  vipKey
	n, i uint32
}

func flatMap(n uint32) string { return mapFlatEndpoints + strconv.Itoa(int(n)) }

// ruleset is the dynamic part of our table: chains, affinity sets and the elements of the
// static maps and sets. Two rulesets diff into the smallest batch that turns one into the other.
type ruleset struct {
	chains        map[string][]rule
	affinity      map[string]time.Duration
	serviceIPs    map[vipKey]string // -> chain (goto)
	flatVIPs      map[vipKey]bool
	flatEPs       map[flatKey]netip.AddrPort
	nodePorts     map[portKey]string
	noEPServices  map[vipKey]bool
	noEPNodePorts map[portKey]bool
	nodeIPs       map[netip.Addr]bool
	clusterIPs    map[netip.Addr]bool
	hairpin       map[netip.Addr]bool
}

func newRuleset() *ruleset {
	return &ruleset{
		chains: map[string][]rule{}, affinity: map[string]time.Duration{},
		serviceIPs: map[vipKey]string{}, nodePorts: map[portKey]string{},
		flatVIPs: map[vipKey]bool{}, flatEPs: map[flatKey]netip.AddrPort{},
		noEPServices: map[vipKey]bool{}, noEPNodePorts: map[portKey]bool{},
		nodeIPs: map[netip.Addr]bool{}, clusterIPs: map[netip.Addr]bool{}, hairpin: map[netip.Addr]bool{},
	}
}

func protoNum(p v1.Protocol) uint8 {
	switch p {
	case v1.ProtocolUDP:
		return protoUDP
	case v1.ProtocolSCTP:
		return protoSCTP
	}
	return protoTCP
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return strings.ToLower(b32.EncodeToString(h[:])[:10])
}

func nftName(kind, hash, readable string) string {
	n := kind + "-" + hash + "-" + readable
	if len(n) > maxNftNameLen {
		n = n[:maxNftNameLen]
	}
	return n
}

// render turns a DesiredState into the nftables ruleset; podCIDR decides which sources are
// "inside the cluster" (not masqueraded when they reach a ClusterIP). It is renderPort for
// every Service port, merged.
func render(ds DesiredState, podCIDR netip.Prefix) *ruleset {
	rs := newRuleset()
	for _, ip := range ds.NodeIPs {
		rs.nodeIPs[ip] = true
	}
	for _, sp := range ds.Services {
		renderPort(sp, podCIDR).mergeInto(rs, nil)
	}
	return rs
}

// fragment is what one Service port contributes to the ruleset. Keeping it per port lets the
// backend redo only the ports that changed and take back exactly what an old version added.
// Slices rather than maps: there are as many fragments as Service ports, and a handful of
// maps each would cost more memory than the rules themselves.
type fragment struct {
	chains        []namedChain
	affinity      []namedSet
	serviceIPs    []vipEntry
	flat          []flatFrontend
	nodePorts     []portEntry
	noEPServices  []vipKey
	noEPNodePorts []portKey
	clusterIPs    []netip.Addr
	hairpin       []netip.Addr // may repeat an address: references are counted
}

type namedChain struct {
	name  string
	rules []rule
}

type namedSet struct {
	name    string
	timeout time.Duration
}

type vipEntry struct {
	k     vipKey
	chain string
}

type portEntry struct {
	k     portKey
	chain string
}

// flatFrontend is a frontend served by the flat path: endpoint i of eps is element
// vip . i of flat-endpoints-<len(eps)>.
type flatFrontend struct {
	k   vipKey
	eps []netip.AddrPort
}

// rulesetRefs counts how many fragments hold each element or name of a ruleset. Elements
// shared by several ports (a ClusterIP with two ports, an endpoint behind two Services) stay
// until the last one lets go; a verdict-map key or chain name held twice is a conflict that
// only a full render resolves the same way every time.
type rulesetRefs struct {
	chains, affinity         map[string]int
	serviceIPs, noEPServices map[vipKey]int
	flatVIPs                 map[vipKey]int
	flatEPs                  map[flatKey]int
	nodePorts, noEPNodePorts map[portKey]int
	clusterIPs, hairpin      map[netip.Addr]int
	conflicts                int // keys or names held by more than one fragment
}

func newRulesetRefs() *rulesetRefs {
	return &rulesetRefs{
		chains: map[string]int{}, affinity: map[string]int{},
		serviceIPs: map[vipKey]int{}, noEPServices: map[vipKey]int{},
		flatVIPs: map[vipKey]int{}, flatEPs: map[flatKey]int{},
		nodePorts: map[portKey]int{}, noEPNodePorts: map[portKey]int{},
		clusterIPs: map[netip.Addr]int{}, hairpin: map[netip.Addr]int{},
	}
}

func ref[K comparable](refs map[K]int, k K, conflicts *int, exclusive bool) {
	refs[k]++
	if exclusive && refs[k] == 2 {
		*conflicts++
	}
}

// unref drops one reference and reports whether it was the last.
func unref[K comparable](refs map[K]int, k K, conflicts *int, exclusive bool) bool {
	refs[k]--
	if exclusive && refs[k] == 1 {
		*conflicts--
	}
	if refs[k] <= 0 {
		delete(refs, k)
		return true
	}
	return false
}

// mergeInto adds f to rs, counting references in refs when it is not nil. On a conflict the
// later fragment wins, as Service ports are rendered in Key order.
func (f *fragment) mergeInto(rs *ruleset, refs *rulesetRefs) {
	var c *int
	if refs != nil {
		c = &refs.conflicts
	}
	for _, ch := range f.chains {
		rs.chains[ch.name] = ch.rules
		if refs != nil {
			ref(refs.chains, ch.name, c, true)
		}
	}
	for _, s := range f.affinity {
		rs.affinity[s.name] = s.timeout
		if refs != nil {
			ref(refs.affinity, s.name, c, true)
		}
	}
	for _, e := range f.serviceIPs {
		rs.serviceIPs[e.k] = e.chain
		if refs != nil {
			ref(refs.serviceIPs, e.k, c, true)
		}
	}
	for _, ff := range f.flat {
		rs.flatVIPs[ff.k] = true
		if refs != nil {
			ref(refs.flatVIPs, ff.k, c, true)
		}
		for i, ep := range ff.eps {
			k := flatKey{ff.k, uint32(len(ff.eps)), uint32(i)}
			rs.flatEPs[k] = ep
			if refs != nil {
				ref(refs.flatEPs, k, c, true)
			}
		}
	}
	for _, e := range f.nodePorts {
		rs.nodePorts[e.k] = e.chain
		if refs != nil {
			ref(refs.nodePorts, e.k, c, true)
		}
	}
	for _, k := range f.noEPServices {
		rs.noEPServices[k] = true
		if refs != nil {
			ref(refs.noEPServices, k, c, false)
		}
	}
	for _, k := range f.noEPNodePorts {
		rs.noEPNodePorts[k] = true
		if refs != nil {
			ref(refs.noEPNodePorts, k, c, false)
		}
	}
	for _, a := range f.clusterIPs {
		rs.clusterIPs[a] = true
		if refs != nil {
			ref(refs.clusterIPs, a, c, false)
		}
	}
	for _, a := range f.hairpin {
		rs.hairpin[a] = true
		if refs != nil {
			ref(refs.hairpin, a, c, false)
		}
	}
}

// removeFrom takes f back out of rs: what no other fragment references any more goes. It is
// only used while refs.conflicts is 0, so an exclusive key always belongs to f alone.
func (f *fragment) removeFrom(rs *ruleset, refs *rulesetRefs) {
	c := &refs.conflicts
	for _, ch := range f.chains {
		if unref(refs.chains, ch.name, c, true) {
			delete(rs.chains, ch.name)
		}
	}
	for _, s := range f.affinity {
		if unref(refs.affinity, s.name, c, true) {
			delete(rs.affinity, s.name)
		}
	}
	for _, e := range f.serviceIPs {
		if unref(refs.serviceIPs, e.k, c, true) {
			delete(rs.serviceIPs, e.k)
		}
	}
	for _, ff := range f.flat {
		if unref(refs.flatVIPs, ff.k, c, true) {
			delete(rs.flatVIPs, ff.k)
		}
		for i := range ff.eps {
			k := flatKey{ff.k, uint32(len(ff.eps)), uint32(i)}
			if unref(refs.flatEPs, k, c, true) {
				delete(rs.flatEPs, k)
			}
		}
	}
	for _, e := range f.nodePorts {
		if unref(refs.nodePorts, e.k, c, true) {
			delete(rs.nodePorts, e.k)
		}
	}
	for _, k := range f.noEPServices {
		if unref(refs.noEPServices, k, c, false) {
			delete(rs.noEPServices, k)
		}
	}
	for _, k := range f.noEPNodePorts {
		if unref(refs.noEPNodePorts, k, c, false) {
			delete(rs.noEPNodePorts, k)
		}
	}
	for _, a := range f.clusterIPs {
		if unref(refs.clusterIPs, a, c, false) {
			delete(rs.clusterIPs, a)
		}
	}
	for _, a := range f.hairpin {
		if unref(refs.hairpin, a, c, false) {
			delete(rs.hairpin, a)
		}
	}
}

// renderPort renders one Service port. There are two layouts.
//
// The flat path, for the common ClusterIP frontend: no session affinity and 1..
// maxFlatEndpoints endpoints to pick from (internalTrafficPolicy Cluster: all of them; Local:
// the local ones, when there are any). The frontend is only elements of static sets and maps:
//   - flat-vips: ip . proto . port;
//   - flat-endpoints-<n>, n its endpoint count: ip . proto . port . i -> endpoint ip . port,
//     for i in 0..n-1.
//
// The services chain sends the members of flat-vips to the static chain flat-services, which
// marks sources outside the pod CIDR for masquerade, then holds one rule per endpoint count n:
// `dnat to flat-endpoints-<n>[ip . proto . port . numgen random mod n]`. Only the rule of the
// frontend's own n finds it, and picks one of its endpoints uniformly; a first packet runs at
// most n of those rules, as the chain path's cascade. As these rules and maps exist for every
// n, adding, changing or removing such a Service adds and deletes only elements of a set and of
// value maps: no rule, chain or jump, so the kernel does not validate the whole table at commit
// (which at 10,000 Services costs ~100 ms). One map per n rather than one for all: the kernel
// checks each element of a map against every rule that uses it, when either is added.
//
// The chain path, for everything else, per Service port with endpoints:
//   - svc-<h>: the ClusterIP target when not flat. Masquerade sources outside the pod CIDR,
//     then pick an endpoint (internalTrafficPolicy Local: among local ones only, else drop).
//   - ext-<h>: the NodePort/externalIP/LB target. Cluster policy: always masquerade, pick among
//     all endpoints. Local policy: pods and the host itself short-circuit to clu-<h> (all
//     endpoints); everyone else keeps its source address and gets a local endpoint, or a drop.
//   - without session affinity the pick is a cascade of `numgen ... dnat` rules, no chain per
//     endpoint; with affinity each endpoint gets a chain ep-<h>-<ip:port> and a dynamic set
//     aff-<h>-... that remembers client addresses, and the cascade jumps to those chains.
//
// The chain path's frontends are elements of the verdict maps service-ips and
// service-nodeports; a frontend is in those or in flat-vips, never both.
//
// A Service port without endpoints gets no chain: its frontends go into the no-endpoint sets,
// whose filter rules reject new connections (TCP reset / ICMP port unreachable). Its
// firewalled load-balancer addresses also get a chain fw- in service-ips that drops the sources
// outside the ranges first, as kube-proxy's firewall comes before that rejection (the rejection
// of the host's own connections, in the output hook, comes first still).
func renderPort(sp ServicePort, podCIDR netip.Prefix) *fragment {
	f := &fragment{}
	proto := protoNum(sp.Protocol)
	f.clusterIPs = append(f.clusterIPs, sp.ClusterIP)
	cvip := vipKey{sp.ClusterIP, proto, sp.Port}
	h := shortHash(sp.Key)
	readable := sp.Namespace + "/" + sp.Name + "/" + strings.ToLower(string(sp.Protocol)) + "/" + portLabel(sp)
	if len(sp.ClusterEndpoints) == 0 {
		f.noEPServices = append(f.noEPServices, cvip)
		for _, ip := range sp.ExternalIPs {
			f.noEPServices = append(f.noEPServices, vipKey{ip, proto, sp.Port})
		}
		if sp.NodePort != 0 {
			f.noEPNodePorts = append(f.noEPNodePorts, portKey{proto, sp.NodePort})
		}
		if len(sp.FirewallIPs) > 0 {
			fw := nftName("fw", h, readable)
			rules := make([]rule, 0, len(sp.SourceRanges)+1)
			for _, r := range sp.SourceRanges {
				rules = append(rules, rule{kind: rReturnIfFrom, cidr: r})
			}
			f.chains = append(f.chains, namedChain{fw, append(rules, rule{kind: rDrop})})
			for _, ip := range sp.FirewallIPs {
				f.serviceIPs = append(f.serviceIPs, vipEntry{vipKey{ip, proto, sp.Port}, fw})
			}
		}
		return f
	}
	pick := func(eps []Endpoint) []rule { return pickInto(f, sp, h, proto, eps) }

	internal := sp.ClusterEndpoints
	if sp.InternalLocal {
		internal = sp.LocalEndpoints
	}
	if sp.Affinity == 0 && len(internal) > 0 && len(internal) <= maxFlatEndpoints {
		ff := flatFrontend{k: cvip, eps: make([]netip.AddrPort, len(internal))}
		for i, e := range internal {
			ff.eps[i] = netip.AddrPortFrom(e.IP, e.Port)
			f.hairpin = append(f.hairpin, e.IP)
		}
		f.flat = append(f.flat, ff)
	} else {
		svc := nftName("svc", h, readable)
		rules := []rule{{kind: rMasqUnlessFrom, cidr: podCIDR}}
		if len(internal) > 0 {
			rules = append(rules, pick(internal)...)
		} else {
			rules = append(rules, rule{kind: rDrop})
		}
		f.chains = append(f.chains, namedChain{svc, rules})
		f.serviceIPs = append(f.serviceIPs, vipEntry{cvip, svc})
	}

	if !sp.HasExternal() {
		return f
	}
	ext := nftName("ext", h, readable)
	if !sp.ExternalLocal {
		f.chains = append(f.chains, namedChain{ext, append([]rule{{kind: rJump, chain: chainMarkMasq}}, pick(sp.ClusterEndpoints)...)})
	} else {
		clu := nftName("clu", h, readable)
		f.chains = append(f.chains, namedChain{clu, pick(sp.ClusterEndpoints)})
		rules := []rule{
			{kind: rGotoIfFrom, cidr: podCIDR, chain: clu},
			{kind: rFibLocalJump, chain: chainMarkMasq},
			{kind: rFibLocalGoto, chain: clu},
		}
		if len(sp.LocalEndpoints) > 0 {
			rules = append(rules, pick(sp.LocalEndpoints)...)
		} else {
			rules = append(rules, rule{kind: rDrop})
		}
		f.chains = append(f.chains, namedChain{ext, rules})
	}
	var fw string
	if len(sp.FirewallIPs) > 0 {
		// The load-balancer addresses answer only the source ranges, as kube-proxy's firewall:
		// everyone else's first packet is dropped (a NodePort of the same Service stays open).
		fw = nftName("fw", h, readable)
		rules := make([]rule, 0, len(sp.SourceRanges)+1)
		for _, r := range sp.SourceRanges {
			rules = append(rules, rule{kind: rGotoIfFrom, cidr: r, chain: ext})
		}
		f.chains = append(f.chains, namedChain{fw, append(rules, rule{kind: rDrop})})
	}
	for _, ip := range sp.ExternalIPs {
		target := ext
		if fw != "" && slices.Contains(sp.FirewallIPs, ip) {
			target = fw
		}
		f.serviceIPs = append(f.serviceIPs, vipEntry{vipKey{ip, proto, sp.Port}, target})
	}
	if sp.NodePort != 0 {
		f.nodePorts = append(f.nodePorts, portEntry{portKey{proto, sp.NodePort}, ext})
	}
	return f
}

func portLabel(sp ServicePort) string {
	if sp.PortName != "" {
		return sp.PortName
	}
	return strconv.Itoa(int(sp.Port))
}

// pickRules are the rules that choose one of eps and DNAT to it; they also register the
// endpoint chains, affinity sets and hairpin addresses they need in rs.
func pickRules(rs *ruleset, sp ServicePort, h string, proto uint8, eps []Endpoint) []rule {
	f := &fragment{}
	rules := pickInto(f, sp, h, proto, eps)
	f.mergeInto(rs, nil)
	return rules
}

func (f *fragment) hasChain(name string) bool {
	for _, c := range f.chains {
		if c.name == name {
			return true
		}
	}
	return false
}

// pickInto is pickRules registering into a fragment.
func pickInto(f *fragment, sp ServicePort, h string, proto uint8, eps []Endpoint) []rule {
	for _, e := range eps {
		f.hairpin = append(f.hairpin, e.IP)
	}
	if sp.Affinity == 0 {
		rules := make([]rule, 0, len(eps))
		for i, e := range eps {
			if n := len(eps) - i; n > 1 {
				rules = append(rules, rule{kind: rDNATOneIn, proto: proto, n: n, ep: e})
			} else {
				rules = append(rules, rule{kind: rDNAT, proto: proto, ep: e})
			}
		}
		return rules
	}
	var rules []rule
	secs := int64(sp.Affinity / time.Second)
	var chains []string
	for _, e := range eps {
		// The timeout is part of the set's name: a new timeout is a new set, so rules that
		// reference the set are rewritten with it and the old set can be deleted.
		set := nftName("aff", h, fmt.Sprintf("%s-%ds", e, secs))
		ch := nftName("ep", h, e.String())
		chains = append(chains, ch)
		// The ClusterIP and external chains may pick among the same endpoints: their
		// endpoint chains and sets are the same objects, held once by this port.
		if !f.hasChain(ch) {
			f.affinity = append(f.affinity, namedSet{set, sp.Affinity})
			f.chains = append(f.chains, namedChain{ch, []rule{{kind: rUpdateSet, set: set}, {kind: rDNAT, proto: proto, ep: e}}})
		}
		rules = append(rules, rule{kind: rAffinityGoto, set: set, chain: ch})
	}
	for i, ch := range chains {
		if n := len(chains) - i; n > 1 {
			rules = append(rules, rule{kind: rGotoOneIn, n: n, chain: ch})
		} else {
			rules = append(rules, rule{kind: rGoto, chain: ch})
		}
	}
	return rules
}

// rulesetDiff is what changes between two rulesets.
type rulesetDiff struct {
	addChains, rewriteChains, delChains []string // rewriteChains includes the added ones
	addSets, delSets                    []string
}

// diffRulesets compares the chain and affinity-set parts; element changes are computed per
// map by diffMap.
func diffRulesets(old, cur *ruleset) rulesetDiff {
	var d rulesetDiff
	for name, rules := range cur.chains {
		prev, ok := old.chains[name]
		if !ok {
			d.addChains = append(d.addChains, name)
			d.rewriteChains = append(d.rewriteChains, name)
			continue
		}
		if !sameRules(prev, rules) {
			d.rewriteChains = append(d.rewriteChains, name)
		}
	}
	for name := range old.chains {
		if _, ok := cur.chains[name]; !ok {
			d.delChains = append(d.delChains, name)
		}
	}
	for name, t := range cur.affinity {
		if ot, ok := old.affinity[name]; !ok || ot != t {
			d.addSets = append(d.addSets, name)
		}
	}
	for name := range old.affinity {
		if _, ok := cur.affinity[name]; !ok {
			d.delSets = append(d.delSets, name)
		}
	}
	for _, l := range [][]string{d.addChains, d.rewriteChains, d.delChains, d.addSets, d.delSets} {
		sort.Strings(l)
	}
	return d
}

func sameRules(a, b []rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// diffMap returns the keys to delete and the entries to add so that old becomes cur; a key
// whose value changed is in both.
func diffMap[K comparable, V comparable](old, cur map[K]V) (del []K, add map[K]V) {
	add = map[K]V{}
	for k, v := range cur {
		if ov, ok := old[k]; !ok || ov != v {
			add[k] = v
			if ok {
				del = append(del, k)
			}
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			del = append(del, k)
		}
	}
	return del, add
}
