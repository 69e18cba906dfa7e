package validation

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Valid Services: example manifests from the Kubernetes documentation, and a few of our own.
var coreServiceFixtures = map[string]string{
	"simple-service": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - protocol: TCP
      port: 80
      targetPort: 9376
`,
	"named targetPort": `
apiVersion: v1
kind: Service
metadata:
  name: nginx-service
spec:
  selector:
    app.kubernetes.io/name: proxy
  ports:
  - name: name-of-service-port
    protocol: TCP
    port: 80
    targetPort: http-web-svc
`,
	"no selector": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  ports:
    - protocol: TCP
      port: 80
      targetPort: 9376
`,
	"multi-port": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - name: http
      protocol: TCP
      port: 80
      targetPort: 9376
    - name: https
      protocol: TCP
      port: 443
      targetPort: 9377
`,
	"ExternalName": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
  namespace: prod
spec:
  type: ExternalName
  externalName: my.database.example.com
`,
	"externalIPs": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - name: http
      protocol: TCP
      port: 80
      targetPort: 9376
  externalIPs:
    - 80.11.12.10
`,
	"headless": `
apiVersion: v1
kind: Service
metadata:
  name: busybox-subdomain
spec:
  selector:
    name: busybox
  clusterIP: None
  ports:
  - name: foo # name is not required for single-port Services
    port: 1234
`,
	"kube-dns static ClusterIP": `
apiVersion: v1
kind: Service
metadata:
  labels:
    k8s-app: kube-dns
    kubernetes.io/cluster-service: "true"
    kubernetes.io/name: CoreDNS
  name: kube-dns
  namespace: kube-system
spec:
  clusterIP: 10.96.0.10
  ports:
  - name: dns
    port: 53
    protocol: UDP
    targetPort: 53
  - name: dns-tcp
    port: 53
    protocol: TCP
    targetPort: 53
  selector:
    k8s-app: kube-dns
  type: ClusterIP
`,
	"internalTrafficPolicy Local": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app: MyApp
  ports:
    - protocol: TCP
      port: 80
      targetPort: 9376
  internalTrafficPolicy: Local
`,
	"NodePort 30007": `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  type: NodePort
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - port: 80
      targetPort: 80
      nodePort: 30007
  externalTrafficPolicy: Local
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 10800}}
`,
	"headless without ports": `
apiVersion: v1
kind: Service
metadata:
  name: peers
spec:
  clusterIP: None
  selector: {app: db}
`,
}

// coreServiceLB is a LoadBalancer with clusterIP 10.0.171.239, outside the default 10.96.0.0/12.
const coreServiceLB = `
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - protocol: TCP
      port: 80
      targetPort: 9376
  clusterIP: 10.0.171.239
  type: LoadBalancer
status:
  loadBalancer:
    ingress:
    - ip: 192.0.2.127
`

func TestCoreServiceFixturesValid(t *testing.T) {
	f := coreFuncs(t, "Service", DefaultOptions())
	for name, manifest := range coreServiceFixtures {
		t.Run(name, func(t *testing.T) {
			coreCheck(t, f.Create(coreFixture[corev1.Service](t, manifest)))
		})
	}
}

func TestCoreServiceClusterIPRange(t *testing.T) {
	svc := coreFixture[corev1.Service](t, coreServiceLB)
	errs := coreFuncs(t, "Service", DefaultOptions()).Create(svc)
	coreCheck(t, errs, cInv("spec.clusterIP"))
	if len(errs) == 1 && !strings.Contains(errs[0].Error(), "is not in the valid range. The range of valid IPs is 10.96.0.0/12") {
		t.Errorf("message does not name the valid range: %v", errs[0])
	}
	svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	coreCheck(t, coreFuncs(t, "Service", DefaultOptions()).Create(svc), cInv("spec.clusterIPs[0]"))

	// The same manifest is fine on a site whose service CIDR holds the address.
	opts := DefaultOptions()
	opts.ServiceCIDR = netip.MustParsePrefix("10.0.0.0/16")
	coreCheck(t, coreFuncs(t, "Service", opts).Create(svc))
}

