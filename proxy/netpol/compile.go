// Package netpol enforces NetworkPolicies on one host: it compiles the policies that select
// the host's pods into a Ruleset (this file, pure) and keeps one nftables table in step with
// it (nftables.go), from informers on Pods, Namespaces and NetworkPolicies (run.go).
//
// The table holds, for each local pod a policy isolates, an ingress chain (keyed by the
// pod's address as destination) and an egress chain (keyed by it as source), each jumping
// to the chains of the policies that select the pod and dropping what none of them accepts.
// A policy's chain matches sources or destinations against sets of peer addresses, which
// follow pods' addresses and labels by element updates alone. The hooks sit after the
// Service DNAT, so a policy sees the address of the pod a Service resolved to.
package netpol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/internal/nftconn"
)

// IP protocol numbers.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

// Direction is the side of a pod a chain guards.
type Direction string

const (
	Ingress Direction = "in"
	Egress  Direction = "out"
)

// Rule is one rule of a chain, comparable so that chains diff by value.
//
// A pod chain holds one Jump rule per policy that selects the pod, then a Drop rule. A
// policy chain holds accept rules: the packet's peer address (the source for ingress, the
// destination for egress) in PeerSet, when set; its destination in NamedSet, when set (a
// named port resolved to Port on those pods); and its protocol and destination port.
type Rule struct {
	Jump string
	Drop bool

	PeerSet  string // "" = any peer
	NamedSet string // "" = no named port
	Proto    uint8  // 0 = any protocol
	PortLo   uint16 // 0 = any port
	PortHi   uint16 // == PortLo for a single port
}

// String renders r in nft syntax (also the order rules print in tests).
func (r Rule) String(dir Direction) string {
	if r.Jump != "" {
		return "jump " + r.Jump
	}
	if r.Drop {
		return "drop"
	}
	var b strings.Builder
	peer := "saddr"
	if dir == Egress {
		peer = "daddr"
	}
	if r.PeerSet != "" {
		fmt.Fprintf(&b, "ip %s @%s ", peer, r.PeerSet)
	}
	if r.NamedSet != "" {
		fmt.Fprintf(&b, "ip daddr @%s ", r.NamedSet)
	}
	if r.Proto != 0 {
		fmt.Fprintf(&b, "meta l4proto %d ", r.Proto)
	}
	switch {
	case r.PortLo != 0 && r.PortHi != r.PortLo:
		fmt.Fprintf(&b, "th dport %d-%d ", r.PortLo, r.PortHi)
	case r.PortLo != 0:
		fmt.Fprintf(&b, "th dport %d ", r.PortLo)
	}
	b.WriteString("accept")
	return b.String()
}

// Chain is a regular chain of the table.
type Chain struct {
	Dir   Direction
	Rules []Rule
}

// Range is an inclusive range of IPv4 addresses.
type Range struct{ First, Last netip.Addr }

// SetSpec is the kind of a set: addresses (pods, updated element by element) or intervals
// (ipBlocks, fixed by the policy).
type SetSpec struct {
	Interval bool
	Ranges   []Range // Interval sets: their elements, sorted, disjoint, not adjacent
}

// Ruleset is what the table must hold.
type Ruleset struct {
	Chains map[string]Chain
	Sets   map[string]SetSpec
	// Addrs are the elements of the address sets, by set name.
	Addrs map[string]map[netip.Addr]bool
	// Ingress and Egress map a local pod's address to its chain.
	Ingress map[netip.Addr]string
	Egress  map[netip.Addr]string
	// Hosts are the addresses of the site's hosts: what they send a pod (probes, the
	// Ingress proxy, cluster DNS, masqueraded NodePort traffic) is never refused.
	Hosts map[netip.Addr]bool
}

// Input is what Compile reads: every host (Node) and pod of the site (pods without an
// address, finished or on the host network are left out), every namespace and every
// NetworkPolicy.
type Input struct {
	NodeName   string
	Nodes      []*corev1.Node // their addresses make Ruleset.Hosts
	Pods       []*corev1.Pod
	Namespaces []*corev1.Namespace
	Policies   []*networkingv1.NetworkPolicy
}

type podInfo struct {
	pod   *corev1.Pod
	ip    netip.Addr
	local bool
}

