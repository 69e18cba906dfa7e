package printers

import (
	"context"
	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func obj[T runtime.Object](t *testing.T, manifest string, o T) T {
	t.Helper()
	if err := yaml.Unmarshal([]byte(manifest), o); err != nil {
		t.Fatalf("decode fixture: %v", err)
	}
	return o
}

func convert(t *testing.T, gr schema.GroupResource, o runtime.Object) *metav1.Table {
	t.Helper()
	table, err := newConvertor(gr, func() time.Time { return now }).ConvertToTable(context.Background(), o, nil)
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	return table
}

func headers(table *metav1.Table, priority int32) []string {
	var out []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority <= priority {
			out = append(out, strings.ToUpper(c.Name))
		}
	}
	return out
}

func TestTables(t *testing.T) {
	const age = "<age>" // replaced by the object's creation time 10 minutes ago
	created := ago(10 * time.Minute)
	cases := []struct {
		name   string
		gr     schema.GroupResource
		obj    runtime.Object
		header []string // plain kubectl get
		wide   []string // the priority 1 columns kubectl adds with -o wide
		cells  []any    // every cell, wide ones included
	}{
		{
			name: "pod running",
			gr:   schema.GroupResource{Resource: "pods"},
			obj: obj(t, `
metadata: {name: frontend-b2zdv}
spec:
  nodeName: node-1
  containers: [{name: php-redis, image: gb-frontend:v3}]
status:
  phase: Running
  podIPs: [{ip: 10.244.1.5}]
  conditions: [{type: Ready, status: "True"}]
  containerStatuses:
  - name: php-redis
    ready: true
    restartCount: 0
    state: {running: {startedAt: "2026-03-01T11:50:00Z"}}
`, &corev1.Pod{}),
			header: []string{"NAME", "READY", "STATUS", "RESTARTS", "AGE"},
			wide:   []string{"IP", "NODE", "NOMINATED NODE", "READINESS GATES"},
			cells:  []any{"frontend-b2zdv", "1/1", "Running", "0", age, "10.244.1.5", "node-1", "<none>", "<none>"},
		},
		{
			name: "pod in CrashLoopBackOff with restarts",
			gr:   schema.GroupResource{Resource: "pods"},
			obj: obj(t, `
metadata: {name: crash}
spec:
  containers: [{name: app, image: app:1}]
  readinessGates: [{conditionType: example.com/ready}]
status:
  phase: Running
  conditions: [{type: example.com/ready, status: "False"}]
  containerStatuses:
  - name: app
    ready: false
    restartCount: 4
    state: {waiting: {reason: CrashLoopBackOff}}
    lastState: {terminated: {exitCode: 1, reason: Error, finishedAt: "2026-03-01T11:58:00Z"}}
`, &corev1.Pod{}),
			cells: []any{"crash", "0/1", "CrashLoopBackOff", "4 (2m ago)", age, "<none>", "<none>", "<none>", "0/1"},
		},
		{
			name: "pod waiting on its first init container",
			gr:   schema.GroupResource{Resource: "pods"},
			obj: obj(t, `
metadata: {name: init}
spec:
  initContainers: [{name: setup, image: busybox}]
  containers: [{name: app, image: app:1}]
status:
  phase: Pending
  initContainerStatuses:
  - name: setup
    state: {running: {}}
  containerStatuses:
  - name: app
    state: {waiting: {reason: PodInitializing}}
`, &corev1.Pod{}),
			cells: []any{"init", "0/1", "Init:0/1", "0", age, "<none>", "<none>", "<none>", "<none>"},
		},
		{
			name: "pod with an image that cannot be pulled",
			gr:   schema.GroupResource{Resource: "pods"},
			obj: obj(t, `
metadata: {name: web-2}
spec:
  containers: [{name: hello, image: hello:nope}]
status:
  phase: Pending
  containerStatuses:
  - name: hello
    state: {waiting: {reason: ImagePullBackOff}}
`, &corev1.Pod{}),
			cells: []any{"web-2", "0/1", "ImagePullBackOff", "0", age, "<none>", "<none>", "<none>", "<none>"},
		},
		{
			name: "pod being deleted",
			gr:   schema.GroupResource{Resource: "pods"},
			obj: obj(t, `
metadata: {name: pod1, deletionTimestamp: "2026-03-01T11:59:59Z"}
spec:
  containers: [{name: hello1, image: hello-app:2.0}]
status:
  phase: Running
  containerStatuses:
  - name: hello1
    ready: false
    state: {running: {}}
`, &corev1.Pod{}),
			cells: []any{"pod1", "0/1", "Terminating", "0", age, "<none>", "<none>", "<none>", "<none>"},
		},
		{
			name: "pod completed",
			gr:   schema.GroupResource{Resource: "pods"},
			obj: obj(t, `
metadata: {name: done, deletionTimestamp: "2026-03-01T11:59:59Z"}
spec:
  containers: [{name: c, image: c}]
status:
  phase: Succeeded
  containerStatuses:
  - name: c
    state: {terminated: {exitCode: 0, reason: Completed}}
`, &corev1.Pod{}),
			cells: []any{"done", "0/1", "Completed", "0", age, "<none>", "<none>", "<none>", "<none>"},
		},
		{
			name: "deployment 2/3",
			gr:   schema.GroupResource{Group: "apps", Resource: "deployments"},
			obj: obj(t, `
metadata: {name: nginx-deployment}
spec:
  replicas: 3
  selector: {matchLabels: {app: nginx}}
  template:
    spec:
      containers: [{name: nginx, image: "nginx:1.14.2"}, {name: sidecar, image: "busybox:1.28"}]
status: {readyReplicas: 2, updatedReplicas: 3, availableReplicas: 2}
`, &appsv1.Deployment{}),
			header: []string{"NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"},
			wide:   []string{"CONTAINERS", "IMAGES", "SELECTOR"},
			cells:  []any{"nginx-deployment", "2/3", int64(3), int64(2), age, "nginx,sidecar", "nginx:1.14.2,busybox:1.28", "app=nginx"},
		},
		{
			name: "replicaset",
			gr:   schema.GroupResource{Group: "apps", Resource: "replicasets"},
			obj: obj(t, `
metadata: {name: frontend}
spec:
  replicas: 3
  selector: {matchLabels: {tier: frontend}}
  template: {spec: {containers: [{name: php-redis, image: "gcr.io/google_samples/gb-frontend:v3"}]}}
status: {replicas: 3, readyReplicas: 3}
`, &appsv1.ReplicaSet{}),
			header: []string{"NAME", "DESIRED", "CURRENT", "READY", "AGE"},
			wide:   []string{"CONTAINERS", "IMAGES", "SELECTOR"},
			cells:  []any{"frontend", int64(3), int64(3), int64(3), age, "php-redis", "gcr.io/google_samples/gb-frontend:v3", "tier=frontend"},
		},
		{
			name: "statefulset",
			gr:   schema.GroupResource{Group: "apps", Resource: "statefulsets"},
			obj: obj(t, `
metadata: {name: web}
spec:
  replicas: 3
  template: {spec: {containers: [{name: hello, image: "ghcr.io/example/hello:1.0"}]}}
status: {readyReplicas: 1}
`, &appsv1.StatefulSet{}),
			header: []string{"NAME", "READY", "AGE"},
			wide:   []string{"CONTAINERS", "IMAGES"},
			cells:  []any{"web", "1/3", age, "hello", "ghcr.io/example/hello:1.0"},
		},
		{
			name: "daemonset",
			gr:   schema.GroupResource{Group: "apps", Resource: "daemonsets"},
			obj: obj(t, `
metadata: {name: node-exporter}
spec:
  selector: {matchLabels: {app: node-exporter}}
  template:
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers: [{name: node-exporter, image: "quay.io/prometheus/node-exporter:v1.12.1"}]
status: {desiredNumberScheduled: 3, currentNumberScheduled: 3, numberReady: 3, updatedNumberScheduled: 3, numberAvailable: 3}
`, &appsv1.DaemonSet{}),
			header: []string{"NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE"},
			wide:   []string{"CONTAINERS", "IMAGES", "SELECTOR"},
			cells: []any{"node-exporter", int64(3), int64(3), int64(3), int64(3), int64(3), "kubernetes.io/os=linux", age,
				"node-exporter", "quay.io/prometheus/node-exporter:v1.12.1", "app=node-exporter"},
		},
		{
			name: "controllerrevision",
			gr:   schema.GroupResource{Group: "apps", Resource: "controllerrevisions"},
			obj: obj(t, `
metadata:
  name: node-exporter-6d4b7c9f
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: node-exporter, uid: u, controller: true}]
revision: 2
`, &appsv1.ControllerRevision{}),
			header: []string{"NAME", "CONTROLLER", "REVISION", "AGE"},
			cells:  []any{"node-exporter-6d4b7c9f", "daemonset.apps/node-exporter", int64(2), age},
		},
		{
			name: "job running",
			gr:   schema.GroupResource{Group: "batch", Resource: "jobs"},
			obj: obj(t, `
metadata: {name: hello}
spec:
  completions: 1
  parallelism: 1
  selector: {matchLabels: {batch.kubernetes.io/controller-uid: u}}
  template: {spec: {containers: [{name: hello, image: "busybox:1.28"}]}}
status:
  startTime: "2026-03-01T11:59:30Z"
`, &batchv1.Job{}),
			header: []string{"NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"},
			wide:   []string{"CONTAINERS", "IMAGES", "SELECTOR"},
			cells:  []any{"hello", "Running", "0/1", "30s", age, "hello", "busybox:1.28", "batch.kubernetes.io/controller-uid=u"},
		},
		{
			name: "job complete, work queue",
			gr:   schema.GroupResource{Group: "batch", Resource: "jobs"},
			obj: obj(t, `
metadata: {name: queue}
spec:
  parallelism: 3
  template: {spec: {containers: [{name: w, image: w}]}}
status:
  succeeded: 1
  startTime: "2026-03-01T11:50:00Z"
  completionTime: "2026-03-01T11:52:05Z"
  conditions: [{type: Complete, status: "True"}]
`, &batchv1.Job{}),
			cells: []any{"queue", "Complete", "1/1 of 3", "2m5s", age, "w", "w", ""},
		},
		{
			name: "cronjob",
			gr:   schema.GroupResource{Group: "batch", Resource: "cronjobs"},
			obj: obj(t, `
metadata: {name: hello}
spec:
  schedule: "* * * * *"
  suspend: false
  jobTemplate: {spec: {template: {spec: {containers: [{name: hello, image: busybox}]}}}}
status:
  active: [{name: hello-1}]
  lastScheduleTime: "2026-03-01T11:59:00Z"
`, &batchv1.CronJob{}),
			header: []string{"NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE"},
			wide:   []string{"CONTAINERS", "IMAGES", "SELECTOR"},
			cells:  []any{"hello", "* * * * *", "<none>", "False", int64(1), "60s", age, "hello", "busybox", ""},
		},
		{
			name: "service NodePort",
			gr:   schema.GroupResource{Resource: "services"},
			obj: obj(t, `
metadata: {name: web}
spec:
  type: NodePort
  clusterIP: 10.96.12.7
  clusterIPs: [10.96.12.7]
  selector: {app: web}
  ports:
  - {port: 80, nodePort: 30080, protocol: TCP}
  - {port: 53, protocol: UDP}
`, &corev1.Service{}),
			header: []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"},
			wide:   []string{"SELECTOR"},
			cells:  []any{"web", "NodePort", "10.96.12.7", "<none>", "80:30080/TCP,53/UDP", age, "app=web"},
		},
		{
			name: "service LoadBalancer without address yet",
			gr:   schema.GroupResource{Resource: "services"},
			obj: obj(t, `
metadata: {name: lb}
spec: {type: LoadBalancer, clusterIPs: [10.96.0.20], ports: [{port: 443, nodePort: 31443, protocol: TCP}]}
`, &corev1.Service{}),
			cells: []any{"lb", "LoadBalancer", "10.96.0.20", "<pending>", "443:31443/TCP", age, "<none>"},
		},
		{
			name: "service list with a headless service",
			gr:   schema.GroupResource{Resource: "services"},
			obj: &corev1.ServiceList{Items: []corev1.Service{
				*obj(t, `{metadata: {name: web}, spec: {type: ClusterIP, clusterIP: None, clusterIPs: [None], ports: [{port: 8080, protocol: TCP}]}}`, &corev1.Service{}),
			}},
			cells: []any{"web", "ClusterIP", "None", "<none>", "8080/TCP", age, "<none>"},
		},
		{
			name: "endpoints",
			gr:   schema.GroupResource{Resource: "endpoints"},
			obj: obj(t, `
metadata: {name: web}
subsets:
- addresses: [{ip: 10.244.1.2}, {ip: 10.244.1.3}, {ip: 10.244.2.2}, {ip: 10.244.2.3}]
  ports: [{port: 8080}]
`, &corev1.Endpoints{}),
			header: []string{"NAME", "ENDPOINTS", "AGE"},
			cells:  []any{"web", "10.244.1.2:8080,10.244.1.3:8080,10.244.2.2:8080 + 1 more...", age},
		},
		{
			name: "endpointslice",
			gr:   schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"},
			obj: obj(t, `
metadata: {name: web-abc12}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.1.2]}, {addresses: [10.244.2.2]}]
`, &discoveryv1.EndpointSlice{}),
			header: []string{"NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"},
			cells:  []any{"web-abc12", "IPv4", "8080", "10.244.1.2,10.244.2.2", age},
		},
		{
			name:   "namespace",
			gr:     schema.GroupResource{Resource: "namespaces"},
			obj:    obj(t, `{metadata: {name: kube-system}, status: {phase: Active}}`, &corev1.Namespace{}),
			header: []string{"NAME", "STATUS", "AGE"},
			cells:  []any{"kube-system", "Active", age},
		},
		{
			name: "node ready, cordoned, control plane",
			gr:   schema.GroupResource{Resource: "nodes"},
			obj: obj(t, `
metadata:
  name: k8s-node-1
  labels: {node-role.kubernetes.io/control-plane: "", kubernetes.io/hostname: k8s-node-1}
spec: {unschedulable: true}
status:
  conditions: [{type: MemoryPressure, status: "False"}, {type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.168.50.11}, {type: Hostname, address: k8s-node-1}]
  nodeInfo: {kubeletVersion: v1.37.2, osImage: Debian GNU/Linux 13 (trixie), kernelVersion: 6.12.0, containerRuntimeVersion: "containerd://1.6.20"}
`, &corev1.Node{}),
			header: []string{"NAME", "STATUS", "ROLES", "AGE", "VERSION"},
			wide:   []string{"INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"},
			cells: []any{"k8s-node-1", "Ready,SchedulingDisabled", "control-plane", age, "v1.37.2",
				"192.168.50.11", "<none>", "Debian GNU/Linux 13 (trixie)", "6.12.0", "containerd://1.6.20"},
		},
		{
			name: "node not ready, no roles",
			gr:   schema.GroupResource{Resource: "nodes"},
			obj: obj(t, `
metadata: {name: k8s-node-2}
status: {conditions: [{type: Ready, status: Unknown}]}
`, &corev1.Node{}),
			cells: []any{"k8s-node-2", "NotReady", "<none>", age, "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"},
		},
		{
			name:   "configmap",
			gr:     schema.GroupResource{Resource: "configmaps"},
			obj:    obj(t, `{metadata: {name: cfg}, data: {a: "1", b: "2"}, binaryData: {c: AA==}}`, &corev1.ConfigMap{}),
			header: []string{"NAME", "DATA", "AGE"},
			cells:  []any{"cfg", int64(3), age},
		},
		{
			name:   "secret",
			gr:     schema.GroupResource{Resource: "secrets"},
			obj:    obj(t, `{metadata: {name: tls}, type: kubernetes.io/tls, data: {tls.crt: AA==, tls.key: AA==}}`, &corev1.Secret{}),
			header: []string{"NAME", "TYPE", "DATA", "AGE"},
			cells:  []any{"tls", "kubernetes.io/tls", int64(2), age},
		},
		{
			name:   "serviceaccount",
			gr:     schema.GroupResource{Resource: "serviceaccounts"},
			obj:    obj(t, `{metadata: {name: default}}`, &corev1.ServiceAccount{}),
			header: []string{"NAME", "SECRETS", "AGE"},
			cells:  []any{"default", int64(0), age},
		},
		{
			name: "core event",
			gr:   schema.GroupResource{Resource: "events"},
			obj: obj(t, `
metadata: {name: frontend.1}
involvedObject: {kind: ReplicaSet, name: frontend}
reason: SuccessfulCreate
message: "Created pod: frontend-wtsmm "
type: Normal
source: {component: replicaset-controller}
firstTimestamp: "2026-03-01T11:58:03Z"
lastTimestamp: "2026-03-01T11:58:03Z"
count: 1
`, &corev1.Event{}),
			header: []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"},
			wide:   []string{"SUBOBJECT", "SOURCE", "FIRST SEEN", "COUNT", "NAME"},
			cells: []any{"117s", "Normal", "SuccessfulCreate", "replicaset/frontend", "", "replicaset-controller",
				"Created pod: frontend-wtsmm", "117s", int64(1), "frontend.1"},
		},
		{
			name: "events.k8s.io event",
			gr:   schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
			obj: obj(t, `
metadata: {name: web-0.2}
regarding: {kind: Pod, name: web-0, fieldPath: "spec.containers{hello}"}
reason: Pulled
note: Successfully pulled image
type: Normal
eventTime: "2026-03-01T11:59:40.000000Z"
reportingController: flotilla-agent
reportingInstance: k8s-node-1
`, &eventsv1.Event{}),
			cells: []any{"20s", "Normal", "Pulled", "pod/web-0", "spec.containers{hello}", "flotilla-agent, k8s-node-1",
				"Successfully pulled image", "20s", int64(1), "web-0.2"},
		},
		{
			name: "persistentvolume bound",
			gr:   schema.GroupResource{Resource: "persistentvolumes"},
			obj: obj(t, `
metadata: {name: pv-node-1-a}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  volumeMode: Filesystem
  claimRef: {namespace: default, name: data-web-0}
status: {phase: Bound}
`, &corev1.PersistentVolume{}),
			header: []string{"NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "REASON", "AGE"},
			wide:   []string{"VOLUMEMODE"},
			cells:  []any{"pv-node-1-a", "1Gi", "RWO", "Retain", "Bound", "default/data-web-0", "", "<unset>", "", age, "Filesystem"},
		},
		{
			name: "persistentvolumeclaim bound",
			gr:   schema.GroupResource{Resource: "persistentvolumeclaims"},
			obj: obj(t, `
metadata: {name: data-web-0}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
  volumeName: pv-node-1-b
  storageClassName: ""
  volumeMode: Filesystem
status: {phase: Bound, accessModes: [ReadWriteOnce], capacity: {storage: 1Gi}}
`, &corev1.PersistentVolumeClaim{}),
			header: []string{"NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"},
			wide:   []string{"VOLUMEMODE"},
			cells:  []any{"data-web-0", "Bound", "pv-node-1-b", "1Gi", "RWO", "", "<unset>", age, "Filesystem"},
		},
		{
			name: "resourcequota",
			gr:   schema.GroupResource{Resource: "resourcequotas"},
			obj: obj(t, `
metadata: {name: compute}
status:
  hard: {requests.cpu: "1", limits.memory: 1Gi, pods: "10"}
  used: {requests.cpu: 500m, limits.memory: 256Mi, pods: "3"}
`, &corev1.ResourceQuota{}),
			header: []string{"NAME", "AGE", "REQUEST", "LIMIT"},
			cells:  []any{"compute", age, "pods: 3/10, requests.cpu: 500m/1", "limits.memory: 256Mi/1Gi"},
		},
		{
			name:   "limitrange",
			gr:     schema.GroupResource{Resource: "limitranges"},
			obj:    obj(t, `{metadata: {name: limits}}`, &corev1.LimitRange{}),
			header: []string{"NAME", "CREATED AT"},
			cells:  []any{"limits", "2026-03-01T11:50:00Z"},
		},
		{
			name: "ingress",
			gr:   schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"},
			obj: obj(t, `
metadata: {name: test-ingress}
spec:
  ingressClassName: external-lb
  defaultBackend: {service: {name: test, port: {number: 80}}}
status: {loadBalancer: {ingress: [{ip: 203.0.113.123}]}}
`, &networkingv1.Ingress{}),
			header: []string{"NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"},
			cells:  []any{"test-ingress", "external-lb", "*", "203.0.113.123", "80", age},
		},
		{
			name: "ingress with hosts and TLS",
			gr:   schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"},
			obj: obj(t, `
metadata: {name: fanout}
spec:
  tls: [{hosts: [foo.bar.com], secretName: tls}]
  rules: [{host: foo.bar.com}, {host: bar.baz.com}, {}, {host: d.example}]
`, &networkingv1.Ingress{}),
			cells: []any{"fanout", "<none>", "foo.bar.com,bar.baz.com + 1 more...", "", "80, 443", age},
		},
		{
			name: "ingressclass",
			gr:   schema.GroupResource{Group: "networking.k8s.io", Resource: "ingressclasses"},
			obj: obj(t, `
metadata: {name: external-lb}
spec: {controller: example.com/ingress-controller, parameters: {apiGroup: k8s.example.com, kind: IngressParameters, name: external-lb}}
`, &networkingv1.IngressClass{}),
			header: []string{"NAME", "CONTROLLER", "PARAMETERS", "AGE"},
			cells:  []any{"external-lb", "example.com/ingress-controller", "IngressParameters.k8s.example.com/external-lb", age},
		},
		{
			name: "storageclass default",
			gr:   schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"},
			obj: obj(t, `
metadata: {name: flotilla-local, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: flotilla.dev/local
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
`, &storagev1.StorageClass{}),
			header: []string{"NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"},
			cells:  []any{"flotilla-local (default)", "flotilla.dev/local", "Delete", "WaitForFirstConsumer", false, age},
		},
		{
			name: "storageclass not default",
			gr:   schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"},
			obj: obj(t, `
metadata: {name: keep, annotations: {storageclass.kubernetes.io/is-default-class: "false"}}
provisioner: example.com/nfs
reclaimPolicy: Retain
volumeBindingMode: Immediate
allowVolumeExpansion: true
`, &storagev1.StorageClass{}),
			cells: []any{"keep", "example.com/nfs", "Retain", "Immediate", true, age},
		},
		{
			name:   "networkpolicy",
			gr:     schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"},
			obj:    obj(t, `{metadata: {name: deny}, spec: {podSelector: {}}}`, &networkingv1.NetworkPolicy{}),
			header: []string{"NAME", "POD-SELECTOR", "AGE"},
			cells:  []any{"deny", "<none>", age},
		},
		{
			name:   "lease",
			gr:     schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"},
			obj:    obj(t, `{metadata: {name: k8s-node-1}, spec: {holderIdentity: k8s-node-1}}`, &coordinationv1.Lease{}),
			header: []string{"NAME", "HOLDER", "AGE"},
			cells:  []any{"k8s-node-1", "k8s-node-1", age},
		},
		{
			name:   "poddisruptionbudget",
			gr:     schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"},
			obj:    obj(t, `{metadata: {name: zk-pdb}, spec: {minAvailable: 2}, status: {disruptionsAllowed: 1}}`, &policyv1.PodDisruptionBudget{}),
			header: []string{"NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"},
			cells:  []any{"zk-pdb", "2", "N/A", int64(1), age},
		},
		{
			name: "validatingadmissionpolicy",
			gr:   schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"},
			obj: obj(t, `
metadata: {name: replicas}
spec: {paramKind: {apiVersion: v1, kind: ConfigMap}, validations: [{expression: "true"}]}
`, &admissionregistrationv1.ValidatingAdmissionPolicy{}),
			header: []string{"NAME", "VALIDATIONS", "PARAMKIND", "AGE"},
			cells:  []any{"replicas", int64(1), "v1/ConfigMap", age},
		},
		{
			name: "validatingadmissionpolicybinding",
			gr:   schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"},
			obj: obj(t, `
metadata: {name: replicas-prod}
spec: {policyName: replicas, paramRef: {name: limits, namespace: prod}}
`, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}),
			header: []string{"NAME", "POLICYNAME", "PARAMREF", "AGE"},
			cells:  []any{"replicas-prod", "replicas", "prod/limits", age},
		},
		{
			name:   "unknown resource: NAME and AGE",
			gr:     schema.GroupResource{Group: "example.com", Resource: "widgets"},
			obj:    &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "site"}},
			header: []string{"NAME", "AGE"},
			cells:  []any{"site", age},
		},
		{
			name: "gitsource: URL REVISION READY MESSAGE",
			gr:   schema.GroupResource{Group: "flotilla.dev", Resource: "gitsources"},
			obj: &flotillav1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Name: "root", CreationTimestamp: created},
				Spec: flotillav1alpha1.GitSourceSpec{URL: "file:///srv/site.git"},
				Status: flotillav1alpha1.GitSourceStatus{LastAppliedRevision: "main@sha1:abc",
					Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Message: "bad.yaml: Deployment demo/bad: spec.selector: Required value"}}}},
			header: []string{"NAME", "URL", "REVISION", "READY", "MESSAGE", "AGE"},
			cells:  []any{"root", "file:///srv/site.git", "main@sha1:abc", "False", "bad.yaml: Deployment demo/bad: spec.selector: Required value", age},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.obj.DeepCopyObject()
			setCreated(t, o, created)
			table := convert(t, tc.gr, o)

			if first := table.ColumnDefinitions[0]; tc.gr.Resource != "events" && (first.Name != "Name" || first.Format != "name") {
				t.Errorf("first column = %+v, want Name with format name", first)
			}
			if tc.header != nil {
				checkColumns(t, table, tc.header, tc.wide)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("rows = %d, want 1", len(table.Rows))
			}
			row := table.Rows[0]
			want := make([]any, len(tc.cells))
			for i, c := range tc.cells {
				if c == age {
					c = "10m"
				}
				want[i] = c
			}
			if !reflect.DeepEqual(row.Cells, want) {
				t.Errorf("cells =\n  %#v\nwant\n  %#v", row.Cells, want)
			}
			if len(row.Cells) != len(table.ColumnDefinitions) {
				t.Errorf("%d cells for %d columns", len(row.Cells), len(table.ColumnDefinitions))
			}
			if row.Object.Object == nil {
				t.Errorf("row carries no object")
			}
		})
	}
}

