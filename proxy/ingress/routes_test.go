package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

type p struct {
	typ  networkingv1.PathType
	path string
}

var (
	prefix = networkingv1.PathTypePrefix
	exact  = networkingv1.PathTypeExact
	impl   = networkingv1.PathTypeImplementationSpecific
)

// backendName names the Service that a configured path routes to in the path tests: every
// configured path gets its own backend, so the winner is visible.
func backendName(x p) string {
	return strings.ToLower(string(x.typ)) + strings.NewReplacer("/", "-s").Replace(x.path)
}

func svcBackend(name string) networkingv1.IngressBackend {
	return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}}
}

func pathIngress(paths []p, withDefault bool) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "paths"}}
	var hp []networkingv1.HTTPIngressPath
	for _, x := range paths {
		hp = append(hp, networkingv1.HTTPIngressPath{Path: x.path, PathType: new(x.typ), Backend: svcBackend(backendName(x))})
	}
	ing.Spec.Rules = []networkingv1.IngressRule{{IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: hp}}}}
	if withDefault {
		b := svcBackend("default")
		ing.Spec.DefaultBackend = &b
	}
	return ing
}

// winner names the backend Service a lookup reached, "default", or "404".
func winner(t *Table, host, path string) string {
	tg := t.Lookup(host, path)
	if tg == nil {
		return "404"
	}
	if tg.Pool == nil {
		return "refused"
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(tg.Pool.Key, "default/"), ":")
	return name
}

