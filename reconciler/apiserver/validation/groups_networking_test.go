package validation

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Ingress examples of the Kubernetes Ingress documentation.
var ingressFixtures = map[string]string{
	"minimal-ingress": `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: minimal-ingress
spec:
  ingressClassName: nginx-example
  rules:
  - http:
      paths:
      - path: /testpath
        pathType: Prefix
        backend:
          service:
            name: test
            port:
              number: 80
`,
	"ingress-resource-backend": `
apiVersion: networking.k8s.io/v1
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
`,
	"ingress-wildcard-host": `
apiVersion: networking.k8s.io/v1
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
`,
	"test-ingress": `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: test-ingress
spec:
  defaultBackend:
    service:
      name: test
      port:
        number: 80
`,
	"simple-fanout-example": `
apiVersion: networking.k8s.io/v1
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
`,
	"name-virtual-host-ingress": `
apiVersion: networking.k8s.io/v1
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
`,
	"tls-example-ingress": `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: tls-example-ingress
spec:
  tls:
  - hosts:
      - https-example.foo.com
    secretName: testsecret-tls
  rules:
  - host: https-example.foo.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: service1
            port:
              number: 80
`,
}

func TestIngressFixtures(t *testing.T) {
	for name, y := range ingressFixtures {
		t.Run(name, func(t *testing.T) {
			checkErrs(t, ValidateIngress(fixture[networkingv1.Ingress](t, y, true)), none())
		})
	}
}