// setCreated sets the creation time on the object or on every item of a list.
func setCreated(t *testing.T, o runtime.Object, ts metav1.Time) {
	t.Helper()
	switch l := o.(type) {
	case *corev1.ServiceList:
		for i := range l.Items {
			l.Items[i].CreationTimestamp = ts
		}
		return
	}
	m, ok := o.(metav1.Object)
	if !ok {
		t.Fatalf("%T has no metadata", o)
	}
	m.SetCreationTimestamp(ts)
}

func TestListMetaAndNoHeaders(t *testing.T) {
	list := &corev1.PodList{
		ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next", RemainingItemCount: new(int64(7))},
		Items: []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
		},
	}
	c := TableConvertor(schema.GroupResource{Resource: "pods"})
	table, err := c.ConvertToTable(context.Background(), list, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if table.ColumnDefinitions != nil {
		t.Errorf("NoHeaders: got %d column definitions", len(table.ColumnDefinitions))
	}
	if table.ResourceVersion != "42" || table.Continue != "next" || table.RemainingItemCount == nil || *table.RemainingItemCount != 7 {
		t.Errorf("list meta not copied: %+v", table.ListMeta)
	}
	if len(table.Rows) != 2 || table.Rows[0].Cells[0] != "a" || table.Rows[1].Cells[0] != "b" {
		t.Errorf("rows = %+v", table.Rows)
	}
	if table.Rows[0].Cells[4] != "<unknown>" {
		t.Errorf("age of an object without creationTimestamp = %v, want <unknown>", table.Rows[0].Cells[4])
	}
	if p, ok := table.Rows[1].Object.Object.(*corev1.Pod); !ok || p.Name != "b" {
		t.Errorf("row object = %#v", table.Rows[1].Object.Object)
	}

	single, err := c.ConvertToTable(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "9"}}, &metav1.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if single.ResourceVersion != "9" || len(single.ColumnDefinitions) == 0 || len(single.Rows) != 1 {
		t.Errorf("single object table = %+v", single)
	}

	if _, err := c.ConvertToTable(context.Background(), list, &metav1.ListOptions{}); err == nil {
		t.Errorf("want an error for table options of the wrong type")
	}
}

func TestPodRowConditions(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	table := convert(t, schema.GroupResource{Resource: "pods"}, pod)
	conds := table.Rows[0].Conditions
	if len(conds) != 1 || conds[0].Type != metav1.RowCompleted || conds[0].Status != metav1.ConditionTrue {
		t.Errorf("conditions = %+v, want Completed=True", conds)
	}
}

func TestWrongObjectType(t *testing.T) {
	_, err := TableConvertor(schema.GroupResource{Resource: "pods"}).ConvertToTable(context.Background(), &corev1.Service{}, nil)
	if err == nil {
		t.Fatal("want an error when a pods table is asked for a Service")
	}
}

// checkColumns compares a table's column headers, and those shown only with -o wide.
func checkColumns(t *testing.T, table *metav1.Table, header, wide []string) {
	t.Helper()
	if got := headers(table, 0); !reflect.DeepEqual(got, header) {
		t.Errorf("columns = %q, want %q", got, header)
	}
	var wideCols []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 1 {
			wideCols = append(wideCols, strings.ToUpper(c.Name))
		}
	}
	if !reflect.DeepEqual(wideCols, wide) {
		t.Errorf("wide columns = %q, want %q", wideCols, wide)
	}
}
