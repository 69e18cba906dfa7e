package defaults

import (
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	Register(s)
	return s
}

// fromYAML decodes a manifest into a new value of obj's type, without defaulting.
func fromYAML[T runtime.Object](t *testing.T, manifest string, obj T) T {
	t.Helper()
	if err := yaml.Unmarshal([]byte(manifest), obj); err != nil {
		t.Fatalf("decode fixture: %v", err)
	}
	return obj
}

func toYAML(t *testing.T, obj any) string {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return string(b)
}

type defaultCase struct {
	name string
	in   runtime.Object // the manifest as written
	want runtime.Object // the manifest as kubectl get -o yaml would show it (defaulted fields)
}

func TestDefaults(t *testing.T) {
	cases := []defaultCase{
		{
			name: "pods/simple-pod.yaml",
			in: fromYAML(t, `
apiVersion: v1
kind: Pod
metadata:
  name: nginx
spec:
  containers:
  - name: nginx
    image: nginx:1.14.2
    ports:
    - containerPort: 80
`, &corev1.Pod{}),
			want: fromYAML(t, `
apiVersion: v1
kind: Pod
metadata:
  name: nginx
spec:
  containers:
  - name: nginx
    image: nginx:1.14.2
    imagePullPolicy: IfNotPresent
    ports:
    - containerPort: 80
      protocol: TCP
    resources: {}
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  dnsPolicy: ClusterFirst
  enableServiceLinks: true
  restartPolicy: Always
  schedulerName: default-scheduler
  securityContext: {}
  terminationGracePeriodSeconds: 30
`, &corev1.Pod{}),
		},
		{
			name: "pod: limits become requests, probes, env fieldRef, volumes, hostNetwork ports",
			in: fromYAML(t, `
apiVersion: v1
kind: Pod
metadata:
  name: full
spec:
  hostNetwork: true
  priorityClassName: high
  containers:
  - name: app
    image: registry.local:5000/app
    ports:
    - containerPort: 8080
    resources:
      requests:
        cpu: 10m
      limits:
        cpu: 100m
        memory: 64Mi
    env:
    - name: NODE
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    livenessProbe:
      httpGet:
        port: 8080
    readinessProbe:
      grpc:
        port: 9090
    lifecycle:
      preStop:
        httpGet:
          port: 8080
          path: /stop
  volumes:
  - name: scratch
  - name: cfg
    configMap:
      name: cfg
  - name: sec
    secret:
      secretName: sec
  - name: host
    hostPath:
      path: /var/log
  - name: token
    projected:
      sources:
      - serviceAccountToken:
          path: token
      - downwardAPI:
          items:
          - path: labels
            fieldRef:
              fieldPath: metadata.labels
  - name: data
    ephemeral:
      volumeClaimTemplate:
        spec:
          accessModes: [ReadWriteOnce]
          resources:
            requests:
              storage: 1Gi
`, &corev1.Pod{}),
			want: fromYAML(t, `
apiVersion: v1
kind: Pod
metadata:
  name: full
spec:
  hostNetwork: true
  priorityClassName: high
  containers:
  - name: app
    image: registry.local:5000/app
    imagePullPolicy: Always
    ports:
    - containerPort: 8080
      hostPort: 8080
      protocol: TCP
    resources:
      requests:
        cpu: 10m
        memory: 64Mi
      limits:
        cpu: 100m
        memory: 64Mi
    env:
    - name: NODE
      valueFrom:
        fieldRef:
          apiVersion: v1
          fieldPath: spec.nodeName
    livenessProbe:
      httpGet:
        path: /
        port: 8080
        scheme: HTTP
      timeoutSeconds: 1
      periodSeconds: 10
      successThreshold: 1
      failureThreshold: 3
    readinessProbe:
      grpc:
        port: 9090
        service: ""
      timeoutSeconds: 1
      periodSeconds: 10
      successThreshold: 1
      failureThreshold: 3
    lifecycle:
      preStop:
        httpGet:
          port: 8080
          path: /stop
          scheme: HTTP
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  dnsPolicy: ClusterFirst
  enableServiceLinks: true
  restartPolicy: Always
  schedulerName: default-scheduler
  securityContext: {}
  terminationGracePeriodSeconds: 30
  volumes:
  - name: scratch
    emptyDir: {}
  - name: cfg
    configMap:
      name: cfg
      defaultMode: 420
  - name: sec
    secret:
      secretName: sec
      defaultMode: 420
  - name: host
    hostPath:
      path: /var/log
      type: ""
  - name: token
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3600
      - downwardAPI:
          items:
          - path: labels
            fieldRef:
              apiVersion: v1
              fieldPath: metadata.labels
  - name: data
    ephemeral:
      volumeClaimTemplate:
        spec:
          accessModes: [ReadWriteOnce]
          resources:
            requests:
              storage: 1Gi
          volumeMode: Filesystem
`, &corev1.Pod{}),
		},
		{
			name: "application/deployment.yaml",
			in: fromYAML(t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
spec:
  selector:
    matchLabels:
      app: nginx
  replicas: 2
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
`, &appsv1.Deployment{}),
			want: fromYAML(t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
spec:
  progressDeadlineSeconds: 600
  replicas: 2
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app: nginx
  strategy:
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 25%
    type: RollingUpdate
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - image: nginx:1.14.2
        imagePullPolicy: IfNotPresent
        name: nginx
        ports:
        - containerPort: 80
          protocol: TCP
        resources: {}
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &appsv1.Deployment{}),
		},
		{
			name: "controllers/frontend.yaml (ReplicaSet keeps replicas 3)",
			in: fromYAML(t, `
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: frontend
  labels:
    app: guestbook
    tier: frontend
spec:
  replicas: 3
  selector:
    matchLabels:
      tier: frontend
  template:
    metadata:
      labels:
        tier: frontend
    spec:
      containers:
      - name: php-redis
        image: gcr.io/google_samples/gb-frontend:v3
`, &appsv1.ReplicaSet{}),
			want: fromYAML(t, `
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: frontend
  labels:
    app: guestbook
    tier: frontend
spec:
  replicas: 3
  selector:
    matchLabels:
      tier: frontend
  template:
    metadata:
      labels:
        tier: frontend
    spec:
      containers:
      - name: php-redis
        image: gcr.io/google_samples/gb-frontend:v3
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &appsv1.ReplicaSet{}),
		},
		{
			name: "Job hello (restartPolicy kept, labels from template)",
			in: fromYAML(t, `
apiVersion: batch/v1
kind: Job
metadata:
  name: hello
spec:
  template:
    metadata:
      labels:
        app: hello
    spec:
      containers:
      - name: hello
        image: busybox:1.28
        command: ['sh', '-c', 'echo "Hello, Kubernetes!" && sleep 3600']
      restartPolicy: OnFailure
`, &batchv1.Job{}),
			want: fromYAML(t, `
apiVersion: batch/v1
kind: Job
metadata:
  name: hello
  labels:
    app: hello
spec:
  backoffLimit: 6
  completionMode: NonIndexed
  completions: 1
  parallelism: 1
  podReplacementPolicy: TerminatingOrFailed
  suspend: false
  template:
    metadata:
      labels:
        app: hello
    spec:
      containers:
      - name: hello
        image: busybox:1.28
        command: ['sh', '-c', 'echo "Hello, Kubernetes!" && sleep 3600']
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: OnFailure
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &batchv1.Job{}),
		},
		{
			name: "job: work queue (parallelism only), no restartPolicy given",
			in: fromYAML(t, `
apiVersion: batch/v1
kind: Job
metadata:
  name: queue
spec:
  parallelism: 3
  template:
    spec:
      containers:
      - name: w
        image: busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000
`, &batchv1.Job{}),
			want: fromYAML(t, `
apiVersion: batch/v1
kind: Job
metadata:
  name: queue
spec:
  backoffLimit: 6
  completionMode: NonIndexed
  parallelism: 3
  podReplacementPolicy: TerminatingOrFailed
  suspend: false
  template:
    spec:
      containers:
      - name: w
        image: busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &batchv1.Job{}),
		},
		{
			name: "application/job/cronjob.yaml",
			in: fromYAML(t, `
apiVersion: batch/v1
kind: CronJob
metadata:
  name: hello
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: hello
            image: busybox
            imagePullPolicy: IfNotPresent
            command:
            - /bin/sh
            - -c
            - date; echo Hello from the Kubernetes cluster
          restartPolicy: OnFailure
`, &batchv1.CronJob{}),
			want: fromYAML(t, `
apiVersion: batch/v1
kind: CronJob
metadata:
  name: hello
spec:
  concurrencyPolicy: Allow
  failedJobsHistoryLimit: 1
  schedule: "* * * * *"
  successfulJobsHistoryLimit: 3
  suspend: false
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: hello
            image: busybox
            imagePullPolicy: IfNotPresent
            command:
            - /bin/sh
            - -c
            - date; echo Hello from the Kubernetes cluster
            terminationMessagePath: /dev/termination-log
            terminationMessagePolicy: File
          dnsPolicy: ClusterFirst
          restartPolicy: OnFailure
          schedulerName: default-scheduler
          securityContext: {}
          terminationGracePeriodSeconds: 30
`, &batchv1.CronJob{}),
		},
		{
			name: "statefulset web with volumeClaimTemplates",
			in: fromYAML(t, `
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: hello
        image: ghcr.io/example/hello:1.0
        ports:
        - name: http
          containerPort: 8080
        readinessProbe:
          httpGet:
            path: /healthz
            port: http
        volumeMounts:
        - name: data
          mountPath: /data
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 1Gi
`, &appsv1.StatefulSet{}),
			want: fromYAML(t, `
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  persistentVolumeClaimRetentionPolicy:
    whenDeleted: Retain
    whenScaled: Retain
  podManagementPolicy: OrderedReady
  replicas: 3
  revisionHistoryLimit: 10
  serviceName: web
  selector:
    matchLabels:
      app: web
  updateStrategy:
    rollingUpdate:
      partition: 0
    type: RollingUpdate
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: hello
        image: ghcr.io/example/hello:1.0
        imagePullPolicy: IfNotPresent
        ports:
        - name: http
          containerPort: 8080
          protocol: TCP
        readinessProbe:
          httpGet:
            path: /healthz
            port: http
            scheme: HTTP
          failureThreshold: 3
          periodSeconds: 10
          successThreshold: 1
          timeoutSeconds: 1
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
        volumeMounts:
        - name: data
          mountPath: /data
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 1Gi
      volumeMode: Filesystem
    status:
      phase: Pending
`, &appsv1.StatefulSet{}),
		},
		{
			name: "daemonset node-exporter (explicit maxUnavailable kept, maxSurge defaulted)",
			in: fromYAML(t, `
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-exporter
spec:
  selector:
    matchLabels:
      app: node-exporter
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  template:
    metadata:
      labels:
        app: node-exporter
    spec:
      hostNetwork: true
      containers:
      - name: node-exporter
        image: quay.io/prometheus/node-exporter:v1.12.1
        ports:
        - name: metrics
          containerPort: 9100
      volumes:
      - name: root
        hostPath:
          path: /
`, &appsv1.DaemonSet{}),
			want: fromYAML(t, `
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-exporter
spec:
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app: node-exporter
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 0
      maxUnavailable: 1
  template:
    metadata:
      labels:
        app: node-exporter
    spec:
      hostNetwork: true
      containers:
      - name: node-exporter
        image: quay.io/prometheus/node-exporter:v1.12.1
        imagePullPolicy: IfNotPresent
        ports:
        - name: metrics
          containerPort: 9100
          protocol: TCP
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
      volumes:
      - name: root
        hostPath:
          path: /
          type: ""
`, &appsv1.DaemonSet{}),
		},
		{
			name: "service headless web",
			in: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: None
  selector:
    app: web
  ports:
  - name: http
    port: 8080
    targetPort: http
`, &corev1.Service{}),
			want: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: None
  clusterIPs: [None]
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  ports:
  - name: http
    port: 8080
    protocol: TCP
    targetPort: http
  selector:
    app: web
  sessionAffinity: None
  type: ClusterIP
`, &corev1.Service{}),
		},
		{
			name: "service NodePort with ClientIP affinity, targetPort from port",
			in: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: np
spec:
  type: NodePort
  sessionAffinity: ClientIP
  ports:
  - port: 80
    nodePort: 30080
`, &corev1.Service{}),
			want: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: np
spec:
  type: NodePort
  externalTrafficPolicy: Cluster
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  sessionAffinity: ClientIP
  sessionAffinityConfig:
    clientIP:
      timeoutSeconds: 10800
  ports:
  - port: 80
    nodePort: 30080
    protocol: TCP
    targetPort: 80
`, &corev1.Service{}),
		},
		{
			name: "service ExternalName gets no IP fields",
			in: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: ext
spec:
  type: ExternalName
  externalName: db.example.com
`, &corev1.Service{}),
			want: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: ext
spec:
  type: ExternalName
  externalName: db.example.com
  sessionAffinity: None
`, &corev1.Service{}),
		},
		{
			name: "service LoadBalancer",
			in: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: lb
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.20
  ports:
  - port: 443
    targetPort: 8443
status:
  loadBalancer:
    ingress:
    - ip: 192.0.2.10
`, &corev1.Service{}),
			want: fromYAML(t, `
apiVersion: v1
kind: Service
metadata:
  name: lb
spec:
  type: LoadBalancer
  allocateLoadBalancerNodePorts: true
  clusterIP: 10.96.0.20
  clusterIPs: [10.96.0.20]
  externalTrafficPolicy: Cluster
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  sessionAffinity: None
  ports:
  - port: 443
    protocol: TCP
    targetPort: 8443
status:
  loadBalancer:
    ingress:
    - ip: 192.0.2.10
      ipMode: VIP
`, &corev1.Service{}),
		},
		{
			name: "namespace being created",
			in:   &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
			want: fromYAML(t, `
metadata:
  name: team-a
  labels:
    kubernetes.io/metadata.name: team-a
spec:
  finalizers: [kubernetes]
status:
  phase: Active
`, &corev1.Namespace{}),
		},
		{
			name: "namespace read back after the finalize call keeps its empty finalizers",
			in: fromYAML(t, `
metadata:
  name: team-a
  uid: 1b4e28ba-2fa1-11d2-883f-0016d3cca427
  labels:
    kubernetes.io/metadata.name: team-a
  deletionTimestamp: "2026-01-01T00:00:00Z"
status:
  phase: Terminating
`, &corev1.Namespace{}),
			want: fromYAML(t, `
metadata:
  name: team-a
  uid: 1b4e28ba-2fa1-11d2-883f-0016d3cca427
  labels:
    kubernetes.io/metadata.name: team-a
  deletionTimestamp: "2026-01-01T00:00:00Z"
status:
  phase: Terminating
`, &corev1.Namespace{}),
		},
		{
			name: "local PersistentVolume",
			in: fromYAML(t, `
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-node-1-a
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  local:
    path: /srv/pv/a
`, &corev1.PersistentVolume{}),
			want: fromYAML(t, `
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-node-1-a
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  local:
    path: /srv/pv/a
  volumeMode: Filesystem
status:
  phase: Pending
`, &corev1.PersistentVolume{}),
		},
		{
			name: "pvc",
			in: fromYAML(t, `
metadata:
  name: data-web-0
spec:
  accessModes: ["ReadWriteOnce"]
  resources:
    requests:
      storage: 1Gi
`, &corev1.PersistentVolumeClaim{}),
			want: fromYAML(t, `
metadata:
  name: data-web-0
spec:
  accessModes: ["ReadWriteOnce"]
  resources:
    requests:
      storage: 1Gi
  volumeMode: Filesystem
status:
  phase: Pending
`, &corev1.PersistentVolumeClaim{}),
		},
		{
			name: "secret type Opaque",
			in:   &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
			want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Type: corev1.SecretTypeOpaque},
		},
		{
			name: "endpoints and endpointslice port protocol",
			in: &corev1.EndpointsList{Items: []corev1.Endpoints{{Subsets: []corev1.EndpointSubset{{
				Ports: []corev1.EndpointPort{{Port: 80}, {Port: 53, Protocol: corev1.ProtocolUDP}},
			}}}}},
			want: &corev1.EndpointsList{Items: []corev1.Endpoints{{Subsets: []corev1.EndpointSubset{{
				Ports: []corev1.EndpointPort{{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}},
			}}}}},
		},
		{
			name: "endpointslice",
			in: fromYAML(t, `
addressType: IPv4
ports:
- port: 80
`, &discoveryv1.EndpointSlice{}),
			want: fromYAML(t, `
addressType: IPv4
ports:
- name: ""
  port: 80
  protocol: TCP
`, &discoveryv1.EndpointSlice{}),
		},
		{
			name: "networkpolicy with egress rules",
			in: fromYAML(t, `
metadata:
  name: np
spec:
  podSelector: {}
  ingress:
  - ports:
    - port: 80
  egress:
  - ports:
    - port: 53
      protocol: UDP
`, &networkingv1.NetworkPolicy{}),
			want: fromYAML(t, `
metadata:
  name: np
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
  ingress:
  - ports:
    - port: 80
      protocol: TCP
  egress:
  - ports:
    - port: 53
      protocol: UDP
`, &networkingv1.NetworkPolicy{}),
		},
		{
			name: "networkpolicy deny-all ingress",
			in:   fromYAML(t, `{"spec":{"podSelector":{}}}`, &networkingv1.NetworkPolicy{}),
			want: fromYAML(t, `{"spec":{"podSelector":{},"policyTypes":["Ingress"]}}`, &networkingv1.NetworkPolicy{}),
		},
		{
			name: "storageclass",
			in:   fromYAML(t, `{metadata: {name: fast}, provisioner: flotilla.dev/local}`, &storagev1.StorageClass{}),
			want: fromYAML(t, `
metadata: {name: fast}
provisioner: flotilla.dev/local
reclaimPolicy: Delete
volumeBindingMode: Immediate
`, &storagev1.StorageClass{}),
		},
		{
			name: "ingressclass parameters scope",
			in: fromYAML(t, `
spec:
  controller: flotilla.dev/ingress
  parameters:
    kind: Params
    name: p
`, &networkingv1.IngressClass{}),
			want: fromYAML(t, `
spec:
  controller: flotilla.dev/ingress
  parameters:
    kind: Params
    name: p
    scope: Cluster
`, &networkingv1.IngressClass{}),
		},
		{
			name: "validatingadmissionpolicy",
			in: fromYAML(t, `
metadata:
  name: replicas
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= 5
`, &admissionregistrationv1.ValidatingAdmissionPolicy{}),
			want: fromYAML(t, `
metadata:
  name: replicas
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    namespaceSelector: {}
    objectSelector: {}
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
      scope: "*"
  validations:
  - expression: object.spec.replicas <= 5
`, &admissionregistrationv1.ValidatingAdmissionPolicy{}),
		},
		{
			name: "validatingadmissionpolicybinding",
			in: fromYAML(t, `
spec:
  policyName: replicas
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        env: prod
`, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}),
			want: fromYAML(t, `
spec:
  policyName: replicas
  validationActions: [Deny]
  matchResources:
    matchPolicy: Equivalent
    namespaceSelector:
      matchLabels:
        env: prod
    objectSelector: {}
`, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}),
		},
		{
			name: "mutatingadmissionpolicy",
			in: fromYAML(t, `
metadata:
  name: team-label
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"team": "edge"}}}'
`, &admissionregistrationv1.MutatingAdmissionPolicy{}),
			want: fromYAML(t, `
