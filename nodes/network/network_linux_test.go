package network_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// requireNetAdmin fails in CI and skips elsewhere when the test cannot make namespaces or run
// the CNI plugins.
func requireNetAdmin(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (network namespaces, bind mounts)")
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			missing = append(missing, "/usr/lib/cni/"+p+" (apt-get install containernetworking-plugins)")
		}
	}
	if len(missing) == 0 {
		return
	}
	if framework.InCI() {
		t.Fatalf("CI=true but missing: %v", missing)
	}
	t.Skipf("missing: %v", missing)
}

// inNS runs fn on a thread in ns; the thread is thrown away afterwards.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// newHost makes a named network namespace flt-n<id>-<suffix> (a simulated host) with lo up.
func newHost(t *testing.T, id, suffix string) netns.NsHandle {
	t.Helper()
	name := fmt.Sprintf("flt-n%s-%s", id, suffix)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is left in the new namespace
		h, err := netns.NewNamed(name)
		if err == nil {
			h.Close()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	nl := nlAt(t, ns)
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("lo up in %s: %v", name, err)
	}
	return ns
}

func nlAt(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

func addAddrUp(t *testing.T, nl *netlink.Handle, name, cidr string) {
	t.Helper()
	link, err := nl.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.AddrAdd(link, addr); err != nil {
		t.Fatalf("address %s on %s: %v", cidr, name, err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		t.Fatalf("up %s: %v", name, err)
	}
}

func randID(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// startNetwork builds a Network in host ns (New takes the calling thread's namespace) and
// tears every sandbox down when the test ends, unmounting leftovers of a failed test.
func startNetwork(t *testing.T, ns netns.NsHandle, cfg network.Config) *network.Network {
	t.Helper()
	var n *network.Network
	if err := inNS(ns, func() error {
		var err error
		n, err = network.New(cfg)
		return err
	}); err != nil {
		t.Fatalf("network.New: %v", err)
	}
	t.Cleanup(func() {
		uids, err := n.Pods()
		if err != nil {
			t.Errorf("pods: %v", err)
		}
		for _, uid := range uids {
			if err := n.TeardownPod(context.Background(), uid); err != nil {
				t.Errorf("teardown %s: %v", uid, err)
			}
		}
		n.Close()
		leftovers, _ := filepath.Glob(filepath.Join(cfg.StateDir, "netns", "*"))
		for _, p := range leftovers {
			_ = unix.Unmount(p, unix.MNT_DETACH)
			_ = os.Remove(p)
		}
	})
	return n
}

// startNetworkNoCleanup builds a Network in host ns for a cleanup step; nil on error.
func startNetworkNoCleanup(t *testing.T, ns netns.NsHandle, stateDir string) *network.Network {
	var n *network.Network
	err := inNS(ns, func() error {
		var err error
		n, err = network.New(network.Config{PodCIDR: "10.244.252.0/24", StateDir: stateDir})
		return err
	})
	if err != nil {
		t.Errorf("cleanup network: %v", err)
		return nil
	}
	return n
}

func openNS(t *testing.T, path string) netns.NsHandle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open pod netns %s: %v", path, err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// serveTCP listens in the pod namespace on ip and answers every connection with msg.
func serveTCP(t *testing.T, ns netns.NsHandle, ip net.IP, msg string) string {
	t.Helper()
	var ln net.Listener
	if err := inNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	}); err != nil {
		t.Fatalf("listen in pod: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, msg)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// dialFrom connects from inside the pod namespace and returns what the server sent.
func dialFrom(ns netns.NsHandle, addr string) (string, error) {
	var got string
	err := inNS(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		got = string(b)
		return err
	})
	return got, err
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// ping sends one ICMP echo from inside the pod namespace and waits for the reply.
func ping(ns netns.NsHandle, dst net.IP) error {
	return inNS(ns, func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		id := uint16(os.Getpid())
		msg := make([]byte, 16)
		msg[0] = 8 // echo request
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], 1)
		copy(msg[8:], "flotilla")
		binary.BigEndian.PutUint16(msg[2:], checksum(msg))
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst}); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("no echo reply from %s: %w", dst, err)
			}
			if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && from.(*net.IPAddr).IP.Equal(dst) {
				return nil
			}
		}
	})
}

