package network

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func renderedStrings(rs *hpRuleset) (dnat, masq []string) {
	for _, r := range rs.dnat {
		dnat = append(dnat, r.String())
	}
	for _, m := range rs.masq {
		masq = append(masq, m.String())
	}
	return dnat, masq
}

func TestHostPortsOf(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "side", Ports: []corev1.ContainerPort{{ContainerPort: 9000, HostPort: 19000, Protocol: corev1.ProtocolUDP}}}},
		Containers: []corev1.Container{{Name: "web", Ports: []corev1.ContainerPort{
			{ContainerPort: 8080, HostPort: 18080},
			{ContainerPort: 8443},
			{ContainerPort: 53, HostPort: 5353, HostIP: "10.213.0.1", Protocol: corev1.ProtocolSCTP},
		}}},
	}}
	want := []HostPort{
		{Protocol: corev1.ProtocolUDP, Port: 19000, ContainerPort: 9000},
		{Protocol: corev1.ProtocolTCP, Port: 18080, ContainerPort: 8080},
		{Protocol: corev1.ProtocolSCTP, HostIP: "10.213.0.1", Port: 5353, ContainerPort: 53},
	}
	if got := HostPortsOf(pod); !reflect.DeepEqual(got, want) {
		t.Fatalf("HostPortsOf = %+v, want %+v", got, want)
	}
	pod.Spec.HostNetwork = true
	if got := HostPortsOf(pod); got != nil {
		t.Fatalf("a host-network pod needs no DNAT, got %+v", got)
	}
}