metadata:
  name: team-label
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    matchPolicy: Equivalent
    namespaceSelector: {}
    objectSelector: {}
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
      scope: "*"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"team": "edge"}}}'
`, &admissionregistrationv1.MutatingAdmissionPolicy{}),
		},
		{
			name: "mutatingadmissionpolicybinding",
			in: fromYAML(t, `
spec:
  policyName: team-label
  matchResources:
    objectSelector:
      matchLabels:
        app: web
`, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}),
			want: fromYAML(t, `
spec:
  policyName: team-label
  matchResources:
    matchPolicy: Equivalent
    namespaceSelector: {}
    objectSelector:
      matchLabels:
        app: web
`, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}),
		},
		{
			name: "limitrange container defaults",
			in: fromYAML(t, `
spec:
  limits:
  - type: Container
    max:
      cpu: "1"
    min:
      memory: 16Mi
  - type: Pod
    max:
      cpu: "2"
`, &corev1.LimitRange{}),
			want: fromYAML(t, `
spec:
  limits:
  - type: Container
    max:
      cpu: "1"
    min:
      memory: 16Mi
    default:
      cpu: "1"
    defaultRequest:
      cpu: "1"
      memory: 16Mi
  - type: Pod
    max:
      cpu: "2"
`, &corev1.LimitRange{}),
		},
		{
			name: "pod list: every item is defaulted",
			in: &corev1.PodList{Items: []corev1.Pod{
				{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a:latest"}}}},
			}},
			want: fromYAML(t, `
