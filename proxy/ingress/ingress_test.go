package ingress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/framework"
)

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// echoHandler names itself, sleeps on /slow, and speaks a minimal websocket handshake followed
// by a line echo, enough to prove the Upgrade went through the proxy both ways.
func echoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
				wsAccept(r.Header.Get("Sec-WebSocket-Key")))
			_ = brw.Flush()
			line, _ := brw.ReadString('\n')
			fmt.Fprintf(brw, "%s echo: %s", name, line)
			_ = brw.Flush()
			return
		}
		if r.URL.Path == "/slow" {
			time.Sleep(800 * time.Millisecond)
		}
		w.Header().Set("X-Backend", name)
		fmt.Fprintf(w, "%s %s %s", name, r.Proto, r.Header.Get("X-Forwarded-Proto"))
	})
}

func serveOn(t *testing.T, l net.Listener, name string) *httptest.Server {
	s := httptest.NewUnstartedServer(echoHandler(name))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// twoLoopbackListeners binds 127.0.0.1:P and 127.0.0.2:P: two endpoints of one Service port.
func twoLoopbackListeners(t *testing.T) (net.Listener, net.Listener, int) {
	var lastErr error
	for i := 0; i < 20; i++ {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
		if err == nil {
			return a, b, port
		}
		a.Close()
		lastErr = err
	}
	if framework.InCI() {
		t.Fatalf("cannot listen on 127.0.0.2: %v", lastErr)
	}
	t.Skipf("cannot listen on 127.0.0.2 (loopback /8 not routed here): %v", lastErr)
	return nil, nil, 0
}

type harness struct {
	t                 *testing.T
	client            kubernetes.Interface
	httpURL, httpsAdr string
	httpClient        *http.Client
}

func (h *harness) get(host, path string) (int, string, http.Header) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.httpURL+path, nil)
	req.Host = host
	resp, err := h.httpClient.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// waitFor polls cond every 20 ms until it holds; it returns the time that took.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < limit {
		ok, msg := cond()
		if ok {
			return time.Since(start)
		}
		last = msg
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, limit, last)
	return 0
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func sliceFor(svc string, port int, eps map[string]bool) *discoveryv1.EndpointSlice {
	name := "http"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-manual", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "ingress-test.flotilla.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: new(int32(port)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		if ready, ok := eps[ip]; ok {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
				Conditions: discoveryv1.EndpointConditions{Ready: new(ready), Serving: new(ready), Terminating: new(false)}})
		}
	}
	return sl
}

