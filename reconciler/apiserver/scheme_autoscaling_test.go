package apiserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func hpaV2(t *testing.T, manifest string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	out := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := yaml.UnmarshalStrict([]byte(manifest), out); err != nil {
		t.Fatalf("decode v2 fixture: %v", err)
	}
	return out
}

func hpaV1(t *testing.T, manifest string) *autoscalingv1.HorizontalPodAutoscaler {
	t.Helper()
	out := &autoscalingv1.HorizontalPodAutoscaler{}
	if err := yaml.UnmarshalStrict([]byte(manifest), out); err != nil {
		t.Fatalf("decode v1 fixture: %v", err)
	}
	return out
}

// A v2 HPA that uses everything v1 cannot express. The CPU utilization metric comes last: the
// v1 -> v2 conversion puts it after the metrics kept in the annotation, as upstream.
const fullHPAv2 = `
metadata: {name: web, namespace: shop, annotations: {team: payments}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 10
  metrics:
  - type: Resource
    resource: {name: memory, target: {type: AverageValue, averageValue: 500Mi}}
  - type: Pods
    pods: {metric: {name: packets-per-second}, target: {type: AverageValue, averageValue: 1k}}
  - type: Object
    object:
      describedObject: {apiVersion: networking.k8s.io/v1, kind: Ingress, name: main-route}
      metric: {name: requests-per-second, selector: {matchLabels: {verb: GET}}}
      target: {type: Value, value: 10k}
  - type: External
    external: {metric: {name: queue_messages_ready, selector: {matchLabels: {queue: worker_tasks}}}, target: {type: AverageValue, averageValue: "30"}}
  - type: ContainerResource
    containerResource: {name: cpu, container: application, target: {type: Utilization, averageUtilization: 60}}
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 300
      selectPolicy: Min
      policies: [{type: Percent, value: 10, periodSeconds: 60}, {type: Pods, value: 5, periodSeconds: 60}]
      tolerance: 50m
    scaleUp:
      stabilizationWindowSeconds: 0
      selectPolicy: Max
      policies: [{type: Pods, value: 4, periodSeconds: 15}]
status:
  observedGeneration: 3
  lastScaleTime: "2026-03-01T11:00:00Z"
  currentReplicas: 4
  desiredReplicas: 5
  currentMetrics:
  - type: Resource
    resource: {name: cpu, current: {averageUtilization: 72, averageValue: 360m}}
  - type: Pods
    pods: {metric: {name: packets-per-second}, current: {averageValue: "900"}}
  - type: Object
    object: {describedObject: {apiVersion: networking.k8s.io/v1, kind: Ingress, name: main-route}, metric: {name: requests-per-second}, current: {value: 8k}}
  - type: External
    external: {metric: {name: queue_messages_ready}, current: {value: "42"}}
  conditions:
  - {type: AbleToScale, status: "True", lastTransitionTime: "2026-03-01T10:00:00Z", reason: ReadyForNewScale, message: recommended size matches current size, observedGeneration: 3}
  - {type: ScalingLimited, status: "False", lastTransitionTime: "2026-03-01T10:00:00Z", reason: DesiredWithinRange}
`

func TestHPAConversionRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		v2   string
		// wantV1 checks the v1 form.
		wantV1 func(t *testing.T, v1 *autoscalingv1.HorizontalPodAutoscaler)
	}{
		{
			name: "cpu utilization only: targetCPUUtilizationPercentage, no annotations",
			v2: `
metadata: {name: web, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 65}}}]
status: {currentReplicas: 2, desiredReplicas: 2}
`,
			wantV1: func(t *testing.T, v1 *autoscalingv1.HorizontalPodAutoscaler) {
				if p := v1.Spec.TargetCPUUtilizationPercentage; p == nil || *p != 65 {
					t.Errorf("targetCPUUtilizationPercentage = %v, want 65", p)
				}
				if len(v1.Annotations) != 0 {
					t.Errorf("annotations %v, want none", v1.Annotations)
				}
				if v1.Spec.ScaleTargetRef.Kind != "Deployment" || v1.Spec.ScaleTargetRef.APIVersion != "apps/v1" || v1.Status.CurrentReplicas != 2 {
					t.Errorf("spec/status not carried: %+v %+v", v1.Spec, v1.Status)
				}
			},
		},
		{
			name: "everything v1 cannot say travels in annotations",
			v2:   fullHPAv2,
			wantV1: func(t *testing.T, v1 *autoscalingv1.HorizontalPodAutoscaler) {
				if p := v1.Spec.TargetCPUUtilizationPercentage; p == nil || *p != 50 {
					t.Errorf("targetCPUUtilizationPercentage = %v, want 50", p)
				}
				if p := v1.Status.CurrentCPUUtilizationPercentage; p == nil || *p != 72 {
					t.Errorf("currentCPUUtilizationPercentage = %v, want 72", p)
				}
				for _, k := range []string{hpaMetricSpecsAnnotation, hpaMetricStatusesAnnotation, hpaBehaviorSpecsAnnotation, hpaConditionsAnnotation, "team"} {
					if v1.Annotations[k] == "" {
						t.Errorf("annotation %s missing: %v", k, v1.Annotations)
					}
				}
				var other []autoscalingv1.MetricSpec
				if err := json.Unmarshal([]byte(v1.Annotations[hpaMetricSpecsAnnotation]), &other); err != nil || len(other) != 5 {
					t.Errorf("metrics annotation: %v, %d metrics, want the 5 others", err, len(other))
				}
				// Upstream marshals its internal behavior type, which has no json tags.
				if b := v1.Annotations[hpaBehaviorSpecsAnnotation]; !strings.Contains(b, `"ScaleDown":{"StabilizationWindowSeconds":300,"SelectPolicy":"Min","Policies":[{"Type":"Percent","Value":10,"PeriodSeconds":60}`) {
					t.Errorf("behavior annotation %s", b)
				}
			},
		},
		{
			name: "minReplicas unset stays unset",
			v2: `
metadata: {name: web, namespace: shop}
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 5, metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]}
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := hpaV2(t, tc.v2)
			orig := in.DeepCopy()
			v1 := &autoscalingv1.HorizontalPodAutoscaler{}
			if err := convertHPAv2ToV1(in, v1); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(in, orig) {
				t.Fatal("v2 -> v1 modified its input")
			}
			if tc.wantV1 != nil {
				tc.wantV1(t, v1)
			}
			// The v1 object goes through JSON, as it does between a client and the server.
			b, err := json.Marshal(v1)
			if err != nil {
				t.Fatal(err)
			}
			v1 = &autoscalingv1.HorizontalPodAutoscaler{}
			if err := json.Unmarshal(b, v1); err != nil {
				t.Fatal(err)
			}
			v1orig := v1.DeepCopy()
			back := &autoscalingv2.HorizontalPodAutoscaler{}
			if err := convertHPAv1ToV2(v1, back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v1, v1orig) {
				t.Fatal("v1 -> v2 modified its input")
			}
			if !apiequality.Semantic.DeepEqual(back, orig) {
				got, _ := yaml.Marshal(back)
				want, _ := yaml.Marshal(orig)
				t.Errorf("round trip lost something:\ngot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestHPAConversionFromV1(t *testing.T) {
	cases := []struct {
		name string
		v1   string
		want string // the v2 object
	}{
		{
			name: "no target: v1's implicit 80% CPU is made explicit",
			v1: `
metadata: {name: web, namespace: shop}
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, minReplicas: 1, maxReplicas: 5}
`,
			want: `
metadata: {name: web, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
status: {currentReplicas: 0, desiredReplicas: 0}
`,
		},
		{
			name: "targetCPUUtilizationPercentage and currentCPUUtilizationPercentage",
			v1: `
metadata: {name: web, namespace: shop}
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 5, targetCPUUtilizationPercentage: 40}
status: {currentReplicas: 3, desiredReplicas: 4, currentCPUUtilizationPercentage: 55}
`,
			want: `
metadata: {name: web, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 40}}}]
status:
  currentReplicas: 3
  desiredReplicas: 4
  currentMetrics: [{type: Resource, resource: {name: cpu, current: {averageUtilization: 55}}}]
`,
		},
		{
			name: "annotations written by upstream are read, and dropped; undecodable ones are ignored",
			v1: `
metadata:
  name: web
  namespace: shop
  annotations:
    keep: "yes"
    autoscaling.alpha.kubernetes.io/metrics: '[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"100"}}]'
    autoscaling.alpha.kubernetes.io/behavior: '{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":"Max","Policies":[{"Type":"Pods","Value":1,"PeriodSeconds":30}],"Tolerance":null}}'
    autoscaling.alpha.kubernetes.io/conditions: 'not json'
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 5, targetCPUUtilizationPercentage: 70}
`,
			want: `
metadata: {name: web, namespace: shop, annotations: {keep: "yes"}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
  metrics:
  - {type: Pods, pods: {metric: {name: qps}, target: {type: AverageValue, averageValue: "100"}}}
  - {type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 70}}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 60, selectPolicy: Max, policies: [{type: Pods, value: 1, periodSeconds: 30}]}