func coreServiceBase(t *testing.T) *corev1.Service {
	s := coreFixture[corev1.Service](t, coreServiceFixtures["multi-port"])
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.ClusterIP = "10.96.12.7"
	s.Spec.ClusterIPs = []string{"10.96.12.7"}
	s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	return s
}

func TestCoreServiceInvalid(t *testing.T) {
	f := coreFuncs(t, "Service", DefaultOptions())
	cases := []struct {
		name   string
		mutate func(s *corev1.Service)
		want   []coreWant
	}{
		{"name starts with a digit", func(s *corev1.Service) { s.Name = "1web" }, []coreWant{cInv("metadata.name")}},
		{"no ports", func(s *corev1.Service) { s.Spec.Ports = nil }, []coreWant{cReq("spec.ports")}},
		{"unnamed port among several", func(s *corev1.Service) { s.Spec.Ports[1].Name = "" }, []coreWant{cReq("spec.ports[1].name")}},
		{"duplicate port name", func(s *corev1.Service) { s.Spec.Ports[1].Name = "http" }, []coreWant{cDup("spec.ports[1].name")}},
		{"port name not a DNS label", func(s *corev1.Service) { s.Spec.Ports[0].Name = "HTTP" }, []coreWant{cInv("spec.ports[0].name")}},
		{"port 0", func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 }, []coreWant{cReq("spec.ports[0].port")}},
		{"port too big", func(s *corev1.Service) { s.Spec.Ports[0].Port = 65536 }, []coreWant{cInv("spec.ports[0].port")}},
		{"duplicate port and protocol", func(s *corev1.Service) { s.Spec.Ports[1].Port = 80 }, []coreWant{cDup("spec.ports[1]")}},
		{"protocol unknown", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "HTTP" }, []coreWant{cNsup("spec.ports[0].protocol")}},
		{"targetPort too big", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(70000) }, []coreWant{cInv("spec.ports[0].targetPort")}},
		{"targetPort bad name", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http_web") }, []coreWant{cInv("spec.ports[0].targetPort")}},
		{"type unknown", func(s *corev1.Service) { s.Spec.Type = "Internal" }, []coreWant{cNsup("spec.type")}},
		{"nodePort on ClusterIP", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30080 }, []coreWant{cForb("spec.ports[0].nodePort")}},
		{"nodePort out of range", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 8080
		}, []coreWant{cInv("spec.ports[0].nodePort")}},
		{"None for NodePort", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"}
		}, []coreWant{cInv("spec.clusterIPs[0]")}},
		{"clusterIP not an IP", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.300", nil }, []coreWant{cInv("spec.clusterIP")}},
		{"clusterIPs disagree with clusterIP", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.12.8"} }, []coreWant{cInv("spec.clusterIPs[0]")}},
		{"network address of the range", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.0", nil }, []coreWant{cInv("spec.clusterIP")}},
		{"ExternalName without externalName", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
		}, []coreWant{cReq("spec.externalName")}},
		{"ExternalName with bad name", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
			s.Spec.ExternalName = "my_db.example.com"
		}, []coreWant{cInv("spec.externalName")}},
		{"ExternalName with clusterIP", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "db.example.com"
		}, []coreWant{cForb("spec.clusterIP"), cForb("spec.clusterIPs")}},
		{"sessionAffinity unknown", func(s *corev1.Service) { s.Spec.SessionAffinity = "Cookie" }, []coreWant{cNsup("spec.sessionAffinity")}},
		{"ClientIP timeout too long", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86401)}}
		}, []coreWant{cInv("spec.sessionAffinityConfig.clientIP.timeoutSeconds")}},
		{"externalTrafficPolicy on ClusterIP", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }, []coreWant{cInv("spec.externalTrafficPolicy")}},
		{"externalTrafficPolicy unknown", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = "Nearest"
		}, []coreWant{cNsup("spec.externalTrafficPolicy")}},
		{"internalTrafficPolicy unknown", func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To[corev1.ServiceInternalTrafficPolicy]("Node")
		}, []coreWant{cNsup("spec.internalTrafficPolicy")}},
		{"ipFamilyPolicy unknown", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr.To[corev1.IPFamilyPolicy]("DualStack") }, []coreWant{cNsup("spec.ipFamilyPolicy")}},
		{"selector bad value", func(s *corev1.Service) { s.Spec.Selector["app"] = "a b" }, []coreWant{cInv("spec.selector")}},
		{"externalIP loopback", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"127.0.0.1"} }, []coreWant{cInv("spec.externalIPs[0]")}},
		{"loadBalancerSourceRanges on ClusterIP", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"143.231.0.0/16"} }, []coreWant{cForb("spec.loadBalancerSourceRanges")}},
		{"bad loadBalancerSourceRange", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{"143.231.0.0/33"}
		}, []coreWant{cInv("spec.loadBalancerSourceRanges[0]")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := coreServiceBase(t)
			tc.mutate(s)
			coreCheck(t, f.Create(s), tc.want...)
		})
	}
}

