package host

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/proxy/dns"
	"github.com/flotilla-dev/flotilla/proxy/ingress"
	"github.com/flotilla-dev/flotilla/proxy/netpol"
	"github.com/flotilla-dev/flotilla/proxy/services"
)

// NftTables are the nftables tables (family ip) an agent creates: Services (nftables mode),
// the IPVS companion table, NetworkPolicies and host ports.
var NftTables = []string{"flotilla", "flotilla-ipvs", netpol.DefaultTable, network.DefaultHostPortsTable}

// Links are the interfaces an agent creates: the pod bridge, the IPVS dummy interface
// holding the Service addresses, the cluster DNS dummy interface.
var Links = []string{network.DefaultBridge, services.DefaultIPVSInterface, dns.InterfaceName}

// serviceCIDR is the default Service range: the agent routes it to lo, and a cluster DNS
// address it put on lo (a kernel without dummy interfaces) lies in it.
var serviceCIDR = mustCIDR("10.96.0.0/12")

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// ResetNetwork removes from the current network namespace what an agent programmed there:
// its IPVS virtual servers (only flotilla's: Service range, addresses of its dummy
// interface), the nftables tables NftTables, the routes it added (protocol
// network.RouteProtocol, and the Service range to lo), the pods' veths left on the bridge, the interfaces Links and a
// cluster DNS address on lo. Nothing else is touched; every step runs, and the errors are
// returned together. Running it again finds nothing to do.
func ResetNetwork() error {
	var errs []error
	// IPVS first: its cleanup finds our virtual servers by the addresses of its interface.
	if _, err := netlink.GenlFamilyGet("IPVS"); err == nil {
		if err := services.NewIPVS(services.IPVSOptions{}).Cleanup(); err != nil {
			errs = append(errs, fmt.Errorf("IPVS: %w", err))
		}
	}
	errs = append(errs, deleteNftTables(nftables.TableFamilyIPv4, func(n string) bool { return slices.Contains(NftTables, n) })...)
	// The Ingress proxies' drain tables (family inet), left by a crash in the middle of a drain.
	errs = append(errs, deleteNftTables(nftables.TableFamilyINet, func(n string) bool { return strings.HasPrefix(n, ingress.DrainTablePrefix) })...)
	errs = append(errs, deleteRoutes()...)
	errs = append(errs, deleteLinks()...)
	return errors.Join(errs...)
}

// deleteNftTables deletes the tables of family whose name match accepts.
func deleteNftTables(family nftables.TableFamily, match func(name string) bool) []error {
	c, err := nftables.New()
	if err != nil {
		return []error{fmt.Errorf("nftables: %w", err)}
	}
	tables, err := c.ListTablesOfFamily(family)
	if err != nil {
		return []error{fmt.Errorf("list nftables tables: %w", err)}
	}
	var errs []error
	for _, t := range tables {
		if !match(t.Name) {
			continue
		}
		c.DelTable(t)
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete nftables table %s: %w", t.Name, err))
		}
	}
	return errs
}

// deleteRoutes removes the routes of our protocol (pod CIDRs of other hosts, the unreachable
// cluster route), in every table.
func deleteRoutes() []error {
	var errs []error
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(family, &netlink.Route{Protocol: network.RouteProtocol, Table: unix.RT_TABLE_UNSPEC},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("list routes: %w", err))
			continue
		}
		for _, r := range routes {
			if r.Protocol != network.RouteProtocol {
				continue
			}
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
			}
		}
	}
	// The Service range routed to lo (ensureServiceRoute), by its static protocol and scope.
	if lo, err := netlink.LinkByName("lo"); err == nil {
		routes, _ := netlink.RouteList(lo, netlink.FAMILY_V4)
		for _, r := range routes {
			if r.Dst == nil || r.Protocol != unix.RTPROT_STATIC || r.Scope != netlink.SCOPE_LINK {
				continue
			}
			if ones, _ := r.Dst.Mask.Size(); serviceCIDR.Contains(r.Dst.IP) && ones >= 12 {
				if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
				}
			}
		}
	}
	return errs
}

// deleteLinks removes the veths still attached to the bridge (a pod namespace not yet
// released), then the interfaces Links, and the cluster DNS address an agent put on lo.
func deleteLinks() []error {
	var errs []error
	links, err := netlink.LinkList()
	if err != nil {
		return []error{fmt.Errorf("list interfaces: %w", err)}
	}
	if br, err := netlink.LinkByName(network.DefaultBridge); err == nil {
		for _, l := range links {
			if l.Attrs().MasterIndex == br.Attrs().Index && l.Type() == "veth" {
				if err := netlink.LinkDel(l); err != nil && !isGone(err) {
					errs = append(errs, fmt.Errorf("delete pod interface %s: %w", l.Attrs().Name, err))
				}
			}
		}
	}
	for _, name := range Links {
		l, err := netlink.LinkByName(name)
		if err != nil {
			continue // not there
		}
		if err := netlink.LinkDel(l); err != nil && !isGone(err) {
			errs = append(errs, fmt.Errorf("delete interface %s: %w", name, err))
		}
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_V4)
		for _, a := range addrs {
			if ones, _ := a.Mask.Size(); ones == 32 && serviceCIDR.Contains(a.IP) {
				if err := netlink.AddrDel(lo, &a); err != nil && !isGone(err) {
					errs = append(errs, fmt.Errorf("remove %s from lo: %w", a.IP, err))
				}
			}
		}
	}
	return errs
}

func isGone(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EADDRNOTAVAIL) ||
		strings.Contains(err.Error(), "not found")
}