items:
- spec:
    containers:
    - name: a
      image: a:latest
      imagePullPolicy: Always
      terminationMessagePath: /dev/termination-log
      terminationMessagePolicy: File
    dnsPolicy: ClusterFirst
    enableServiceLinks: true
    restartPolicy: Always
    schedulerName: default-scheduler
    securityContext: {}
    terminationGracePeriodSeconds: 30
`, &corev1.PodList{}),
		},
	}
	checkDefaults(t, cases)
}

// TestExplicitValuesKept defaults objects that already set every defaulted field to a
// non-default value, and expects no change at all.
func TestExplicitValuesKept(t *testing.T) {
	objs := []runtime.Object{
		fromYAML(t, `
metadata:
  name: explicit
spec:
  replicas: 0
  revisionHistoryLimit: 0
  progressDeadlineSeconds: 60
  strategy:
    type: Recreate
  template:
    spec:
      containers:
      - name: c
        image: nginx:latest
        imagePullPolicy: Never
        terminationMessagePath: /tmp/msg
        terminationMessagePolicy: FallbackToLogsOnError
        ports:
        - containerPort: 53
          protocol: UDP
        livenessProbe:
          exec:
            command: ["true"]
          timeoutSeconds: 5
          periodSeconds: 7
          successThreshold: 1
          failureThreshold: 9
      dnsPolicy: Default
      restartPolicy: Always
      schedulerName: other
      securityContext:
        runAsUser: 1000
      terminationGracePeriodSeconds: 0
      volumes:
      - name: s
        secret:
          secretName: s
          defaultMode: 256
