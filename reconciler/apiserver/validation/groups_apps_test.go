package validation

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// application/deployment.yaml of the Kubernetes documentation.
const deploymentYAML = `
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
`

// controllers/frontend.yaml of the Kubernetes documentation.
const replicaSetYAML = `
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
`

// The web StatefulSet with its volumeClaimTemplates, plus a
// persistentVolumeClaimRetentionPolicy.
const statefulSetYAML = `
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
  persistentVolumeClaimRetentionPolicy:
    whenDeleted: Retain
    whenScaled: Delete
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
`

// A node-exporter DaemonSet (node-exporter.yaml).
const daemonSetYAML = `
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-exporter
  labels:
    app: node-exporter
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
      hostPID: true
      tolerations:
      - key: node-role.kubernetes.io/control-plane
        operator: Exists
        effect: NoSchedule
      containers:
      - name: node-exporter
        image: quay.io/prometheus/node-exporter:v1.12.1
        args:
        - --path.rootfs=/host
        - --path.udev.data=/host/run/udev/data
        ports:
        - name: metrics
          containerPort: 9100
        resources:
          requests:
            cpu: 20m
            memory: 32Mi
          limits:
            memory: 64Mi
        securityContext:
          runAsNonRoot: true
          runAsUser: 65534
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
        volumeMounts:
        - name: root
          mountPath: /host
          readOnly: true
          mountPropagation: HostToContainer
      volumes:
      - name: root
        hostPath:
          path: /
`

// The tests apply the defaults the defaults package fills in before validation.

func testDeployment(t *testing.T) *appsv1.Deployment {
	d := fixture[appsv1.Deployment](t, deploymentYAML, true)
	pct := intstr.FromString("25%")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &pct, MaxUnavailable: ptr.To(pct)}}
	d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return d
}

func testReplicaSet(t *testing.T) *appsv1.ReplicaSet {
	rs := fixture[appsv1.ReplicaSet](t, replicaSetYAML, true)
	rs.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return rs
}

func testStatefulSet(t *testing.T) *appsv1.StatefulSet {
	ss := fixture[appsv1.StatefulSet](t, statefulSetYAML, true)
	ss.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	ss.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](0)}}
	ss.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	ss.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return ss
}

func testDaemonSet(t *testing.T) *appsv1.DaemonSet {
	ds := fixture[appsv1.DaemonSet](t, daemonSetYAML, true)
	ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
	ds.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return ds
}

func ios(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }

func TestValidateDeployment(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*appsv1.Deployment)
		want   []string
	}{
		{"deployment.yaml", func(*appsv1.Deployment) {}, none()},
		{"recreate", func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}, none()},
		{"bad name", func(d *appsv1.Deployment) { d.Name = "Nginx_Deployment" }, errs(inv("metadata.name"))},
		{"no namespace", func(d *appsv1.Deployment) { d.Namespace = "" }, errs(req("metadata.namespace"))},
		{"negative replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](-1) }, errs(inv("spec.replicas"))},
		{"no selector", func(d *appsv1.Deployment) { d.Spec.Selector = nil }, errs(req("spec.selector"))},
		{"empty selector", func(d *appsv1.Deployment) { d.Spec.Selector = &metav1.LabelSelector{} }, errs(inv("spec.selector"))},
		{"bad selector operator", func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Like"}}
		}, errs(inv("spec.selector.matchExpressions[0].operator"))},
		{"selector does not match template", func(d *appsv1.Deployment) {
			d.Spec.Template.Labels = map[string]string{"app": "apache"}
		}, errs(inv("spec.template.metadata.labels"))},
		{"restartPolicy OnFailure", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}, errs(nsup("spec.template.spec.restartPolicy"))},
		{"activeDeadlineSeconds", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](30)
		}, errs(forb("spec.template.spec.activeDeadlineSeconds"))},
		{"negative minReadySeconds", func(d *appsv1.Deployment) {
			d.Spec.MinReadySeconds = -1
		}, errs(inv("spec.minReadySeconds"))},
		{"negative revisionHistoryLimit", func(d *appsv1.Deployment) {
			d.Spec.RevisionHistoryLimit = ptr.To[int32](-1)
		}, errs(inv("spec.revisionHistoryLimit"))},
		{"unknown strategy", func(d *appsv1.Deployment) {
			d.Spec.Strategy.Type = "BlueGreen"
		}, errs(nsup("spec.strategy.type"))},
		{"rollingUpdate with Recreate", func(d *appsv1.Deployment) {
			d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		}, errs(forb("spec.strategy.rollingUpdate"))},
		{"both zero", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ios("0"), MaxUnavailable: ios("0%")}
		}, errs(inv("spec.strategy.rollingUpdate.maxUnavailable"))},
		{"maxUnavailable over 100%", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = ios("110%")
		}, errs(inv("spec.strategy.rollingUpdate.maxUnavailable"))},
		{"maxSurge not a percentage", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = ios("ten")
		}, errs(inv("spec.strategy.rollingUpdate.maxSurge"))},
		{"negative maxSurge", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(-1))
		}, errs(inv("spec.strategy.rollingUpdate.maxSurge"))},
		{"progress deadline not above minReadySeconds", func(d *appsv1.Deployment) {
			d.Spec.MinReadySeconds = 600
		}, errs(inv("spec.progressDeadlineSeconds"))},
		{"paused and rollbackTo ignored", func(d *appsv1.Deployment) { d.Spec.Paused = true }, none()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := testDeployment(t)
			c.mutate(d)
			checkErrs(t, ValidateDeployment(d), c.want)
		})
	}
}

