package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

type coreCase struct {
	name string
	obj  runtime.Object
	want []coreWant
}

func coreRunCreate(t *testing.T, kind string, cases []coreCase) {
	t.Helper()
	f := coreFuncs(t, kind, DefaultOptions())
	for _, tc := range cases {
		t.Run(kind+"/"+tc.name, func(t *testing.T) { coreCheck(t, f.Create(tc.obj), tc.want...) })
	}
}

type coreUpdateCase struct {
	name     string
	obj, old runtime.Object
	want     []coreWant
}

func coreRunUpdate(t *testing.T, kind string, status bool, cases []coreUpdateCase) {
	t.Helper()
	f := coreFuncs(t, kind, DefaultOptions())
	fn := f.Update
	if status {
		fn = f.StatusUpdate
	}
	for _, tc := range cases {
		t.Run(kind+"/"+tc.name, func(t *testing.T) { coreCheck(t, fn(tc.obj, tc.old), tc.want...) })
	}
}

func coreOM(name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1"}
}

func TestCoreNamespace(t *testing.T) {
	ns := func(name string, fin ...corev1.FinalizerName) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: coreOM(name, ""), Spec: corev1.NamespaceSpec{Finalizers: fin}}
	}
	withLabel := ns("prod")
	withLabel.Labels = map[string]string{corev1.LabelMetadataName: "dev"}
	coreRunCreate(t, "Namespace", []coreCase{
		{"valid", ns("kube-system", corev1.FinalizerKubernetes), nil},
		{"qualified finalizer", ns("prod", "example.com/cleanup"), nil},
		{"name not a DNS label", ns("prod.eu"), []coreWant{cInv("metadata.name")}},
		{"finalizer neither standard nor qualified", ns("prod", "cleanup"), []coreWant{cInv("spec.finalizers[0]")}},
		{"metadata.name label mismatch", withLabel, []coreWant{cInv("metadata.labels[kubernetes.io/metadata.name]")}},
	})
	old := ns("prod", corev1.FinalizerKubernetes)
	terminating := old.DeepCopy()
	terminating.Status.Phase = corev1.NamespaceTerminating
	coreRunUpdate(t, "Namespace", false, []coreUpdateCase{
		{"labels change", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", ResourceVersion: "1", Labels: map[string]string{"team": "a"}}, Spec: old.Spec}, old, nil},
		{"finalizers change", ns("prod"), old, []coreWant{cForb("spec.finalizers")}},
	})
	coreRunUpdate(t, "Namespace", true, []coreUpdateCase{
		{"terminating without deletionTimestamp", terminating, old, []coreWant{cInv("status.phase")}},
	})
}

func TestCoreConfigMap(t *testing.T) {
	cm := func(data map[string]string, bin map[string][]byte) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: coreOM("web-config", "default"), Data: data, BinaryData: bin}
	}
	coreRunCreate(t, "ConfigMap", []coreCase{
		{"valid", cm(map[string]string{"app.conf": "x", "KEY_NAME": "y", "key-name": "z"}, map[string][]byte{"logo.png": {1}}), nil},
		{"key with slash", cm(map[string]string{"conf/app": "x"}, nil), []coreWant{cInv("data[conf/app]")}},
		{"key ..", cm(map[string]string{"..": "x"}, nil), []coreWant{cInv("data[..]")}},
		{"key in data and binaryData", cm(map[string]string{"a": "x"}, map[string][]byte{"a": {1}}), []coreWant{cInv("binaryData[a]")}},
		{"too big", cm(map[string]string{"big": strings.Repeat("x", 1<<20)}, nil), []coreWant{cLong("data")}},
	})
	immutable := cm(map[string]string{"a": "1"}, nil)
	immutable.Immutable = ptr.To(true)
	changed := immutable.DeepCopy()
	changed.Data["a"] = "2"
	unlocked := immutable.DeepCopy()
	unlocked.Immutable = ptr.To(false)
	relabelled := immutable.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	coreRunUpdate(t, "ConfigMap", false, []coreUpdateCase{
		{"immutable: labels may change", relabelled, immutable, nil},
		{"immutable: data may not change", changed, immutable, []coreWant{cForb("data")}},
		{"immutable: flag may not be cleared", unlocked, immutable, []coreWant{cForb("immutable")}},
		{"mutable: data may change", cm(map[string]string{"a": "2"}, nil), cm(map[string]string{"a": "1"}, nil), nil},
	})
}