// TestPodsOnTwoHosts is the pod network end to end on real namespaces: two hosts joined by a
// veth pair, a Network on each, one pod each; pod A reaches pod B by ICMP and TCP once the
// routes are synced (and not before); setup is idempotent; a restarted agent finds its
// sandboxes; teardown releases the address and the namespace.
func TestPodsOnTwoHosts(t *testing.T) {
	requireNetAdmin(t)
	id := randID(t)
	hostA, hostB := newHost(t, id, "a"), newHost(t, id, "b")
	nlA, nlB := nlAt(t, hostA), nlAt(t, hostB)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "flt-h"}, PeerName: "flt-h-peer", PeerNamespace: netlink.NsFd(int(hostB))}
	if err := nlA.LinkAdd(veth); err != nil {
		t.Fatalf("veth: %v", err)
	}
	addAddrUp(t, nlA, "flt-h", "10.213.250.1/24")
	addAddrUp(t, nlB, "flt-h-peer", "10.213.250.2/24")

	cfgA := network.Config{PodCIDR: "10.244.250.0/24", StateDir: t.TempDir()}
	cfgB := network.Config{PodCIDR: "10.244.251.0/24", StateDir: t.TempDir()}
	netA, netB := startNetwork(t, hostA, cfgA), startNetwork(t, hostB, cfgB)
	ctx := context.Background()

	start := time.Now()
	podA, err := netA.SetupPod(ctx, "uid-a", "default", "pod-a")
	if err != nil {
		t.Fatalf("setup pod a: %v", err)
	}
	t.Logf("SetupPod took %v (cold: bridge created)", time.Since(start))
	podB, err := netB.SetupPod(ctx, "uid-b", "default", "pod-b")
	if err != nil {
		t.Fatalf("setup pod b: %v", err)
	}
	if len(podA.IPs) != 1 || !podA.IPs[0].Equal(net.ParseIP("10.244.250.2")) {
		t.Fatalf("pod a IPs %v, want [10.244.250.2] (first after the gateway)", podA.IPs)
	}
	if len(podB.IPs) != 1 || !podB.IPs[0].Equal(net.ParseIP("10.244.251.2")) {
		t.Fatalf("pod b IPs %v, want [10.244.251.2]", podB.IPs)
	}
	for _, dir := range []string{cfgA.StateDir, cfgB.StateDir} {
		if _, err := os.Stat(filepath.Join(dir, "10-flotilla.conflist")); err != nil {
			t.Errorf("conflist not written: %v", err)
		}
	}
	for _, ns := range []netns.NsHandle{hostA, hostB} {
		var fwd []byte
		_ = inNS(ns, func() error { fwd, err = os.ReadFile("/proc/sys/net/ipv4/ip_forward"); return err })
		if string(fwd) != "1\n" {
			t.Errorf("ip_forward in host = %q, want 1", fwd)
		}
	}
	nsA, nsB := openNS(t, podA.NetNSPath), openNS(t, podB.NetNSPath)
	addrB := serveTCP(t, nsB, podB.IPs[0], "hello from b")

	// Same host: pod A reaches its gateway (the bridge).
	if err := ping(nsA, net.ParseIP("10.244.250.1")); err != nil {
		t.Fatalf("pod a -> its gateway: %v", err)
	}
	// No routes yet: the unreachable cluster route refuses at once.
	if _, err := dialFrom(nsA, addrB); err == nil {
		t.Fatalf("pod a reached pod b before any route between the hosts existed")
	}

	if err := netA.SyncRoutes([]network.Peer{{Name: "b", PodCIDR: cfgB.PodCIDR, HostIP: net.ParseIP("10.213.250.2")}}); err != nil {
		t.Fatalf("sync routes a: %v", err)
	}
	if err := netB.SyncRoutes([]network.Peer{{Name: "a", PodCIDR: cfgA.PodCIDR, HostIP: net.ParseIP("10.213.250.1")}}); err != nil {
		t.Fatalf("sync routes b: %v", err)
	}
	start = time.Now()
	if err := ping(nsA, podB.IPs[0]); err != nil {
		t.Fatalf("pod a -> pod b ping: %v", err)
	}
	t.Logf("first cross-host ping answered in %v", time.Since(start))
	if got, err := dialFrom(nsA, addrB); err != nil || got != "hello from b" {
		t.Fatalf("pod a -> pod b TCP: %q, %v", got, err)
	}
	addrA := serveTCP(t, nsA, podA.IPs[0], "hello from a")
	if got, err := dialFrom(nsB, addrA); err != nil || got != "hello from a" {
		t.Fatalf("pod b -> pod a TCP: %q, %v", got, err)
	}

	// Idempotent setup: same sandbox, same IP.
	again, err := netA.SetupPod(ctx, "uid-a", "default", "pod-a")
	if err != nil || !again.IPs[0].Equal(podA.IPs[0]) || again.NetNSPath != podA.NetNSPath {
		t.Fatalf("second SetupPod: %+v, %v; want %+v", again, err, podA)
	}

	// Agent restart: a new Network on the same state dir finds the sandbox, and the pod still
	// reaches the other host (sandbox and routes outlive the agent).
	netA2 := startNetwork(t, hostA, cfgA)
	uids, err := netA2.Pods()
	if err != nil || len(uids) != 1 || uids[0] != "uid-a" {
		t.Fatalf("Pods after restart: %v, %v", uids, err)
	}
	found, ok := netA2.PodNetwork(ctx, "uid-a")
	if !ok || !found.IPs[0].Equal(podA.IPs[0]) || found.NetNSPath != podA.NetNSPath {
		t.Fatalf("PodNetwork after restart: %+v %v, want %+v", found, ok, podA)
	}
	if again, err := netA2.SetupPod(ctx, "uid-a", "default", "pod-a"); err != nil || !again.IPs[0].Equal(podA.IPs[0]) {
		t.Fatalf("SetupPod after restart: %+v, %v", again, err)
	}
	if got, err := dialFrom(nsA, addrB); err != nil || got != "hello from b" {
		t.Fatalf("pod a -> pod b after agent restart: %q, %v", got, err)
	}
	if _, ok := netA2.PodNetwork(ctx, "uid-unknown"); ok {
		t.Fatalf("PodNetwork of an unknown pod")
	}

	// Teardown releases the address and the namespace, and may be repeated.
	ipamFile := filepath.Join(cfgA.StateDir, "ipam", network.NetworkName, podA.IPs[0].String())
	if _, err := os.Stat(ipamFile); err != nil {
		t.Fatalf("host-local lease %s missing before teardown: %v", ipamFile, err)
	}
	if err := netA2.TeardownPod(ctx, "uid-a"); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if err := netA2.TeardownPod(ctx, "uid-a"); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
	if _, err := os.Stat(ipamFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("address lease still held after teardown: %v", err)
	}
	if _, err := os.Stat(podA.NetNSPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s still there after teardown: %v", podA.NetNSPath, err)
	}
	if _, ok := netA.PodNetwork(ctx, "uid-a"); ok {
		t.Errorf("PodNetwork after teardown")
	}
	if uids, _ := netA2.Pods(); len(uids) != 0 {
		t.Errorf("Pods after teardown: %v", uids)
	}

	// SyncRoutes removes the routes it added for vanished peers, and only those.
	other := &netlink.Route{Dst: mustCIDR(t, "10.213.99.0/24"), Gw: net.ParseIP("10.213.250.1")}
	if err := nlB.RouteAdd(other); err != nil {
		t.Fatalf("foreign route: %v", err)
	}
	if err := netB.SyncRoutes(nil); err != nil {
		t.Fatalf("sync routes b to nothing: %v", err)
	}
	routes, err := nlB.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var sawForeign, sawUnreachable bool
	for _, r := range routes {
		switch {
		case r.Dst != nil && r.Dst.String() == cfgA.PodCIDR:
			t.Errorf("stale route to %s not removed: %v", cfgA.PodCIDR, r)
		case r.Dst != nil && r.Dst.String() == "10.213.99.0/24":
			sawForeign = true
		case r.Dst != nil && r.Dst.String() == network.DefaultClusterCIDR && r.Type == unix.RTN_UNREACHABLE:
			sawUnreachable = true
		}
	}
	if !sawForeign || !sawUnreachable {
		t.Errorf("route not of ours removed (%v) or unreachable cluster route missing (%v): %v", !sawForeign, sawUnreachable, routes)
	}
}