func TestValidateIngress(t *testing.T) {
	path0 := func(ing *networkingv1.Ingress) *networkingv1.HTTPIngressPath { return &ing.Spec.Rules[0].HTTP.Paths[0] }
	cases := []struct {
		name   string
		mutate func(*networkingv1.Ingress)
		want   []string
	}{
		{"named port", func(ing *networkingv1.Ingress) {
			path0(ing).Backend.Service.Port = networkingv1.ServiceBackendPort{Name: "http"}
		}, none()},
		{"exact path", func(ing *networkingv1.Ingress) { path0(ing).PathType = ptr.To(networkingv1.PathTypeExact) }, none()},
		{"no pathType", func(ing *networkingv1.Ingress) { path0(ing).PathType = nil },
			errs(req("spec.rules[0].http.paths[0].pathType"))},
		{"unknown pathType", func(ing *networkingv1.Ingress) {
			path0(ing).PathType = ptr.To[networkingv1.PathType]("Regex")
		}, errs(nsup("spec.rules[0].http.paths[0].pathType"))},
		{"relative Prefix path", func(ing *networkingv1.Ingress) { path0(ing).Path = "testpath" },
			errs(inv("spec.rules[0].http.paths[0].path"))},
		{"relative ImplementationSpecific path", func(ing *networkingv1.Ingress) {
			path0(ing).PathType = ptr.To(networkingv1.PathTypeImplementationSpecific)
			path0(ing).Path = "testpath"
		}, errs(inv("spec.rules[0].http.paths[0].path"))},
		{"double slash", func(ing *networkingv1.Ingress) { path0(ing).Path = "/test//path" },
			errs(inv("spec.rules[0].http.paths[0].path"))},
		{"dot-dot suffix", func(ing *networkingv1.Ingress) { path0(ing).Path = "/test/.." },
			errs(inv("spec.rules[0].http.paths[0].path"))},
		{"encoded slash", func(ing *networkingv1.Ingress) { path0(ing).Path = "/a%2Fb" },
			errs(inv("spec.rules[0].http.paths[0].path"))},
		{"both service and resource", func(ing *networkingv1.Ingress) {
			path0(ing).Backend.Resource = &corev1.TypedLocalObjectReference{Kind: "StorageBucket", Name: "b"}
		}, errs(inv("spec.rules[0].http.paths[0].backend"))},
		{"no backend", func(ing *networkingv1.Ingress) { path0(ing).Backend = networkingv1.IngressBackend{} },
			errs(inv("spec.rules[0].http.paths[0].backend"))},
		{"service name not DNS-1035", func(ing *networkingv1.Ingress) { path0(ing).Backend.Service.Name = "1test" },
			errs(inv("spec.rules[0].http.paths[0].backend.service.name"))},
		{"service without name", func(ing *networkingv1.Ingress) { path0(ing).Backend.Service.Name = "" },
			errs(req("spec.rules[0].http.paths[0].backend.service.name"))},
		{"port name and number", func(ing *networkingv1.Ingress) { path0(ing).Backend.Service.Port.Name = "http" },
			errs(inv("spec.rules[0].http.paths[0].backend.service.port"))},
		{"no port", func(ing *networkingv1.Ingress) { path0(ing).Backend.Service.Port = networkingv1.ServiceBackendPort{} },
			errs(req("spec.rules[0].http.paths[0].backend.service.port"))},
		{"port out of range", func(ing *networkingv1.Ingress) { path0(ing).Backend.Service.Port.Number = 70000 },
			errs(inv("spec.rules[0].http.paths[0].backend.service.port.number"))},
		{"IP host", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "10.0.0.1" },
			errs(inv("spec.rules[0].host"))},
		{"double wildcard", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "*.*.foo.com" },
			errs(inv("spec.rules[0].host"))},
		{"uppercase host", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].Host = "Foo.Bar.com" },
			errs(inv("spec.rules[0].host"))},
		{"no rules, no default backend", func(ing *networkingv1.Ingress) { ing.Spec.Rules = nil },
			errs(req("spec.rules"))},
		{"http without paths", func(ing *networkingv1.Ingress) { ing.Spec.Rules[0].HTTP.Paths = nil },
			errs(req("spec.rules[0].http.paths"))},
		{"bad tls host", func(ing *networkingv1.Ingress) {
			ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"foo_bar.com"}, SecretName: "tls"}}
		}, errs(inv("spec.tls[0].hosts[0]"))},
		{"bad ingressClassName", func(ing *networkingv1.Ingress) { ing.Spec.IngressClassName = ptr.To("Nginx") },
			errs(inv("spec.ingressClassName"))},
		{"class annotation disagrees", func(ing *networkingv1.Ingress) {
			ing.Annotations = map[string]string{annotationIngressClass: "traefik"}
		}, errs(inv("metadata.annotations[kubernetes.io/ingress.class]"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ing := fixture[networkingv1.Ingress](t, ingressFixtures["minimal-ingress"], true)
			c.mutate(ing)
			checkErrs(t, ValidateIngress(ing), c.want)
		})
	}

	ing := fixture[networkingv1.Ingress](t, ingressFixtures["minimal-ingress"], true)
	ing.Spec.Rules[0].HTTP.Paths[0].PathType = nil
	if got := ValidateIngress(ing).ToAggregate().Error(); got != "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified" {
		t.Errorf("pathType message: %s", got)
	}

	old := fixture[networkingv1.Ingress](t, ingressFixtures["simple-fanout-example"], true)
	upd := old.DeepCopy()
	upd.Spec.Rules = append(upd.Spec.Rules, *fixture[networkingv1.Ingress](t, ingressFixtures["name-virtual-host-ingress"], true).Spec.Rules[1].DeepCopy())
	checkErrs(t, ValidateIngressUpdate(upd, old), none())
	upd.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.123"}, {IP: "203.0.113.300"}, {Hostname: "10.0.0.1"}}
	checkErrs(t, ValidateIngressStatusUpdate(upd, old), errs(inv("status.loadBalancer.ingress[1].ip"), inv("status.loadBalancer.ingress[2].hostname")))
}

// IngressClass examples of the Kubernetes Ingress documentation.
const ingressClassesYAML = `
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: external-lb
spec:
  controller: example.com/ingress-controller
  parameters:
    apiGroup: k8s.example.com
    kind: IngressParameters
    name: external-lb
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: external-lb-1
spec:
  controller: example.com/ingress-controller
  parameters:
    scope: Cluster
    apiGroup: k8s.example.net
    kind: ClusterIngressParameter
    name: external-config-1
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: external-lb-2
spec:
  controller: example.com/ingress-controller
  parameters:
    scope: Namespace
    apiGroup: k8s.example.com
    kind: IngressParameter
    namespace: external-configuration
    name: external-config
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  labels:
    app.kubernetes.io/component: controller
  name: example-class
  annotations:
    ingressclass.kubernetes.io/is-default-class: "true"
spec:
  controller: k8s.io/example-class
`