func TestDeploymentMessages(t *testing.T) {
	d := testDeployment(t)
	d.Spec.Template.Labels = map[string]string{"app": "apache"}
	d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	got := ValidateDeployment(d).ToAggregate().Error()
	for _, want := range []string{
		"spec.template.metadata.labels: Invalid value: {\"app\":\"apache\"}: `selector` does not match template `labels`",
		`spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("message %q\n does not contain %q", got, want)
		}
	}
}

func TestValidateDeploymentUpdate(t *testing.T) {
	old := testDeployment(t)
	old.ResourceVersion = "1"
	d := old.DeepCopy()
	d.Spec.Replicas = ptr.To[int32](5)
	d.Spec.Template.Spec.Containers[0].Image = "nginx:1.16.1"
	checkErrs(t, ValidateDeploymentUpdate(d, old), none())

	d = old.DeepCopy()
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx", "tier": "web"}}
	d.Spec.Template.Labels["tier"] = "web"
	checkErrs(t, ValidateDeploymentUpdate(d, old), errs(inv("spec.selector")))

	d = old.DeepCopy()
	d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 2, 2, 3
	d.Status.CollisionCount = ptr.To[int32](1)
	old.Status.CollisionCount = ptr.To[int32](2)
	checkErrs(t, ValidateDeploymentStatusUpdate(d, old), errs(
		inv("status.availableReplicas"), inv("status.availableReplicas"), inv("status.collisionCount")))
}

func TestValidateReplicaSet(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*appsv1.ReplicaSet)
		want   []string
	}{
		{"frontend.yaml", func(*appsv1.ReplicaSet) {}, none()},
		{"set-based selector", func(rs *appsv1.ReplicaSet) {
			rs.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"frontend", "web"}}}}
		}, none()},
		{"empty restartPolicy is defaulted", func(rs *appsv1.ReplicaSet) { rs.Spec.Template.Spec.RestartPolicy = "" }, none()},
		{"labels do not match", func(rs *appsv1.ReplicaSet) {
			rs.Spec.Template.Labels = map[string]string{"tier": "backend"}
		}, errs(inv("spec.template.metadata.labels"))},
		{"restartPolicy Never", func(rs *appsv1.ReplicaSet) {
			rs.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		}, errs(nsup("spec.template.spec.restartPolicy"))},
		{"empty selector", func(rs *appsv1.ReplicaSet) { rs.Spec.Selector = &metav1.LabelSelector{} }, errs(inv("spec.selector"))},
		{"negative replicas", func(rs *appsv1.ReplicaSet) { rs.Spec.Replicas = ptr.To[int32](-3) }, errs(inv("spec.replicas"))},
		{"bad selector label", func(rs *appsv1.ReplicaSet) {
			rs.Spec.Selector.MatchLabels = map[string]string{"tier": "front end"}
		}, errs(inv("spec.selector.matchLabels"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := testReplicaSet(t)
			c.mutate(rs)
			checkErrs(t, ValidateReplicaSet(rs), c.want)
		})
	}

	old := testReplicaSet(t)
	rs := old.DeepCopy()
	rs.Spec.Selector.MatchLabels["app"] = "guestbook"
	rs.Spec.Template.Labels["app"] = "guestbook"
	checkErrs(t, ValidateReplicaSetUpdate(rs, old), errs(inv("spec.selector")))

	rs = old.DeepCopy()
	rs.Status = appsv1.ReplicaSetStatus{Replicas: 3, FullyLabeledReplicas: 4, ReadyReplicas: 3, AvailableReplicas: 3}
	checkErrs(t, ValidateReplicaSetStatusUpdate(rs, old), errs(inv("status.fullyLabeledReplicas")))
}

func TestValidateStatefulSet(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*appsv1.StatefulSet)
		want   []string
	}{
		{"web with claims and retention policy", func(*appsv1.StatefulSet) {}, none()},
		{"partition, Parallel, ordinals", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](2)
			ss.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ios("50%")
			ss.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
			ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 5}
		}, none()},
		{"OnDelete", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		}, none()},
		{"name not a DNS label", func(ss *appsv1.StatefulSet) { ss.Name = "web.v1" }, errs(inv("metadata.name"))},
		{"bad podManagementPolicy", func(ss *appsv1.StatefulSet) {
			ss.Spec.PodManagementPolicy = "Random"
		}, errs(nsup("spec.podManagementPolicy"))},
		{"bad updateStrategy", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy.Type = "Rolling"
		}, errs(nsup("spec.updateStrategy.type"))},
		{"rollingUpdate with OnDelete", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
		}, errs(forb("spec.updateStrategy.rollingUpdate"))},
		{"negative partition", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](-1)
		}, errs(inv("spec.updateStrategy.rollingUpdate.partition"))},
		{"maxUnavailable 0", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ios("0")
		}, errs(inv("spec.updateStrategy.rollingUpdate.maxUnavailable"))},
		{"retention policy", func(ss *appsv1.StatefulSet) {
			ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = "Keep"
		}, errs(nsup("spec.persistentVolumeClaimRetentionPolicy.whenScaled"))},
		{"negative ordinals start", func(ss *appsv1.StatefulSet) {
			ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: -1}
		}, errs(inv("spec.ordinals.start"))},
		{"claim without access modes", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec.AccessModes = nil
		}, errs(req("spec.volumeClaimTemplates[0].spec.accessModes"))},
		{"claim with unknown access mode", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{"ReadWriteSometimes"}
		}, errs(nsup("spec.volumeClaimTemplates[0].spec.accessModes[0]"))},
		{"claim without storage", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests = nil
		}, errs(req("spec.volumeClaimTemplates[0].spec.resources.requests[storage]"))},
		{"claim with zero storage", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("0")
		}, errs(inv("spec.volumeClaimTemplates[0].spec.resources.requests[storage]"))},
		{"duplicate claim names", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates = append(ss.Spec.VolumeClaimTemplates, ss.Spec.VolumeClaimTemplates[0])
		}, errs(dup("spec.volumeClaimTemplates[1].metadata.name"))},
		{"unnamed claim", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Name = ""
			ss.Spec.Template.Spec.Containers[0].VolumeMounts = nil
		}, errs(req("spec.volumeClaimTemplates[0].metadata.name"))},
		{"restartPolicy Never", func(ss *appsv1.StatefulSet) {
			ss.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		}, errs(nsup("spec.template.spec.restartPolicy"))},
		{"selector mismatch", func(ss *appsv1.StatefulSet) {
			ss.Spec.Selector.MatchLabels["app"] = "db"
		}, errs(inv("spec.template.metadata.labels"))},
		{"no selector", func(ss *appsv1.StatefulSet) { ss.Spec.Selector = nil }, errs(req("spec.selector"))},
		{"bad serviceName", func(ss *appsv1.StatefulSet) { ss.Spec.ServiceName = "Web" }, errs(inv("spec.serviceName"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ss := testStatefulSet(t)
			c.mutate(ss)
			checkErrs(t, ValidateStatefulSet(ss), c.want)
		})
	}
}

func TestValidateStatefulSetUpdate(t *testing.T) {
	old := testStatefulSet(t)
	allowed := old.DeepCopy()
	allowed.Spec.Replicas = ptr.To[int32](1)
	allowed.Spec.Template.Spec.Containers[0].Image = "ghcr.io/example/hello:2.0"
	allowed.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](2)
	allowed.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	allowed.Spec.MinReadySeconds = 5
	allowed.Spec.RevisionHistoryLimit = ptr.To[int32](3)
	allowed.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
	checkErrs(t, ValidateStatefulSetUpdate(allowed, old), none())

	for name, mutate := range map[string]func(*appsv1.StatefulSet){
		"volumeClaimTemplates": func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		},
		"serviceName":         func(ss *appsv1.StatefulSet) { ss.Spec.ServiceName = "web2" },
		"podManagementPolicy": func(ss *appsv1.StatefulSet) { ss.Spec.PodManagementPolicy = appsv1.ParallelPodManagement },
	} {
		t.Run(name, func(t *testing.T) {
			ss := old.DeepCopy()
			mutate(ss)
			got := ValidateStatefulSetUpdate(ss, old)
			checkErrs(t, got, errs(forb("spec")))
			if len(got) == 1 && !strings.Contains(got[0].Detail, "'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds'") {
				t.Errorf("message %q does not list the mutable fields", got[0].Detail)
			}
		})
	}

	ss := old.DeepCopy()
	ss.Status = appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 4, CurrentReplicas: 3, UpdatedReplicas: 3}
	checkErrs(t, ValidateStatefulSetStatusUpdate(ss, old), errs(inv("status.readyReplicas")))
}

func TestValidateDaemonSet(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*appsv1.DaemonSet)
		want   []string
	}{
		{"node-exporter.yaml", func(*appsv1.DaemonSet) {}, none()},
		{"surge", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ios("0"), MaxSurge: ios("1")}
		}, none()},
		{"OnDelete", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		}, none()},
		{"both zero", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ios("0")
		}, errs(req("spec.updateStrategy.rollingUpdate.maxUnavailable"))},
		{"both non-zero", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ios("1")
		}, errs(inv("spec.updateStrategy.rollingUpdate.maxSurge"))},
		{"maxSurge over 100%", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ios("0"), MaxSurge: ios("200%")}
		}, errs(inv("spec.updateStrategy.rollingUpdate.maxSurge"))},
		{"unknown strategy", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.Type = "Surge"
		}, errs(nsup("spec.updateStrategy.type"))},
		{"rollingUpdate with OnDelete", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
		}, errs(forb("spec.updateStrategy.rollingUpdate"))},
		{"restartPolicy", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}, errs(nsup("spec.template.spec.restartPolicy"))},
		{"empty selector", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = &metav1.LabelSelector{} }, errs(inv("spec.selector"))},
		{"selector mismatch", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Labels = nil
		}, errs(inv("spec.template.metadata.labels"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := testDaemonSet(t)
			c.mutate(ds)
			checkErrs(t, ValidateDaemonSet(ds), c.want)
		})
	}

	ds := testDaemonSet(t)
	ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ios("0")
	if got := ValidateDaemonSet(ds).ToAggregate().Error(); !strings.Contains(got, "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0") {
		t.Errorf("both-zero message: %s", got)
	}
	ds = testDaemonSet(t)
	ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ios("1")
	if got := ValidateDaemonSet(ds).ToAggregate().Error(); !strings.Contains(got, "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"1\": may not be set when maxUnavailable is non-zero") {
		t.Errorf("both-non-zero message: %s", got)
	}

	old := testDaemonSet(t)
	ds = old.DeepCopy()
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "node-exporter", "v": "2"}}
	ds.Spec.Template.Labels["v"] = "2"
	checkErrs(t, ValidateDaemonSetUpdate(ds, old), errs(inv("spec.selector")))
}

func TestValidateControllerRevision(t *testing.T) {
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7b9f8d6c5", Namespace: "default", ResourceVersion: "1"},
		Data:       runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace"}}}`)},
		Revision:   1,
	}
	checkErrs(t, ValidateControllerRevision(cr), none())

	bad := cr.DeepCopy()
	bad.Data = runtime.RawExtension{}
	bad.Revision = -1
	checkErrs(t, ValidateControllerRevision(bad), errs(req("data"), inv("revision")))

	renumbered := cr.DeepCopy()
	renumbered.Revision = 3 // a rollback renumbers the revision
	checkErrs(t, ValidateControllerRevisionUpdate(renumbered, cr), none())

	changed := cr.DeepCopy()
	changed.Data.Raw = []byte(`{}`)
	checkErrs(t, ValidateControllerRevisionUpdate(changed, cr), errs(inv("data")))
}