// Compile computes the Ruleset of in.NodeName. Policies whose selectors do not parse (the API
// validates them, so only stored objects of another version) are skipped and returned as
// errors; everything else still compiles.
func Compile(in Input) (*Ruleset, []error) {
	rs := &Ruleset{Chains: map[string]Chain{}, Sets: map[string]SetSpec{}, Addrs: map[string]map[netip.Addr]bool{},
		Ingress: map[netip.Addr]string{}, Egress: map[netip.Addr]string{}, Hosts: map[netip.Addr]bool{}}
	var errs []error
	for _, n := range in.Nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() {
				rs.Hosts[ip.Unmap()] = true
			}
		}
	}

	nsLabels := map[string]labels.Set{}
	for _, ns := range in.Namespaces {
		nsLabels[ns.Name] = ns.Labels
	}
	byNS := map[string][]podInfo{}
	var nsNames []string
	for _, p := range in.Pods {
		ip, ok := podIP(p)
		if !ok {
			continue
		}
		if _, seen := byNS[p.Namespace]; !seen {
			nsNames = append(nsNames, p.Namespace)
		}
		byNS[p.Namespace] = append(byNS[p.Namespace], podInfo{pod: p, ip: ip, local: p.Spec.NodeName == in.NodeName})
	}
	sort.Strings(nsNames)

	policies := slices.Clone(in.Policies)
	sort.Slice(policies, func(i, j int) bool {
		if policies[i].Namespace != policies[j].Namespace {
			return policies[i].Namespace < policies[j].Namespace
		}
		return policies[i].Name < policies[j].Name
	})

	// pod key -> the policy chains of each direction that select it.
	type podChains struct {
		ip      netip.Addr
		in, out []string
	}
	local := map[string]*podChains{}
	var localKeys []string

	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("NetworkPolicy %s/%s: spec.podSelector: %w", np.Namespace, np.Name, err))
			continue
		}
		var selected []podInfo
		for _, pi := range byNS[np.Namespace] {
			if sel.Matches(labels.Set(pi.pod.Labels)) {
				selected = append(selected, pi)
			}
		}
		hasLocal := slices.ContainsFunc(selected, func(pi podInfo) bool { return pi.local })
		if !hasLocal {
			continue
		}
		ingress, egress := policyTypes(np)
		c := &compiler{rs: rs, np: np, nsLabels: nsLabels, byNS: byNS, nsNames: nsNames}
		var inChain, outChain string
		if ingress {
			inChain = chainName("pol", Ingress, np.Namespace, np.Name)
			rules, err := c.rules(Ingress, inChain, ingressRules(np), selected)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rs.Chains[inChain] = Chain{Dir: Ingress, Rules: rules}
		}
		if egress {
			outChain = chainName("pol", Egress, np.Namespace, np.Name)
			rules, err := c.rules(Egress, outChain, egressRules(np), nil)
			if err != nil {
				errs = append(errs, err)
				delete(rs.Chains, inChain)
				continue
			}
			rs.Chains[outChain] = Chain{Dir: Egress, Rules: rules}
		}
		for _, pi := range selected {
			if !pi.local {
				continue
			}
			key := pi.pod.Namespace + "/" + pi.pod.Name
			pc := local[key]
			if pc == nil {
				pc = &podChains{ip: pi.ip}
				local[key] = pc
				localKeys = append(localKeys, key)
			}
			if inChain != "" {
				pc.in = append(pc.in, inChain)
			}
			if outChain != "" {
				pc.out = append(pc.out, outChain)
			}
		}
	}
	sort.Strings(localKeys)
	for _, key := range localKeys {
		pc := local[key]
		ns, name, _ := strings.Cut(key, "/")
		for _, d := range []struct {
			dir    Direction
			chains []string
			m      map[netip.Addr]string
		}{{Ingress, pc.in, rs.Ingress}, {Egress, pc.out, rs.Egress}} {
			if len(d.chains) == 0 {
				continue
			}
			podChain := chainName("pod", d.dir, ns, name)
			ch := Chain{Dir: d.dir}
			for _, j := range d.chains {
				ch.Rules = append(ch.Rules, Rule{Jump: j})
			}
			ch.Rules = append(ch.Rules, Rule{Drop: true})
			rs.Chains[podChain] = ch
			// Two local pods never share an address; should the API say so for a moment
			// (a pod deleted, its address reused), the first in name order keeps it.
			if _, taken := d.m[pc.ip]; !taken {
				d.m[pc.ip] = podChain
			}
		}
	}
	return rs, errs
}