`, &appsv1.Deployment{}),
		fromYAML(t, `
spec:
  replicas: 5
  podManagementPolicy: Parallel
  revisionHistoryLimit: 2
  persistentVolumeClaimRetentionPolicy:
    whenDeleted: Delete
    whenScaled: Delete
  updateStrategy:
    type: OnDelete
  template:
    spec:
      containers:
      - name: c
        image: nginx@sha256:abc
        imagePullPolicy: Always
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &appsv1.StatefulSet{}),
		fromYAML(t, `
spec:
  revisionHistoryLimit: 1
  updateStrategy:
    type: OnDelete
  template:
    spec:
      containers:
      - name: c
        image: x:1
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &appsv1.DaemonSet{}),
		fromYAML(t, `
spec:
  parallelism: 2
  completions: 4
  backoffLimit: 0
  completionMode: Indexed
  suspend: true
  manualSelector: true
  podReplacementPolicy: Failed
  template:
    spec:
      containers:
      - name: c
        image: x:1
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Never
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`, &batchv1.Job{}),
		fromYAML(t, `
spec:
  schedule: "@hourly"
  concurrencyPolicy: Forbid
  suspend: true
  successfulJobsHistoryLimit: 0
  failedJobsHistoryLimit: 0
  jobTemplate:
    spec:
      template:
        spec:
          dnsPolicy: None
          schedulerName: other
          securityContext: {}
          terminationGracePeriodSeconds: 5
`, &batchv1.CronJob{}),
		fromYAML(t, `
spec:
  type: ClusterIP
  clusterIP: fd00::10
  clusterIPs: [fd00::10]
  ipFamilies: [IPv6]
  ipFamilyPolicy: PreferDualStack
  internalTrafficPolicy: Local
  sessionAffinity: ClientIP
  sessionAffinityConfig:
    clientIP:
      timeoutSeconds: 60
  ports:
  - port: 53
    protocol: UDP
    targetPort: dns
`, &corev1.Service{}),
		fromYAML(t, `
spec:
  persistentVolumeReclaimPolicy: Delete
  volumeMode: Block
status:
  phase: Bound
`, &corev1.PersistentVolume{}),
		fromYAML(t, `
type: kubernetes.io/tls
`, &corev1.Secret{}),
		fromYAML(t, `
spec:
  failurePolicy: Ignore
  matchConstraints:
    matchPolicy: Exact
    namespaceSelector:
      matchLabels: {a: b}
    objectSelector:
      matchLabels: {c: d}
`, &admissionregistrationv1.ValidatingAdmissionPolicy{}),
		fromYAML(t, `
spec:
  failurePolicy: Ignore
  reinvocationPolicy: IfNeeded
  matchConstraints:
    matchPolicy: Exact
    namespaceSelector:
      matchLabels: {a: b}
    objectSelector:
      matchLabels: {c: d}
`, &admissionregistrationv1.MutatingAdmissionPolicy{}),
		fromYAML(t, `
provisioner: flotilla.dev/local
reclaimPolicy: Retain
volumeBindingMode: WaitForFirstConsumer
`, &storagev1.StorageClass{}),
	}
	checkExplicitValuesKept(t, objs)
}

// TestDefaultsRunOnDecode checks that a codec built on the scheme applies the defaults, which is
// what makes server-side apply and patches see them.
func TestDefaultsRunOnDecode(t *testing.T) {
	s := newScheme(t)
	if err := appsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(s)
	manifest := []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},
"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},
"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`)
	obj, _, err := codecs.UniversalDecoder(appsv1.SchemeGroupVersion).Decode(manifest, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	d := obj.(*appsv1.Deployment)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas = %v, want 1", d.Spec.Replicas)
	}
	if got := d.Spec.Template.Spec.Containers[0].ImagePullPolicy; got != corev1.PullAlways {
		t.Errorf("imagePullPolicy = %q, want Always", got)
	}
}

