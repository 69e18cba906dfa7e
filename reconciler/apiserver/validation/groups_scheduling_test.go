package validation

import (
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSchedulingNodeAutoscalingKindsHaveValidation(t *testing.T) {
	for _, gk := range []schema.GroupKind{
		{Group: "scheduling.k8s.io", Kind: "PriorityClass"}, {Group: "node.k8s.io", Kind: "RuntimeClass"},
		{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"},
	} {
		f, ok := For(gk, DefaultOptions())
		if !ok || f.Create == nil || f.Update == nil {
			t.Errorf("%s: no Create/Update validation", gk)
		}
	}
	if f, _ := For(schema.GroupKind{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}, DefaultOptions()); f.StatusUpdate == nil {
		t.Error("HorizontalPodAutoscaler: no status validation")
	}
}

// A PriorityClass as the defaulter leaves it (from the Kubernetes documentation).
const priorityClassYAML = `
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority
value: 1000000
globalDefault: false
preemptionPolicy: PreemptLowerPriority
description: "This priority class should be used for XYZ service pods only."
`

func TestValidatePriorityClass(t *testing.T) {
	checkErrs(t, ValidatePriorityClass(fixture[schedulingv1.PriorityClass](t, priorityClassYAML, false)), none())
	for _, spc := range SystemPriorityClasses() {
		checkErrs(t, ValidatePriorityClass(spc), none())
	}
	cases := []struct {
		name   string
		mutate func(*schedulingv1.PriorityClass)
		want   []string
	}{
		{"the highest user value", func(pc *schedulingv1.PriorityClass) { pc.Value = HighestUserDefinablePriority }, none()},
		{"above the highest user value", func(pc *schedulingv1.PriorityClass) { pc.Value = HighestUserDefinablePriority + 1 }, errs(forb("value"))},
		{"negative values are fine", func(pc *schedulingv1.PriorityClass) { pc.Value = -5 }, none()},
		{"reserved prefix", func(pc *schedulingv1.PriorityClass) { pc.Name = "system-mine" }, errs(forb("metadata.name"))},
		{"built-in name with another value", func(pc *schedulingv1.PriorityClass) {
			pc.Name, pc.Value = SystemNodeCritical, 5
		}, errs(forb("metadata.name"))},
		{"built-in name as global default", func(pc *schedulingv1.PriorityClass) {
			pc.Name, pc.Value, pc.GlobalDefault = SystemClusterCritical, SystemCriticalPriority, true
		}, errs(forb("metadata.name"))},
		{"preemption policy Never", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptNever) }, none()},
		{"unknown preemption policy", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptionPolicy("Always")) }, errs(nsup("preemptionPolicy"))},
		{"empty preemption policy", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptionPolicy("")) }, errs(req("preemptionPolicy"))},
		{"namespace set", func(pc *schedulingv1.PriorityClass) { pc.Namespace = "default" }, errs(forb("metadata.namespace"))},
		{"bad name", func(pc *schedulingv1.PriorityClass) { pc.Name = "High_Priority" }, errs(inv("metadata.name"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pc := fixture[schedulingv1.PriorityClass](t, priorityClassYAML, false)
			c.mutate(pc)
			checkErrs(t, ValidatePriorityClass(pc), c.want)
		})
	}
	pc := fixture[schedulingv1.PriorityClass](t, priorityClassYAML, false)
	pc.Value = HighestUserDefinablePriority + 1
	if e := ValidatePriorityClass(pc); len(e) != 1 || !strings.Contains(e[0].Detail, "maximum allowed value of a user defined priority is 1000000000") {
		t.Errorf("message: %v", e)
	}
	pc = fixture[schedulingv1.PriorityClass](t, priorityClassYAML, false)
	pc.Name = "system-mine"
	if e := ValidatePriorityClass(pc); len(e) != 1 || !strings.Contains(e[0].Detail, "priority class names with 'system-' prefix are reserved for system use only") {
		t.Errorf("message: %v", e)
	}
}

func TestValidatePriorityClassUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*schedulingv1.PriorityClass)
		want   []string
	}{
		{"description, labels and globalDefault may change", func(pc *schedulingv1.PriorityClass) {
			pc.Description, pc.Labels, pc.GlobalDefault = "other", map[string]string{"a": "b"}, true
		}, none()},
		{"value is immutable", func(pc *schedulingv1.PriorityClass) { pc.Value++ }, errs(forb("value"))},
		{"preemptionPolicy is immutable", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptNever) }, errs(inv("preemptionPolicy"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := fixture[schedulingv1.PriorityClass](t, priorityClassYAML, false)
			pc := old.DeepCopy()
			c.mutate(pc)
			checkErrs(t, ValidatePriorityClassUpdate(pc, old), c.want)
		})
	}
}

const runtimeClassYAML = `
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: kata-fc
handler: kata-fc
overhead:
  podFixed:
    memory: "120Mi"
    cpu: "250m"
scheduling:
  nodeSelector:
    runtime: kata
  tolerations:
  - key: runtime
    operator: Equal
    value: kata
    effect: NoSchedule
`

func TestValidateRuntimeClass(t *testing.T) {
	checkErrs(t, ValidateRuntimeClass(fixture[nodev1.RuntimeClass](t, runtimeClassYAML, false)), none())
	cases := []struct {
		name   string
		mutate func(*nodev1.RuntimeClass)
		want   []string
	}{
		{"runc", func(rc *nodev1.RuntimeClass) { rc.Handler, rc.Overhead, rc.Scheduling = "runc", nil, nil }, none()},
		{"no handler", func(rc *nodev1.RuntimeClass) { rc.Handler = "" }, errs(inv("handler"))},
		{"handler not a DNS label", func(rc *nodev1.RuntimeClass) { rc.Handler = "kata.fc" }, errs(inv("handler"))},
		{"negative overhead", func(rc *nodev1.RuntimeClass) {
			rc.Overhead.PodFixed[corev1.ResourceCPU] = apiresource.MustParse("-1")
		}, errs(inv("overhead.limits[cpu]"))},
		{"unknown overhead resource", func(rc *nodev1.RuntimeClass) {
			rc.Overhead.PodFixed["gpus"] = apiresource.MustParse("1")
		}, errs(inv("overhead.limits[gpus]"))},
		{"bad node selector label", func(rc *nodev1.RuntimeClass) { rc.Scheduling.NodeSelector["bad key"] = "x" }, errs(inv("scheduling.nodeSelector"))},
		{"bad toleration", func(rc *nodev1.RuntimeClass) {
			rc.Scheduling.Tolerations[0].Operator = corev1.TolerationOpExists
		}, errs(inv("scheduling.tolerations[0].value"))},
		{"bad name", func(rc *nodev1.RuntimeClass) { rc.Name = "Kata" }, errs(inv("metadata.name"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc := fixture[nodev1.RuntimeClass](t, runtimeClassYAML, false)
			c.mutate(rc)
			checkErrs(t, ValidateRuntimeClass(rc), c.want)
		})
	}
}

func TestValidateRuntimeClassUpdate(t *testing.T) {
	old := fixture[nodev1.RuntimeClass](t, runtimeClassYAML, false)
	rc := old.DeepCopy()
	rc.Overhead = nil
	rc.Scheduling.NodeSelector = nil
	checkErrs(t, ValidateRuntimeClassUpdate(rc, old), none())
	rc.Handler = "runc"
	checkErrs(t, ValidateRuntimeClassUpdate(rc, old), errs(inv("handler")))
}

// A defaulted HPA (from the Kubernetes documentation's HPA walkthrough, with behavior).
const hpaYAML = `
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: php-apache
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: php-apache
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: Resource
    resource:
      name: cpu
      target:
        type: Utilization
        averageUtilization: 50
  - type: Pods
    pods:
      metric:
        name: packets-per-second
      target:
        type: AverageValue
        averageValue: 1k
  - type: Object
    object:
      metric:
        name: requests-per-second
      describedObject:
        apiVersion: networking.k8s.io/v1
        kind: Ingress
        name: main-route
      target:
        type: Value
        value: 10k
  - type: External
    external:
      metric:
        name: queue_messages_ready
        selector:
          matchLabels:
            queue: worker_tasks
      target:
        type: AverageValue
        averageValue: 30
  - type: ContainerResource
    containerResource:
      name: cpu
      container: application
      target:
        type: Utilization
        averageUtilization: 60
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 300
      selectPolicy: Max
      policies:
      - type: Percent
        value: 100
        periodSeconds: 15
    scaleUp:
      stabilizationWindowSeconds: 0
      selectPolicy: Max
      tolerance: 50m
      policies:
      - type: Percent
        value: 100
        periodSeconds: 15
      - type: Pods
        value: 4
        periodSeconds: 15
`

func TestValidateHorizontalPodAutoscaler(t *testing.T) {
	checkErrs(t, ValidateHorizontalPodAutoscaler(fixture[autoscalingv2.HorizontalPodAutoscaler](t, hpaYAML, true)), none())
	q := func(s string) *apiresource.Quantity { return new(apiresource.MustParse(s)) }
	cases := []struct {
		name   string
		mutate func(*autoscalingv2.HorizontalPodAutoscaler)
		want   []string
	}{
		{"minReplicas 0", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(0)) }, errs(inv("spec.minReplicas"))},
		{"maxReplicas 0", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MaxReplicas = 0 }, errs(inv("spec.maxReplicas"), inv("spec.maxReplicas"))},
		{"max below min", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MinReplicas = new(int32(5))
			h.Spec.MaxReplicas = 3
		}, errs(inv("spec.maxReplicas"))},
		{"no target kind and name", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name = "", ""
		}, errs(req("spec.scaleTargetRef.kind"), req("spec.scaleTargetRef.name"))},
		{"target name with a slash", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.Name = "a/b" }, errs(inv("spec.scaleTargetRef.name"))},
		{"target without API group", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.APIVersion = "" }, errs(inv("spec.scaleTargetRef.apiVersion"))},
		{"ReplicationController target needs no group", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "ReplicationController", Name: "rc"}
		}, none()},
		{"unparsable apiVersion", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.APIVersion = "a/b/c" }, errs(inv("spec.scaleTargetRef.apiVersion"))},
		{"no metric type", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[0].Type = "" },
			errs(req("spec.metrics[0].type"), nsup("spec.metrics[0].type"), nsup("spec.metrics[0].type"))},
		{"type and source differ", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[0].Type = autoscalingv2.PodsMetricSourceType
		}, errs(req("spec.metrics[0].pods"))},
		{"two sources", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[0].Pods = h.Spec.Metrics[1].Pods },
			errs(forb("spec.metrics[0].pods"))},
		{"resource without target", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[0].Resource.Target = autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType}
		}, errs(req("spec.metrics[0].resource.target.averageUtilization"))},
		{"resource with both targets", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[0].Resource.Target.AverageValue = q("1")
		}, errs(forb("spec.metrics[0].resource.target.averageValue"))},
		{"utilization 0 and bad target type", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[0].Resource.Target = autoscalingv2.MetricTarget{Type: "Percent", AverageUtilization: new(int32(0))}
		}, errs(inv("spec.metrics[0].resource.target.type"), inv("spec.metrics[0].resource.target.averageUtilization"))},
		{"resource without name", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[0].Resource.Name = "" }, errs(req("spec.metrics[0].resource.name"))},
		{"pods without average value", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[1].Pods.Target = autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType}
		}, errs(req("spec.metrics[1].pods.target.averageValue"))},
		{"pods zero value and no metric name", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[1].Pods.Target.AverageValue = q("0")
			h.Spec.Metrics[1].Pods.Metric.Name = ""
		}, errs(inv("spec.metrics[1].pods.target.averageValue"), req("spec.metrics[1].pods.metric.name"))},
		{"object without target value", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[2].Object.Target.Value = nil },
			errs(req("spec.metrics[2].object.target.averageValue"))},
		{"object in the core group is fine", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics[2].Object.DescribedObject = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "Service", Name: "s"}
		}, none()},
		{"external with both targets", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[3].External.Target.Value = q("1") },
			errs(forb("spec.metrics[3].external.target.value"))},
		{"container resource without container", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[4].ContainerResource.Container = "" },
			errs(req("spec.metrics[4].containerResource.container"))},
		{"container resource not a container resource", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics[4].ContainerResource.Name = "pods" },
			errs(inv("spec.metrics[4].containerResource.name"))},
		{"stabilization window too long", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds = new(int32(3601))
		}, errs(inv("spec.behavior.scaleDown.stabilizationWindowSeconds"))},
		{"negative stabilization window", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior.ScaleUp.StabilizationWindowSeconds = new(int32(-1))
		}, errs(inv("spec.behavior.scaleUp.stabilizationWindowSeconds"))},
		{"unknown select policy", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior.ScaleUp.SelectPolicy = new(autoscalingv2.ScalingPolicySelect("Avg"))
		}, errs(nsup("spec.behavior.scaleUp.selectPolicy"))},
		{"no policies", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Behavior.ScaleDown.Policies = nil }, errs(req("spec.behavior.scaleDown.policies"))},
		{"bad policy", func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior.ScaleUp.Policies[0] = autoscalingv2.HPAScalingPolicy{Type: "Nodes", Value: 0, PeriodSeconds: 1801}
		}, errs(nsup("spec.behavior.scaleUp.policies[0].type"), inv("spec.behavior.scaleUp.policies[0].value"), inv("spec.behavior.scaleUp.policies[0].periodSeconds"))},
		{"negative tolerance", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Behavior.ScaleUp.Tolerance = q("-1") },
			errs(inv("spec.behavior.scaleUp.tolerance"))},
		{"bad name", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Name = "PHP" }, errs(inv("metadata.name"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := fixture[autoscalingv2.HorizontalPodAutoscaler](t, hpaYAML, true)
			c.mutate(h)
			checkErrs(t, ValidateHorizontalPodAutoscaler(h), c.want)
		})
	}
}

