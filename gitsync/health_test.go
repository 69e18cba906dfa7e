package gitsync

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestObjectHealth(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const (
		H = v1alpha1.HealthHealthy
		P = v1alpha1.HealthProgressing
		D = v1alpha1.HealthDegraded
	)
	tests := []struct {
		name, obj, want, msg string
	}{
		{"crd established", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, generation: 1}
status:
  conditions:
  - {type: NamesAccepted, status: "True", reason: NoConflicts, message: no conflicts found}
  - {type: Established, status: "True", reason: InitialNamesAccepted, message: the initial names have been accepted}`, H, ""},
		{"crd not established yet", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, generation: 1}`, P, "not established yet"},
		{"crd names refused", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, generation: 1}
status:
  conditions:
  - {type: NamesAccepted, status: "False", reason: KindConflict, message: '"Widget" is already in use'}
  - {type: Established, status: "False", reason: NotAccepted, message: not all names are accepted}`, D, `NamesAccepted=False (KindConflict): "Widget" is already in use`},
		{"deployment without status", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 1}
spec: {replicas: 2}`, P, "not yet observed"},
		{"deployment old generation", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 3}
spec: {replicas: 2}
status: {observedGeneration: 2, replicas: 2, updatedReplicas: 2, availableReplicas: 2, readyReplicas: 2}`, P, "observed generation 2 is older than generation 3"},
		{"deployment rolling", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 3}
status: {observedGeneration: 2, replicas: 4, updatedReplicas: 2, availableReplicas: 3, readyReplicas: 3}`, P, "2 of 3 replicas updated"},
		{"deployment old pods terminating", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 3}
status: {observedGeneration: 2, replicas: 4, updatedReplicas: 3, availableReplicas: 3, readyReplicas: 3}`, P, "1 old replicas pending termination"},
		{"deployment unavailable", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 3}
status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3, availableReplicas: 1, readyReplicas: 1}`, P, "1 of 3 replicas available"},
		{"deployment deadline", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 3}
status:
  observedGeneration: 2
  conditions: [{type: Progressing, status: "False", reason: ProgressDeadlineExceeded, message: "ReplicaSet web-1 has timed out"}]`, D, "progress deadline exceeded: ReplicaSet web-1 has timed out"},
		{"deployment available", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 3}
status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3, availableReplicas: 3, readyReplicas: 3}`, H, ""},
		{"deployment default one replica", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 1}
status: {observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 1, readyReplicas: 1}`, H, ""},
		{"replicaset not ready", `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, generation: 1}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, fullyLabeledReplicas: 2, availableReplicas: 2, readyReplicas: 1}`, P, "1 of 2 replicas ready"},
		{"replicaset ready", `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, generation: 1}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, fullyLabeledReplicas: 2, availableReplicas: 2, readyReplicas: 2}`, H, ""},
		{"statefulset rolling", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, generation: 2}
spec: {replicas: 3}
status: {observedGeneration: 2, replicas: 3, readyReplicas: 3, updatedReplicas: 1, currentRevision: db-1, updateRevision: db-2}`, P, "rolling out revision db-2: 1 of 3 replicas updated"},
		{"statefulset partition done", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, generation: 2}
spec: {replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 2}}}
status: {observedGeneration: 2, replicas: 3, readyReplicas: 3, updatedReplicas: 1, currentRevision: db-1, updateRevision: db-2}`, H, ""},
		{"statefulset ondelete", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, generation: 1}
spec: {replicas: 3, updateStrategy: {type: OnDelete}}`, H, ""},
		{"statefulset ready", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, generation: 1}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, readyReplicas: 2, updatedReplicas: 2, currentRevision: db-1, updateRevision: db-1}`, H, ""},
		{"daemonset unobserved", `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, generation: 1}`, P, "not yet observed"},
		{"daemonset partly available", `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, generation: 1}
status: {observedGeneration: 1, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 3, numberAvailable: 2, numberReady: 2}`, P, "2 of 3 pods available"},
		{"daemonset ready", `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, generation: 1}
status: {observedGeneration: 1, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 3, numberAvailable: 3, numberReady: 3}`, H, ""},
		{"job not started", `
apiVersion: batch/v1
kind: Job
metadata: {name: j}`, P, "not started"},
		{"job running", `
apiVersion: batch/v1
kind: Job
metadata: {name: j}
status: {startTime: "2026-01-01T11:00:00Z", active: 1}`, P, "running: 1 active, 0 succeeded, 0 failed"},
		{"job complete", `
apiVersion: batch/v1
kind: Job
metadata: {name: j}
status: {conditions: [{type: Complete, status: "True"}]}`, H, ""},
		{"job failed", `
apiVersion: batch/v1
kind: Job
metadata: {name: j}
status: {conditions: [{type: Failed, status: "True", reason: BackoffLimitExceeded, message: "Job has reached the specified backoff limit"}]}`, D, "failed (BackoffLimitExceeded)"},
		{"pod ready", `
apiVersion: v1
kind: Pod
metadata: {name: p}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}`, H, ""},
		{"pod crashloop", `
