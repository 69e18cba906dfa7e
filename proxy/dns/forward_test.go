package dns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// serveLoopback serves h on UDP and TCP at one 127.0.0.1 port and returns "127.0.0.1:port".
func serveLoopback(t *testing.T, h mdns.Handler) string {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		l, err := net.Listen("tcp", addr)
		if err != nil { // TCP side of the port taken: try another
			pc.Close()
			continue
		}
		for _, s := range []*mdns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			go func() { _ = s.ActivateAndServe() }()
			<-started
			t.Cleanup(func() { _ = s.Shutdown() })
		}
		return addr
	}
	t.Fatal("no free UDP+TCP port pair on 127.0.0.1")
	return ""
}

// fakeUpstream is a resolver on loopback with fixed answers: tests never reach a real one.
func fakeUpstream(t *testing.T) string {
	return serveLoopback(t, mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		udp := w.RemoteAddr().Network() == "udp"
		switch q.Name {
		case "example.org.":
			m.Answer = append(m.Answer, &mdns.A{Hdr: hdr(q.Name, mdns.TypeA), A: net.ParseIP("192.0.2.1")})
		case "my.database.example.com.":
			m.Answer = append(m.Answer, &mdns.A{Hdr: hdr(q.Name, mdns.TypeA), A: net.ParseIP("192.0.2.10")})
		case "9.9.9.10.in-addr.arpa.":
			m.Answer = append(m.Answer, &mdns.PTR{Hdr: hdr(q.Name, mdns.TypePTR), Ptr: "host.example."})
		case "big.example.":
			if udp {
				m.Truncated = true
			} else {
				m.Answer = append(m.Answer, &mdns.A{Hdr: hdr(q.Name, mdns.TypeA), A: net.ParseIP("192.0.2.99")})
			}
		default:
			m.Rcode = mdns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	}))
}

// rcodeUpstream answers every query with rcode.
func rcodeUpstream(t *testing.T, rcode int) string {
	return serveLoopback(t, mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		_ = w.WriteMsg(m.SetRcode(r, rcode))
	}))
}

