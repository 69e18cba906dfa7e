package netpol

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/netnstest"
)

func requireNetAdmin(t testing.TB)           { netnstest.RequireNetAdmin(t) }
func sh(t testing.TB, args ...string) string { t.Helper(); return netnstest.Sh(t, args...) }
func newNetns(t testing.TB, name string)     { t.Helper(); netnstest.New(t, name) }

// inNetns runs fn on a thread switched into the namespace at path; sockets created there
// stay in it. The thread is discarded afterwards rather than switched back.
func inNetns(path string, fn func() error) error { return netnstest.In(path, fn) }

// site is two hosts, each a network namespace with a bridge its pods' namespaces hang on,
// joined by a link and routes, as flotilla's pod network joins hosts:
//
//	pods 10.244.1.0/24 -- br0 [host h1] 192.168.77.1 -- 192.168.77.2 [host h2] br0 -- pods 10.244.2.0/24
type site struct {
	t      *testing.T
	prefix string
	hosts  [2]string
	pods   []*testPod
}

type testPod struct {
	ns, name string
	host     int
	netns    string
	ip       string
}

func (p *testPod) key() string { return p.ns + "/" + p.name }

func newSite(t *testing.T) *site {
	requireNetAdmin(t)
	s := &site{t: t, prefix: fmt.Sprintf("fnp%04d", rand.Intn(10000))}
	for i := range s.hosts {
		h := fmt.Sprintf("%s-h%d", s.prefix, i+1)
		s.hosts[i] = h
		newNetns(t, h)
		sh(t, "ip", "netns", "exec", h, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		sh(t, "ip", "-n", h, "link", "add", "br0", "type", "bridge")
		sh(t, "ip", "-n", h, "addr", "add", fmt.Sprintf("10.244.%d.1/24", i+1), "dev", "br0")
		sh(t, "ip", "-n", h, "link", "set", "br0", "up")
		// Bridged traffic between pods of one host goes through the IP hooks, as on a host
		// (where the pod network turns this on).
		if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err == nil {
			sh(t, "ip", "netns", "exec", h, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
		}
	}
	sh(t, "ip", "-n", s.hosts[0], "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", s.hosts[1])
	for i, h := range s.hosts {
		sh(t, "ip", "-n", h, "addr", "add", fmt.Sprintf("192.168.77.%d/24", i+1), "dev", "wan")
		sh(t, "ip", "-n", h, "link", "set", "wan", "up")
		other := 1 - i
		sh(t, "ip", "-n", h, "route", "add", fmt.Sprintf("10.244.%d.0/24", other+1), "via", fmt.Sprintf("192.168.77.%d", other+1))
	}
	return s
}

func (s *site) hostPath(i int) string { return "/run/netns/" + s.hosts[i] }

// addPod makes a pod's network namespace on host i, with servers on ports 80 and 81 over TCP
// and UDP that answer with the pod's name.
func (s *site) addPod(ns, name string, host int) *testPod {
	t := s.t
	n := len(s.pods)
	p := &testPod{ns: ns, name: name, host: host, netns: fmt.Sprintf("%s-p%d", s.prefix, n),
		ip: fmt.Sprintf("10.244.%d.%d", host+1, 10+n)}
	newNetns(t, p.netns)
	h := s.hosts[host]
	veth := fmt.Sprintf("v%d", n)
	sh(t, "ip", "-n", h, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", p.netns)
	sh(t, "ip", "-n", h, "link", "set", veth, "master", "br0", "up")
	sh(t, "ip", "-n", p.netns, "addr", "add", p.ip+"/24", "dev", "eth0")
	sh(t, "ip", "-n", p.netns, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", p.netns, "route", "add", "default", "via", fmt.Sprintf("10.244.%d.1", host+1))
	for _, port := range []int{80, 81} {
		addr := fmt.Sprintf(":%d", port)
		var l net.Listener
		var pc net.PacketConn
		err := inNetns("/run/netns/"+p.netns, func() error {
			var err error
			if l, err = net.Listen("tcp", addr); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp", addr)
			return err
		})
		if err != nil {
			t.Fatalf("servers of %s: %v", p.key(), err)
		}
		t.Cleanup(func() { l.Close(); pc.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(p.key()))
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
				_, _ = pc.WriteTo([]byte(p.key()), from)
			}
		}()
	}
	s.pods = append(s.pods, p)
	return p
}

// probe connects from one pod to an address and says whether the server answered.
func probe(from *testPod, addr, proto string) bool { return probeFrom(from.netns, addr, proto) }

// probeFrom connects from the named network namespace.
func probeFrom(netnsName, addr, proto string) bool {
	var c net.Conn
	err := inNetns("/run/netns/"+netnsName, func() error {
		var err error
		c, err = net.DialTimeout(proto, addr, time.Second)
		return err
	})
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if proto == "udp" {
		if _, err := c.Write([]byte("?")); err != nil {
			return false
		}
	}
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	return n > 0
}

// matrix is who reaches whom: matrix[from][to] by pod key.
type matrix map[string]map[string]bool

func (s *site) newMatrix(v bool) matrix {
	m := matrix{}
	for _, a := range s.pods {
		m[a.key()] = map[string]bool{}
		for _, b := range s.pods {
			m[a.key()][b.key()] = v || a == b
		}
	}
	return m
}

func (m matrix) equal(o matrix) bool {
	for a, row := range m {
		for b, v := range row {
			if o[a][b] != v {
				return false
			}
		}
	}
	return true
}

func (s *site) format(m matrix) string {
	var b strings.Builder
	b.WriteString("from\\to")
	for _, p := range s.pods {
		fmt.Fprintf(&b, " %s", p.key())
	}
	b.WriteString("\n")
	for _, a := range s.pods {
		fmt.Fprintf(&b, "%-7s", a.key())
		for _, p := range s.pods {
			c := "."
			if m[a.key()][p.key()] {
				c = "X"
			}
			fmt.Fprintf(&b, " %s%s", strings.Repeat(" ", len(p.key())-1), c)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// probeAll probes every pair on port/proto, 81 probes at once. A pod always reaches itself
// (loopback never leaves its namespace).
func (s *site) probeAll(port int, proto string) matrix {
	m := s.newMatrix(false)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range s.pods {
		for _, b := range s.pods {
			if a == b {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok := probe(a, fmt.Sprintf("%s:%d", b.ip, port), proto)
				mu.Lock()
				m[a.key()][b.key()] = ok
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return m
}

// startController runs the policy controller of host i against the API.
func (s *site) startController(ctx context.Context, client kubernetes.Interface, i int) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactory(client, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := Run(ctx, Config{NodeName: s.hosts[i], Informers: f, PodInformers: f, NetNS: s.hostPath(i)})
		if err != nil && ctx.Err() == nil {
			s.t.Errorf("policy controller of %s: %v", s.hosts[i], err)
		}
	}()
	s.t.Cleanup(func() {
		cancel()
		<-done
		f.Shutdown()
	})
}

// registerPods creates namespaces and pods in the API, as the scheduler and node agents
// would leave them: bound, running, with the address of their namespace and the four named
// container ports the probes use.
func (s *site) registerPods(ctx context.Context, client kubernetes.Interface) {
	t := s.t
	for i, h := range s.hosts {
		node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.77.%d", i+1)}}
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, p := range s.pods {
		if !seen[p.ns] {
			seen[p.ns] = true
			_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns,
				Labels: map[string]string{"ns": p.ns}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		var ports []corev1.ContainerPort
		for _, port := range []int32{80, 81} {
			for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
				ports = append(ports, corev1.ContainerPort{Name: fmt.Sprintf("serve-%d-%s", port, strings.ToLower(string(proto))),
					ContainerPort: port, Protocol: proto})
			}
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, Labels: map[string]string{"pod": p.name}},
			Spec: corev1.PodSpec{NodeName: s.hosts[p.host], Containers: []corev1.Container{{Name: "c", Image: "agnhost", Ports: ports}}}}
		created, err := client.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Phase = corev1.PodRunning
		created.Status.PodIP = p.ip
		created.Status.PodIPs = []corev1.PodIP{{IP: p.ip}}
		if _, err := client.CoreV1().Pods(p.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