// TestPathMatchingTable is every row of the path matching examples of the Kubernetes Ingress
// documentation ("docs row N"), plus cases of our own: element-wise prefixes, case
// sensitivity, the longest match and Exact before Prefix.
func TestPathMatchingTable(t *testing.T) {
	const def = "default"
	rows := []struct {
		row   string
		paths []p
		reqs  []string
		want  string // backendName of the winning path, or "default"
	}{
		{"docs row 1", []p{{prefix, "/"}}, []string{"/", "/foo", "/aaa/bbb/", "/x/y/z"}, backendName(p{prefix, "/"})},
		{"docs row 2", []p{{exact, "/foo"}}, []string{"/foo"}, backendName(p{exact, "/foo"})},
		{"docs row 3", []p{{exact, "/foo"}}, []string{"/bar"}, def},
		{"docs row 4", []p{{exact, "/foo"}}, []string{"/foo/"}, def},
		{"docs row 5", []p{{exact, "/foo/"}}, []string{"/foo"}, def},
		{"docs row 6", []p{{prefix, "/foo"}}, []string{"/foo", "/foo/"}, backendName(p{prefix, "/foo"})},
		{"docs row 7", []p{{prefix, "/foo/"}}, []string{"/foo", "/foo/"}, backendName(p{prefix, "/foo/"})},
		{"docs row 8", []p{{prefix, "/aaa/bb"}}, []string{"/aaa/bbb"}, def},
		{"docs row 9", []p{{prefix, "/aaa/bbb"}}, []string{"/aaa/bbb"}, backendName(p{prefix, "/aaa/bbb"})},
		{"docs row 10", []p{{prefix, "/aaa/bbb/"}}, []string{"/aaa/bbb"}, backendName(p{prefix, "/aaa/bbb/"})},
		{"docs row 11", []p{{prefix, "/aaa/bbb"}}, []string{"/aaa/bbb/"}, backendName(p{prefix, "/aaa/bbb"})},
		{"docs row 12", []p{{prefix, "/aaa/bbb"}}, []string{"/aaa/bbb/ccc"}, backendName(p{prefix, "/aaa/bbb"})},
		{"docs row 13", []p{{prefix, "/aaa/bbb"}}, []string{"/aaa/bbbxyz"}, def},
		{"docs row 14", []p{{prefix, "/"}, {prefix, "/aaa"}}, []string{"/aaa/ccc"}, backendName(p{prefix, "/aaa"})},
		{"docs row 15", []p{{prefix, "/"}, {prefix, "/aaa"}, {prefix, "/aaa/bbb"}}, []string{"/aaa/bbb"}, backendName(p{prefix, "/aaa/bbb"})},
		{"docs row 16", []p{{prefix, "/"}, {prefix, "/aaa"}, {prefix, "/aaa/bbb"}}, []string{"/ccc"}, backendName(p{prefix, "/"})},
		{"docs row 17", []p{{prefix, "/aaa"}}, []string{"/ccc"}, def},
		{"docs row 18", []p{{prefix, "/foo"}, {exact, "/foo"}}, []string{"/foo"}, backendName(p{exact, "/foo"})},
		{"docs row 18-reversed", []p{{exact, "/foo"}, {prefix, "/foo"}}, []string{"/foo"}, backendName(p{exact, "/foo"})},
		{"prefix matches a deeper path", []p{{prefix, "/foo/bar"}}, []string{"/foo/bar/baz"}, backendName(p{prefix, "/foo/bar"})},
		{"prefix is not a substring match", []p{{prefix, "/foo/bar"}}, []string{"/foo/barbaz"}, def},
		{"exact is case-sensitive", []p{{exact, "/foo"}}, []string{"/FOO"}, def},
		{"prefix is case-sensitive", []p{{prefix, "/foo"}}, []string{"/FOO/bar"}, def},
		{"exact beats shorter prefixes", []p{{prefix, "/aaa"}, {prefix, "/aaa/bbb"}, {exact, "/aaa/bbb/ccc"}}, []string{"/aaa/bbb/ccc"}, backendName(p{exact, "/aaa/bbb/ccc"})},
		{"longest prefix wins", []p{{prefix, "/a"}, {prefix, "/a/b"}}, []string{"/a/b/c"}, backendName(p{prefix, "/a/b"})},
		{"longest prefix wins, reversed order", []p{{prefix, "/a/b"}, {prefix, "/a"}}, []string{"/a/b/c"}, backendName(p{prefix, "/a/b"})},
		// Derived: a Prefix path's trailing slash does not make it longer than the Exact path.
		{"trailing-slash-tie", []p{{prefix, "/foo/"}, {exact, "/foo"}}, []string{"/foo"}, backendName(p{exact, "/foo"})},
		{"exact-with-slash-longer", []p{{prefix, "/foo"}, {exact, "/foo/"}}, []string{"/foo/"}, backendName(p{exact, "/foo/"})},
		// ImplementationSpecific is documented to behave as Prefix (see the package doc).
		{"IS-as-prefix", []p{{impl, "/aaa/bbb"}}, []string{"/aaa/bbb/ccc"}, backendName(p{impl, "/aaa/bbb"})},
		{"IS-elementwise", []p{{impl, "/aaa/bbb"}}, []string{"/aaa/bbbxyz"}, def},
		{"IS-vs-exact-tie", []p{{impl, "/foo"}, {exact, "/foo"}}, []string{"/foo"}, backendName(p{exact, "/foo"})},
	}
	for _, r := range rows {
		t.Run(r.row, func(t *testing.T) {
			withDef, _ := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{pathIngress(r.paths, true)}})
			noDef, _ := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{pathIngress(r.paths, false)}})
			for _, req := range r.reqs {
				if got := winner(withDef, "any.example", req); got != r.want {
					t.Errorf("paths %v, request %q: winner %q, want %q", r.paths, req, got, r.want)
				}
				// Without a defaultBackend a miss is the appliance's 404.
				want := r.want
				if want == def {
					want = "404"
				}
				if got := winner(noDef, "any.example", req); got != want {
					t.Errorf("paths %v, request %q, no defaultBackend: got %q, want %q", r.paths, req, got, want)
				}
			}
		})
	}
}

// TestHostMatchingTable is the host matching examples of the Kubernetes Ingress documentation
// plus exact and empty rule hosts.
func TestHostMatchingTable(t *testing.T) {
	rows := []struct {
		rule, header string
		want         bool
	}{
		{"*.foo.com", "bar.foo.com", true},
		{"*.foo.com", "baz.bar.foo.com", false},
		{"*.foo.com", "foo.com", false},
		{"foo.bar.com", "foo.bar.com", true},
		{"foo.bar.com", "x.foo.bar.com", false},
		{"", "anything.example", true},
	}
	for _, r := range rows {
		if got := MatchHost(r.rule, r.header); got != r.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", r.rule, r.header, got, r.want)
		}
		// The same through the compiled table, with the Host header forms clients send.
		ing := pathIngress([]p{{prefix, "/"}}, false)
		ing.Spec.Rules[0].Host = r.rule
		tab, _ := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{ing}})
		for _, h := range []string{r.header, strings.ToUpper(r.header), r.header + ":8080", r.header + "."} {
			if got := tab.Lookup(h, "/") != nil; got != r.want {
				t.Errorf("rule host %q, Host header %q: matched %v, want %v", r.rule, h, got, r.want)
			}
		}
	}
}

