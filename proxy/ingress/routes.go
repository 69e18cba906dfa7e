package ingress

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const (
	// ControllerName is the IngressClass spec.controller this proxy implements.
	ControllerName = "flotilla.dev/ingress"
	// DefaultClassName is the IngressClass created by EnsureClass and served by default.
	DefaultClassName = "flotilla"
	// AnnotationSSLRedirect set to "true" on an Ingress makes its plain-HTTP requests redirect to HTTPS.
	AnnotationSSLRedirect = "flotilla.dev/ssl-redirect"

	annotationLegacyClass  = "kubernetes.io/ingress.class"
	annotationDefaultClass = networkingv1.AnnotationIsDefaultIngressClass
)

// IsOurs reports whether the proxy serving class className must serve ing, and why.
// spec.ingressClassName wins over the legacy annotation; an Ingress naming neither is ours only
// when exactly one IngressClass is marked default and it is ours.
func IsOurs(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass, className string) (bool, string) {
	ours := func(name string) (bool, string) {
		if name != className {
			return false, fmt.Sprintf("class %q is not %q", name, className)
		}
		for _, c := range classes {
			if c.Name == name {
				if c.Spec.Controller != ControllerName {
					return false, fmt.Sprintf("IngressClass %q names controller %q, not %q", name, c.Spec.Controller, ControllerName)
				}
				return true, "ingressClassName"
			}
		}
		return false, fmt.Sprintf("IngressClass %q does not exist", name)
	}
	if n := ing.Spec.IngressClassName; n != nil {
		return ours(*n)
	}
	if n, ok := ing.Annotations[annotationLegacyClass]; ok {
		// The legacy annotation predates IngressClass objects: it names the class directly.
		if n == className {
			return true, annotationLegacyClass
		}
		return false, fmt.Sprintf("annotation %s=%q is not %q", annotationLegacyClass, n, className)
	}
	var defaults []*networkingv1.IngressClass
	for _, c := range classes {
		if c.Annotations[annotationDefaultClass] == "true" {
			defaults = append(defaults, c)
		}
	}
	if len(defaults) != 1 {
		return false, fmt.Sprintf("no class set and %d IngressClasses are marked default (need exactly 1)", len(defaults))
	}
	if ok, why := ours(defaults[0].Name); !ok {
		return false, "default class: " + why
	}
	return true, "default class"
}

// MatchHost reports whether an Ingress rule host (exact, or "*." wildcard covering exactly one
// DNS label) matches a normalized request host, as the Kubernetes Ingress documentation's host
// examples show. An empty rule host matches all.
func MatchHost(ruleHost, host string) bool {
	ruleHost = strings.ToLower(ruleHost)
	if ruleHost == "" {
		return true
	}
	if suffix, ok := strings.CutPrefix(ruleHost, "*."); ok {
		i := strings.IndexByte(host, '.')
		return i > 0 && host[i+1:] == suffix
	}
	return ruleHost == host
}

// MatchPath reports whether an Ingress path of type pt matches the request path, as the
// Kubernetes Ingress documentation's path examples show: Exact is a case-sensitive string
// comparison; Prefix (and ImplementationSpecific, which this controller treats as Prefix) compares whole "/"-separated elements, ignoring a
// trailing slash on the configured path.
func MatchPath(pt networkingv1.PathType, path, reqPath string) bool {
	if pt == networkingv1.PathTypeExact {
		return path == reqPath
	}
	p := strings.TrimRight(path, "/")
	if p == "" {
		return true
	}
	return strings.HasPrefix(reqPath, p) && (len(reqPath) == len(p) || reqPath[len(p)] == '/')
}

// NormalizeHost turns a Host header into the form rules are compared with: no port, no
// brackets, no trailing dot, lower case.
func NormalizeHost(h string) string {
	return strings.ToLower(trimHost(h))
}