func TestCoreServiceUpdate(t *testing.T) {
	f := coreFuncs(t, "Service", DefaultOptions())
	old := coreServiceBase(t)
	old.ResourceVersion = "7"

	s := old.DeepCopy()
	s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
	coreCheck(t, f.Update(s, old))

	s = old.DeepCopy()
	s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.12.9", []string{"10.96.12.9"}
	coreCheck(t, f.Update(s, old), cInv("spec.clusterIP"), cInv("spec.clusterIPs[0]"))

	s = old.DeepCopy()
	s.Spec.Type = corev1.ServiceTypeExternalName
	s.Spec.ExternalName = "db.example.com"
	s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
	coreCheck(t, f.Update(s, old))

	s = old.DeepCopy()
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
	coreCheck(t, f.Update(s, old))

	st := coreFixture[corev1.Service](t, coreServiceLB)
	st.Spec.ClusterIP = "10.96.0.20"
	st.ResourceVersion = "3"
	newSt := st.DeepCopy()
	coreCheck(t, f.StatusUpdate(newSt, st))
	newSt.Status.LoadBalancer.Ingress[0].IP = "192.0.2"
	newSt.Status.LoadBalancer.Ingress = append(newSt.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{Hostname: "lb.example.com", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
	coreCheck(t, f.StatusUpdate(newSt, st), cInv("status.loadBalancer.ingress[0].ip"), cForb("status.loadBalancer.ingress[1].ipMode"))
}

func TestCoreEndpoints(t *testing.T) {
	f := coreFuncs(t, "Endpoints", DefaultOptions())
	// The Endpoints example of the Kubernetes Service documentation.
	ep := coreFixture[corev1.Endpoints](t, `
apiVersion: v1
kind: Endpoints
metadata:
  name: my-service
subsets:
  - addresses:
      - ip: 192.0.2.42
    ports:
      - port: 9376
`)
	coreCheck(t, f.Create(ep))

	bad := ep.DeepCopy()
	bad.Subsets[0].Addresses = append(bad.Subsets[0].Addresses, corev1.EndpointAddress{IP: "not-an-ip"}, corev1.EndpointAddress{IP: "127.0.0.1"})
	bad.Subsets[0].Ports = append(bad.Subsets[0].Ports, corev1.EndpointPort{Name: "metrics", Port: 70000})
	bad.Subsets = append(bad.Subsets, corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "a", Port: 1}, {Name: "a", Port: 2}}})
	coreCheck(t, f.Create(bad),
		cInv("subsets[0].addresses[1].ip"), cInv("subsets[0].addresses[2].ip"),
		cReq("subsets[0].ports[0].name"), cInv("subsets[0].ports[1].port"),
		cReq("subsets[1]"), cDup("subsets[1].ports[1].name"))
}