func TestImagePullPolicy(t *testing.T) {
	cases := map[string]corev1.PullPolicy{
		"nginx":                               corev1.PullAlways,
		"nginx:latest":                        corev1.PullAlways,
		"nginx:1.14.2":                        corev1.PullIfNotPresent,
		"registry.local:5000/app":             corev1.PullAlways,
		"registry.local:5000/app:v1":          corev1.PullIfNotPresent,
		"registry.local:5000/app:latest":      corev1.PullAlways,
		"nginx@sha256:abcdef":                 corev1.PullIfNotPresent,
		"nginx:latest@sha256:abcdef":          corev1.PullAlways,
		"gcr.io/google_samples/gb-frontend:3": corev1.PullIfNotPresent,
	}
	for image, want := range cases {
		if got := pullPolicyFor(image); got != want {
			t.Errorf("pullPolicyFor(%q) = %s, want %s", image, got, want)
		}
	}
}

func TestPrepareJobForCreate(t *testing.T) {
	t.Run("generated selector", func(t *testing.T) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "hello", UID: "uid-1"}}
		job.Spec.Template.Labels = map[string]string{"app": "hello"}
		PrepareJobForCreate(job)
		wantLabels := map[string]string{
			"app":                                "hello",
			"batch.kubernetes.io/controller-uid": "uid-1",
			"batch.kubernetes.io/job-name":       "hello",
			"controller-uid":                     "uid-1",
			"job-name":                           "hello",
		}
		if !reflect.DeepEqual(job.Spec.Template.Labels, wantLabels) {
			t.Errorf("template labels = %v, want %v", job.Spec.Template.Labels, wantLabels)
		}
		wantSel := &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "uid-1"}}
		if !reflect.DeepEqual(job.Spec.Selector, wantSel) {
			t.Errorf("selector = %v, want %v", job.Spec.Selector, wantSel)
		}
	})
	t.Run("manual selector left alone", func(t *testing.T) {
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "uid-2"}}
		job.Spec.ManualSelector = new(true)
		job.Spec.Selector = sel.DeepCopy()
		job.Spec.Template.Labels = map[string]string{"app": "x"}
		PrepareJobForCreate(job)
		if !reflect.DeepEqual(job.Spec.Selector, sel) || len(job.Spec.Template.Labels) != 1 {
			t.Errorf("manual selector job changed: selector %v labels %v", job.Spec.Selector, job.Spec.Template.Labels)
		}
	})
	t.Run("user labels are not overwritten", func(t *testing.T) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "y", UID: "uid-3"}}
		job.Spec.Template.Labels = map[string]string{"job-name": "custom"}
		PrepareJobForCreate(job)
		if got := job.Spec.Template.Labels["job-name"]; got != "custom" {
			t.Errorf("job-name label = %q, want the user's value", got)
		}
	})
}

