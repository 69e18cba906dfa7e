package network_test

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// hpTopo is a host namespace with two routed "pods" and an outside client:
//
//	pod-a 10.244.1.2 --hpa-- host --hpb-- pod-b 10.244.1.3
//	                          | 10.213.0.1/24, 10.213.0.3/24
//	                         hpc
//	                          | 10.213.0.2/24
//	                        client
type hpTopo struct {
	host, podA, podB, client string
}

const (
	hpPodA   = "10.244.1.2"
	hpPodB   = "10.244.1.3"
	hpHost   = "10.213.0.1"
	hpHost2  = "10.213.0.3"
	hpClient = "10.213.0.2"
)

func hpRequire(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
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

func hpSh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func hpSetup(t *testing.T) *hpTopo {
	t.Helper()
	hpRequire(t)
	id := randID(t)
	tp := &hpTopo{host: "flt-hp" + id, podA: "flt-hp" + id + "a", podB: "flt-hp" + id + "b", client: "flt-hp" + id + "c"}
	for _, ns := range []string{tp.host, tp.podA, tp.podB, tp.client} {
		hpSh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		hpSh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	h := tp.host
	hpSh(t, "ip", "netns", "exec", h, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, p := range []struct{ ns, dev, ip string }{{tp.podA, "hpa", hpPodA}, {tp.podB, "hpb", hpPodB}} {
		hpSh(t, "ip", "-n", h, "link", "add", p.dev, "type", "veth", "peer", "name", "eth0", "netns", p.ns)
		hpSh(t, "ip", "-n", h, "addr", "add", "10.244.1.1/32", "dev", p.dev)
		hpSh(t, "ip", "-n", h, "link", "set", p.dev, "up")
		hpSh(t, "ip", "-n", h, "route", "add", p.ip+"/32", "dev", p.dev)
		hpSh(t, "ip", "-n", p.ns, "addr", "add", p.ip+"/32", "dev", "eth0")
		hpSh(t, "ip", "-n", p.ns, "link", "set", "eth0", "up")
		hpSh(t, "ip", "-n", p.ns, "route", "add", "10.244.1.1/32", "dev", "eth0")
		hpSh(t, "ip", "-n", p.ns, "route", "add", "default", "via", "10.244.1.1", "dev", "eth0")
	}
	hpSh(t, "ip", "-n", h, "link", "add", "hpc", "type", "veth", "peer", "name", "eth0", "netns", tp.client)
	hpSh(t, "ip", "-n", h, "addr", "add", hpHost+"/24", "dev", "hpc")
	hpSh(t, "ip", "-n", h, "addr", "add", hpHost2+"/24", "dev", "hpc")
	hpSh(t, "ip", "-n", h, "link", "set", "hpc", "up")
	hpSh(t, "ip", "-n", tp.client, "addr", "add", hpClient+"/24", "dev", "eth0")
	hpSh(t, "ip", "-n", tp.client, "link", "set", "eth0", "up")
	hpSh(t, "ip", "-n", tp.client, "route", "add", "default", "via", hpHost)
	return tp
}

// hpIn runs fn on a thread in the named namespace; the thread is thrown away afterwards.
func hpIn(t *testing.T, name string, fn func() error) error {
	t.Helper()
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	defer ns.Close()
	return inNS(ns, fn)
}

// hpServe answers every TCP connection on addr in ns with "<name> <client address>" and every
// UDP datagram on the same address likewise.
func hpServe(t *testing.T, ns, addr, name string) {
	t.Helper()
	var l net.Listener
	var pc net.PacketConn
	if err := hpIn(t, ns, func() error {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close(); pc.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s %s\n", name, ip)
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			ip, _, _ := net.SplitHostPort(from.String())
			_, _ = pc.WriteTo([]byte(name+" "+ip), from)
		}
	}()
}

// hpAsk connects from ns to addr over network (tcp or udp) and returns the answer.
func hpAsk(t *testing.T, ns, network, addr string) (string, error) {
	t.Helper()
	var line string
	err := hpIn(t, ns, func() error {
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if network == "udp" {
			if _, err := c.Write([]byte("?")); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			line = string(buf[:n])
			return err
		}
		line, err = bufio.NewReader(c).ReadString('\n')
		line = strings.TrimSpace(line)
		return err
	})
	return line, err
}

func hpNft(t *testing.T, tp *hpTopo) string {
	out, _ := exec.Command("ip", "netns", "exec", tp.host, "nft", "list", "table", "ip", "flotilla-hostports").CombinedOutput()
	return string(out)
}

// TestHostPortsDataplane programs real nftables in a test namespace and connects through it:
// from another host, from the host itself and from pods; hostIP, UDP, hairpin; removal, an
// agent restart with a stale pod, drift repair and cleanup.
func TestHostPortsDataplane(t *testing.T) {
	tp := hpSetup(t)
	hpServe(t, tp.podA, hpPodA+":8080", "a")
	hpServe(t, tp.podB, hpPodB+":8080", "b")
	// The host's own services on the same port numbers: what answers when no DNAT applies.
	hpServe(t, tp.host, "127.0.0.1:18080", "host-loopback")
	hpServe(t, tp.host, hpHost2+":18081", "host")
	log := logrus.NewEntry(logrus.New())
	newHP := func() *network.HostPorts {
		hp, err := network.NewHostPorts(network.HostPortsConfig{NetNS: "/run/netns/" + tp.host, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hp.Close() })
		return hp
	}
	hp := newHP()
	t.Cleanup(func() {
		if err := hp.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	want := func(t *testing.T, ns, proto, addr, wantLine string) {
		t.Helper()
		got, err := hpAsk(t, ns, proto, addr)
		if err != nil || got != wantLine {
			t.Fatalf("%s %s from %s: got %q, %v; want %q\n%s", proto, addr, ns, got, err, wantLine, hpNft(t, tp))
		}
	}
	refused := func(t *testing.T, ns, addr string) {
		t.Helper()
		if got, err := hpAsk(t, ns, "tcp", addr); err == nil {
			t.Fatalf("tcp %s from %s answered %q, want no answer\n%s", addr, ns, got, hpNft(t, tp))
		}
	}
	podA := network.PodHostPorts{Pod: "test/a", IP: netip.MustParseAddr(hpPodA), Ports: []network.HostPort{
		{Port: 18080, ContainerPort: 8080},
		{Protocol: corev1.ProtocolUDP, Port: 18080, ContainerPort: 8080},
	}}
	podB := network.PodHostPorts{Pod: "test/b", IP: netip.MustParseAddr(hpPodB), Ports: []network.HostPort{
		{HostIP: hpHost2, Port: 18081, ContainerPort: 8080},
	}}

	// Before the first Sync nothing is programmed. The pods were listed before pod a's
	// sandbox was ready: Sync keeps what SetPod gave.
	gen := hp.Generation()
	if err := hp.SetPod("uid-a", podA); err != nil {
		t.Fatal(err)
	}
	if out := hpNft(t, tp); !strings.Contains(out, "No such file") {
		t.Fatalf("the table exists before the first Sync:\n%s", out)
	}
	if err := hp.Sync(nil, gen); err != nil {
		t.Fatal(err)
	}

	t.Run("another host reaches the pod and keeps its address", func(t *testing.T) {
		want(t, tp.client, "tcp", hpHost+":18080", "a "+hpClient)
		want(t, tp.client, "tcp", hpHost2+":18080", "a "+hpClient)
		want(t, tp.client, "udp", hpHost+":18080", "a "+hpClient)
	})
	t.Run("the host reaches the pod on its own address, not on 127.0.0.1", func(t *testing.T) {
		want(t, tp.host, "tcp", hpHost+":18080", "a "+hpHost)
		want(t, tp.host, "tcp", "127.0.0.1:18080", "host-loopback 127.0.0.1")
	})
	t.Run("another pod reaches it", func(t *testing.T) {
		want(t, tp.podB, "tcp", hpHost+":18080", "a "+hpPodB)
	})
	t.Run("hairpin: the pod reaches itself through its host port", func(t *testing.T) {
		want(t, tp.podA, "tcp", hpHost+":18080", "a 10.244.1.1")
	})
	t.Run("a port for one host address answers there only", func(t *testing.T) {
		if err := hp.SetPod("uid-b", podB); err != nil {
			t.Fatal(err)
		}
		want(t, tp.client, "tcp", hpHost2+":18081", "b "+hpClient)
		refused(t, tp.client, hpHost+":18081")
	})
	t.Run("a taken port is refused", func(t *testing.T) {
		dup := network.PodHostPorts{Pod: "test/dup", IP: netip.MustParseAddr("10.244.1.9"), Ports: []network.HostPort{{Port: 18080, ContainerPort: 80}}}
		if err := hp.SetPod("uid-dup", dup); err == nil || !strings.Contains(err.Error(), "test/a") {
			t.Fatalf("SetPod of a taken port: %v", err)
		}
		want(t, tp.client, "tcp", hpHost+":18080", "a "+hpClient)
	})
	t.Run("removed: the port no longer leads to the pod", func(t *testing.T) {
		if err := hp.RemovePod("uid-b"); err != nil {
			t.Fatal(err)
		}
		want(t, tp.client, "tcp", hpHost2+":18081", "host "+hpClient)
	})
	t.Run("drift: a deleted table is rebuilt by Sync", func(t *testing.T) {
		hpSh(t, "ip", "netns", "exec", tp.host, "nft", "delete", "table", "ip", "flotilla-hostports")
		refused(t, tp.client, hpHost+":18080")
		gen := hp.Generation()
		if err := hp.Sync(map[string]network.PodHostPorts{"uid-a": podA}, gen); err != nil {
			t.Fatal(err)
		}
		want(t, tp.client, "tcp", hpHost+":18080", "a "+hpClient)
	})
	t.Run("agent restart: the old rules serve until the first Sync, which drops stale pods", func(t *testing.T) {
		if err := hp.SetPod("uid-b", podB); err != nil {
			t.Fatal(err)
		}
		restarted := newHP()
		// The new agent's worker of pod a sets it before the first Sync: nothing changes yet.
		if err := restarted.SetPod("uid-a", podA); err != nil {
			t.Fatal(err)
		}
		want(t, tp.client, "tcp", hpHost2+":18081", "b "+hpClient)
		// Pod b was deleted while the agent was down: it is not among the pods.
		gen := restarted.Generation()
		if err := restarted.Sync(map[string]network.PodHostPorts{"uid-a": {Pod: "test/a", Ports: podA.Ports}}, gen); err != nil {
			t.Fatal(err)
		}
		want(t, tp.client, "tcp", hpHost2+":18081", "host "+hpClient)
		want(t, tp.client, "tcp", hpHost+":18080", "a "+hpClient)
		hp = restarted
	})
	t.Run("a pod set after the listing survives Sync; one removed stays removed", func(t *testing.T) {
		gen := hp.Generation()
		if err := hp.SetPod("uid-b", podB); err != nil { // created after the pods were listed
			t.Fatal(err)
		}
		if err := hp.RemovePod("uid-a"); err != nil { // torn down, its sandbox still listed
			t.Fatal(err)
		}
		if err := hp.Sync(map[string]network.PodHostPorts{"uid-a": podA}, gen); err != nil {
			t.Fatal(err)
		}
		want(t, tp.client, "tcp", hpHost2+":18081", "b "+hpClient)
		refused(t, tp.client, hpHost+":18080")
	})
	t.Run("cleanup deletes the table", func(t *testing.T) {
		if err := hp.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := hpNft(t, tp); !strings.Contains(out, "No such file") {
			t.Fatalf("table left after Cleanup:\n%s", out)
		}
	})
}
