package unenforced

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The topology-mode annotation (and its older name) is named when it asks for Auto;
// trafficDistribution and source ranges are carried out.
func TestServiceSettings(t *testing.T) {
	preferClose := corev1.ServiceTrafficDistributionPreferClose
	annotated := func(k, v string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: v}}}
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{"plain", &corev1.Service{}, nil},
		{"topology-mode Auto", annotated(corev1.AnnotationTopologyMode, "Auto"),
			[]string{"annotation service.kubernetes.io/topology-mode: Auto is not carried out"}},
		{"topology-aware-hints auto", annotated(corev1.DeprecatedAnnotationTopologyAwareHints, "auto"),
			[]string{"annotation service.kubernetes.io/topology-aware-hints: auto is not carried out"}},
		{"topology-mode Disabled", annotated(corev1.AnnotationTopologyMode, "Disabled"), nil},
		{"trafficDistribution is carried out", &corev1.Service{Spec: corev1.ServiceSpec{TrafficDistribution: &preferClose}}, nil},
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
