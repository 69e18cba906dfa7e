package printers

import (
	"reflect"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSchedulingNodeAutoscalingTables(t *testing.T) {
	hpa := schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}
	cases := []struct {
		name   string
		gr     schema.GroupResource
		obj    runtime.Object
		header []string
		cells  []any // AGE last, "10m"
	}{
		{
			name: "priorityclass",
			gr:   schema.GroupResource{Group: "scheduling.k8s.io", Resource: "priorityclasses"},
			obj:  obj(t, `{metadata: {name: system-node-critical}, value: 2000001000, preemptionPolicy: PreemptLowerPriority}`, &schedulingv1.PriorityClass{}),
			// AGE before PREEMPTIONPOLICY, as upstream.
			header: []string{"NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"},
			cells:  []any{"system-node-critical", int64(2000001000), false, "10m", "PreemptLowerPriority"},
		},
		{
			name:   "runtimeclass",
			gr:     schema.GroupResource{Group: "node.k8s.io", Resource: "runtimeclasses"},
			obj:    obj(t, `{metadata: {name: gvisor}, handler: runsc}`, &nodev1.RuntimeClass{}),
			header: []string{"NAME", "HANDLER", "AGE"},
			cells:  []any{"gvisor", "runsc", "10m"},
		},
		{
			name: "hpa with a CPU target, no status yet",
			gr:   hpa,
			obj: obj(t, `
metadata: {name: php-apache}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: php-apache}
  minReplicas: 1
  maxReplicas: 10
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}]
`, &autoscalingv2.HorizontalPodAutoscaler{}),
			header: []string{"NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"},
			cells:  []any{"php-apache", "Deployment/php-apache", "cpu: <unknown>/50%", "1", int64(10), int64(0), "10m"},
		},
		{
			name: "hpa with current values and more than two metrics",
			gr:   hpa,
			obj: obj(t, `
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: web}
  maxReplicas: 5
  metrics:
  - {type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}
  - {type: Resource, resource: {name: memory, target: {type: AverageValue, averageValue: 1Gi}}}
  - {type: Pods, pods: {metric: {name: qps}, target: {type: AverageValue, averageValue: "100"}}}
status:
  currentReplicas: 3
  currentMetrics:
  - {type: Resource, resource: {name: cpu, current: {averageUtilization: 72}}}
  - {type: Resource, resource: {name: memory, current: {averageValue: 600Mi}}}
`, &autoscalingv2.HorizontalPodAutoscaler{}),
			cells: []any{"web", "StatefulSet/web", "cpu: 72%/50%, memory: 600Mi/1Gi + 1 more...", "<unset>", int64(5), int64(3), "10m"},
		},
		{
			name: "hpa with object, external and container metrics",
			gr:   hpa,
			obj: obj(t, `
metadata: {name: q}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: q}
  minReplicas: 2
  maxReplicas: 4
  metrics:
  - {type: External, external: {metric: {name: queue}, target: {type: AverageValue, averageValue: "30"}}}
  - {type: Object, object: {describedObject: {apiVersion: v1, kind: Service, name: s}, metric: {name: rps}, target: {type: Value, value: 10k}}}
status:
  currentReplicas: 2
  currentMetrics:
  - {type: External, external: {metric: {name: queue}, current: {averageValue: "12"}}}
`, &autoscalingv2.HorizontalPodAutoscaler{}),
			cells: []any{"q", "Deployment/q", "12/30 (avg), <unknown>/10k", "2", int64(4), int64(2), "10m"},
		},
		{
			name:  "hpa without metrics",
			gr:    hpa,
			obj:   obj(t, `{metadata: {name: none}, spec: {scaleTargetRef: {kind: Deployment, name: x}, maxReplicas: 1, minReplicas: 1}}`, &autoscalingv2.HorizontalPodAutoscaler{}),
			cells: []any{"none", "Deployment/x", "<none>", "1", int64(1), int64(0), "10m"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.obj.DeepCopyObject()
			setCreated(t, o, ago(10*time.Minute))
			table := convert(t, tc.gr, o)
			if tc.header != nil {
				if got := headers(table, 0); !reflect.DeepEqual(got, tc.header) {
					t.Errorf("columns = %q, want %q", got, tc.header)
				}
			}
			if len(table.Rows) != 1 || !reflect.DeepEqual(table.Rows[0].Cells, tc.cells) {
				t.Errorf("rows = %#v, want cells %#v", table.Rows, tc.cells)
			}
			if len(table.Rows) == 1 && len(table.Rows[0].Cells) != len(table.ColumnDefinitions) {
				t.Errorf("%d cells for %d columns", len(table.Rows[0].Cells), len(table.ColumnDefinitions))
			}
		})
	}
}