func TestValidateIngressClass(t *testing.T) {
	docs := strings.Split(ingressClassesYAML, "\n---\n")
	for _, d := range docs {
		ic := fixture[networkingv1.IngressClass](t, d, false)
		t.Run(ic.Name, func(t *testing.T) { checkErrs(t, ValidateIngressClass(ic), none()) })
	}
	cases := []struct {
		name   string
		mutate func(*networkingv1.IngressClass)
		want   []string
	}{
		{"no controller", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "" }, errs(req("spec.controller"))},
		{"controller without domain", func(ic *networkingv1.IngressClass) { ic.Spec.Controller = "ingress-controller" },
			errs(inv("spec.controller"))},
		{"controller too long", func(ic *networkingv1.IngressClass) {
			ic.Spec.Controller = "example.com/" + strings.Repeat("a", 250)
		}, errs(long("spec.controller"))},
		{"namespace with Cluster scope", func(ic *networkingv1.IngressClass) {
			ic.Spec.Parameters.Namespace = ptr.To("external-configuration")
		}, errs(forb("spec.parameters.namespace"))},
		{"Namespace scope without namespace", func(ic *networkingv1.IngressClass) {
			ic.Spec.Parameters.Scope = ptr.To("Namespace")
		}, errs(req("spec.parameters.namespace"))},
		{"unknown scope", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Scope = ptr.To("Global") },
			errs(nsup("spec.parameters.scope"))},
		{"parameters without kind", func(ic *networkingv1.IngressClass) { ic.Spec.Parameters.Kind = "" },
			errs(req("spec.parameters.kind"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ic := fixture[networkingv1.IngressClass](t, docs[0], false)
			c.mutate(ic)
			checkErrs(t, ValidateIngressClass(ic), c.want)
		})
	}
	old := fixture[networkingv1.IngressClass](t, docs[0], false)
	upd := old.DeepCopy()
	upd.Spec.Controller = "flotilla.dev/ingress"
	checkErrs(t, ValidateIngressClassUpdate(upd, old), errs(inv("spec.controller")))
}