func fixture(t *testing.T, y string) *networkingv1.Ingress {
	t.Helper()
	ing := &networkingv1.Ingress{}
	if err := yaml.UnmarshalStrict([]byte(y), ing); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	if ing.Namespace == "" {
		ing.Namespace = "default"
	}
	return ing
}

// Example Ingresses copied verbatim from the Kubernetes Ingress documentation.
const (
	fixtureWildcardHost = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ingress-wildcard-host
spec:
  rules:
  - host: "foo.bar.com"
    http:
      paths:
      - pathType: Prefix
        path: "/bar"
        backend:
          service:
            name: service1
            port:
              number: 80
  - host: "*.foo.com"
    http:
      paths:
      - pathType: Prefix
        path: "/foo"
        backend:
          service:
            name: service2
            port:
              number: 80
`
	fixtureFanout = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: simple-fanout-example
spec:
  rules:
  - host: foo.bar.com
    http:
      paths:
      - path: /foo
        pathType: Prefix
        backend:
          service:
            name: service1
            port:
              number: 4200
      - path: /bar
        pathType: Prefix
        backend:
          service:
            name: service2
            port:
              number: 8080
`
	fixtureVirtualHost = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: name-virtual-host-ingress
spec:
  rules:
  - host: foo.bar.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service1
            port:
              number: 80
  - host: bar.foo.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service2
            port:
              number: 80
`
	fixtureNoThirdHost = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: name-virtual-host-ingress-no-third-host
spec:
  rules:
  - host: first.bar.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service1
            port:
              number: 80
  - host: second.bar.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service2
            port:
              number: 80
  - http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service3
            port:
              number: 80
`
	fixtureTestIngress = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: test-ingress
spec:
  defaultBackend:
    service:
      name: test
      port:
        number: 80
`
	fixtureResourceBackend = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ingress-resource-backend
spec:
  defaultBackend:
    resource:
      apiGroup: k8s.example.com
      kind: StorageBucket
      name: static-assets
  rules:
    - http:
        paths:
          - path: /icons
            pathType: ImplementationSpecific
            backend:
              resource:
                apiGroup: k8s.example.com
                kind: StorageBucket
                name: icon-assets
`
)

// TestFixtureRouting routes requests through the example Ingresses: wildcard host, simple
// fanout, name-based virtual hosts (with and without a catch-all rule), single default backend.
func TestFixtureRouting(t *testing.T) {
	cases := []struct {
		fixture          string
		host, path, want string
	}{
		{fixtureWildcardHost, "foo.bar.com", "/bar", "service1"},
		{fixtureWildcardHost, "foo.bar.com", "/foo", "404"},
		{fixtureWildcardHost, "x.foo.com", "/foo/y", "service2"},
		{fixtureWildcardHost, "a.b.foo.com", "/foo", "404"},
		{fixtureWildcardHost, "foo.com", "/foo", "404"},
		{fixtureFanout, "foo.bar.com", "/foo", "service1"},
		{fixtureFanout, "foo.bar.com", "/bar/x", "service2"},
		{fixtureFanout, "foo.bar.com", "/baz", "404"},
		{fixtureFanout, "other.com", "/foo", "404"},
		{fixtureVirtualHost, "foo.bar.com", "/", "service1"},
		{fixtureVirtualHost, "bar.foo.com", "/x", "service2"},
		{fixtureVirtualHost, "baz.foo.com", "/", "404"},
		{fixtureNoThirdHost, "first.bar.com", "/", "service1"},
		{fixtureNoThirdHost, "second.bar.com", "/a", "service2"},
		{fixtureNoThirdHost, "third.bar.com", "/", "service3"},
		{fixtureNoThirdHost, "10.213.0.1", "/", "service3"},
		{fixtureTestIngress, "anything", "/any/path", "test"},
	}
	for _, c := range cases {
		ing := fixture(t, c.fixture)
		tab, problems := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{ing}})
		if got := winner(tab, c.host, c.path); got != c.want {
			t.Errorf("%s: host %q path %q: got %q, want %q", ing.Name, c.host, c.path, got, c.want)
		}
		// No Services exist here: every backend is reported missing, and nothing else.
		for _, pr := range problems {
			if pr.Reason != "BackendUnavailable" {
				t.Errorf("%s: unexpected problem %+v", ing.Name, pr)
			}
		}
	}
	tab, _ := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{fixture(t, fixtureFanout)}})
	if tg := tab.Lookup("foo.bar.com", "/foo"); tg.Pool.Key != "default/service1:4200" || tg.Pool.Reason != "Service default/service1 not found" {
		t.Errorf("fanout /foo: pool %+v", tg.Pool)
	}
}