func TestCoreSecret(t *testing.T) {
	sec := func(typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: coreOM("s", "default"), Type: typ, Data: data}
	}
	// The TLS Secret example of the Kubernetes Ingress documentation (with real bytes in place of
	// the placeholders).
	tls := sec(corev1.SecretTypeTLS, map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")})
	tls.Name = "testsecret-tls"
	sat := sec(corev1.SecretTypeServiceAccountToken, nil)
	sat.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	withStringData := sec(corev1.SecretTypeBasicAuth, nil)
	withStringData.StringData = map[string]string{"username": "admin"}
	coreRunCreate(t, "Secret", []coreCase{
		{"tls", tls, nil},
		{"opaque", sec(corev1.SecretTypeOpaque, map[string][]byte{"password": []byte("x")}), nil},
		{"service account token", sat, nil},
		{"basic-auth via stringData", withStringData, nil},
		{"dockerconfigjson", sec(corev1.SecretTypeDockerConfigJson, map[string][]byte{".dockerconfigjson": []byte(`{"auths":{}}`)}), nil},
		{"tls without key", sec(corev1.SecretTypeTLS, map[string][]byte{"tls.crt": []byte("c")}), []coreWant{cReq("data[tls.key]")}},
		{"dockerconfigjson missing", sec(corev1.SecretTypeDockerConfigJson, nil), []coreWant{cReq("data[.dockerconfigjson]")}},
		{"dockerconfigjson not JSON", sec(corev1.SecretTypeDockerConfigJson, map[string][]byte{".dockerconfigjson": []byte("{")}), []coreWant{cInv("data[.dockerconfigjson]")}},
		{"basic-auth empty", sec(corev1.SecretTypeBasicAuth, nil), []coreWant{cReq("data[username]")}},
		{"ssh-auth without key", sec(corev1.SecretTypeSSHAuth, nil), []coreWant{cReq("data[ssh-privatekey]")}},
		{"service account token without annotation", sec(corev1.SecretTypeServiceAccountToken, nil), []coreWant{cReq("metadata.annotations[kubernetes.io/service-account.name]")}},
		{"bad key", sec(corev1.SecretTypeOpaque, map[string][]byte{"a b": nil}), []coreWant{cInv("data[a b]")}},
	})
	opaque := sec("", map[string][]byte{"a": []byte("1")})
	toTLS := tls.DeepCopy()
	toTLS.Name = "s"
	locked := opaque.DeepCopy()
	locked.Immutable = ptr.To(true)
	lockedChanged := locked.DeepCopy()
	lockedChanged.Data["a"] = []byte("2")
	coreRunUpdate(t, "Secret", false, []coreUpdateCase{
		{"explicit Opaque equals empty type", sec(corev1.SecretTypeOpaque, map[string][]byte{"a": []byte("2")}), opaque, nil},
		{"type is immutable", toTLS, opaque, []coreWant{cInv("type")}},
		{"immutable data", lockedChanged, locked, []coreWant{cForb("data")}},
	})
}

func TestCoreServiceAccount(t *testing.T) {
	coreRunCreate(t, "ServiceAccount", []coreCase{
		{"valid", &corev1.ServiceAccount{ObjectMeta: coreOM("default", "prod"), ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}}, nil},
		{"bad name", &corev1.ServiceAccount{ObjectMeta: coreOM("Build_Bot", "prod")}, []coreWant{cInv("metadata.name")}},
		{"pull secret without name", &corev1.ServiceAccount{ObjectMeta: coreOM("ci", "prod"), ImagePullSecrets: []corev1.LocalObjectReference{{}}}, []coreWant{cReq("imagePullSecrets[0].name")}},
	})
}

