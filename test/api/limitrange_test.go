package api

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestLimitRange: a namespace's LimitRange gives its new pods their missing requests and limits
// and refuses pods and claims outside its bounds, through the real API server (kubectl prints
// no "not enforced" warning any more).
func TestLimitRange(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, errOut, err := a.Kubectl(`apiVersion: v1
kind: LimitRange
metadata: {name: limits, namespace: default}
spec:
  limits:
  - type: Container
    default: {cpu: 500m, memory: 128Mi}
    defaultRequest: {cpu: 100m}
    max: {cpu: "1"}
  - type: PersistentVolumeClaim
    max: {storage: 10Gi}
`, "apply", "-f", "-")
	if err != nil || strings.Contains(errOut, "Warning") {
		t.Fatalf("LimitRange apply: %v, want no warning:\n%s", err, errOut)
	}
	pod := func(name string, limits corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "flotilla.local/hello:latest", Resources: corev1.ResourceRequirements{Limits: limits}}}}}
	}
	// The API server's informer sees the LimitRange a moment after its creation.
	var created *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Create(ctx, pod("defaulted", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		created = p
		return p.Spec.Containers[0].Resources.Limits != nil, nil
	}); err != nil {
		t.Fatalf("a pod never got the LimitRange's defaults: %v %+v", err, created)
	}
	created, err = c.CoreV1().Pods("default").Create(ctx, pod("defaulted", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := created.Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "100m" || r.Requests.Memory().String() != "128Mi" || r.Limits.Cpu().String() != "500m" || r.Limits.Memory().String() != "128Mi" {
		t.Errorf("defaulted pod's resources %+v, want requests cpu 100m memory 128Mi, limits cpu 500m memory 128Mi", r)
	}
	if got := created.Annotations["kubernetes.io/limit-ranger"]; got != "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app" {
		t.Errorf("annotation kubernetes.io/limit-ranger %q", got)
	}
	_, err = c.CoreV1().Pods("default").Create(ctx, pod("too-big", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "maximum cpu usage per Container is 1, but limit is 2") {
		t.Errorf("pod over the maximum: %v, want 403 naming the maximum", err)
	}
	_, errOut, err = a.Kubectl(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: huge, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 20Gi}}
`, "apply", "-f", "-")
	if err == nil || !strings.Contains(errOut, "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi") {
		t.Errorf("claim over the maximum: %v, want refused:\n%s", err, errOut)
	}
}