// TestHostPrecedence: an exact host beats a wildcard, and a host that has rules but no matching
// path goes to the defaultBackend, not to host-less rules.
func TestHostPrecedence(t *testing.T) {
	mk := func(name, host, path, svc string, created int) *networkingv1.Ingress {
		ing := pathIngress(nil, false)
		ing.Name = name
		ing.CreationTimestamp = metav1.NewTime(time.Unix(int64(created), 0))
		ing.Spec.Rules = []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: path, PathType: new(prefix), Backend: svcBackend(svc)}}}}}}
		return ing
	}
	wild := mk("wild", "*.foo.com", "/", "wild", 1)
	exactHost := mk("exact", "bar.foo.com", "/api", "exact", 2)
	b := svcBackend("exact-default")
	exactHost.Spec.DefaultBackend = &b
	catchAll := mk("catchall", "", "/", "catchall", 3)
	late := mk("late", "bar.foo.com", "/api", "late", 4) // same rule, newer: loses
	for _, order := range [][]*networkingv1.Ingress{{wild, exactHost, catchAll, late}, {late, catchAll, exactHost, wild}} {
		tab, _ := Compile(Snapshot{Ingresses: order})
		for _, c := range []struct{ host, path, want string }{
			{"bar.foo.com", "/api/x", "exact"},
			{"bar.foo.com", "/other", "exact-default"},
			{"baz.foo.com", "/other", "wild"},
			{"elsewhere.com", "/other", "catchall"},
		} {
			if got := winner(tab, c.host, c.path); got != c.want {
				t.Errorf("host %q path %q: got %q, want %q", c.host, c.path, got, c.want)
			}
		}
	}
}

func TestResourceBackendsRefused(t *testing.T) {
	tab, problems := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{fixture(t, fixtureResourceBackend)}})
	if got := winner(tab, "x", "/icons"); got != "404" {
		t.Errorf("/icons: got %q, want 404 (resource backend refused)", got)
	}
	if len(problems) != 2 {
		t.Fatalf("problems: %+v, want 2", problems)
	}
	for _, pr := range problems {
		if pr.Reason != "ResourceBackendUnsupported" || pr.Ingress != "default/ingress-resource-backend" {
			t.Errorf("problem %+v", pr)
		}
	}
	if !strings.Contains(problems[1].Message, "spec.rules[0].http.paths[0].backend") || !strings.Contains(problems[1].Message, "icon-assets") {
		t.Errorf("message does not say where: %q", problems[1].Message)
	}
}