func TestRenderHostPorts(t *testing.T) {
	a := netip.MustParseAddr("10.244.1.2")
	b := netip.MustParseAddr("10.244.1.3")
	cases := []struct {
		name       string
		entries    []hpEntry
		dnat, masq []string
	}{
		{
			name:    "nothing: no rules",
			entries: nil,
		},
		{
			name: "one TCP port on every address, one UDP port on one address",
			entries: []hpEntry{{PodHostPorts: PodHostPorts{Pod: "ns/web", IP: a, Ports: []HostPort{
				{Port: 18080, ContainerPort: 8080},
				{Protocol: corev1.ProtocolUDP, HostIP: "10.213.0.1", Port: 5353, ContainerPort: 53},
			}}}},
			dnat: []string{
				`ip daddr 10.213.0.1 meta l4proto udp th dport 5353 dnat to 10.244.1.2:53 comment "ns/web"`,
				`meta l4proto tcp th dport 18080 dnat to 10.244.1.2:8080 comment "ns/web"`,
			},
			masq: []string{`ip saddr 10.244.1.2 ip daddr 10.244.1.2 masquerade comment "ns/web"`},
		},
		{
			name: "the same port on one address and on every other: the specific rule first",
			entries: []hpEntry{{PodHostPorts: PodHostPorts{Pod: "ns/two", IP: a, Ports: []HostPort{
				{Port: 80, ContainerPort: 8080},
				{Port: 80, HostIP: "192.0.2.7", ContainerPort: 8081},
			}}}},
			dnat: []string{
				`ip daddr 192.0.2.7 meta l4proto tcp th dport 80 dnat to 10.244.1.2:8081 comment "ns/two"`,
				`meta l4proto tcp th dport 80 dnat to 10.244.1.2:8080 comment "ns/two"`,
			},
			masq: []string{`ip saddr 10.244.1.2 ip daddr 10.244.1.2 masquerade comment "ns/two"`},
		},
		{
			name: "a port held by an older pod stays with it; another protocol does not clash",
			entries: []hpEntry{
				{PodHostPorts: PodHostPorts{Pod: "ns/old", IP: b, Ports: []HostPort{{Port: 80, HostIP: "0.0.0.0", ContainerPort: 80}}}, order: 1},
				{PodHostPorts: PodHostPorts{Pod: "ns/new", IP: a, Ports: []HostPort{
					{Port: 80, HostIP: "10.213.0.1", ContainerPort: 8080},
					{Port: 80, Protocol: corev1.ProtocolUDP, ContainerPort: 8080},
				}}, order: 2},
			},
			dnat: []string{
				`meta l4proto tcp th dport 80 dnat to 10.244.1.3:80 comment "ns/old"`,
				`meta l4proto udp th dport 80 dnat to 10.244.1.2:8080 comment "ns/new"`,
			},
			masq: []string{
				`ip saddr 10.244.1.2 ip daddr 10.244.1.2 masquerade comment "ns/new"`,
				`ip saddr 10.244.1.3 ip daddr 10.244.1.3 masquerade comment "ns/old"`,
			},
		},
		{
			name: "invalid mappings are left out",
			entries: []hpEntry{{PodHostPorts: PodHostPorts{Pod: "ns/bad", IP: a, Ports: []HostPort{
				{Port: 70000, ContainerPort: 80},
				{Port: 81, HostIP: "fd00::1", ContainerPort: 80},
				{Port: 82, Protocol: "ICMP", ContainerPort: 80},
			}}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dnat, masq := renderedStrings(renderHostPorts(tc.entries))
			if !reflect.DeepEqual(dnat, tc.dnat) {
				t.Errorf("DNAT rules:\n got  %s\n want %s", strings.Join(dnat, "\n      "), strings.Join(tc.dnat, "\n      "))
			}
			if !reflect.DeepEqual(masq, tc.masq) {
				t.Errorf("masquerade rules:\n got  %s\n want %s", strings.Join(masq, "\n      "), strings.Join(tc.masq, "\n      "))
			}
		})
	}
}

// The bookkeeping below runs without the kernel: before the first Sync nothing is applied.

func TestHostPortsSetPodRefusesTakenPorts(t *testing.T) {
	h, err := NewHostPorts(HostPortsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a := PodHostPorts{Pod: "ns/a", IP: netip.MustParseAddr("10.244.1.2"), Ports: []HostPort{{Port: 80, HostIP: "10.213.0.1", ContainerPort: 8080}}}
	if err := h.SetPod("a", a); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		port    HostPort
		clashes bool
	}{
		{HostPort{Port: 80, ContainerPort: 80}, true},                                                    // every address covers a's
		{HostPort{Port: 80, HostIP: "10.213.0.1", ContainerPort: 80}, true},                              // same address
		{HostPort{Port: 80, HostIP: "10.213.0.2", ContainerPort: 80}, false},                             // another address
		{HostPort{Port: 80, Protocol: corev1.ProtocolUDP, ContainerPort: 80}, false},                     // another protocol
		{HostPort{Port: 81, HostIP: "10.213.0.1", ContainerPort: 80}, false},                             // another port
		{HostPort{Port: 80, HostIP: "10.213.0.1", Protocol: corev1.ProtocolTCP, ContainerPort: 1}, true}, // explicit TCP
	} {
		b := PodHostPorts{Pod: "ns/b", IP: netip.MustParseAddr("10.244.1.3"), Ports: []HostPort{tc.port}}
		err := h.SetPod("b", b)
		if tc.clashes != (err != nil) {
			t.Errorf("SetPod(%s): %v, want clash=%v", tc.port, err, tc.clashes)
		}
		if err := h.RemovePod("b"); err != nil {
			t.Fatal(err)
		}
	}
	// The pod itself may set its ports again (an agent restart, a new sandbox).
	a.IP = netip.MustParseAddr("10.244.1.9")
	if err := h.SetPod("a", a); err != nil {
		t.Fatalf("setting a pod's own ports again: %v", err)
	}
	if err := h.SetPod("v6", PodHostPorts{Pod: "ns/v6", IP: netip.MustParseAddr("fd00::5"), Ports: []HostPort{{Port: 90, ContainerPort: 90}}}); err == nil {
		t.Error("an IPv6 pod address was accepted")
	}
}