status: {currentReplicas: 0, desiredReplicas: 0}
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := &autoscalingv2.HorizontalPodAutoscaler{}
			if err := convertHPAv1ToV2(hpaV1(t, tc.v1), got); err != nil {
				t.Fatal(err)
			}
			if want := hpaV2(t, tc.want); !apiequality.Semantic.DeepEqual(got, want) {
				g, _ := yaml.Marshal(got)
				w, _ := yaml.Marshal(want)
				t.Errorf("got:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

func TestHPAConversionDropsStaleAnnotations(t *testing.T) {
	// Round-trip annotations stored on a v2 object (set by hand) are not served as if the
	// conversion had written them.
	in := hpaV2(t, `
metadata: {name: web, namespace: shop, annotations: {autoscaling.alpha.kubernetes.io/metrics: '[{"type":"Pods"}]'}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}]
`)
	v1 := &autoscalingv1.HorizontalPodAutoscaler{}
	if err := convertHPAv2ToV1(in, v1); err != nil {
		t.Fatal(err)
	}
	if len(v1.Annotations) != 0 {
		t.Errorf("stale annotations served: %v", v1.Annotations)
	}
}

// TestHPASchemeServesBothVersions checks the scheme NewScheme builds: the v2 type is the hub,
// v2 is preferred, and v1 requests and responses convert through it.
func TestHPASchemeServesBothVersions(t *testing.T) {
	scheme := NewScheme()
	codecs := NewCodecs(scheme)
	if got := scheme.PrioritizedVersionsForGroup("autoscaling"); !reflect.DeepEqual(got, []schema.GroupVersion{autoscalingv2.SchemeGroupVersion, autoscalingv1.SchemeGroupVersion}) {
		t.Errorf("autoscaling versions in priority order = %v, want v2, v1", got)
	}
	internal := schema.GroupVersion{Group: "autoscaling", Version: runtime.APIVersionInternal}
	for kind, want := range map[string]any{
		"HorizontalPodAutoscaler": &autoscalingv2.HorizontalPodAutoscaler{}, "HorizontalPodAutoscalerList": &autoscalingv2.HorizontalPodAutoscalerList{},
		"Scale": &autoscalingv1.Scale{},
	} {
		obj, err := scheme.New(internal.WithKind(kind))
		if err != nil || reflect.TypeOf(obj) != reflect.TypeOf(want) {
			t.Errorf("internal %s is %T (%v), want %T", kind, obj, err, want)
		}
	}

	// A v1 request body: decoded, v1-defaulted (minReplicas), converted to the hub.
	body := `{"apiVersion":"autoscaling/v1","kind":"HorizontalPodAutoscaler","metadata":{"name":"web","namespace":"shop"},
	  "spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"maxReplicas":4,"targetCPUUtilizationPercentage":60}}`
	obj, _, err := codecs.UniversalDecoder().Decode([]byte(body), nil, &autoscalingv2.HorizontalPodAutoscaler{})
	if err != nil {
		t.Fatalf("decode v1 into the hub: %v", err)
	}
	hub := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if hub.Spec.MinReplicas == nil || *hub.Spec.MinReplicas != 1 || len(hub.Spec.Metrics) != 1 ||
		*hub.Spec.Metrics[0].Resource.Target.AverageUtilization != 60 {
		t.Fatalf("hub = %+v", hub.Spec)
	}

	// The hub served as v1 and as v2.
	hub.Spec.Metrics = append(hub.Spec.Metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType,
		Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps"},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(apiresource.MustParse("10"))}}})
	out, err := scheme.ConvertToVersion(hub.DeepCopy(), autoscalingv1.SchemeGroupVersion)
	if err != nil {
		t.Fatalf("hub -> v1: %v", err)
	}
	v1 := out.(*autoscalingv1.HorizontalPodAutoscaler)
	if v1.APIVersion != "autoscaling/v1" || *v1.Spec.TargetCPUUtilizationPercentage != 60 || !strings.Contains(v1.Annotations[hpaMetricSpecsAnnotation], "qps") {
		t.Errorf("v1 = %+v", v1)
	}
	out, err = scheme.ConvertToVersion(hub.DeepCopy(), autoscalingv2.SchemeGroupVersion)
	if err != nil || out.(*autoscalingv2.HorizontalPodAutoscaler).APIVersion != "autoscaling/v2" {
		t.Errorf("hub -> v2: %v %v", out, err)
	}

	// Lists (v1 list responses).
	list := &autoscalingv2.HorizontalPodAutoscalerList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []autoscalingv2.HorizontalPodAutoscaler{*hub}}
	out, err = scheme.ConvertToVersion(list, autoscalingv1.SchemeGroupVersion)
	if err != nil {
		t.Fatalf("hub list -> v1: %v", err)
	}
	if l := out.(*autoscalingv1.HorizontalPodAutoscalerList); l.ResourceVersion != "7" || len(l.Items) != 1 || *l.Items[0].Spec.TargetCPUUtilizationPercentage != 60 {
		t.Errorf("v1 list = %+v", l)
	}

	// Reads from etcd: stored v2 JSON, v2-defaulted.
	stored := `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"web","namespace":"shop"},
	  "spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"maxReplicas":4}}`
	obj, _, err = codecs.UniversalDecoder().Decode([]byte(stored), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := obj.(*autoscalingv2.HorizontalPodAutoscaler); len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
		t.Errorf("stored v2 not defaulted: %+v", h.Spec)
	}
}