// TestIngressAgainstAPIServer drives the proxy from a real API server: routing by host and path,
// round-robin over two endpoints, readiness changes within 2 s, 503 without endpoints, TLS with
// SNI from a Secret over HTTP/2, websocket upgrade, HTTP->HTTPS redirect, a reload during a slow
// request, resource backends refused with an Event, and status.loadBalancer merged.
func TestIngressAgainstAPIServer(t *testing.T) {
	la, lb, port := twoLoopbackListeners(t)
	serveOn(t, la, "a")
	serverB := serveOn(t, lb, "b")
	apiL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiPort := apiL.Addr().(*net.TCPAddr).Port
	serveOn(t, apiL, "api")

	agent := framework.StartAgent(t, framework.AgentOptions{})
	client := agent.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\nagent log tail:\n%s", what, err, tail(agent.Logs(), 40))
		}
	}

	// Nodes: ours, another live host, and (in the status) the address of a host that is gone.
	const nodeName = "ingress-host-1"
	for name, ip := range map[string]string{nodeName: "127.0.0.1", "ingress-host-2": "10.213.0.2"} {
		n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must("create node", err)
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		must("node status", err)
	}

	must("EnsureClass", EnsureClass(ctx, client))
	must("EnsureClass again", EnsureClass(ctx, client))
	ic, err := client.NetworkingV1().IngressClasses().Get(ctx, DefaultClassName, metav1.GetOptions{})
	must("get class", err)
	if ic.Spec.Controller != ControllerName || ic.Annotations[annotationDefaultClass] != "true" {
		t.Fatalf("IngressClass: %+v", ic)
	}

	for name, p := range map[string]int{"web": port, "api": apiPort} {
		_, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(p)), Protocol: corev1.ProtocolTCP}}}},
			metav1.CreateOptions{})
		must("create service", err)
	}
	webSlice, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, sliceFor("web", port, map[string]bool{"127.0.0.1": true, "127.0.0.2": true}), metav1.CreateOptions{})
	must("create web slice", err)
	_, err = client.DiscoveryV1().EndpointSlices("default").Create(ctx, sliceFor("api", apiPort, map[string]bool{"127.0.0.1": true}), metav1.CreateOptions{})
	must("create api slice", err)
	sec := tlsSecret(t, "testsecret-tls", "https-example.foo.com")
	_, err = client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{})
	must("create secret", err)

	path := func(p string, pt networkingv1.PathType, svc string, port networkingv1.ServiceBackendPort) networkingv1.HTTPIngressPath {
		return networkingv1.HTTPIngressPath{Path: p, PathType: new(pt), Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: svc, Port: port}}}
	}
	rule := func(host string, paths ...networkingv1.HTTPIngressPath) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}}}
	}
	byName, byNumber := networkingv1.ServiceBackendPort{Name: "http"}, networkingv1.ServiceBackendPort{Number: 80}
	// No ingressClassName: ours because "flotilla" is the one default class.
	web := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: networkingv1.IngressSpec{
		TLS: []networkingv1.IngressTLS{{Hosts: []string{"https-example.foo.com"}, SecretName: "testsecret-tls"}},
		Rules: []networkingv1.IngressRule{
			rule("web.example", path("/", networkingv1.PathTypePrefix, "web", byName), path("/api", networkingv1.PathTypePrefix, "api", byNumber)),
			rule("*.wild.example", path("/", networkingv1.PathTypePrefix, "api", byNumber)),
			rule("https-example.foo.com", path("/", networkingv1.PathTypePrefix, "web", byNumber)),
		}}}
	web, err = client.NetworkingV1().Ingresses("default").Create(ctx, web, metav1.CreateOptions{})
	must("create ingress", err)
	// Seed the status with another live host and a host that is gone.
	web.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "10.213.0.2"}, {IP: "10.213.0.99"}}
	_, err = client.NetworkingV1().Ingresses("default").UpdateStatus(ctx, web, metav1.UpdateOptions{})
	must("seed status", err)
	other := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"}, Spec: networkingv1.IngressSpec{
		IngressClassName: new("nginx"), Rules: []networkingv1.IngressRule{rule("other.example", path("/", networkingv1.PathTypePrefix, "web", byNumber))}}}
	_, err = client.NetworkingV1().Ingresses("default").Create(ctx, other, metav1.CreateOptions{})
	must("create other-class ingress", err)
	resource := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "ingress-resource-backend", Namespace: "default"}, Spec: networkingv1.IngressSpec{
		IngressClassName: new(DefaultClassName),
		DefaultBackend:   &networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{APIGroup: new("k8s.example.com"), Kind: "StorageBucket", Name: "static-assets"}}}}
	_, err = client.NetworkingV1().Ingresses("default").Create(ctx, resource, metav1.CreateOptions{})
	must("create resource-backend ingress", err)

	// A path without pathType is a validation error.
	noType := path("/x", networkingv1.PathTypePrefix, "web", byNumber)
	noType.PathType = nil
	_, err = client.NetworkingV1().Ingresses("default").Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "s7", Namespace: "default"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{rule("", noType)}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("row S7: path without pathType: got %v, want Invalid", err)
	}

	ports := framework.FreePorts(t, 2)
	httpPort, httpsPort := ports[0], ports[1]
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	go func() {
		errc <- Run(runCtx, client, Config{NodeName: nodeName, HTTPAddr: "127.0.0.1:" + strconv.Itoa(httpPort),
			HTTPSAddr: "127.0.0.1:" + strconv.Itoa(httpsPort), Log: logrus.NewEntry(log)})
	}()
	defer func() {
		stop()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	}()
	h := &harness{t: t, client: client, httpURL: "http://127.0.0.1:" + strconv.Itoa(httpPort),
		httpClient: &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}

	waitFor(t, "proxy serves web.example", 30*time.Second, func() (bool, string) {
		code, body, _ := h.get("web.example", "/")
		return code == 200, fmt.Sprint(code, body)
	})

	t.Run("routing by host and path", func(t *testing.T) {
		for _, c := range []struct {
			host, path string
			code       int
			backend    string
		}{
			{"web.example", "/api/v1", 200, "api"},
			{"WEB.example:80", "/apix", 200, "a|b"},
			{"x.wild.example", "/", 200, "api"},
			{"x.y.wild.example", "/", 404, ""},
			{"other.example", "/", 404, ""}, // another class's Ingress
			{"nothing.example", "/", 404, ""},
		} {
			code, body, hdr := h.get(c.host, c.path)
			if code != c.code {
				t.Errorf("%s%s: %d %q, want %d", c.host, c.path, code, body, c.code)
				continue
			}
			if c.backend != "" && !strings.Contains("|"+c.backend+"|", "|"+hdr.Get("X-Backend")+"|") {
				t.Errorf("%s%s: backend %q, want %s", c.host, c.path, hdr.Get("X-Backend"), c.backend)
			}
		}
	})

	t.Run("round robin over both endpoints", func(t *testing.T) {
		counts := map[string]int{}
		for i := 0; i < 40; i++ {
			_, _, hdr := h.get("web.example", "/")
			counts[hdr.Get("X-Backend")]++
		}
		if counts["a"] != 20 || counts["b"] != 20 {
			t.Errorf("40 requests: %v, want 20 each", counts)
		}
	})

	t.Run("websocket upgrade", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(httpPort), 5*time.Second)
		must("dial", err)
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: web.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		must("read handshake", err)
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
			t.Fatalf("handshake: %d %v", resp.StatusCode, resp.Header)
		}
		fmt.Fprintf(conn, "hello\n")
		line, err := br.ReadString('\n')
		must("read echo", err)
		if !strings.HasSuffix(line, " echo: hello\n") {
			t.Errorf("echo: %q", line)
		}
	})

	t.Run("TLS with SNI from the Secret, HTTP/2", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(sec.Data[corev1.TLSCertKey])
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "https-example.foo.com"}, ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(httpsPort))
			}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://https-example.foo.com/")
		must("https get", err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || !strings.HasSuffix(string(body), "HTTP/1.1 https") {
			t.Errorf("https: %d %s %q", resp.StatusCode, resp.Proto, body)
		}
		// A server name no tls entry covers gets no certificate.
		_, err = tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(httpsPort), &tls.Config{ServerName: "web.example", InsecureSkipVerify: true})
		if err == nil {
			t.Errorf("handshake for an uncovered SNI name succeeded")
		}
	})

	t.Run("a renewed TLS Secret is served", func(t *testing.T) {
		renewed := tlsSecret(t, "testsecret-tls", "https-example.foo.com")
		_, err := client.CoreV1().Secrets("default").Update(ctx, renewed, metav1.UpdateOptions{})
		must("update secret", err)
		block, _ := pem.Decode(renewed.Data[corev1.TLSCertKey])
		waitFor(t, "the renewed certificate is served", 10*time.Second, func() (bool, string) {
			conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(httpsPort), &tls.Config{ServerName: "https-example.foo.com", InsecureSkipVerify: true})
			if err != nil {
				return false, err.Error()
			}
			defer conn.Close()
			certs := conn.ConnectionState().PeerCertificates
			return len(certs) > 0 && bytes.Equal(certs[0].Raw, block.Bytes), "old certificate"
		})
	})

	t.Run("status.loadBalancer merged", func(t *testing.T) {
		waitFor(t, "status has this host and keeps the live one", 10*time.Second, func() (bool, string) {
			ing, err := client.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got := fmt.Sprint(ing.Status.LoadBalancer.Ingress)
			return got == fmt.Sprint([]networkingv1.IngressLoadBalancerIngress{{IP: "10.213.0.2"}, {IP: "127.0.0.1"}}), got
		})
		// A host that leaves the site leaves the status with its Node.
		must("delete node", client.CoreV1().Nodes().Delete(ctx, "ingress-host-2", metav1.DeleteOptions{}))
		waitFor(t, "status drops the deleted host", 10*time.Second, func() (bool, string) {
			ing, err := client.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got := fmt.Sprint(ing.Status.LoadBalancer.Ingress)
			return got == fmt.Sprint([]networkingv1.IngressLoadBalancerIngress{{IP: "127.0.0.1"}}), got
		})
		ing, err := client.NetworkingV1().Ingresses("default").Get(ctx, "other", metav1.GetOptions{})
		must("get other", err)
		if len(ing.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("another class's Ingress got status %v", ing.Status.LoadBalancer.Ingress)
		}
	})

	t.Run("resource backend refused with an Event", func(t *testing.T) {
		waitFor(t, "ResourceBackendUnsupported event", ProblemGrace+10*time.Second, func() (bool, string) {
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "ingress-resource-backend" && e.Reason == "ResourceBackendUnsupported" && e.Type == corev1.EventTypeWarning {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(evs.Items))
		})
	})

	// Applied together, an Ingress can reach the proxy before its Service: that is no problem
	// to report. A Service that stays missing is.
	t.Run("a Service missing only for a moment is not reported", func(t *testing.T) {
		for name, svc := range map[string]string{"late": "late", "dangling": "absent"} {
			_, err := client.NetworkingV1().Ingresses("default").Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{rule(name+".example", path("/", networkingv1.PathTypePrefix, svc, byNumber))}}},
				metav1.CreateOptions{})
			must("create ingress "+name, err)
		}
		_, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "late"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(int32(port)), Protocol: corev1.ProtocolTCP}}}},
			metav1.CreateOptions{})
		must("create service late", err)
		reasons := func(ingress string, evs []corev1.Event) []string {
			var rs []string
			for _, e := range evs {
				if e.InvolvedObject.Kind == "Ingress" && e.InvolvedObject.Name == ingress {
					rs = append(rs, e.Reason+": "+e.Message)
				}
			}
			return rs
		}
		var evs []corev1.Event
		waitFor(t, "BackendUnavailable event of the dangling Ingress", ProblemGrace+10*time.Second, func() (bool, string) {
			l, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			evs = l.Items
			rs := reasons("dangling", evs)
			return len(rs) == 1 && strings.HasPrefix(rs[0], "BackendUnavailable: ") && strings.Contains(rs[0], "Service default/absent not found"), fmt.Sprint(rs)
		})
		if rs := reasons("late", evs); len(rs) != 0 {
			t.Errorf("Ingress late, whose Service came within %s: events %q", ProblemGrace, rs)
		}
	})

	t.Run("reload keeps a request in flight, then redirects to HTTPS", func(t *testing.T) {
		done := make(chan string, 1)
		go func() {
			code, body, _ := h.get("https-example.foo.com", "/slow")
			done <- fmt.Sprint(code, " ", body)
		}()
		time.Sleep(200 * time.Millisecond)
		secure := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: "default",
			Annotations: map[string]string{AnnotationSSLRedirect: "true"}}, Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{rule("secure.example", path("/", networkingv1.PathTypePrefix, "web", byNumber))}}}
		_, err := client.NetworkingV1().Ingresses("default").Create(ctx, secure, metav1.CreateOptions{})
		must("create secure", err)
		want := fmt.Sprintf("https://secure.example:%d/x?y=1", httpsPort)
		waitFor(t, "HTTP->HTTPS redirect", 5*time.Second, func() (bool, string) {
			code, _, hdr := h.get("secure.example", "/x?y=1")
			return code == http.StatusPermanentRedirect && hdr.Get("Location") == want, fmt.Sprint(code, hdr.Get("Location"))
		})
		if got := <-done; !strings.HasPrefix(got, "200 ") {
			t.Errorf("request in flight during reload: %s", got)
		}
	})

	t.Run("an update adds a host", func(t *testing.T) {
		cur, err := client.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
		must("get web", err)
		cur.Spec.Rules = append(cur.Spec.Rules, rule("bar.baz.com", path("/foo", networkingv1.PathTypePrefix, "api", byNumber)))
		_, err = client.NetworkingV1().Ingresses("default").Update(ctx, cur, metav1.UpdateOptions{})
		must("update web", err)
		waitFor(t, "bar.baz.com/foo routed", 5*time.Second, func() (bool, string) {
			code, _, hdr := h.get("bar.baz.com", "/foo")
			return code == 200 && hdr.Get("X-Backend") == "api", fmt.Sprint(code, hdr.Get("X-Backend"))
		})
	})

	t.Run("readiness change removes an endpoint within 2s", func(t *testing.T) {
		cur, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, webSlice.Name, metav1.GetOptions{})
		must("get slice", err)
		upd := sliceFor("web", port, map[string]bool{"127.0.0.1": true, "127.0.0.2": false})
		cur.Endpoints = upd.Endpoints
		_, err = client.DiscoveryV1().EndpointSlices("default").Update(ctx, cur, metav1.UpdateOptions{})
		must("mark 127.0.0.2 not ready", err)
		took := waitFor(t, "only endpoint a serves", 2*time.Second, func() (bool, string) {
			for i := 0; i < 4; i++ {
				if _, _, hdr := h.get("web.example", "/"); hdr.Get("X-Backend") != "a" {
					return false, hdr.Get("X-Backend")
				}
			}
			return true, ""
		})
		t.Logf("readiness change took effect in %s", took)
	})

	t.Run("a dead endpoint costs no request (passive health)", func(t *testing.T) {
		cur, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, webSlice.Name, metav1.GetOptions{})
		must("get slice", err)
		cur.Endpoints = sliceFor("web", port, map[string]bool{"127.0.0.1": true, "127.0.0.2": true}).Endpoints
		_, err = client.DiscoveryV1().EndpointSlices("default").Update(ctx, cur, metav1.UpdateOptions{})
		must("mark 127.0.0.2 ready again", err)
		waitFor(t, "endpoint b back in rotation", 2*time.Second, func() (bool, string) {
			_, _, hdr := h.get("web.example", "/")
			return hdr.Get("X-Backend") == "b", hdr.Get("X-Backend")
		})
		serverB.Close() // still ready in the EndpointSlice
		for i := 0; i < 20; i++ {
			if code, body, hdr := h.get("web.example", "/"); code != 200 || hdr.Get("X-Backend") != "a" {
				t.Fatalf("request %d with endpoint b dead: %d %q", i, code, body)
			}
		}
	})

	t.Run("503 without ready endpoints", func(t *testing.T) {
		cur, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, webSlice.Name, metav1.GetOptions{})
		must("get slice", err)
		cur.Endpoints = sliceFor("web", port, map[string]bool{"127.0.0.1": false, "127.0.0.2": false}).Endpoints
		_, err = client.DiscoveryV1().EndpointSlices("default").Update(ctx, cur, metav1.UpdateOptions{})
		must("mark all not ready", err)
		waitFor(t, "503", 2*time.Second, func() (bool, string) {
			code, body, _ := h.get("web.example", "/")
			return code == http.StatusServiceUnavailable, fmt.Sprint(code, body)
		})
		if code, _, _ := h.get("web.example", "/api"); code != 200 {
			t.Errorf("other Service's route: %d", code)
		}
	})
}

