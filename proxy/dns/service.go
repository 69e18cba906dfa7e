package dns

import (
	"context"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// AnnotationServedByHost marks a Service whose address every host serves itself, so the
// Service proxy programs no rules for it.
const AnnotationServedByHost = "flotilla.dev/served-by-host"

// Name and namespace of the DNS Service, as pods and tools expect them.
const (
	ServiceName      = "kube-dns"
	ServiceNamespace = "kube-system"
)

// EnsureService creates (idempotently) the Service kube-system/kube-dns with clusterIP ip
// (ports dns 53/UDP and dns-tcp 53/TCP), label k8s-app=kube-dns, the annotation
// flotilla.dev/served-by-host=true and no selector. An existing one gets the label and
// annotation back if they were removed; one with another clusterIP is an error.
func EnsureService(ctx context.Context, client kubernetes.Interface, ip net.IP) error {
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: ServiceName, Namespace: ServiceNamespace,
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
				"kubernetes.io/name": "CoreDNS"},
			Annotations: map[string]string{AnnotationServedByHost: "true"},
		},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: ip.String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	svcs := client.CoreV1().Services(ServiceNamespace)
	// Get before Create: creating a second Service with a taken clusterIP fails on the IP
	// (422) before the name is checked, so AlreadyExists cannot be relied on.
	got, err := svcs.Get(ctx, ServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = svcs.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) { // namespace missing (a fresh cluster still creating it)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ServiceNamespace}}
			if _, nerr := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); nerr != nil && !apierrors.IsAlreadyExists(nerr) {
				return fmt.Errorf("create namespace %s for the DNS Service: %w", ServiceNamespace, nerr)
			}
			_, err = svcs.Create(ctx, want, metav1.CreateOptions{})
		}
		if err == nil {
			return nil
		}
		// Another host may have created it meanwhile; anything else is the error to report.
		var gerr error
		if got, gerr = svcs.Get(ctx, ServiceName, metav1.GetOptions{}); gerr != nil {
			return fmt.Errorf("create Service %s/%s with clusterIP %s: %w", ServiceNamespace, ServiceName, ip, err)
		}
	} else if err != nil {
		return fmt.Errorf("get Service %s/%s: %w", ServiceNamespace, ServiceName, err)
	}
	if got.Spec.ClusterIP != ip.String() {
		return fmt.Errorf("Service %s/%s has clusterIP %q, want %s: delete it (clusterIP is immutable) or set the DNS address to %s",
			ServiceNamespace, ServiceName, got.Spec.ClusterIP, ip, got.Spec.ClusterIP)
	}
	if got.Labels["k8s-app"] == "kube-dns" && got.Annotations[AnnotationServedByHost] == "true" {
		return nil
	}
	got = got.DeepCopy()
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	if got.Annotations == nil {
		got.Annotations = map[string]string{}
	}
	got.Labels["k8s-app"] = "kube-dns"
	got.Annotations[AnnotationServedByHost] = "true"
	if _, err := svcs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Service %s/%s: %w", ServiceNamespace, ServiceName, err)
	}
	return nil
}