// podIP is the pod's IPv4 address, when it has one and takes part in pod networking.
func podIP(p *corev1.Pod) (netip.Addr, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return netip.Addr{}, false
	}
	candidates := []string{p.Status.PodIP}
	for _, ip := range p.Status.PodIPs {
		candidates = append(candidates, ip.IP)
	}
	for _, s := range candidates {
		if a, err := netip.ParseAddr(s); err == nil && a.Unmap().Is4() {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// policyTypes returns whether np isolates the pods it selects for ingress and for egress:
// spec.policyTypes when set; otherwise Ingress, and Egress when it has egress rules.
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

// rulePeers is an ingress or egress rule: its peers and ports.
type rulePeers struct {
	peers []networkingv1.NetworkPolicyPeer
	ports []networkingv1.NetworkPolicyPort
}

func ingressRules(np *networkingv1.NetworkPolicy) []rulePeers {
	var out []rulePeers
	for _, r := range np.Spec.Ingress {
		out = append(out, rulePeers{peers: r.From, ports: r.Ports})
	}
	return out
}

func egressRules(np *networkingv1.NetworkPolicy) []rulePeers {
	var out []rulePeers
	for _, r := range np.Spec.Egress {
		out = append(out, rulePeers{peers: r.To, ports: r.Ports})
	}
	return out
}

type compiler struct {
	rs       *Ruleset
	np       *networkingv1.NetworkPolicy
	nsLabels map[string]labels.Set
	byNS     map[string][]podInfo
	nsNames  []string
}

// rules compiles the rules of one direction of the policy. selected are the pods it selects
// (for ingress, the destinations a named port is resolved on); egress resolves named ports on
// every pod, the destinations.
func (c *compiler) rules(dir Direction, chain string, rps []rulePeers, selected []podInfo) ([]Rule, error) {
	var out []Rule
	for i, rp := range rps {
		peerSets, err := c.peerSets(chain, i, rp.peers)
		if err != nil {
			return nil, fmt.Errorf("NetworkPolicy %s/%s: %s rule %d: %w", c.np.Namespace, c.np.Name, dirWord(dir), i, err)
		}
		if peerSets == nil {
			continue // peers that match nothing: the rule allows nothing
		}
		ports := c.ports(dir, chain, i, rp.ports, selected)
		for _, ps := range peerSets {
			for _, p := range ports {
				r := p
				r.PeerSet = ps
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func dirWord(d Direction) string {
	if d == Ingress {
		return "ingress"
	}
	return "egress"
}

// peerSets creates the sets of one rule's peers and returns their names: [""] for any peer,
// nil when the peers can match no IPv4 address.
func (c *compiler) peerSets(chain string, i int, peers []networkingv1.NetworkPolicyPeer) ([]string, error) {
	if len(peers) == 0 {
		return []string{""}, nil
	}
	var addrs map[netip.Addr]bool
	var ranges []Range
	hasPods, hasBlocks := false, false
	for _, peer := range peers {
		if peer.IPBlock != nil {
			rr, ok, err := blockRanges(peer.IPBlock)
			if err != nil {
				return nil, err
			}
			if ok {
				hasBlocks = true
				ranges = append(ranges, rr...)
			}
			continue
		}
		hasPods = true
		if addrs == nil {
			addrs = map[netip.Addr]bool{}
		}
		if err := c.matchPeer(peer, addrs); err != nil {
			return nil, err
		}
	}
	var out []string
	if hasPods {
		name := setName(chain, i, "pods")
		c.rs.Sets[name] = SetSpec{}
		c.rs.Addrs[name] = addrs
		out = append(out, name)
	}
	if hasBlocks {
		name := setName(chain, i, "cidrs")
		c.rs.Sets[name] = SetSpec{Interval: true, Ranges: mergeRanges(ranges)}
		out = append(out, name)
	}
	return out, nil
}

// matchPeer adds the addresses of the pods a podSelector and/or namespaceSelector peer
// selects.
func (c *compiler) matchPeer(peer networkingv1.NetworkPolicyPeer, into map[netip.Addr]bool) error {
	podSel := labels.Everything()
	if peer.PodSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil {
			return fmt.Errorf("podSelector: %w", err)
		}
		podSel = s
	}
	namespaces := []string{c.np.Namespace}
	if peer.NamespaceSelector != nil {
		nsSel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			return fmt.Errorf("namespaceSelector: %w", err)
		}
		namespaces = namespaces[:0]
		for _, ns := range c.nsNames {
			if nsSel.Matches(c.nsLabels[ns]) {
				namespaces = append(namespaces, ns)
			}
		}
	}
	for _, ns := range namespaces {
		for _, pi := range c.byNS[ns] {
			if podSel.Matches(labels.Set(pi.pod.Labels)) {
				into[pi.ip] = true
			}
		}
	}
	return nil
}

// ports compiles a rule's ports into rules without a peer. A named port becomes one rule per
// number it resolves to, each with the set of destination pods it resolves so on.
func (c *compiler) ports(dir Direction, chain string, i int, ports []networkingv1.NetworkPolicyPort, selected []podInfo) []Rule {
	if len(ports) == 0 {
		return []Rule{{}}
	}
	var out []Rule
	for _, p := range ports {
		proto := uint8(protoTCP)
		if p.Protocol != nil {
			switch *p.Protocol {
			case corev1.ProtocolUDP:
				proto = protoUDP
			case corev1.ProtocolSCTP:
				proto = protoSCTP
			}
		}
		switch {
		case p.Port == nil:
			out = append(out, Rule{Proto: proto})
		case p.Port.StrVal == "" && p.Port.IntVal > 0:
			hi := uint16(p.Port.IntVal)
			if p.EndPort != nil && *p.EndPort > p.Port.IntVal {
				hi = uint16(*p.EndPort)
			}
			out = append(out, Rule{Proto: proto, PortLo: uint16(p.Port.IntVal), PortHi: hi})
		case p.Port.StrVal != "":
			dests := selected
			if dir == Egress {
				dests = nil
				for _, ns := range c.nsNames {
					dests = append(dests, c.byNS[ns]...)
				}
			}
			byNumber := map[int32]map[netip.Addr]bool{}
			for _, pi := range dests {
				if n, ok := namedPort(pi.pod, p.Port.StrVal, protoName(proto)); ok {
					if byNumber[n] == nil {
						byNumber[n] = map[netip.Addr]bool{}
					}
					byNumber[n][pi.ip] = true
				}
			}
			numbers := make([]int32, 0, len(byNumber))
			for n := range byNumber {
				numbers = append(numbers, n)
			}
			slices.Sort(numbers)
			for _, n := range numbers {
				name := setName(chain, i, "port-"+p.Port.StrVal+"-"+strconv.Itoa(int(n)))
				c.rs.Sets[name] = SetSpec{}
				c.rs.Addrs[name] = byNumber[n]
				out = append(out, Rule{NamedSet: name, Proto: proto, PortLo: uint16(n), PortHi: uint16(n)})
			}
		}
	}
	return out
}

func protoName(p uint8) corev1.Protocol {
	switch p {
	case protoUDP:
		return corev1.ProtocolUDP
	case protoSCTP:
		return corev1.ProtocolSCTP
	}
	return corev1.ProtocolTCP
}

// namedPort resolves a container port name of pod, for protocol proto.
func namedPort(pod *corev1.Pod, name string, proto corev1.Protocol) (int32, bool) {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, ctr := range cs {
			for _, cp := range ctr.Ports {
				p := cp.Protocol
				if p == "" {
					p = corev1.ProtocolTCP
				}
				if cp.Name == name && p == proto && cp.ContainerPort > 0 {
					return cp.ContainerPort, true
				}
			}
		}
	}
	return 0, false
}

// blockRanges returns the IPv4 ranges of an ipBlock: its CIDR less its excepts. ok is false
// for an IPv6 block, which no IPv4 packet can match.
func blockRanges(b *networkingv1.IPBlock) ([]Range, bool, error) {
	p, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, false, fmt.Errorf("ipBlock.cidr %q: %w", b.CIDR, err)
	}
	if !p.Addr().Is4() {
		return nil, false, nil
	}
	p = p.Masked()
	ranges := []Range{{First: p.Addr(), Last: nftconn.LastAddr(p)}}
	for _, e := range b.Except {
		ep, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, false, fmt.Errorf("ipBlock.except %q: %w", e, err)
		}
		if !ep.Addr().Is4() {
			continue
		}
		ep = ep.Masked()
		ranges = subtract(ranges, Range{First: ep.Addr(), Last: nftconn.LastAddr(ep)})
	}
	return ranges, true, nil
}

// subtract removes x from every range of rs.
func subtract(rs []Range, x Range) []Range {
	var out []Range
	for _, r := range rs {
		if x.Last.Less(r.First) || r.Last.Less(x.First) {
			out = append(out, r)
			continue
		}
		if r.First.Less(x.First) {
			out = append(out, Range{First: r.First, Last: x.First.Prev()})
		}
		if x.Last.Less(r.Last) {
			out = append(out, Range{First: x.Last.Next(), Last: r.Last})
		}
	}
	return out
}

// mergeRanges sorts rs and joins those that overlap or touch, as an interval set needs.
func mergeRanges(rs []Range) []Range {
	rs = slices.Clone(rs)
	sort.Slice(rs, func(i, j int) bool { return rs[i].First.Less(rs[j].First) })
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			next := last.Last.Next()
			if !next.IsValid() || !next.Less(r.First) { // overlaps or touches
				if last.Last.Less(r.Last) {
					last.Last = r.Last
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// chainName names a chain "<kind>-<in|out>-<namespace>/<name>", or, when that would pass the
// kernel's limit, keeps a readable prefix and a hash of the rest.
func chainName(kind string, d Direction, ns, name string) string {
	return limitName(kind + "-" + string(d) + "-" + ns + "/" + name)
}

func setName(chain string, rule int, what string) string {
	return limitName(chain + "#" + strconv.Itoa(rule) + "-" + what)
}

const maxNameLen = 200 // the kernel allows 255

func limitName(s string) string {
	if len(s) <= maxNameLen {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:maxNameLen-17] + "~" + hex.EncodeToString(sum[:8])
}