func TestIsOurs(t *testing.T) {
	class := func(name, controller string, def bool) *networkingv1.IngressClass {
		c := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: controller}}
		if def {
			c.Annotations = map[string]string{annotationDefaultClass: "true"}
		}
		return c
	}
	ours := class("flotilla", ControllerName, true)
	oursNotDefault := class("flotilla", ControllerName, false)
	other := class("nginx", "k8s.io/ingress-nginx", false)
	otherDefault := class("nginx", "k8s.io/ingress-nginx", true)
	hijack := class("flotilla", "example.com/other", true)
	ing := func(className, legacy string) *networkingv1.Ingress {
		i := &networkingv1.Ingress{}
		if className != "" {
			i.Spec.IngressClassName = &className
		}
		if legacy != "" {
			i.Annotations = map[string]string{annotationLegacyClass: legacy}
		}
		return i
	}
	cases := []struct {
		name    string
		ing     *networkingv1.Ingress
		classes []*networkingv1.IngressClass
		want    bool
	}{
		{"named ours", ing("flotilla", ""), []*networkingv1.IngressClass{ours, other}, true},
		{"named ours, not default", ing("flotilla", ""), []*networkingv1.IngressClass{oursNotDefault}, true},
		{"named other", ing("nginx", ""), []*networkingv1.IngressClass{ours, other}, false},
		{"named ours, class missing", ing("flotilla", ""), []*networkingv1.IngressClass{other}, false},
		{"named ours, foreign controller", ing("flotilla", ""), []*networkingv1.IngressClass{hijack}, false},
		{"legacy ours", ing("", "flotilla"), nil, true},
		{"legacy other", ing("", "nginx"), []*networkingv1.IngressClass{ours}, false},
		{"field beats legacy", ing("nginx", "flotilla"), []*networkingv1.IngressClass{ours, other}, false},
		{"unset, ours default", ing("", ""), []*networkingv1.IngressClass{ours, other}, true},
		{"unset, ours not default", ing("", ""), []*networkingv1.IngressClass{oursNotDefault, other}, false},
		{"unset, other default", ing("", ""), []*networkingv1.IngressClass{oursNotDefault, otherDefault}, false},
		{"unset, two defaults", ing("", ""), []*networkingv1.IngressClass{ours, otherDefault}, false},
		{"unset, no classes", ing("", ""), nil, false},
	}
	for _, c := range cases {
		if got, why := IsOurs(c.ing, c.classes, "flotilla"); got != c.want {
			t.Errorf("%s: got %v (%s), want %v", c.name, got, why, c.want)
		}
	}
}

func TestEndpoints(t *testing.T) {
	tr, fa := true, false
	cond := func(ready, serving, terminating *bool) discoveryv1.EndpointConditions {
		return discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}
	}
	slice := func(portName string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: new(corev1.ProtocolTCP)}}}
	}
	ep := func(ip string, c discoveryv1.EndpointConditions) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: c}
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "admin", Port: 9000, Protocol: corev1.ProtocolTCP}}}}
	byNum := networkingv1.ServiceBackendPort{Number: 80}
	byName := networkingv1.ServiceBackendPort{Name: "admin"}
	cases := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		port   networkingv1.ServiceBackendPort
		want   []string
		reason string
	}{
		{"ready only", svc, []*discoveryv1.EndpointSlice{slice("http", 8080,
			ep("10.244.0.2", cond(&tr, &tr, &fa)), ep("10.244.0.3", cond(&fa, &fa, &fa)), ep("10.244.0.4", cond(nil, nil, nil)))},
			byNum, []string{"10.244.0.2:8080", "10.244.0.4:8080"}, ""},
		{"named port maps to its slice port", svc, []*discoveryv1.EndpointSlice{slice("http", 8080, ep("10.244.0.2", cond(&tr, nil, nil))),
			slice("admin", 9090, ep("10.244.0.2", cond(&tr, nil, nil)))}, byName, []string{"10.244.0.2:9090"}, ""},
		{"deduplicated across slices", svc, []*discoveryv1.EndpointSlice{slice("http", 8080, ep("10.244.0.2", cond(&tr, nil, nil))),
			slice("http", 8080, ep("10.244.0.2", cond(&tr, nil, nil)))}, byNum, []string{"10.244.0.2:8080"}, ""},
		{"terminating fallback when none ready", svc, []*discoveryv1.EndpointSlice{slice("http", 8080,
			ep("10.244.0.2", cond(&fa, &tr, &tr)), ep("10.244.0.3", cond(&fa, &fa, &tr)))}, byNum, []string{"10.244.0.2:8080"}, ""},
		{"terminating ignored while one is ready", svc, []*discoveryv1.EndpointSlice{slice("http", 8080,
			ep("10.244.0.2", cond(&fa, &tr, &tr)), ep("10.244.0.3", cond(&tr, &tr, &fa)))}, byNum, []string{"10.244.0.3:8080"}, ""},
		{"no endpoints", svc, nil, byNum, []string{}, ""},
		{"missing service", nil, nil, byNum, nil, "not found"},
		{"missing port", svc, nil, networkingv1.ServiceBackendPort{Number: 81}, nil, "has no port 81"},
		{"missing port name", svc, nil, networkingv1.ServiceBackendPort{Name: "x"}, nil, `has no port named "x"`},
		{"external name", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}, nil, byNum, nil, "type ExternalName is not supported as an Ingress backend"},
	}
	for _, c := range cases {
		got, reason := Endpoints(c.svc, c.slices, c.port)
		if !slices.Equal(got, c.want) || reason != c.reason {
			t.Errorf("%s: got %v %q, want %v %q", c.name, got, reason, c.want, c.reason)
		}
	}
}