func TestCoreNode(t *testing.T) {
	// The Node examples of the Kubernetes documentation: a manually created Node, and one that
	// declares a feature.
	manual := coreFixture[corev1.Node](t, `{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "10.240.79.157", "labels": {"name": "my-first-k8s-node"}}}`)
	declaring := coreFixture[corev1.Node](t, `
apiVersion: v1
kind: Node
metadata:
  name: example-node
status:
  declaredFeatures:
  - RestartAllContainersOnContainerExits
`)
	node := func(mut func(n *corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: coreOM("edge-1", ""), Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}, ProviderID: "flotilla://edge-1",
			Taints: []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: "edge-1"}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}},
				Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}}}
		if mut != nil {
			mut(n)
		}
		return n
	}
	coreRunCreate(t, "Node", []coreCase{
		{"manually created node", manual, nil},
		{"node declaring a feature", declaring, nil},
		{"full", node(nil), nil},
		{"bad podCIDR", node(func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.1.0/33", nil }), []coreWant{cInv("spec.podCIDR")}},
		{"two IPv4 podCIDRs", node(func(n *corev1.Node) { n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "10.245.1.0/24") }), []coreWant{cInv("spec.podCIDRs[1]")}},
		{"taint without key", node(func(n *corev1.Node) { n.Spec.Taints[0].Key = "" }), []coreWant{cReq("spec.taints[0].key")}},
		{"taint effect unknown", node(func(n *corev1.Node) { n.Spec.Taints[0].Effect = "NoRun" }), []coreWant{cNsup("spec.taints[0].effect")}},
		{"duplicate taint", node(func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, n.Spec.Taints[0]) }), []coreWant{cDup("spec.taints[1]")}},
		{"condition status unknown", node(func(n *corev1.Node) { n.Status.Conditions[0].Status = "Yes" }), []coreWant{cNsup("status.conditions[0].status")}},
		{"address type unknown", node(func(n *corev1.Node) { n.Status.Addresses[0].Type = "PodIP" }), []coreWant{cNsup("status.addresses[0].type")}},
	})
	old := node(nil)
	unset := node(func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs, n.Spec.ProviderID = "", nil, "" })
	coreRunUpdate(t, "Node", false, []coreUpdateCase{
		{"cordon", node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), old, nil},
		{"podCIDR assigned once", node(nil), unset, nil},
		{"podCIDR may not change", node(func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.2.0/24", []string{"10.244.2.0/24"} }), old,
			[]coreWant{cForb("spec.podCIDR"), cForb("spec.podCIDRs")}},
		{"providerID may not change", node(func(n *corev1.Node) { n.Spec.ProviderID = "other://x" }), old, []coreWant{cForb("spec.providerID")}},
	})
	coreRunUpdate(t, "Node", true, []coreUpdateCase{
		{"negative capacity", node(func(n *corev1.Node) { n.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("-1") }), old, []coreWant{cInv("status.capacity[cpu]")}},
	})
}

func TestCoreEvent(t *testing.T) {
	ev := func(mut func(e *corev1.Event)) *corev1.Event {
		e := &corev1.Event{ObjectMeta: coreOM("web-1.17a0b", "default"), Type: corev1.EventTypeWarning, Reason: "FailedPostStartHook", Message: "hook failed",
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Name: "web-1", Namespace: "default"}, Count: 1}
		if mut != nil {
			mut(e)
		}
		return e
	}
	coreRunCreate(t, "Event", []coreCase{
		{"valid", ev(nil), nil},
		{"node event in default", ev(func(e *corev1.Event) { e.InvolvedObject = corev1.ObjectReference{Kind: "Node", Name: "edge-1"} }), nil},
		{"namespace mismatch", ev(func(e *corev1.Event) { e.InvolvedObject.Namespace = "prod" }), []coreWant{cInv("involvedObject.namespace")}},
		{"pod event without namespace", ev(func(e *corev1.Event) { e.Namespace = "prod"; e.InvolvedObject.Namespace = "" }), []coreWant{cReq("involvedObject.namespace")}},
		{"type unknown", ev(func(e *corev1.Event) { e.Type = "Error" }), []coreWant{cNsup("type")}},
		{"reason too long", ev(func(e *corev1.Event) { e.Reason = strings.Repeat("R", 129) }), []coreWant{cLong("reason")}},
	})
}