// NetworkPolicy examples of the Kubernetes documentation.
const (
	networkPolicyYAML = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: test-network-policy
  namespace: default
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
  - Ingress
  - Egress
  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
        except:
        - 172.17.1.0/24
    - namespaceSelector:
        matchLabels:
          project: myproject
    - podSelector:
        matchLabels:
          role: frontend
    ports:
    - protocol: TCP
      port: 6379
  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
    ports:
    - protocol: TCP
      port: 5978
`
	multiPortEgressYAML = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: multi-port-egress
  namespace: default
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
    - Egress
  egress:
    - to:
        - ipBlock:
            cidr: 10.0.0.0/24
      ports:
        - protocol: TCP
          port: 32000
          endPort: 32768
`
	egressNamespacesYAML = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: egress-namespaces
spec:
  podSelector:
    matchLabels:
      app: myapp
  policyTypes:
  - Egress
  egress:
  - to:
    - namespaceSelector:
        matchExpressions:
        - key: namespace
          operator: In
          values: ["frontend", "backend"]
`
)

func TestValidateNetworkPolicy(t *testing.T) {
	for _, y := range []string{networkPolicyYAML, multiPortEgressYAML, egressNamespacesYAML} {
		np := fixture[networkingv1.NetworkPolicy](t, y, true)
		t.Run(np.Name, func(t *testing.T) { checkErrs(t, ValidateNetworkPolicy(np), none()) })
	}
	from := func(np *networkingv1.NetworkPolicy) []networkingv1.NetworkPolicyPeer { return np.Spec.Ingress[0].From }
	port := func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicyPort {
		return &np.Spec.Ingress[0].Ports[0]
	}
	cases := []struct {
		name   string
		mutate func(*networkingv1.NetworkPolicy)
		want   []string
	}{
		{"named port", func(np *networkingv1.NetworkPolicy) { port(np).Port = ptr.To(intstr.FromString("redis")) }, none()},
		{"endPort below port", func(np *networkingv1.NetworkPolicy) { port(np).EndPort = ptr.To[int32](6000) },
			errs(inv("spec.ingress[0].ports[0].endPort"))},
		{"endPort with named port", func(np *networkingv1.NetworkPolicy) {
			port(np).Port = ptr.To(intstr.FromString("redis"))
			port(np).EndPort = ptr.To[int32](7000)
		}, errs(inv("spec.ingress[0].ports[0].endPort"))},
		{"endPort without port", func(np *networkingv1.NetworkPolicy) {
			port(np).Port = nil
			port(np).EndPort = ptr.To[int32](7000)
		}, errs(inv("spec.ingress[0].ports[0].endPort"))},
		{"port out of range", func(np *networkingv1.NetworkPolicy) { port(np).Port = ptr.To(intstr.FromInt32(0)) },
			errs(inv("spec.ingress[0].ports[0].port"))},
		{"protocol", func(np *networkingv1.NetworkPolicy) { port(np).Protocol = ptr.To[corev1.Protocol]("ICMP") },
			errs(nsup("spec.ingress[0].ports[0].protocol"))},
		{"bad cidr", func(np *networkingv1.NetworkPolicy) { from(np)[0].IPBlock.CIDR = "172.17.0.0/33" },
			errs(inv("spec.ingress[0].from[0].ipBlock.cidr"))},
		{"except outside cidr", func(np *networkingv1.NetworkPolicy) { from(np)[0].IPBlock.Except = []string{"10.1.0.0/24"} },
			errs(inv("spec.ingress[0].from[0].ipBlock.except[0]"))},
		{"except equal to cidr", func(np *networkingv1.NetworkPolicy) { from(np)[0].IPBlock.Except = []string{"172.17.0.0/16"} },
			errs(inv("spec.ingress[0].from[0].ipBlock.except[0]"))},
		{"empty cidr", func(np *networkingv1.NetworkPolicy) { from(np)[0].IPBlock.CIDR = "" },
			errs(req("spec.ingress[0].from[0].ipBlock.cidr"))},
		{"empty peer", func(np *networkingv1.NetworkPolicy) { from(np)[1] = networkingv1.NetworkPolicyPeer{} },
			errs(req("spec.ingress[0].from[1]"))},
		{"ipBlock with selector", func(np *networkingv1.NetworkPolicy) {
			from(np)[0].PodSelector = &metav1.LabelSelector{}
		}, errs(forb("spec.ingress[0].from[0]"))},
		{"policyType", func(np *networkingv1.NetworkPolicy) { np.Spec.PolicyTypes[1] = "Both" },
			errs(nsup("spec.policyTypes[1]"))},
		{"three policyTypes", func(np *networkingv1.NetworkPolicy) {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		}, errs(inv("spec.policyTypes"), dup("spec.policyTypes[2]"))},
		{"podSelector", func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpIn}}
		}, errs(req("spec.podSelector.matchExpressions[0].values"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			np := fixture[networkingv1.NetworkPolicy](t, networkPolicyYAML, true)
			c.mutate(np)
			checkErrs(t, ValidateNetworkPolicy(np), c.want)
		})
	}
}

// EndpointSlice examples of the Kubernetes documentation.
const (
	endpointSliceMyService = `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: my-service-1
  labels:
    kubernetes.io/service-name: my-service
addressType: IPv4
ports:
  - name: http
    appProtocol: http
    protocol: TCP
    port: 9376
endpoints:
  - addresses:
      - "10.4.5.6"
  - addresses:
      - "10.1.2.3"
`
	endpointSliceExampleABC = `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: example-abc
  labels:
    kubernetes.io/service-name: example
addressType: IPv4
ports:
  - name: http
    protocol: TCP
    port: 80
endpoints:
  - addresses:
      - "10.1.2.3"
    conditions:
      ready: true
    hostname: pod-1
    nodeName: node-1
    zone: us-west2-a
`
)

func TestValidateEndpointSlice(t *testing.T) {
	for _, y := range []string{endpointSliceMyService, endpointSliceExampleABC} {
		es := fixture[discoveryv1.EndpointSlice](t, y, true)
		t.Run(es.Name, func(t *testing.T) { checkErrs(t, ValidateEndpointSlice(es), none()) })
	}
	manyAddrs := make([]string, 101)
	for i := range manyAddrs {
		manyAddrs[i] = fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
	}
	cases := []struct {
		name   string
		mutate func(*discoveryv1.EndpointSlice)
		want   []string
	}{
		{"IPv6", func(es *discoveryv1.EndpointSlice) {
			es.AddressType = discoveryv1.AddressTypeIPv6
			es.Endpoints[0].Addresses = []string{"fd00::1"}
		}, none()},
		{"FQDN", func(es *discoveryv1.EndpointSlice) {
			es.AddressType = discoveryv1.AddressTypeFQDN
			es.Endpoints[0].Addresses = []string{"db.example.com"}
		}, none()},
		{"unknown addressType", func(es *discoveryv1.EndpointSlice) { es.AddressType = "IPX" }, errs(nsup("addressType"))},
		{"IPv6 address in IPv4 slice", func(es *discoveryv1.EndpointSlice) { es.Endpoints[0].Addresses = []string{"fd00::1"} },
			errs(inv("endpoints[0].addresses[0]"))},
		{"not an IP", func(es *discoveryv1.EndpointSlice) { es.Endpoints[0].Addresses = []string{"10.1.2"} },
			errs(inv("endpoints[0].addresses[0]"))},
		{"no addresses", func(es *discoveryv1.EndpointSlice) { es.Endpoints[0].Addresses = nil },
			errs(req("endpoints[0].addresses"))},
		{"101 addresses", func(es *discoveryv1.EndpointSlice) { es.Endpoints[0].Addresses = manyAddrs },
			errs(many("endpoints[0].addresses"))},
		{"1001 endpoints", func(es *discoveryv1.EndpointSlice) {
			es.Endpoints = make([]discoveryv1.Endpoint, 1001)
			for i := range es.Endpoints {
				es.Endpoints[i].Addresses = []string{"10.1.2.3"}
			}
		}, errs(many("endpoints"))},
		{"bad hostname", func(es *discoveryv1.EndpointSlice) { es.Endpoints[0].Hostname = ptr.To("pod.1") },
			errs(inv("endpoints[0].hostname"))},
		{"duplicate port name", func(es *discoveryv1.EndpointSlice) {
			es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To("http"), Port: ptr.To[int32](81)})
		}, errs(dup("ports[1].name"))},
		{"port name not a DNS label", func(es *discoveryv1.EndpointSlice) { es.Ports[0].Name = ptr.To("HTTP") },
			errs(inv("ports[0].name"))},
		{"port 0", func(es *discoveryv1.EndpointSlice) { es.Ports[0].Port = ptr.To[int32](0) }, errs(inv("ports[0].port"))},
		{"protocol", func(es *discoveryv1.EndpointSlice) { es.Ports[0].Protocol = ptr.To[corev1.Protocol]("HTTP") },
			errs(nsup("ports[0].protocol"))},
		{"service-name label", func(es *discoveryv1.EndpointSlice) { es.Labels[discoveryv1.LabelServiceName] = "1-service" },
			errs(inv("metadata.labels[kubernetes.io/service-name]"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es := fixture[discoveryv1.EndpointSlice](t, endpointSliceExampleABC, true)
			c.mutate(es)
			checkErrs(t, ValidateEndpointSlice(es), c.want)
		})
	}

	old := fixture[discoveryv1.EndpointSlice](t, endpointSliceMyService, true)
	upd := old.DeepCopy()
	upd.Endpoints = upd.Endpoints[:1]
	checkErrs(t, ValidateEndpointSliceUpdate(upd, old), none())
	upd.AddressType = discoveryv1.AddressTypeFQDN
	upd.Endpoints[0].Addresses = []string{"db.example.com"}
	checkErrs(t, ValidateEndpointSliceUpdate(upd, old), errs(inv("addressType")))
}