apiVersion: v1
kind: Pod
metadata: {name: p}
status:
  phase: Running
  conditions: [{type: Ready, status: "False"}]
  containerStatuses: [{name: app, state: {waiting: {reason: CrashLoopBackOff}}}]`, D, "containers failing: app (CrashLoopBackOff)"},
		{"pod running not ready", `
apiVersion: v1
kind: Pod
metadata: {name: p}
status: {phase: Running}`, P, "running but not ready"},
		{"pod unschedulable recent", `
apiVersion: v1
kind: Pod
metadata: {name: p, creationTimestamp: "2026-01-01T11:59:55Z"}
status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable, message: "0/1 nodes available"}]}`, P, "not scheduled yet: 0/1 nodes available"},
		{"pod unschedulable long", `
apiVersion: v1
kind: Pod
metadata: {name: p, creationTimestamp: "2026-01-01T11:00:00Z"}
status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable, message: "0/1 nodes available"}]}`, D, "unschedulable: 0/1 nodes available"},
		{"pod succeeded", `
apiVersion: v1
kind: Pod
metadata: {name: p}
status: {phase: Succeeded}`, H, ""},
		{"pod failed", `
apiVersion: v1
kind: Pod
metadata: {name: p}
status: {phase: Failed}`, D, "pod failed"},
		{"service clusterip", `
apiVersion: v1
kind: Service
metadata: {name: s}
spec: {type: ClusterIP, clusterIP: 10.96.0.20}`, H, ""},
		{"service lb pending", `
apiVersion: v1
kind: Service
metadata: {name: s}
spec: {type: LoadBalancer, clusterIP: 10.96.0.20}`, P, "load balancer address not assigned"},
		{"service lb assigned", `
apiVersion: v1
kind: Service
metadata: {name: s}
spec: {type: LoadBalancer, clusterIP: 10.96.0.20}
status: {loadBalancer: {ingress: [{ip: 10.213.0.1}]}}`, H, ""},
		{"ingress without address", `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i}`, P, "no address"},
		{"ingress with address", `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i}
status: {loadBalancer: {ingress: [{ip: 10.213.0.1}]}}`, H, ""},
		{"pvc pending", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c}
status: {phase: Pending}`, P, "not bound: phase Pending"},
		{"pvc bound", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c}
status: {phase: Bound}`, H, ""},
		{"pvc lost", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c}
status: {phase: Lost}`, D, "claim lost its volume"},
		{"configmap", `
apiVersion: v1
kind: ConfigMap
metadata: {name: c}`, H, ""},
		{"gitsource stalled", `
apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: g, generation: 1}
status: {observedGeneration: 1, conditions: [{type: Stalled, status: "True", reason: BuildFailed, message: "bad yaml"}]}`, D, "stalled (BuildFailed): bad yaml"},
		{"gitsource not ready", `
apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: g, generation: 1}
status: {observedGeneration: 1, conditions: [{type: Ready, status: "False", reason: Progressing, message: "x"}]}`, P, "not ready (Progressing): x"},
		{"being deleted", `
apiVersion: v1
kind: ConfigMap
metadata: {name: c, deletionTimestamp: "2026-01-01T11:00:00Z"}`, P, "being deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ObjectHealth(obj(t, tt.obj), now)
			if got.Status != tt.want || !strings.Contains(got.Message, tt.msg) || (tt.msg == "" && got.Message != "") {
				t.Errorf("ObjectHealth = %+v, want %s with message containing %q", got, tt.want, tt.msg)
			}
		})
	}
}

func TestSummarizeHealth(t *testing.T) {
	tests := []struct {
		name  string
		in    map[string]HealthResult
		want  string
		lines []string
	}{
		{"empty", nil, v1alpha1.HealthHealthy, nil},
		{"all healthy", map[string]HealthResult{"ConfigMap a/b": healthy()}, v1alpha1.HealthHealthy, nil},
		{"one progressing", map[string]HealthResult{"ConfigMap a/b": healthy(), "Deployment a/web": progressing("0 of 2 replicas available")},
			v1alpha1.HealthProgressing, []string{"Deployment a/web: 0 of 2 replicas available"}},
		{"degraded wins", map[string]HealthResult{"Job a/j": degraded("failed"), "Deployment a/web": progressing("x")},
			v1alpha1.HealthDegraded, []string{"Deployment a/web: x", "Job a/j: failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, lines := SummarizeHealth(tt.in)
			if got != tt.want || strings.Join(lines, "|") != strings.Join(tt.lines, "|") {
				t.Errorf("SummarizeHealth = %s %q, want %s %q", got, lines, tt.want, tt.lines)
			}
		})
	}
	many := map[string]HealthResult{}
	for i := range 60 {
		many[strings.Repeat("x", i+1)] = progressing("p")
	}
	if _, lines := SummarizeHealth(many); len(lines) != maxProgressingLines+1 || lines[maxProgressingLines] != "... and 10 more" {
		t.Errorf("60 progressing: %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}
