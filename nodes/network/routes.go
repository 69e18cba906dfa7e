package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/internal/kick"
)

// RouteProtocol marks the routes this package adds (the rtm_protocol of `ip route ... proto
// 0xf1`), so that SyncRoutes removes stale ones of its own and nothing else.
const RouteProtocol netlink.RouteProtocol = 0xf1

// routesResync re-applies the routes periodically, in case someone removed one.
const routesResync = 30 * time.Second

// Peer is another host: its pod CIDR is reached via its host address.
type Peer struct {
	Name    string
	PodCIDR string
	HostIP  net.IP
}

// route is one route of ours: Dst via Via, or unreachable when Via is not valid.
type route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r route) String() string {
	if !r.Via.IsValid() {
		return "unreachable " + r.Dst.String()
	}
	return r.Dst.String() + " via " + r.Via.String()
}

// desiredRoutes turns peers into routes: one per peer pod CIDR, plus the unreachable cluster
// route. A peer is refused (and reported) when its pod CIDR is not inside the cluster CIDR (a
// Node object must not be able to steer other traffic of this host), overlaps ours, is
// claimed by another peer too, or has no usable host address of its family.
func desiredRoutes(self, cluster netip.Prefix, peers []Peer) ([]route, []error) {
	out := []route{{Dst: cluster}}
	var errs []error
	sorted := append([]Peer(nil), peers...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	owner := map[netip.Prefix]string{}
	for _, p := range sorted {
		dst, err := netip.ParsePrefix(p.PodCIDR)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %s: pod CIDR %q: %w", p.Name, p.PodCIDR, err))
			continue
		}
		dst = dst.Masked()
		via, ok := netip.AddrFromSlice(p.HostIP)
		via = via.Unmap()
		switch {
		case !ok || !via.IsValid() || via.IsUnspecified():
			errs = append(errs, fmt.Errorf("peer %s: no host address", p.Name))
			continue
		case via.Is4() != dst.Addr().Is4():
			errs = append(errs, fmt.Errorf("peer %s: host address %s and pod CIDR %s are of different IP families", p.Name, via, dst))
			continue
		case dst.Bits() < cluster.Bits() || !cluster.Contains(dst.Addr()):
			errs = append(errs, fmt.Errorf("peer %s: pod CIDR %s is outside the cluster CIDR %s", p.Name, dst, cluster))
			continue
		case dst.Overlaps(self):
			errs = append(errs, fmt.Errorf("peer %s: pod CIDR %s overlaps this host's %s", p.Name, dst, self))
			continue
		case cluster.Contains(via):
			errs = append(errs, fmt.Errorf("peer %s: host address %s is inside the cluster CIDR %s", p.Name, via, cluster))
			continue
		}
		if other, dup := owner[dst]; dup {
			errs = append(errs, fmt.Errorf("peers %s and %s both claim pod CIDR %s: routing to %s", other, p.Name, dst, other))
			continue
		}
		overlap := ""
		for d, name := range owner {
			if d.Overlaps(dst) {
				overlap = name
			}
		}
		if overlap != "" {
			errs = append(errs, fmt.Errorf("peer %s: pod CIDR %s overlaps that of %s", p.Name, dst, overlap))
			continue
		}
		owner[dst] = p.Name
		out = append(out, route{Dst: dst, Via: via})
	}
	return out, errs
}

// planRoutes compares our current routes with the desired ones: replace adds or changes
// routes, remove deletes those whose destination is no longer wanted.
func planRoutes(current, desired []route) (replace, remove []route) {
	have := map[route]bool{}
	for _, r := range current {
		have[r] = true
	}
	want := map[netip.Prefix]bool{}
	for _, r := range desired {
		want[r.Dst] = true
		if !have[r] {
			replace = append(replace, r)
		}
	}
	for _, r := range current {
		if !want[r.Dst] {
			remove = append(remove, r)
		}
	}
	return replace, remove
}

func clusterRoute(cluster netip.Prefix) *netlink.Route {
	return toNetlink(route{Dst: cluster})
}

func toNetlink(r route) *netlink.Route {
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Protocol: RouteProtocol,
		Table:    unix.RT_TABLE_MAIN,
	}
	if r.Via.IsValid() {
		nr.Gw = r.Via.AsSlice()
	} else {
		nr.Type = unix.RTN_UNREACHABLE
	}
	return nr
}

func fromNetlink(nr netlink.Route) (route, bool) {
	if nr.Dst == nil {
		return route{}, false
	}
	addr, ok := netip.AddrFromSlice(nr.Dst.IP)
	if !ok {
		return route{}, false
	}
	ones, _ := nr.Dst.Mask.Size()
	r := route{Dst: netip.PrefixFrom(addr.Unmap(), ones)}
	if nr.Gw != nil {
		gw, _ := netip.AddrFromSlice(nr.Gw)
		r.Via = gw.Unmap()
	}
	return r, true
}