func TestCorePersistentVolume(t *testing.T) {
	pv := func(mut func(p *corev1.PersistentVolume)) *corev1.PersistentVolume {
		p := &corev1.PersistentVolume{ObjectMeta: coreOM("pv-1", ""), Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/pv-1"}},
		}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	local := func(p *corev1.PersistentVolume) {
		p.Spec.HostPath = nil
		p.Spec.Local = &corev1.LocalVolumeSource{Path: "/mnt/disk1"}
	}
	coreRunCreate(t, "PersistentVolume", []coreCase{
		{"hostPath", pv(nil), nil},
		{"local with node affinity", pv(func(p *corev1.PersistentVolume) {
			local(p)
			p.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-1"}}}}}}}
		}), nil},
		{"local without node affinity", pv(local), []coreWant{cReq("spec.nodeAffinity")}},
		{"no capacity", pv(func(p *corev1.PersistentVolume) { p.Spec.Capacity = nil }), []coreWant{cReq("spec.capacity")}},
		{"zero capacity", pv(func(p *corev1.PersistentVolume) { p.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("0") }), []coreWant{cInv("spec.capacity[storage]")}},
		{"no access modes", pv(func(p *corev1.PersistentVolume) { p.Spec.AccessModes = nil }), []coreWant{cReq("spec.accessModes")}},
		{"access mode unknown", pv(func(p *corev1.PersistentVolume) { p.Spec.AccessModes[0] = "ReadWriteSome" }), []coreWant{cNsup("spec.accessModes[0]")}},
		{"no source", pv(func(p *corev1.PersistentVolume) { p.Spec.HostPath = nil }), []coreWant{cReq("spec")}},
		{"two sources", pv(func(p *corev1.PersistentVolume) { p.Spec.NFS = &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"} }), []coreWant{cForb("spec")}},
		{"reclaim policy unknown", pv(func(p *corev1.PersistentVolume) { p.Spec.PersistentVolumeReclaimPolicy = "Keep" }), []coreWant{cNsup("spec.persistentVolumeReclaimPolicy")}},
	})
	coreRunUpdate(t, "PersistentVolume", false, []coreUpdateCase{
		{"capacity may grow", pv(func(p *corev1.PersistentVolume) { p.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("20Gi") }), pv(nil), nil},
		{"source is immutable", pv(func(p *corev1.PersistentVolume) { p.Spec.HostPath.Path = "/srv/other" }), pv(nil), []coreWant{cForb("spec.persistentvolumesource")}},
	})
}

func TestCorePersistentVolumeClaim(t *testing.T) {
	pvc := func(mut func(c *corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: coreOM("data", "default"), Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: ptr.To("local-path"),
		}}
		if mut != nil {
			mut(c)
		}
		return c
	}
	coreRunCreate(t, "PersistentVolumeClaim", []coreCase{
		{"valid", pvc(nil), nil},
		{"no access modes", pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }), []coreWant{cReq("spec.accessModes")}},
		{"RWOP with others", pvc(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod, corev1.ReadOnlyMany}
		}), []coreWant{cForb("spec.accessModes")}},
		{"no storage request", pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }), []coreWant{cReq("spec.resources.requests[storage]")}},
		{"zero storage request", pvc(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("0")
		}), []coreWant{cInv("spec.resources.requests[storage]")}},
		{"volumeMode unknown", pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = ptr.To[corev1.PersistentVolumeMode]("Raw") }), []coreWant{cNsup("spec.volumeMode")}},
	})
	coreRunUpdate(t, "PersistentVolumeClaim", false, []coreUpdateCase{
		{"grow", pvc(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}), pvc(nil), nil},
		{"bind", pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-1" }), pvc(nil), nil},
		{"shrink", pvc(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("512Mi")
		}), pvc(nil),
			[]coreWant{cForb("spec.resources.requests.storage")}},
		{"storage class is immutable", pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr.To("fast") }), pvc(nil), []coreWant{cForb("spec")}},
		{"rebind", pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-2" }), pvc(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-1" }),
			[]coreWant{cForb("spec")}},
	})
	coreRunUpdate(t, "PersistentVolumeClaim", true, []coreUpdateCase{
		{"phase unknown", pvc(func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = "Attached" }), pvc(nil), []coreWant{cNsup("status.phase")}},
	})
}

