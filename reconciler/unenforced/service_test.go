package unenforced

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// trafficDistribution is named, with its value; source ranges are carried out by the proxy.
func TestServiceSettings(t *testing.T) {
	preferClose := corev1.ServiceTrafficDistributionPreferClose
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{"plain", &corev1.Service{}, nil},
		{"trafficDistribution", &corev1.Service{Spec: corev1.ServiceSpec{TrafficDistribution: &preferClose}},
			[]string{"spec.trafficDistribution: PreferClose is not carried out"}},
		{"source ranges are carried out", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			LoadBalancerSourceRanges: []string{"10.0.0.0/8"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ServiceSettings(tc.svc)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d messages starting %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("message %d = %q, want it to start %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