// silentUpstream reads queries and never answers.
func silentUpstream(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// closedPort is a loopback UDP port nobody listens on (queries get ICMP port unreachable).
func closedPort(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func TestForwarding(t *testing.T) {
	up := fakeUpstream(t)
	caches := fixtureCaches(t)
	cases := []struct {
		name      string
		upstreams []string
		q         string
		qtype     uint16
		want      []string
		within    time.Duration
	}{
		{"answer from the upstream", []string{up}, "example.org.", mdns.TypeA, []string{"NOERROR", "A 192.0.2.1"}, time.Second},
		{"NXDOMAIN from the upstream is final", []string{up}, "nope.example.", mdns.TypeA, []string{"NXDOMAIN"}, time.Second},
		{"dead upstream skipped", []string{closedPort(t), up}, "example.org.", mdns.TypeA, []string{"NOERROR", "A 192.0.2.1"}, time.Second},
		{"SERVFAIL upstream skipped", []string{rcodeUpstream(t, mdns.RcodeServerFailure), up}, "example.org.", mdns.TypeA,
			[]string{"NOERROR", "A 192.0.2.1"}, time.Second},
		{"all upstreams fail: their SERVFAIL", []string{rcodeUpstream(t, mdns.RcodeRefused), rcodeUpstream(t, mdns.RcodeServerFailure)},
			"example.org.", mdns.TypeA, []string{"SERVFAIL"}, time.Second},
		{"silent upstream: SERVFAIL after the timeout", []string{silentUpstream(t)}, "example.org.", mdns.TypeA, []string{"SERVFAIL"}, time.Second},
		{"unreachable upstream: SERVFAIL", []string{closedPort(t)}, "example.org.", mdns.TypeA, []string{"SERVFAIL"}, time.Second},
		{"truncated UDP reply retried over TCP", []string{up}, "big.example.", mdns.TypeA, []string{"NOERROR", "A 192.0.2.99"}, time.Second},
		{"PTR of a non-cluster address falls through", []string{up}, "9.9.9.10.in-addr.arpa.", mdns.TypePTR,
			[]string{"NOERROR", "PTR host.example."}, time.Second},
		// ExternalName: the CNAME, then the target's records resolved upstream (stub resolvers do not chase).
		{"ExternalName chased upstream", []string{up}, "my-service.prod.svc.cluster.local.", mdns.TypeA,
			[]string{"NOERROR", "CNAME my.database.example.com.", "my.database.example.com. A 192.0.2.10"}, time.Second},
		{"cluster names never forwarded", []string{up}, "example.org.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewHandler(Config{Upstreams: c.upstreams}, caches)
			h.fwd.timeout = 300 * time.Millisecond
			req := query(c.q, c.qtype)
			req.Id = 4242
			start := time.Now()
			r := h.resolve(context.Background(), req, "udp")
			if took := time.Since(start); took > c.within {
				t.Errorf("took %s, want under %s", took, c.within)
			}
			if got := summary(t, c.q, r); !slices.Equal(got, c.want) {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
			if r.Id != 4242 {
				t.Errorf("reply id %d, want the query's 4242", r.Id)
			}
		})
	}
}

// TestServeTruncation checks the wire behaviour: a reply too big for UDP comes back truncated
// (TC) and whole over TCP or with a large EDNS0 buffer.
func TestServeTruncation(t *testing.T) {
	c := NewCaches()
	s := svc("default", "big", "None", port("web", corev1.ProtocolTCP, 80))
	s.Spec.ClusterIPs = nil
	if err := c.Services.Add(s); err != nil {
		t.Fatal(err)
	}
	var eps []ep
	for i := range 100 {
		eps = append(eps, ep{ip: fmt.Sprintf("10.244.9.%d", i+1)})
	}
	if err := c.EndpointSlices.Add(slice("default", "big", "big-a", []discoveryv1.EndpointPort{epPort("web", 80)}, eps...)); err != nil {
		t.Fatal(err)
	}
	addr := serveLoopback(t, NewHandler(Config{}, c))
	for _, x := range []struct {
		net     string
		edns    uint16
		wantN   int
		wantTC  bool
		comment string
	}{
		{"udp", 0, -1, true, "plain UDP: 512 bytes"},
		{"udp", 4096, 100, false, "EDNS0 4096"},
		{"tcp", 0, 100, false, "TCP"},
	} {
		m := query("big.default.svc.cluster.local.", mdns.TypeA)
		if x.edns > 0 {
			m.SetEdns0(x.edns, false)
		}
		cl := &mdns.Client{Net: x.net, Timeout: 2 * time.Second, UDPSize: 65535}
		r, _, err := cl.Exchange(m, addr)
		if err != nil {
			t.Fatalf("%s: %v", x.comment, err)
		}
		if r.Truncated != x.wantTC || (x.wantN >= 0 && len(r.Answer) != x.wantN) || (x.wantN < 0 && len(r.Answer) >= 100) {
			t.Errorf("%s: TC=%v with %d answers, want TC=%v and %d", x.comment, r.Truncated, len(r.Answer), x.wantTC, x.wantN)
		}
		if !r.Authoritative {
			t.Errorf("%s: not authoritative", x.comment)
		}
	}
}

func TestUpstreamsFromResolvConf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "# generated\nsearch example.com\nnameserver 192.0.2.53\nnameserver 10.96.0.10\nnameserver 2001:db8::53\noptions ndots:2\n"
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := upstreamsFromResolvConf(p, net.ParseIP("10.96.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"192.0.2.53:53", "[2001:db8::53]:53"}; !slices.Equal(got, want) {
		t.Errorf("upstreams %q, want %q (our own address left out)", got, want)
	}
	if _, err := upstreamsFromResolvConf(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("missing resolv.conf: no error")
	}
	cfg, err := Config{}.withDefaults(p)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.ListenIP.Equal(DefaultListenIP) || cfg.Port != 53 || cfg.Domain != "cluster.local" || len(cfg.Upstreams) != 2 {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, bad := range []string{"192.0.2.53", "dns.example:53", "192.0.2.53:99999"} {
		if _, err := (Config{Upstreams: []string{bad}}).withDefaults(p); err == nil {
			t.Errorf("upstream %q accepted", bad)
		}
	}
}