// trimHost is NormalizeHost without the lower-casing.
func trimHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && i > strings.LastIndexByte(h, ']') {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

// appendHostKey appends NormalizeHost(h) to buf. Lookup passes a buffer on its stack and
// indexes its maps with string(key), which Go does without a copy, so that routing a request
// allocates nothing even when the client's Host has capitals (ASCII ones; others take
// strings.ToLower).
func appendHostKey(buf []byte, h string) []byte {
	h = trimHost(h)
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= utf8.RuneSelf {
			return append(buf, strings.ToLower(h)...)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return buf
}

// Pool is the set of endpoints (ip:port) behind one Ingress backend, as compiled; Reason says
// why it is empty.
type Pool struct {
	Key       string // namespace/service:port
	Endpoints []string
	Reason    string
	broken    bool // the Service or its port is missing or unusable (not just unready)

	// proxy is the Server's reverse proxy to these endpoints, made on the first request.
	proxy atomic.Pointer[poolProxy]
}

// Target is what a request resolves to.
type Target struct {
	Ingress     string // namespace/name that supplied the rule
	Path        string // the matching rule path, "" for a default backend
	Pool        *Pool  // nil for a refused (resource) backend
	SSLRedirect bool
}

type route struct {
	path   string
	exact  bool
	order  int // position of the Ingress in age order, for ties between Ingresses
	target *Target
}

// matchLen is the length that ranks a route: a Prefix path's trailing slash matches nothing
// more, so "/foo/" (Prefix) ties with "/foo" (Exact) and Exact wins.
func (r route) matchLen() int {
	if r.exact {
		return len(r.path)
	}
	return len(strings.TrimRight(r.path, "/"))
}

type hostRoutes struct {
	routes   []route // in precedence order
	fallback *Target // defaultBackend of the Ingresses contributing these rules
}

// Table is an immutable compiled routing configuration; a new one replaces the old atomically.
type Table struct {
	exact    map[string]*hostRoutes
	wildcard map[string]*hostRoutes // keyed by the suffix after "*."
	anyHost  *hostRoutes
	def      *Target
	certs    map[string]*tls.Certificate // exact names and "*.suffix"
	defCert  *tls.Certificate
}

// Lookup returns the target for a request, or nil when nothing matches (404). The host
// picks the rule set first (exact host, then wildcard, then rules without host); the longest
// matching path wins inside it, Exact before Prefix on equal length.
func (t *Table) Lookup(host, path string) *Target {
	if t == nil {
		return nil
	}
	var buf [128]byte
	key := appendHostKey(buf[:0], host)
	hr := t.exact[string(key)]
	if hr == nil {
		if i := bytes.IndexByte(key, '.'); i > 0 {
			hr = t.wildcard[string(key[i+1:])]
		}
	}
	if hr == nil {
		hr = t.anyHost
	}
	if hr == nil {
		return t.def
	}
	for _, r := range hr.routes {
		pt := networkingv1.PathTypePrefix
		if r.exact {
			pt = networkingv1.PathTypeExact
		}
		if MatchPath(pt, r.path, path) {
			return r.target
		}
	}
	if hr.fallback != nil {
		return hr.fallback
	}
	return t.def
}

// Certificate returns the certificate for a TLS server name (SNI): exact name, then a wildcard
// covering its first label, then a certificate from a tls entry without hosts.
func (t *Table) Certificate(serverName string) *tls.Certificate {
	if t == nil {
		return nil
	}
	name := NormalizeHost(serverName)
	if c := t.certs[name]; c != nil {
		return c
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		if c := t.certs["*"+name[i:]]; c != nil {
			return c
		}
	}
	return t.defCert
}

// Problem is something in an Ingress that the proxy cannot serve as written.
type Problem struct {
	Ingress string // namespace/name
	Reason  string // CamelCase, used as the Event reason
	Message string
}

// Snapshot is the API state a Table is compiled from. Ingresses must already be filtered to
// this controller's class.
type Snapshot struct {
	Ingresses []*networkingv1.Ingress
	Services  []*corev1.Service
	Slices    []*discoveryv1.EndpointSlice
	Secrets   []*corev1.Secret
	// ParseCert turns a kubernetes.io/tls Secret into a certificate; nil parses every time.
	ParseCert func(*corev1.Secret) (*tls.Certificate, error)
}

// Compile builds the routing table from a snapshot. It has no I/O: everything it cannot serve
// is reported as a Problem and left out (resource backends, missing Secrets) or answers 503
// (missing Services, ports or endpoints).
func Compile(s Snapshot) (*Table, []Problem) {
	c := &compiler{
		t:        &Table{exact: map[string]*hostRoutes{}, wildcard: map[string]*hostRoutes{}, certs: map[string]*tls.Certificate{}},
		services: map[string]*corev1.Service{},
		slices:   map[string][]*discoveryv1.EndpointSlice{},
		secrets:  map[string]*corev1.Secret{},
		pools:    map[string]*Pool{},
		parse:    s.ParseCert,
	}
	if c.parse == nil {
		c.parse = ParseTLSSecret
	}
	for _, svc := range s.Services {
		c.services[svc.Namespace+"/"+svc.Name] = svc
	}
	for _, sl := range s.Slices {
		if n := sl.Labels[discoveryv1.LabelServiceName]; n != "" {
			k := sl.Namespace + "/" + n
			c.slices[k] = append(c.slices[k], sl)
		}
	}
	for _, sec := range s.Secrets {
		c.secrets[sec.Namespace+"/"+sec.Name] = sec
	}
	// Oldest first: on conflicting rules or default backends the oldest Ingress wins, so a new
	// Ingress cannot take over traffic that an existing one already serves.
	ings := slices.Clone(s.Ingresses)
	slices.SortStableFunc(ings, func(a, b *networkingv1.Ingress) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for i, ing := range ings {
		c.addIngress(i, ing)
	}
	for _, hr := range c.allHostRoutes() {
		slices.SortStableFunc(hr.routes, func(a, b route) int {
			if d := cmp.Compare(b.matchLen(), a.matchLen()); d != 0 {
				return d
			}
			if a.exact != b.exact {
				if a.exact {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.order, b.order)
		})
	}
	return c.t, c.problems
}

type compiler struct {
	t        *Table
	services map[string]*corev1.Service
	slices   map[string][]*discoveryv1.EndpointSlice
	secrets  map[string]*corev1.Secret
	pools    map[string]*Pool
	parse    func(*corev1.Secret) (*tls.Certificate, error)
	problems []Problem
}

func (c *compiler) problem(ing *networkingv1.Ingress, reason, format string, args ...any) {
	c.problems = append(c.problems, Problem{Ingress: ing.Namespace + "/" + ing.Name, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

func (c *compiler) allHostRoutes() []*hostRoutes {
	var out []*hostRoutes
	for _, hr := range c.t.exact {
		out = append(out, hr)
	}
	for _, hr := range c.t.wildcard {
		out = append(out, hr)
	}
	if c.t.anyHost != nil {
		out = append(out, c.t.anyHost)
	}
	return out
}

func (c *compiler) hostRoutes(host string) *hostRoutes {
	host = strings.ToLower(host)
	m, key := c.t.exact, host
	switch {
	case host == "":
		if c.t.anyHost == nil {
			c.t.anyHost = &hostRoutes{}
		}
		return c.t.anyHost
	case strings.HasPrefix(host, "*."):
		m, key = c.t.wildcard, host[2:]
	}
	hr := m[key]
	if hr == nil {
		hr = &hostRoutes{}
		m[key] = hr
	}
	return hr
}

func (c *compiler) addIngress(order int, ing *networkingv1.Ingress) {
	key := ing.Namespace + "/" + ing.Name
	redirect := ing.Annotations[AnnotationSSLRedirect] == "true"
	var def *Target
	if b := ing.Spec.DefaultBackend; b != nil {
		if t := c.target(ing, key, "", b, "spec.defaultBackend", redirect); t != nil {
			def = t
			if c.t.def == nil {
				c.t.def = t
			}
		}
	}
	for i, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		hr := c.hostRoutes(r.Host)
		if hr.fallback == nil && def != nil {
			hr.fallback = def
		}
		for j, p := range r.HTTP.Paths {
			field := fmt.Sprintf("spec.rules[%d].http.paths[%d]", i, j)
			t := c.target(ing, key, p.Path, &p.Backend, field+".backend", redirect)
			if t == nil {
				continue
			}
			path := p.Path
			if path == "" {
				path = "/"
			}
			exact := p.PathType != nil && *p.PathType == networkingv1.PathTypeExact
			hr.routes = append(hr.routes, route{path: path, exact: exact, order: order, target: t})
		}
	}
	for i, tl := range ing.Spec.TLS {
		c.addTLS(ing, i, tl)
	}
}

// target resolves one backend; resource backends are refused and return nil.
func (c *compiler) target(ing *networkingv1.Ingress, key, path string, b *networkingv1.IngressBackend, field string, redirect bool) *Target {
	if b.Resource != nil {
		c.problem(ing, "ResourceBackendUnsupported", "%s: resource backend %s/%s is not supported by %s; use a Service backend",
			field, b.Resource.Kind, b.Resource.Name, ControllerName)
		return nil
	}
	if b.Service == nil {
		c.problem(ing, "InvalidBackend", "%s: backend names no Service", field)
		return nil
	}
	p := c.pool(ing.Namespace, b.Service)
	if p.broken {
		c.problem(ing, "BackendUnavailable", "%s: %s", field, p.Reason)
	}
	return &Target{Ingress: key, Path: path, Pool: p, SSLRedirect: redirect}
}

func (c *compiler) pool(ns string, b *networkingv1.IngressServiceBackend) *Pool {
	port := b.Port.Name
	if port == "" {
		port = strconv.Itoa(int(b.Port.Number))
	}
	key := ns + "/" + b.Name + ":" + port
	if p := c.pools[key]; p != nil {
		return p
	}
	p := &Pool{Key: key}
	c.pools[key] = p
	eps, reason := Endpoints(c.services[ns+"/"+b.Name], c.slices[ns+"/"+b.Name], b.Port)
	p.Endpoints = eps
	switch {
	case reason != "":
		p.Reason, p.broken = fmt.Sprintf("Service %s/%s %s", ns, b.Name, reason), true
	case len(eps) == 0:
		p.Reason = "no ready endpoints for Service " + key
	}
	return p
}

// Endpoints returns the sorted, de-duplicated ip:port addresses that traffic for a Service
// port may go to: ready endpoints, or when none is ready the serving and terminating ones
// (as kube-proxy falls back), each address once. A non-empty reason explains why the Service
// port cannot be used at all.
func Endpoints(svc *corev1.Service, slcs []*discoveryv1.EndpointSlice, port networkingv1.ServiceBackendPort) ([]string, string) {
	if svc == nil {
		return nil, "not found"
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, "type ExternalName is not supported as an Ingress backend"
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if (port.Name != "" && p.Name == port.Name) || (port.Name == "" && p.Port == port.Number) {
			sp = p
			break
		}
	}
	if sp == nil {
		if port.Name != "" {
			return nil, fmt.Sprintf("has no port named %q", port.Name)
		}
		return nil, fmt.Sprintf("has no port %d", port.Number)
	}
	if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
		return nil, fmt.Sprintf("port %d is %s, not TCP", sp.Port, sp.Protocol)
	}
	ready, fallback := map[string]bool{}, map[string]bool{}
	for _, sl := range slcs {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		var num int32
		for _, p := range sl.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if name == sp.Name && proto == corev1.ProtocolTCP && p.Port != nil {
				num = *p.Port
			}
		}
		if num == 0 {
			continue
		}
		for _, e := range sl.Endpoints {
			isReady := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := e.Conditions.Serving == nil || *e.Conditions.Serving
			terminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			for _, a := range e.Addresses {
				hp := net.JoinHostPort(a, strconv.Itoa(int(num)))
				switch {
				case isReady:
					ready[hp] = true
				case serving && terminating:
					fallback[hp] = true
				}
			}
		}
	}
	set := ready
	if len(set) == 0 {
		set = fallback
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	slices.Sort(out)
	return out, ""
}

func (c *compiler) addTLS(ing *networkingv1.Ingress, i int, tl networkingv1.IngressTLS) {
	field := fmt.Sprintf("spec.tls[%d]", i)
	if tl.SecretName == "" {
		c.problem(ing, "TLSSecretMissing", "%s: secretName is empty; name a kubernetes.io/tls Secret", field)
		return
	}
	sec := c.secrets[ing.Namespace+"/"+tl.SecretName]
	if sec == nil {
		c.problem(ing, "TLSSecretMissing", "%s: Secret %s/%s of type kubernetes.io/tls not found", field, ing.Namespace, tl.SecretName)
		return
	}
	cert, err := c.parse(sec)
	if err != nil {
		c.problem(ing, "TLSSecretInvalid", "%s: Secret %s/%s: %v", field, ing.Namespace, tl.SecretName, err)
		return
	}
	if len(tl.Hosts) == 0 {
		if c.t.defCert == nil {
			c.t.defCert = cert
		}
		return
	}
	for _, h := range tl.Hosts {
		h = strings.ToLower(h)
		if _, taken := c.t.certs[h]; !taken {
			c.t.certs[h] = cert
		}
	}
}

// ParseTLSSecret reads tls.crt and tls.key of a kubernetes.io/tls Secret.
func ParseTLSSecret(sec *corev1.Secret) (*tls.Certificate, error) {
	if sec.Type != corev1.SecretTypeTLS {
		return nil, fmt.Errorf("type is %q; it must be %q", sec.Type, corev1.SecretTypeTLS)
	}
	cert, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("keys %s/%s do not hold a PEM certificate and its key: %w", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	return &cert, nil
}
