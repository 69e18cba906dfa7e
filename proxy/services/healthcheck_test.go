package services

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
)

func freePort(t *testing.T) (uint16, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return uint16(ln.Addr().(*net.TCPAddr).Port), ln
}

// TestHealthCheckNodePorts: each healthCheckNodePort answers as kube-proxy's, 200 with the
// number of this host's ready endpoints or 503 without any; a port no Service has any more is
// closed, and one held by another program is served once it is free.
func TestHealthCheckNodePorts(t *testing.T) {
	hp, ln := freePort(t)
	_ = ln.Close()
	busy, held := freePort(t)
	h := newHealthChecks("127.0.0.1", logrus.NewEntry(logrus.New()))
	defer h.close()
	ep := func(ip string, terminating bool) Endpoint {
		return Endpoint{IP: netip.MustParseAddr(ip), Port: 8080, NodeName: "n1", Terminating: terminating}
	}
	port := func(name string, hc uint16, local ...Endpoint) ServicePort {
		return ServicePort{Key: "shop/web/" + name + "/TCP", Namespace: "shop", Name: "web", PortName: name, Protocol: "TCP",
			ExternalLocal: true, HealthCheckNodePort: hc, LocalEndpoints: local}
	}
	get := func(p uint16) (int, string, map[string]any, error) {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p))
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil {
			return 0, "", nil, fmt.Errorf("body %q: %v", b, err)
		}
		return resp.StatusCode, resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), body, nil
	}

	// Two ports of one Service, the same two pods behind each, one of them terminating.
	h.update(DesiredState{Services: []ServicePort{
		port("http", hp, ep("10.244.0.5", false), ep("10.244.0.6", true)),
		port("https", hp, ep("10.244.0.5", false), ep("10.244.0.6", true)),
		port("other", busy, ep("10.244.0.7", false)),
	}})
	code, weight, body, err := get(hp)
	if err != nil || code != 200 || weight != "1" || body["localEndpoints"] != float64(1) ||
		fmt.Sprint(body["service"]) != "map[name:web namespace:shop]" || body["serviceProxyHealthy"] != true {
		t.Fatalf("with a ready local endpoint: %d weight %q %v %v, want 200, weight 1, 1 local endpoint of shop/web", code, weight, body, err)
	}
	h.update(DesiredState{Services: []ServicePort{port("http", hp, ep("10.244.0.6", true)), port("other", busy)}})
	if code, weight, body, err := get(hp); err != nil || code != 503 || weight != "0" || body["localEndpoints"] != float64(0) {
		t.Fatalf("without a ready local endpoint: %d weight %q %v %v, want 503, 0", code, weight, body, err)
	}
	// The port another program held is served once it is free.
	_ = held.Close()
	h.update(DesiredState{Services: []ServicePort{port("other", busy, ep("10.244.0.7", false))}})
	if code, _, _, err := get(busy); err != nil || code != 200 {
		t.Fatalf("port freed by its other program: %d %v, want 200", code, err)
	}
	// hp's Service has gone (or no longer needs a health check port): hp is closed.
	if _, _, _, err := get(hp); err == nil {
		t.Fatalf("port %d still answers after its Service went", hp)
	}
	h.close()
	if _, _, _, err := get(busy); err == nil {
		t.Fatalf("port %d still answers after close", busy)
	}
}

// TestCompileHealthCheckNodePort: only a LoadBalancer Service with externalTrafficPolicy
// Local carries its healthCheckNodePort to the ports.
func TestCompileHealthCheckNodePort(t *testing.T) {
	hc := func(p int32) svcOpt { return func(s *v1.Service) { s.Spec.HealthCheckNodePort = p } }
	for _, c := range []struct {
		name string
		svc  *v1.Service
		want uint16
	}{
		{"LoadBalancer, Local", mkSvc("a", "10.96.0.50", 80, nodePort(30080), loadBalancer("192.0.2.20"), etpLocal, hc(31555)), 31555},
		{"LoadBalancer, Cluster", mkSvc("a", "10.96.0.50", 80, nodePort(30080), loadBalancer("192.0.2.20"), hc(31555)), 0},
		{"NodePort, Local", mkSvc("a", "10.96.0.50", 80, nodePort(30080), etpLocal, hc(31555)), 0},
	} {
		ports := compileService(c.svc, nil, "n1", "")
		if len(ports) != 1 || ports[0].HealthCheckNodePort != c.want {
			t.Errorf("%s: %+v, want health check port %d", c.name, ports, c.want)
		}
	}
}