// ourRoutes lists the routes in the host namespace that carry RouteProtocol.
func (n *Network) ourRoutes() ([]route, error) {
	family := netlink.FAMILY_V4
	if n.p.cluster.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	var list []netlink.Route
	var err error
	for i := 0; i < 3; i++ {
		list, err = n.nl.RouteListFiltered(family, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []route
	for _, nr := range list {
		if r, ok := fromNetlink(nr); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// SyncRoutes makes the host's routes to other hosts' pod CIDRs exactly peers: it adds or
// changes `<peer pod CIDR> via <peer host IP>` and removes routes it added earlier for hosts
// no longer listed. Invalid peers are skipped; all problems are returned together, after
// everything that could be done was done.
func (n *Network) SyncRoutes(peers []Peer) error {
	n.routesMu.Lock()
	defer n.routesMu.Unlock()
	desired, errs := desiredRoutes(n.p.podCIDR, n.p.cluster, peers)
	current, err := n.ourRoutes()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	replace, remove := planRoutes(current, desired)
	for _, r := range replace {
		if err := n.nl.RouteReplace(toNetlink(r)); err != nil {
			errs = append(errs, fmt.Errorf("add route %s: %w", r, err))
			continue
		}
		n.log.WithField("route", r.String()).Info("route to peer pod CIDR set")
	}
	for _, r := range remove {
		if err := n.nl.RouteDel(toNetlink(r)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
			continue
		}
		n.log.WithField("route", r.String()).Info("stale route to peer pod CIDR removed")
	}
	return errors.Join(errs...)
}

// PeersFromNodes returns the peers for every Node but self: each pod CIDR of the node with
// the node's first InternalIP of the same family. Nodes without either are left out (they
// get a route once they have both).
func PeersFromNodes(nodes []*corev1.Node, self string) []Peer {
	var out []Peer
	for _, node := range nodes {
		if node.Name == self {
			continue
		}
		out = append(out, peersOf(node)...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func peersOf(node *corev1.Node) []Peer {
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	var out []Peer
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		for _, a := range node.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || ip.Unmap().Is4() != p.Addr().Is4() {
				continue
			}
			out = append(out, Peer{Name: node.Name, PodCIDR: c, HostIP: net.IP(ip.Unmap().AsSlice())})
			break
		}
	}
	return out
}

func samePeers(a, b []Peer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].PodCIDR != b[i].PodCIDR || !a[i].HostIP.Equal(b[i].HostIP) {
			return false
		}
	}
	return true
}

// RoutesConfig holds the optional settings of RunRoutes.
type RoutesConfig struct {
	// Informers is the host's shared factory; nil makes one of its own. RunRoutes registers
	// the Node informer on it and starts it with its ctx (an informer stops with the context
	// of whoever started it first, so give every user of one factory the host's context), and
	// never shuts a shared factory down.
	Informers informers.SharedInformerFactory
}

// RunRoutes watches Nodes with the client and calls SyncRoutes with every other Node's
// spec.podCIDR and InternalIP, on every relevant change and every 30 s, until ctx ends. Routes
// stay when it returns: pods keep reaching other hosts while the agent restarts or the API is
// away. cfg is optional, at most one.
func RunRoutes(ctx context.Context, client kubernetes.Interface, self string, n *Network, cfg ...RoutesConfig) error {
	if len(cfg) > 1 {
		return errors.New("pod routes: RunRoutes takes at most one RoutesConfig")
	}
	var rc RoutesConfig
	if len(cfg) == 1 {
		rc = cfg[0]
	}
	return runRoutes(ctx, client, self, rc, n.SyncRoutes, n.log.WithField("self", self))
}

// runRoutes is RunRoutes with the route programming passed in.
func runRoutes(ctx context.Context, client kubernetes.Interface, self string, cfg RoutesConfig, sync func([]Peer) error, log *logrus.Entry) error {
	factory := cfg.Informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(client, 0)
		defer factory.Shutdown()
	}
	informer := factory.Core().V1().Nodes()
	lister := informer.Lister()
	k := kick.New()
	h := k.Handler()
	h.UpdateFunc = func(old, cur any) {
		o, ok1 := old.(*corev1.Node)
		c, ok2 := cur.(*corev1.Node)
		// Heartbeats update every node every few seconds: only address and CIDR changes matter.
		if !ok1 || !ok2 || !samePeers(peersOf(o), peersOf(c)) {
			k.Poke()
		}
	}
	remove, err := kick.AddHandlers(kick.On{Informer: informer.Informer(), Handler: h})
	if err != nil {
		return fmt.Errorf("pod routes: node handler: %w", err)
	}
	// A shared informer outlives this function.
	defer remove()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return nil
	}
	tick := time.NewTicker(routesResync)
	defer tick.Stop()
	lastErr := ""
	for {
		nodes, err := lister.List(labels.Everything())
		if err == nil {
			err = sync(PeersFromNodes(nodes, self))
		}
		// Log a persistent problem once, not every resync.
		if msg := fmt.Sprint(err); err != nil && msg != lastErr {
			log.WithError(err).Warn("routes to peer pod CIDRs incomplete")
			lastErr = msg
		} else if err == nil && lastErr != "" {
			log.Info("routes to peer pod CIDRs complete again")
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.C():
		case <-tick.C:
		}
	}
}