func TestMergeStatus(t *testing.T) {
	lb := func(ips ...string) []networkingv1.IngressLoadBalancerIngress {
		var out []networkingv1.IngressLoadBalancerIngress
		for _, ip := range ips {
			out = append(out, networkingv1.IngressLoadBalancerIngress{IP: ip})
		}
		return out
	}
	nodes := map[string]bool{"10.213.0.1": true, "10.213.0.2": true, "10.213.0.3": true}
	cases := []struct {
		name      string
		cur       []networkingv1.IngressLoadBalancerIngress
		mine      []string
		want      []networkingv1.IngressLoadBalancerIngress
		unchanged bool
	}{
		{"empty", nil, []string{"10.213.0.1"}, lb("10.213.0.1"), false},
		{"merge with others", lb("10.213.0.3", "10.213.0.2"), []string{"10.213.0.1"}, lb("10.213.0.1", "10.213.0.2", "10.213.0.3"), false},
		{"already present", lb("10.213.0.1", "10.213.0.2"), []string{"10.213.0.1"}, lb("10.213.0.1", "10.213.0.2"), true},
		{"gone host removed", lb("10.213.0.9", "10.213.0.2"), []string{"10.213.0.1"}, lb("10.213.0.1", "10.213.0.2"), false},
		{"duplicates removed", lb("10.213.0.2", "10.213.0.2"), []string{"10.213.0.1"}, lb("10.213.0.1", "10.213.0.2"), false},
		{"hostname entries kept", []networkingv1.IngressLoadBalancerIngress{{Hostname: "lb.example"}}, []string{"10.213.0.1"},
			[]networkingv1.IngressLoadBalancerIngress{{IP: "", Hostname: "lb.example"}, {IP: "10.213.0.1"}}, false},
	}
	for _, c := range cases {
		got := MergeStatus(c.cur, c.mine, nodes)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// selfSigned returns a PEM certificate and key for the names.
func selfSigned(t testing.TB, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func tlsSecret(t testing.TB, name string, names ...string) *corev1.Secret {
	c, k := selfSigned(t, names...)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: c, corev1.TLSPrivateKeyKey: k}}
}

// TestCertificateSelection: SNI picks the tls entry's Secret by exact and wildcard host; a
// missing or malformed Secret is a problem, not a crash.
func TestCertificateSelection(t *testing.T) {
	ing := pathIngress([]p{{prefix, "/"}}, false)
	ing.Spec.TLS = []networkingv1.IngressTLS{
		{Hosts: []string{"https-example.foo.com"}, SecretName: "testsecret-tls"},
		{Hosts: []string{"*.wild.com"}, SecretName: "wild"},
		{Hosts: []string{"missing.com"}, SecretName: "nope"},
		{Hosts: []string{"bad.com"}, SecretName: "bad"},
	}
	bad := tlsSecret(t, "bad", "bad.com")
	bad.Data[corev1.TLSPrivateKeyKey] = []byte("not a key")
	tab, problems := Compile(Snapshot{Ingresses: []*networkingv1.Ingress{ing},
		Secrets: []*corev1.Secret{tlsSecret(t, "testsecret-tls", "https-example.foo.com"), tlsSecret(t, "wild", "*.wild.com"), bad}})
	leaf := func(name string) string {
		c := tab.Certificate(name)
		if c == nil {
			return ""
		}
		x, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.Subject.CommonName
	}
	for name, want := range map[string]string{"https-example.foo.com": "https-example.foo.com", "HTTPS-example.foo.com": "https-example.foo.com",
		"a.wild.com": "*.wild.com", "a.b.wild.com": "", "wild.com": "", "missing.com": "", "bad.com": "", "": ""} {
		if got := leaf(name); got != want {
			t.Errorf("SNI %q: certificate %q, want %q", name, got, want)
		}
	}
	var reasons []string
	for _, pr := range problems {
		if pr.Reason != "BackendUnavailable" {
			reasons = append(reasons, pr.Reason)
		}
	}
	if !slices.Equal(reasons, []string{"TLSSecretMissing", "TLSSecretInvalid"}) {
		t.Errorf("problems %v", problems)
	}
}