func mustCIDR(t *testing.T, s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pinNetNS makes a bare network namespace at path, as an agent killed between creating a
// sandbox and attaching it leaves behind.
func pinNetNS(t *testing.T, path string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := os.WriteFile(path, nil, 0o444); err != nil {
			errc <- err
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		t.Fatalf("pin netns at %s: %v", path, err)
	}
}

// leases lists the addresses host-local holds.
func leases(t *testing.T, stateDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(stateDir, "ipam", network.NetworkName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestSandboxRecoveryAndConcurrency: 20 pods set up at once get distinct addresses; a sandbox
// whose namespace vanished (host reboot; it keeps its address) and one whose attachment never
// finished (agent killed) are both repaired by SetupPod without leaking an address; teardown of everything leaves no
// lease.
func TestSandboxRecoveryAndConcurrency(t *testing.T) {
	requireNetAdmin(t)
	host := newHost(t, randID(t), "a")
	cfg := network.Config{PodCIDR: "10.244.250.0/24", StateDir: t.TempDir(), MTU: 1400}
	n := startNetwork(t, host, cfg)
	ctx := context.Background()

	const pods = 20
	type res struct {
		pn  network.PodNetwork
		err error
	}
	results := make(chan res, pods)
	start := time.Now()
	for i := 0; i < pods; i++ {
		go func() {
			pn, err := n.SetupPod(ctx, fmt.Sprintf("uid-%02d", i), "default", fmt.Sprintf("p%d", i))
			results <- res{pn, err}
		}()
	}
	seen := map[string]bool{}
	for i := 0; i < pods; i++ {
		r := <-results
		if r.err != nil {
			t.Fatalf("concurrent setup: %v", r.err)
		}
		ip := r.pn.IPs[0].String()
		if seen[ip] {
			t.Fatalf("address %s handed out twice", ip)
		}
		seen[ip] = true
	}
	t.Logf("%d concurrent SetupPod calls took %v", pods, time.Since(start))
	pnMTU, _ := n.PodNetwork(ctx, "uid-00")
	var mtu int
	_ = inNS(openNS(t, pnMTU.NetNSPath), func() error {
		l, err := netlink.LinkByName("eth0")
		if err == nil {
			mtu = l.Attrs().MTU
		}
		return err
	})
	if mtu != 1400 {
		t.Errorf("pod eth0 MTU %d, want 1400", mtu)
	}

	// Host reboot: the namespace of uid-00 is gone, its mount point file and lease remain.
	old, _ := n.PodNetwork(ctx, "uid-00")
	if err := unix.Unmount(old.NetNSPath, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.PodNetwork(ctx, "uid-00"); ok {
		t.Fatalf("PodNetwork reports a sandbox whose namespace is gone")
	}
	if uids, _ := n.Pods(); len(uids) != pods {
		t.Fatalf("Pods must list the broken sandbox for GC: %v", uids)
	}
	fresh, err := n.SetupPod(ctx, "uid-00", "default", "p0")
	if err != nil {
		t.Fatalf("setup over a vanished namespace: %v", err)
	}
	if got := len(leases(t, cfg.StateDir)); got != pods {
		t.Errorf("%d leases after repairing one sandbox of %d: old address %s leaked (new %s)", got, pods, old.IPs[0], fresh.IPs[0])
	}
	if !fresh.IPs[0].Equal(old.IPs[0]) {
		t.Errorf("repaired sandbox has %s, want its old address %s back", fresh.IPs[0], old.IPs[0])
	}

	// Agent killed after making the namespace, before the CNI ADD finished.
	bare := filepath.Join(cfg.StateDir, "netns", "uid-bare")
	pinNetNS(t, bare)
	if _, ok := n.PodNetwork(ctx, "uid-bare"); ok {
		t.Fatalf("PodNetwork reports an unattached sandbox")
	}
	pn, err := n.SetupPod(ctx, "uid-bare", "default", "bare")
	if err != nil || pn.NetNSPath != bare {
		t.Fatalf("setup over an unattached sandbox: %+v, %v", pn, err)
	}

	uids, err := n.Pods()
	if err != nil || len(uids) != pods+1 {
		t.Fatalf("Pods: %v, %v", uids, err)
	}
	for _, uid := range uids {
		if err := n.TeardownPod(ctx, uid); err != nil {
			t.Fatalf("teardown %s: %v", uid, err)
		}
	}
	if l := leases(t, cfg.StateDir); len(l) != 0 {
		t.Errorf("leases left after tearing everything down: %v", l)
	}
	if err := n.TeardownPod(ctx, "../etc"); err == nil {
		t.Errorf("TeardownPod accepted a UID with a path in it")
	}
}

// loseNamespaces does to the pod sandboxes at paths what a host restart (or `flotilla reset`)
// does: their namespaces go, and the veths with them, while the bind-mount files, the CNI cache
// and the leases stay.
func loseNamespaces(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Fatalf("unmount %s: %v", p, err)
		}
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("netns file %s must stay: %v", p, err)
		}
	}
}

func setupPods(t *testing.T, n *network.Network, uids ...string) map[string]network.PodNetwork {
	t.Helper()
	out := map[string]network.PodNetwork{}
	for _, uid := range uids {
		pn, err := n.SetupPod(context.Background(), uid, "default", "p-"+uid)
		if err != nil {
			t.Fatalf("setup %s: %v", uid, err)
		}
		if len(pn.IPs) != 1 {
			t.Fatalf("setup %s: IPs %v, want one", uid, pn.IPs)
		}
		out[uid] = pn
	}
	return out
}

// TestPodKeepsIPAcrossReboot: after a host restart (namespaces and bridge gone, a new agent on
// the same state dir) every pod gets its sandbox back with the address it had, whatever order
// the pods come back in and though a new pod was set up first, and the pods reach each other.
func TestPodKeepsIPAcrossReboot(t *testing.T) {
	requireNetAdmin(t)
	host := newHost(t, randID(t), "a")
	cfg := network.Config{PodCIDR: "10.244.248.0/24", StateDir: t.TempDir()}
	n := startNetwork(t, host, cfg)
	ctx := context.Background()
	before := setupPods(t, n, "uid-a", "uid-b", "uid-c")

	loseNamespaces(t, before["uid-a"].NetNSPath, before["uid-b"].NetNSPath, before["uid-c"].NetNSPath)
	nl := nlAt(t, host)
	br, err := nl.LinkByName(network.DefaultBridge)
	if err == nil {
		err = nl.LinkDel(br)
	}
	if err != nil {
		t.Fatalf("delete the bridge: %v", err)
	}
	n = startNetwork(t, host, cfg) // the agent after the restart

	// A new pod first: the old pods' leases are still held, so it gets none of their addresses.
	newer := setupPods(t, n, "uid-d")["uid-d"]
	for uid, pn := range before {
		if newer.IPs[0].Equal(pn.IPs[0]) {
			t.Fatalf("new pod got %s, the address of %s before the reboot", newer.IPs[0], uid)
		}
	}
	after := setupPods(t, n, "uid-c", "uid-a", "uid-b")
	for uid, pn := range before {
		if !after[uid].IPs[0].Equal(pn.IPs[0]) || after[uid].NetNSPath != pn.NetNSPath {
			t.Errorf("%s after the reboot: %+v, want %+v", uid, after[uid], pn)
		}
	}
	if l := leases(t, cfg.StateDir); len(l) != 4 {
		t.Errorf("leases %v, want 4 (a, b, c, d)", l)
	}
	nsA := openNS(t, after["uid-a"].NetNSPath)
	if err := ping(nsA, net.ParseIP("10.244.248.1")); err != nil {
		t.Errorf("pod a -> gateway after the reboot: %v", err)
	}
	for _, uid := range []string{"uid-b", "uid-c", "uid-d"} {
		dst := newer
		if uid != "uid-d" {
			dst = after[uid]
		}
		if err := ping(nsA, dst.IPs[0]); err != nil {
			t.Errorf("pod a -> %s (%s) after the reboot: %v", uid, dst.IPs[0], err)
		}
	}
	if again, err := n.SetupPod(ctx, "uid-a", "default", "p-uid-a"); err != nil || !again.IPs[0].Equal(before["uid-a"].IPs[0]) {
		t.Errorf("SetupPod again after the reboot: %+v, %v", again, err)
	}
}

// TestPodGetsNewIPWhenOldTaken: a pod whose namespace is gone and whose address went to another
// pod meanwhile (here host-local lost its lease and, the range being full, handed it to the
// next pod) is set up with another address, without an error; both pods work; no lease leaks.
// A pod CIDR that changed over the restart likewise gives the pod a new address in the new one.
func TestPodGetsNewIPWhenOldTaken(t *testing.T) {
	requireNetAdmin(t)
	host := newHost(t, randID(t), "a")
	// .2 to .6: five pods fill it.
	cfg := network.Config{PodCIDR: "10.244.248.0/29", StateDir: t.TempDir()}
	n := startNetwork(t, host, cfg)
	ctx := context.Background()
	pods := setupPods(t, n, "uid-a", "uid-b", "uid-c", "uid-d", "uid-e")
	old := pods["uid-b"].IPs[0]

	loseNamespaces(t, pods["uid-b"].NetNSPath)
	if err := os.Remove(filepath.Join(cfg.StateDir, "ipam", network.NetworkName, old.String())); err != nil {
		t.Fatalf("drop the lease of %s: %v", old, err)
	}
	if err := n.TeardownPod(ctx, "uid-e"); err != nil {
		t.Fatalf("teardown e: %v", err)
	}
	thief := setupPods(t, n, "uid-thief")["uid-thief"]
	if !thief.IPs[0].Equal(old) {
		t.Fatalf("test setup: the next pod got %s, want b's old %s", thief.IPs[0], old)
	}

	b, err := n.SetupPod(ctx, "uid-b", "default", "p-uid-b")
	if err != nil {
		t.Fatalf("setup b whose address is taken: %v", err)
	}
	if len(b.IPs) != 1 || b.IPs[0].Equal(old) || !mustCIDR(t, cfg.PodCIDR).Contains(b.IPs[0]) {
		t.Fatalf("b after its address was taken: %v, want another one in %s", b.IPs, cfg.PodCIDR)
	}
	if found, ok := n.PodNetwork(ctx, "uid-b"); !ok || !found.IPs[0].Equal(b.IPs[0]) {
		t.Errorf("PodNetwork of b: %+v, %v", found, ok)
	}
	nsB, nsThief := openNS(t, b.NetNSPath), openNS(t, thief.NetNSPath)
	if err := ping(nsB, net.ParseIP("10.244.248.1")); err != nil {
		t.Errorf("b -> gateway: %v", err)
	}
	if err := ping(nsB, thief.IPs[0]); err != nil {
		t.Errorf("b -> the pod with its old address: %v", err)
	}
	if err := ping(nsThief, pods["uid-a"].IPs[0]); err != nil {
		t.Errorf("the pod with b's old address -> a: %v", err)
	}
	if l := leases(t, cfg.StateDir); len(l) != 5 {
		t.Errorf("leases %v, want 5 (a, b, c, d, thief)", l)
	}

	// The pod CIDR changed over a restart: the old address is outside it.
	loseNamespaces(t, pods["uid-c"].NetNSPath)
	nl := nlAt(t, host)
	br, err := nl.LinkByName(network.DefaultBridge)
	if err == nil {
		err = nl.LinkDel(br)
	}
	if err != nil {
		t.Fatalf("delete the bridge: %v", err)
	}
	cfg.PodCIDR = "10.244.247.0/24"
	n = startNetwork(t, host, cfg)
	c, err := n.SetupPod(ctx, "uid-c", "default", "p-uid-c")
	if err != nil || len(c.IPs) != 1 || !mustCIDR(t, cfg.PodCIDR).Contains(c.IPs[0]) {
		t.Fatalf("c after the pod CIDR changed: %+v, %v; want an address in %s", c, err, cfg.PodCIDR)
	}
	if err := ping(openNS(t, c.NetNSPath), net.ParseIP("10.244.247.1")); err != nil {
		t.Errorf("c -> new gateway: %v", err)
	}
}
