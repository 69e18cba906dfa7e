package api

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestPriorityRuntimeClassAutoscaling drives scheduling.k8s.io PriorityClass, node.k8s.io
// RuntimeClass, autoscaling/v1+v2 HorizontalPodAutoscaler and the warnings about kinds flotilla
// stores but does not enforce, through kubectl and client-go.
func TestPriorityRuntimeClassAutoscaling(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	ctx := context.Background()

	out := a.MustKubectl("", "api-resources", "--no-headers")
	for _, want := range []string{
		`(?m)^priorityclasses\s+pc\s+scheduling.k8s.io/v1\s+false\s+PriorityClass$`,
		`(?m)^runtimeclasses\s+node.k8s.io/v1\s+false\s+RuntimeClass$`,
		`(?m)^horizontalpodautoscalers\s+hpa\s+autoscaling/v2\s+true\s+HorizontalPodAutoscaler$`,
	} {
		if !regexpMatch(want, out) {
			t.Errorf("api-resources lacks %s:\n%s", want, out)
		}
	}

	// The built-in classes are created on start and cannot be deleted.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out = a.MustKubectl("", "get", "priorityclasses", "--no-headers")
		if strings.Count(out, "system-") == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{`(?m)^system-cluster-critical\s+2000000000\s+false\s+\S+\s+PreemptLowerPriority$`,
		`(?m)^system-node-critical\s+2000001000\s+false\s+\S+\s+PreemptLowerPriority$`} {
		if !regexpMatch(want, out) {
			t.Errorf("kubectl get pc lacks %s:\n%s", want, out)
		}
	}
	if _, errOut, err := a.Kubectl("", "delete", "pc", "system-node-critical"); err == nil || !strings.Contains(errOut, "this is a system priority class and cannot be deleted") {
		t.Errorf("built-in class deleted or unexplained: %v\n%s", err, errOut)
	}
	if _, errOut, err := a.Kubectl("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: system-mine}\nvalue: 5\n", "create", "-f", "-"); err == nil ||
		!strings.Contains(errOut, "reserved for system use only") {
		t.Errorf("system- name accepted or unexplained: %v\n%s", err, errOut)
	}

	// Pods get their class's priority; unknown classes are refused.
	a.MustKubectl(`apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
description: for the test
`, "apply", "-f", "-")
	pod := func(name, extra string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: default}\nspec:\n" + extra +
			"  containers: [{name: c, image: busybox}]\n"
	}
	a.MustKubectl(pod("important", "  priorityClassName: high\n"), "create", "-f", "-")
	a.MustKubectl(pod("plain", ""), "create", "-f", "-")
	if got := a.MustKubectl("", "get", "pod", "important", "-o", "jsonpath={.spec.priority} {.spec.preemptionPolicy}"); got != "1000 PreemptLowerPriority" {
		t.Errorf("pod with priorityClassName high: priority and policy %q, want 1000 PreemptLowerPriority", got)
	}
	if got := a.MustKubectl("", "get", "pod", "plain", "-o", "jsonpath={.spec.priority}"); got != "0" {
		t.Errorf("pod without class: priority %q, want 0", got)
	}
	if _, errOut, err := a.Kubectl(pod("lost", "  priorityClassName: nope\n"), "create", "-f", "-"); err == nil || !strings.Contains(errOut, "no PriorityClass with name nope was found") {
		t.Errorf("unknown PriorityClass accepted or unexplained: %v\n%s", err, errOut)
	}
	if _, errOut, err := a.Kubectl(pod("bold", "  priorityClassName: high\n  priority: 7\n"), "create", "-f", "-"); err == nil || !strings.Contains(errOut, "must not be provided in pod spec") {
		t.Errorf("pod with its own priority accepted or unexplained: %v\n%s", err, errOut)
	}

	// RuntimeClasses: unknown ones refused; handlers other than runc warned about.
	if _, errOut, err := a.Kubectl(pod("sandboxed", "  runtimeClassName: missing\n"), "create", "-f", "-"); err == nil || !strings.Contains(errOut, `RuntimeClass "missing" not found`) {
		t.Errorf("unknown RuntimeClass accepted or unexplained: %v\n%s", err, errOut)
	}
	_, errOut, err := a.Kubectl(`apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: 250m, memory: 120Mi}}
`, "apply", "-f", "-")
	if err != nil || !strings.Contains(errOut, `Warning: handler "kata" is not available on flotilla hosts`) {
		t.Errorf("RuntimeClass kata: %v, want a warning about the handler:\n%s", err, errOut)
	}
	_, errOut, err = a.Kubectl(pod("sandboxed", "  runtimeClassName: kata\n"), "create", "-f", "-")
	if err != nil || !strings.Contains(errOut, `Warning: RuntimeClass "kata" has handler "kata"`) {
		t.Errorf("pod with RuntimeClass kata: %v, want a warning:\n%s", err, errOut)
	}
	if got := a.MustKubectl("", "get", "pod", "sandboxed", "-o", "jsonpath={.spec.overhead.cpu} {.spec.overhead.memory}"); got != "250m 120Mi" {
		t.Errorf("pod overhead %q, want the class's 250m 120Mi", got)
	}

	// HorizontalPodAutoscaler: one object, two versions.
	a.MustKubectl(`apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 5
  metrics:
  - {type: Pods, pods: {metric: {name: qps}, target: {type: AverageValue, averageValue: "100"}}}
  - {type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}}
`, "apply", "-f", "-")
	hpas := a.Client().AutoscalingV1().HorizontalPodAutoscalers("default")
	v1, err := hpas.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the v2 HPA as v1: %v", err)
	}
	if p := v1.Spec.TargetCPUUtilizationPercentage; p == nil || *p != 60 || v1.Spec.MaxReplicas != 5 ||
		!strings.Contains(v1.Annotations["autoscaling.alpha.kubernetes.io/metrics"], "qps") {
		t.Errorf("v2 HPA read as v1: spec %+v, annotations %v", v1.Spec, v1.Annotations)
	}
	// A v1 client writes it back: the Pods metric survives.
	v1.Spec.MaxReplicas = 6
	if _, err := hpas.Update(ctx, v1, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update as v1: %v", err)
	}
	if got := a.MustKubectl("", "get", "hpa", "web", "-o", "jsonpath={.spec.maxReplicas} {.spec.metrics[*].type}"); got != "6 Pods Resource" {
		t.Errorf("after the v1 update, v2 reads %q, want 6 Pods Resource", got)
	}

	created, err := hpas.Create(ctx, &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "default"},
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			MaxReplicas:    3, TargetCPUUtilizationPercentage: new(int32(40)),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create as v1: %v", err)
	}
	if created.Spec.MinReplicas == nil || *created.Spec.MinReplicas != 1 || len(created.Annotations) != 0 {
		t.Errorf("v1 create answered %+v (annotations %v)", created.Spec, created.Annotations)
	}
	v2, err := a.Client().AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the v1 HPA as v2: %v", err)
	}
	if m := v2.Spec.Metrics; len(m) != 1 || m[0].Resource == nil || m[0].Resource.Name != "cpu" || m[0].Resource.Target.AverageUtilization == nil ||
		*m[0].Resource.Target.AverageUtilization != 40 {
		t.Errorf("v1 HPA read as v2: metrics %+v", v2.Spec.Metrics)
	}
	out = a.MustKubectl("", "get", "hpa", "api")
	if !regexpMatch(`(?m)^NAME\s+REFERENCE\s+TARGETS\s+MINPODS\s+MAXPODS\s+REPLICAS\s+AGE$`, out) ||
		!regexpMatch(`(?m)^api\s+Deployment/api\s+cpu: <unknown>/40%\s+1\s+3\s+0\s+\S+$`, out) {
		t.Errorf("kubectl get hpa:\n%s", out)
	}
	if _, errOut, err := a.Kubectl("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad, namespace: default}\n"+
		"spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}, minReplicas: 4, maxReplicas: 2}\n", "create", "-f", "-"); err == nil ||
		!strings.Contains(errOut, "must be greater than or equal to `minReplicas`") {
		t.Errorf("maxReplicas < minReplicas accepted or unexplained: %v\n%s", err, errOut)
	}
	// Server-side apply through v1: the field manager converts through the stored v2 object.
	for _, pct := range []string{"70", "75"} {
		a.MustKubectl(`apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: ssa, namespace: default}
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: ssa}, maxReplicas: 2, targetCPUUtilizationPercentage: `+pct+`}
`, "apply", "--server-side", "-f", "-")
		if got := a.MustKubectl("", "get", "hpa.v2.autoscaling", "ssa", "-o", "jsonpath={.spec.metrics[0].resource.target.averageUtilization}"); got != pct {
			t.Errorf("server-side applied v1 HPA read as v2: averageUtilization %q, want %s", got, pct)
		}
	}
	// The status subresource.
	st := v2.DeepCopy()
	st.Status.CurrentReplicas, st.Status.DesiredReplicas = 2, 3
	if _, err := a.Client().AutoscalingV2().HorizontalPodAutoscalers("default").UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update status: %v", err)
	} else if got := a.MustKubectl("", "get", "hpa.v1.autoscaling", "api", "-o", "jsonpath={.status.desiredReplicas}"); got != "3" {
		t.Errorf("status read as v1: desiredReplicas %q, want 3", got)
	}
}