// TestProblemReporterGrace: a problem is reported once it has lasted the grace, once, never
// if it goes away before, and again if it comes back later.
func TestProblemReporterGrace(t *testing.T) {
	now := time.Unix(1000, 0)
	r := problemReporter{grace: 5 * time.Second, now: func() time.Time { return now }}
	missing := Problem{Ingress: "default/web", Reason: "BackendUnavailable", Message: "Service default/web not found"}
	refused := Problem{Ingress: "default/other", Reason: "ResourceBackendUnsupported", Message: "resource backend"}
	step := func(d time.Duration, problems ...Problem) ([]Problem, time.Duration) {
		now = now.Add(d)
		return r.update(problems)
	}
	if rep, re := step(0, missing, missing); len(rep) != 0 || re != 5*time.Second {
		t.Fatalf("new problem: reported %v, recheck %s; want none, 5s", rep, re)
	}
	if rep, re := step(2*time.Second, missing, refused); len(rep) != 0 || re != 3*time.Second {
		t.Fatalf("2s later: reported %v, recheck %s; want none, 3s (the first one due)", rep, re)
	}
	rep, re := step(3*time.Second, missing, refused)
	if len(rep) != 1 || rep[0] != missing || re != 2*time.Second {
		t.Fatalf("5s later: reported %v, recheck %s; want the missing Service, 2s", rep, re)
	}
	if rep, _ := step(time.Second, missing, refused); len(rep) != 0 {
		t.Fatalf("reported again: %v", rep)
	}
	// The refused backend is fixed before its grace; the missing Service appears.
	if rep, re := step(time.Second); len(rep) != 0 || re != 0 {
		t.Fatalf("no problems: reported %v, recheck %s", rep, re)
	}
	if rep, _ := step(time.Minute, missing); len(rep) != 0 {
		t.Fatalf("a problem back after a fix waits its grace again, reported %v", rep)
	}
	if rep, _ := step(5*time.Second, missing); len(rep) != 1 {
		t.Fatalf("back for 5s: reported %v, want it", rep)
	}
}