func TestValidateHorizontalPodAutoscalerUpdate(t *testing.T) {
	cases := []struct {
		name     string
		old, new func(*autoscalingv2.HorizontalPodAutoscaler)
		want     []string
	}{
		{"spec may change", nil, func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MaxReplicas = 20
			h.Spec.Metrics = h.Spec.Metrics[:1]
		}, none()},
		{"an unchanged target without group stays accepted",
			func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.APIVersion = "" },
			func(h *autoscalingv2.HorizontalPodAutoscaler) {
				h.Spec.ScaleTargetRef.APIVersion = ""
				h.Spec.MaxReplicas = 20
			}, none()},
		{"a changed target is checked", nil, func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "StatefulSet", Name: "db"}
		}, errs(inv("spec.scaleTargetRef.apiVersion"))},
		{"minReplicas 0 kept on an object that has it",
			func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(0)) },
			func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(0)) }, none()},
		{"minReplicas 0 not introduced", nil, func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(0)) }, errs(inv("spec.minReplicas"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := fixture[autoscalingv2.HorizontalPodAutoscaler](t, hpaYAML, true)
			if c.old != nil {
				c.old(old)
			}
			h := old.DeepCopy()
			c.new(h)
			checkErrs(t, ValidateHorizontalPodAutoscalerUpdate(h, old), c.want)
		})
	}
	old := fixture[autoscalingv2.HorizontalPodAutoscaler](t, hpaYAML, true)
	h := old.DeepCopy()
	h.Status.CurrentReplicas, h.Status.DesiredReplicas = -1, 3
	checkErrs(t, ValidateHorizontalPodAutoscalerStatusUpdate(h, old), errs(inv("status.currentReplicas")))
}
