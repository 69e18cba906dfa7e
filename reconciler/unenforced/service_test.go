package unenforced

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Source ranges are named for LoadBalancer Services only, as the field or the annotation.
func TestServiceSettings(t *testing.T) {
	lb := func(ranges []string, annotations map[string]string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: corev1.ServiceSpec{Type: typ, LoadBalancerSourceRanges: ranges}}
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{"plain LoadBalancer", lb(nil, nil, corev1.ServiceTypeLoadBalancer), nil},
		{"field", lb([]string{"10.0.0.0/8"}, nil, corev1.ServiceTypeLoadBalancer), []string{"spec.loadBalancerSourceRanges is not carried out"}},
		{"annotation", lb(nil, map[string]string{corev1.AnnotationLoadBalancerSourceRangesKey: "10.0.0.0/8"}, corev1.ServiceTypeLoadBalancer),
			[]string{"annotation service.beta.kubernetes.io/load-balancer-source-ranges is not carried out"}},
		{"not a LoadBalancer", lb([]string{"10.0.0.0/8"}, nil, corev1.ServiceTypeClusterIP), nil},
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
