package services

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// svcOpt mutates a test Service.
type svcOpt func(*v1.Service)

func mkSvc(name, clusterIP string, port int32, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{Port: port, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func nodePort(np int32) svcOpt {
	return func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = np }
}

func etpLocal(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }

func itpLocal(s *v1.Service) {
	s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
}

func affinity(secs int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		if secs > 0 {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(secs)}}
		}
	}
}

func externalIP(ip string) svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, ip) }
}

// ep is an endpoint for mkSlice.
type ep struct {
	ip, node                    string
	ready, serving, terminating bool
	unknown                     bool // no conditions at all
}

func readyEP(ip, node string) ep { return ep{ip: ip, node: node, ready: true, serving: true} }

func mkSlice(name, svc string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(port), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}}
		if e.node != "" {
			x.NodeName = ptr.To(e.node)
		}
		if !e.unknown {
			x.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating)}
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func mkNode(name string, ips ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for i, ip := range ips {
		t := v1.NodeInternalIP
		if i > 0 {
			t = v1.NodeExternalIP
		}
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: t, Address: ip})
	}
	return n
}

// loadBalancer makes the Service a LoadBalancer whose status holds ip (as servicelb writes a
// host's address there), reachable only from ranges when any are given.
func loadBalancer(ip string, ranges ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = ranges
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
	}
}