func TestPrepareNamespaceForCreate(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u"}}
	PrepareNamespaceForCreate(ns)
	if want := []corev1.FinalizerName{corev1.FinalizerKubernetes}; !reflect.DeepEqual(ns.Spec.Finalizers, want) {
		t.Errorf("finalizers = %v, want %v", ns.Spec.Finalizers, want)
	}
}

// checkDefaults defaults each case's input and expects its want, and no change when the
// result is defaulted again.
func checkDefaults(t *testing.T, cases []defaultCase) {
	t.Helper()
	s := newScheme(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.DeepCopyObject()
			s.Default(got)
			if g, w := toYAML(t, got), toYAML(t, tc.want); g != w {
				t.Fatalf("defaulted object differs (-want +got):\n%s", diff.Diff(tc.want, got))
			}
			again := got.DeepCopyObject()
			s.Default(again)
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("defaulting is not idempotent:\n%s", diff.Diff(got, again))
			}
		})
	}
}

// checkExplicitValuesKept defaults objects that set every defaulted field and expects no
// change at all.
func checkExplicitValuesKept(t *testing.T, objs []runtime.Object) {
	t.Helper()
	s := newScheme(t)
	for _, obj := range objs {
		t.Run(reflect.TypeOf(obj).Elem().Name(), func(t *testing.T) {
			got := obj.DeepCopyObject()
			s.Default(got)
			if !reflect.DeepEqual(got, obj) {
				t.Fatalf("explicit values changed (-want +got):\n%s", diff.Diff(obj, got))
			}
		})
	}
}