func TestCoreResourceQuota(t *testing.T) {
	rq := func(mut func(q *corev1.ResourceQuota)) *corev1.ResourceQuota {
		q := &corev1.ResourceQuota{ObjectMeta: coreOM("compute", "default"), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"pods": resource.MustParse("10"), "requests.cpu": resource.MustParse("4"), "limits.memory": resource.MustParse("8Gi"),
			"count/deployments.apps": resource.MustParse("5"), "example.com/gpu": resource.MustParse("2")}}}
		if mut != nil {
			mut(q)
		}
		return q
	}
	coreRunCreate(t, "ResourceQuota", []coreCase{
		{"valid", rq(nil), nil},
		{"valid scopes", rq(func(q *corev1.ResourceQuota) {
			q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotTerminating}
		}), nil},
		{"negative", rq(func(q *corev1.ResourceQuota) { q.Spec.Hard["pods"] = resource.MustParse("-1") }), []coreWant{cInv("spec.hard[pods]")}},
		{"fractional pods", rq(func(q *corev1.ResourceQuota) { q.Spec.Hard["pods"] = resource.MustParse("1500m") }), []coreWant{cInv("spec.hard[pods]")}},
		{"unknown resource", rq(func(q *corev1.ResourceQuota) { q.Spec.Hard["gpus"] = resource.MustParse("1") }), []coreWant{cInv("spec.hard[gpus]")}},
		{"unknown scope", rq(func(q *corev1.ResourceQuota) { q.Spec.Scopes = []corev1.ResourceQuotaScope{"Cheap"} }), []coreWant{cNsup("spec.scopes[0]")}},
		{"conflicting scopes", rq(func(q *corev1.ResourceQuota) {
			q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort}
		}), []coreWant{cInv("spec.scopes")}},
	})
}

func TestCoreLimitRange(t *testing.T) {
	q := resource.MustParse
	lr := func(items ...corev1.LimitRangeItem) *corev1.LimitRange {
		return &corev1.LimitRange{ObjectMeta: coreOM("limits", "default"), Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	container := corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
		Min: corev1.ResourceList{"cpu": q("50m")}, Max: corev1.ResourceList{"cpu": q("2")},
		Default: corev1.ResourceList{"cpu": q("500m")}, DefaultRequest: corev1.ResourceList{"cpu": q("100m")},
		MaxLimitRequestRatio: corev1.ResourceList{"cpu": q("10")}}
	defAboveMax := *container.DeepCopy()
	defAboveMax.Default["cpu"] = q("3")
	reqAboveDef := *container.DeepCopy()
	reqAboveDef.DefaultRequest["cpu"] = q("600m")
	minAboveMax := *container.DeepCopy()
	minAboveMax.Min["cpu"] = q("3")
	minAboveMax.DefaultRequest, minAboveMax.Default, minAboveMax.MaxLimitRequestRatio = nil, nil, nil
	ratio := *container.DeepCopy()
	ratio.MaxLimitRequestRatio["cpu"] = q("500m")
	coreRunCreate(t, "LimitRange", []coreCase{
		{"valid", lr(container, corev1.LimitRangeItem{Type: corev1.LimitTypePersistentVolumeClaim, Max: corev1.ResourceList{"storage": q("10Gi")}}), nil},
		{"default above max", lr(defAboveMax), []coreWant{cInv("spec.limits[0].default[cpu]")}},
		{"defaultRequest above default", lr(reqAboveDef), []coreWant{cInv("spec.limits[0].defaultRequest[cpu]")}},
		{"min above max", lr(minAboveMax), []coreWant{cInv("spec.limits[0].min[cpu]")}},
		{"ratio below 1", lr(ratio), []coreWant{cInv("spec.limits[0].maxLimitRequestRatio[cpu]")}},
		{"unknown type", lr(corev1.LimitRangeItem{Type: "Namespace"}), []coreWant{cNsup("spec.limits[0].type")}},
		{"duplicate type", lr(container, container), []coreWant{cDup("spec.limits[1].type")}},
		{"pod with default", lr(corev1.LimitRangeItem{Type: corev1.LimitTypePod, Default: corev1.ResourceList{"cpu": q("1")}}), []coreWant{cForb("spec.limits[0].default")}},
		{"negative max", lr(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{"memory": q("-1Gi")}}), []coreWant{cInv("spec.limits[0].max[memory]")}},
	})
}

// TestCoreErrorMessageShape pins the rendering the API server returns to users.
func TestCoreErrorMessageShape(t *testing.T) {
	s := coreServiceBase(t)
	s.Name = "x"
	s.Spec.Ports[1].Name = "http"
	errs := coreFuncs(t, "Service", DefaultOptions()).Create(s)
	if len(errs) != 1 {
		t.Fatalf("want one error, got %v", errs)
	}
	if got, want := errs[0].Error(), `spec.ports[1].name: Duplicate value: "http"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
