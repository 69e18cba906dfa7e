package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
)

var (
	nrHost1 = &user.DefaultInfo{Name: "system:node:host-1", Groups: []string{user.NodesGroup, user.AllAuthenticated}}
	nrAdmin = &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
)

func nrPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{NodeName: node}}
}

func nrNode(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

func nrAttrs(obj, old runtime.Object, gvr schema.GroupVersionResource, sub, ns, name string, op admission.Operation, u user.Info) admission.Attributes {
	kind := schema.GroupVersionKind{}
	return admission.NewAttributesRecord(obj, old, kind, ns, name, gvr, sub, op, nil, false, u)
}

var (
	podsGVR   = corev1.SchemeGroupVersion.WithResource("pods")
	nodesGVR  = corev1.SchemeGroupVersion.WithResource("nodes")
	pvcsGVR   = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	saGVR     = corev1.SchemeGroupVersion.WithResource("serviceaccounts")
	leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")
	eventsGVR = corev1.SchemeGroupVersion.WithResource("events")
)

func TestNodeIdentity(t *testing.T) {
	for _, c := range []struct {
		u      user.Info
		name   string
		isNode bool
	}{
		{nrHost1, "host-1", true},
		{&user.DefaultInfo{Name: "system:node:host-1"}, "", false}, // not in system:nodes
		{&user.DefaultInfo{Name: "kubelet", Groups: []string{user.NodesGroup}}, "", false},
		{&user.DefaultInfo{Name: "system:node:", Groups: []string{user.NodesGroup}}, "", true},
		{nil, "", false},
	} {
		name, isNode := nodeIdentity(c.u)
		if name != c.name || isNode != c.isNode {
			t.Errorf("nodeIdentity(%v) = %q, %v; want %q, %v", c.u, name, isNode, c.name, c.isNode)
		}
	}
}

func TestNodeRestriction(t *testing.T) {
	mine, theirs := nrPod("mine", "host-1"), nrPod("theirs", "host-2")
	p := newNodeRestriction(fake.NewClientset(mine, theirs))

	withStatus := func(pod *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
		pod = pod.DeepCopy()
		pod.Status.Phase = phase
		return pod
	}
	relabelled := mine.DeepCopy()
	relabelled.Labels["app"] = "b"
	claimed := withStatus(mine, corev1.PodRunning)
	claimed.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: new("mine-gpu")}}

	noPods := corev1.Taint{Key: flotillaNoPodsTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	host1 := nrNode("host-1", map[string]string{corev1.LabelHostname: "host-1", corev1.LabelOSStable: "linux", "zone": "hall-a"})
	withLabel := func(n *corev1.Node, k, v string) *corev1.Node {
		n = n.DeepCopy()
		if v == "" {
			delete(n.Labels, k)
		} else {
			n.Labels[k] = v
		}
		return n
	}
	withTaints := func(n *corev1.Node, taints ...corev1.Taint) *corev1.Node {
		n = n.DeepCopy()
		n.Spec.Taints = taints
		return n
	}
	owned := host1.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "host-2", UID: "x"}}
	configured := host1.DeepCopy()
	configured.Spec.ConfigSource = &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{Namespace: "kube-system", Name: "c", KubeletConfigKey: "k"}}

	token := func(ref *authenticationv1.BoundObjectReference) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref}}
	}
	podRef := func(pod *corev1.Pod, uid types.UID) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: uid}
	}
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"}}
	resized := pvc.DeepCopy()
	resized.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("2Gi")}
	relabelledPVC := pvc.DeepCopy()
	relabelledPVC.Labels = map[string]string{"x": "y"}

	cases := []struct {
		name string
		a    admission.Attributes
		want string // "" allowed, "notfound", or a part of the 403's message
	}{
		// Anyone but a node is not looked at.
		{"admin updates another node", nrAttrs(withTaints(nrNode("host-2", nil)), nrNode("host-2", nil, dedicated), nodesGVR, "", "", "host-2", admission.Update, nrAdmin), ""},
		{"node without a name", nrAttrs(host1, nil, nodesGVR, "", "", "host-1", admission.Create, &user.DefaultInfo{Name: "system:node:", Groups: []string{user.NodesGroup}}), `could not determine node from user "system:node:"`},

		// Nodes.
		{"create own node", nrAttrs(withTaints(host1, noPods), nil, nodesGVR, "", "", "", admission.Create, nrHost1), ""},
		{"create own node with a taint", nrAttrs(withTaints(host1, dedicated), nil, nodesGVR, "", "", "", admission.Create, nrHost1), ""},
		{"create another node", nrAttrs(nrNode("host-2", nil), nil, nodesGVR, "", "", "", admission.Create, nrHost1), `node "host-1" is not allowed to modify node "host-2"`},
		{"create with kubelet labels", nrAttrs(withLabel(withLabel(withLabel(withLabel(host1, corev1.LabelTopologyZone, "z"), "node.kubernetes.io/exclude-from-external-load-balancers", "true"), "x.kubelet.kubernetes.io/y", "1"), "beta.kubernetes.io/arch", "amd64"), nil, nodesGVR, "", "", "host-1", admission.Create, nrHost1), ""},
		{"create with a node-restriction label", nrAttrs(withLabel(host1, "node-restriction.kubernetes.io/x", "y"), nil, nodesGVR, "", "", "host-1", admission.Create, nrHost1), "is not allowed to set the following labels: node-restriction.kubernetes.io/x"},
		{"create with a node-role label", nrAttrs(withLabel(host1, "node-role.kubernetes.io/worker", "true"), nil, nodesGVR, "", "", "host-1", admission.Create, nrHost1), "node-role.kubernetes.io/worker"},
		{"create with a k8s.io label", nrAttrs(withLabel(host1, "example.k8s.io/x", "y"), nil, nodesGVR, "", "", "host-1", admission.Create, nrHost1), "example.k8s.io/x"},
		{"create with a configSource", nrAttrs(configured, nil, nodesGVR, "", "", "host-1", admission.Create, nrHost1), "non-nil configSource"},
		{"update own node's labels", nrAttrs(withLabel(host1, "zone", "hall-b"), host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), ""},
		{"update own node's status", nrAttrs(host1, host1, nodesGVR, "status", "", "host-1", admission.Update, nrHost1), ""},
		{"update another node", nrAttrs(nrNode("host-2", nil), nrNode("host-2", nil), nodesGVR, "", "", "host-2", admission.Update, nrHost1), `node "host-1" is not allowed to modify node "host-2"`},
		{"update another node's status", nrAttrs(nrNode("host-2", nil), nrNode("host-2", nil), nodesGVR, "status", "", "host-2", admission.Update, nrHost1), `is not allowed to modify node "host-2"`},
		{"delete own node", nrAttrs(nil, host1, nodesGVR, "", "", "host-1", admission.Delete, nrHost1), ""},
		{"delete another node", nrAttrs(nil, nrNode("host-2", nil), nodesGVR, "", "", "host-2", admission.Delete, nrHost1), `is not allowed to modify node "host-2"`},
		{"add a node-restriction label", nrAttrs(withLabel(host1, "node-restriction.kubernetes.io/x", "y"), host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), "is not allowed to modify labels: node-restriction.kubernetes.io/x"},
		{"remove a node-restriction label", nrAttrs(host1, withLabel(host1, "sub.node-restriction.kubernetes.io/x", "y"), nodesGVR, "", "", "host-1", admission.Update, nrHost1), "sub.node-restriction.kubernetes.io/x"},
		{"keep a node-restriction label", nrAttrs(withLabel(withLabel(host1, "node-restriction.kubernetes.io/x", "y"), "zone", "b"), withLabel(host1, "node-restriction.kubernetes.io/x", "y"), nodesGVR, "", "", "host-1", admission.Update, nrHost1), ""},
		{"change a reserved label", nrAttrs(withLabel(host1, "kubernetes.io/role", "master"), host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), "kubernetes.io/role"},
		{"change a kubelet label", nrAttrs(withLabel(host1, corev1.LabelInstanceTypeStable, "big"), host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), ""},
		{"add a taint", nrAttrs(withTaints(host1, dedicated), host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), `node "host-1" is not allowed to modify taints`},
		{"remove a taint", nrAttrs(host1, withTaints(host1, dedicated), nodesGVR, "", "", "host-1", admission.Update, nrHost1), "is not allowed to modify taints"},
		{"add the no-pods taint", nrAttrs(withTaints(host1, dedicated, noPods), withTaints(host1, dedicated), nodesGVR, "", "", "host-1", admission.Update, nrHost1), ""},
		{"remove the no-pods taint", nrAttrs(withTaints(host1, dedicated), withTaints(host1, dedicated, noPods), nodesGVR, "", "", "host-1", admission.Update, nrHost1), ""},
		{"remove the no-pods taint and another", nrAttrs(host1, withTaints(host1, dedicated, noPods), nodesGVR, "", "", "host-1", admission.Update, nrHost1), "is not allowed to modify taints"},
		{"set ownerReferences", nrAttrs(owned, host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), "is not allowed to modify ownerReferences"},
		{"set a configSource", nrAttrs(configured, host1, nodesGVR, "", "", "host-1", admission.Update, nrHost1), "is not allowed to update configSource"},
		{"drop the configSource", nrAttrs(host1, configured, nodesGVR, "", "", "host-1", admission.Update, nrHost1), ""},

		// Pods.
		{"create a pod", nrAttrs(mine, nil, podsGVR, "", "default", "mine", admission.Create, nrHost1), `node "host-1" may not create pods: flotilla has no static or mirror pods`},
		{"update a pod", nrAttrs(mine, mine, podsGVR, "", "default", "mine", admission.Update, nrHost1), "can only delete pods bound to it and update their status"},
		{"delete own pod", nrAttrs(nil, mine, podsGVR, "", "default", "mine", admission.Delete, nrHost1), ""},
		{"delete another node's pod", nrAttrs(nil, theirs, podsGVR, "", "default", "theirs", admission.Delete, nrHost1), `node "host-1" can only delete pods with spec.nodeName set to itself`},
		{"delete an unscheduled pod", nrAttrs(nil, nrPod("pending", ""), podsGVR, "", "default", "pending", admission.Delete, nrHost1), "can only delete pods"},
		{"update own pod's status", nrAttrs(withStatus(mine, corev1.PodRunning), mine, podsGVR, "status", "default", "mine", admission.Update, nrHost1), ""},
		{"update another node's pod's status", nrAttrs(withStatus(theirs, corev1.PodRunning), theirs, podsGVR, "status", "default", "theirs", admission.Update, nrHost1), `node "host-1" can only update pod status for pods with spec.nodeName set to itself`},
		{"relabel through status", nrAttrs(relabelled, mine, podsGVR, "status", "default", "mine", admission.Update, nrHost1), "cannot update labels through pod status"},
		{"set resource claim statuses", nrAttrs(claimed, mine, podsGVR, "status", "default", "mine", admission.Update, nrHost1), "cannot update resource claim statuses"},
		{"evict own pod", nrAttrs(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, nil, podsGVR, "eviction", "default", "mine", admission.Create, nrHost1), ""},
		{"evict another node's pod", nrAttrs(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}, nil, podsGVR, "eviction", "default", "theirs", admission.Create, nrHost1), `node "host-1" can only evict pods with spec.nodeName set to itself`},
		{"evict a missing pod", nrAttrs(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, nil, podsGVR, "eviction", "default", "gone", admission.Create, nrHost1), "notfound"},
		{"ephemeral containers", nrAttrs(mine, mine, podsGVR, "ephemeralcontainers", "default", "mine", admission.Update, nrHost1), `unexpected pod subresource "ephemeralcontainers"`},
		{"bind a pod", nrAttrs(&corev1.Binding{}, nil, podsGVR, "binding", "default", "mine", admission.Create, nrHost1), `unexpected pod subresource "binding"`},

		// PersistentVolumeClaims.
		{"create a claim", nrAttrs(pvc, nil, pvcsGVR, "", "default", "data", admission.Create, nrHost1), "may only update PVC status"},
		{"resize status", nrAttrs(resized, pvc, pvcsGVR, "status", "default", "data", admission.Update, nrHost1), ""},
		{"relabel a claim through status", nrAttrs(relabelledPVC, pvc, pvcsGVR, "status", "default", "data", admission.Update, nrHost1), "is not allowed to update fields other than status.capacity"},

		// Service account tokens.
		{"token for own pod", nrAttrs(token(podRef(mine, mine.UID)), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), ""},
		{"token for another node's pod", nrAttrs(token(podRef(theirs, theirs.UID)), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), `node "host-1" requested a token bound to a pod scheduled on a different node`},
		{"unbound token", nrAttrs(token(nil), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), "requested a token not bound to a pod"},
		{"token bound to a secret", nrAttrs(token(&authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Secret", Name: "s", UID: "u"}), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), "not bound to a pod"},
		{"token without the pod's uid", nrAttrs(token(podRef(mine, "")), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), "pod binding without a uid"},
		{"token with a stale uid", nrAttrs(token(podRef(mine, "old")), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), "does not match the UID in record"},
		{"token for a missing pod", nrAttrs(token(podRef(nrPod("gone", "host-1"), "gone-uid")), nil, saGVR, "token", "default", "default", admission.Create, nrHost1), "notfound"},
		{"update a service account", nrAttrs(&corev1.ServiceAccount{}, &corev1.ServiceAccount{}, saGVR, "", "default", "default", admission.Update, nrHost1), ""},

		// Leases.
		{"create own lease", nrAttrs(lease(corev1.NamespaceNodeLease, "host-1"), nil, leasesGVR, "", corev1.NamespaceNodeLease, "", admission.Create, nrHost1), ""},
		{"renew own lease", nrAttrs(lease(corev1.NamespaceNodeLease, "host-1"), lease(corev1.NamespaceNodeLease, "host-1"), leasesGVR, "", corev1.NamespaceNodeLease, "host-1", admission.Update, nrHost1), ""},
		{"create another node's lease", nrAttrs(lease(corev1.NamespaceNodeLease, "host-2"), nil, leasesGVR, "", corev1.NamespaceNodeLease, "", admission.Create, nrHost1), `node "host-1" can only access the node lease with the same name`},
		{"renew another node's lease", nrAttrs(lease(corev1.NamespaceNodeLease, "host-2"), lease(corev1.NamespaceNodeLease, "host-2"), leasesGVR, "", corev1.NamespaceNodeLease, "host-2", admission.Update, nrHost1), "same name as the requesting node"},
		{"delete another node's lease", nrAttrs(nil, lease(corev1.NamespaceNodeLease, "host-2"), leasesGVR, "", corev1.NamespaceNodeLease, "host-2", admission.Delete, nrHost1), "same name as the requesting node"},
		{"lease elsewhere", nrAttrs(lease("kube-system", "host-1"), nil, leasesGVR, "", "kube-system", "", admission.Create, nrHost1), `can only access leases in the "kube-node-lease" system namespace`},

		// Not restricted.
		{"event", nrAttrs(&corev1.Event{}, nil, eventsGVR, "", "default", "", admission.Create, nrHost1), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := p.Validate(context.Background(), c.a, nil)
			switch {
			case c.want == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case c.want == "notfound":
				if !apierrors.IsNotFound(err) {
					t.Fatalf("err = %v, want NotFound", err)
				}
			default:
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err = %v, want 403 containing %q", err, c.want)
				}
			}
		})
	}
}

// TestNodeRestrictionLocalVolumes: a node only removes the cleanup finalizer of a deleted
// local volume labelled with its name (as the stored object says), and changes nothing else.
func TestNodeRestrictionLocalVolumes(t *testing.T) {
	p := newNodeRestriction(fake.NewClientset())
	pvsGVR := corev1.SchemeGroupVersion.WithResource("persistentvolumes")
	now := metav1.Now()
	volume := func(node string, deleted bool, finalizers ...string) *corev1.PersistentVolume {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1", ResourceVersion: "5", Finalizers: finalizers,
			Labels: map[string]string{localpv.LabelNode: node}},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/var/lib/flotilla/volumes/pvc-1"}}}}
		if deleted {
			pv.DeletionTimestamp = &now
		}
		return pv
	}
	update := func(pv, old *corev1.PersistentVolume) admission.Attributes {
		return nrAttrs(pv, old, pvsGVR, "", "", "pvc-1", admission.Update, nrHost1)
	}
	const other = "example.com/keep"
	mine := volume("host-1", true, other, localpv.Finalizer)
	cleaned := volume("host-1", true, other)
	cleaned.ResourceVersion = "6"
	relabelled := cleaned.DeepCopy()
	relabelled.Labels[localpv.LabelNode] = "host-2"
	moved := cleaned.DeepCopy()
	moved.Spec.Local.Path = "/etc"
	bothGone := volume("host-1", true)
	reordered := volume("host-1", true, localpv.Finalizer, other)
	added := volume("host-1", true, other, localpv.Finalizer, "example.com/more")
	for _, c := range []struct {
		name string
		a    admission.Attributes
		want string
	}{
		{"remove the finalizer of its deleted volume", update(cleaned, mine), ""},
		{"remove only the finalizer", update(volume("host-1", true), volume("host-1", true, localpv.Finalizer)), ""},
		{"another node's volume", update(volume("host-2", true, other), volume("host-2", true, other, localpv.Finalizer)), `may only update the persistentvolumes labelled ` + localpv.LabelNode + `=host-1`},
		{"an unlabelled volume", update(volume("", true), volume("", true, localpv.Finalizer)), "may only update the persistentvolumes labelled"},
		{"before deletion", update(volume("host-1", false), volume("host-1", false, localpv.Finalizer)), "once the volume is deleted"},
		{"another finalizer too", update(bothGone, mine), "may only remove the finalizer " + localpv.Finalizer + ", no other"},
		{"reorder", update(reordered, mine), "no other"},
		{"add a finalizer", update(added, mine), "no other"},
		{"keep the finalizer, change a label", update(func() *corev1.PersistentVolume { v := mine.DeepCopy(); v.Labels["x"] = "y"; return v }(), mine), "no other"},
		{"move the label to another node", update(relabelled, mine), "change nothing else"},
		{"change the path", update(moved, mine), "change nothing else"},
		{"status", nrAttrs(cleaned, mine, pvsGVR, "status", "", "pvc-1", admission.Update, nrHost1), "may only remove the finalizer"},
		{"delete", nrAttrs(nil, mine, pvsGVR, "", "", "pvc-1", admission.Delete, nrHost1), "may only remove the finalizer"},
		{"create", nrAttrs(volume("host-1", false), nil, pvsGVR, "", "", "", admission.Create, nrHost1), "may only remove the finalizer"},
		{"an admin", nrAttrs(moved, mine, pvsGVR, "", "", "pvc-1", admission.Update, nrAdmin), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := p.Validate(context.Background(), c.a, nil)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want 403 containing %q", err, c.want)
			}
		})
	}
}

// TestNodeRestrictionAgentLabels checks that what the node agent labels its Node with
// (nodes/agent nodeLabels) stays allowed, and that the kubelet label list matches upstream's.
func TestNodeRestrictionAgentLabels(t *testing.T) {
	agent := map[string]string{corev1.LabelHostname: "h", corev1.LabelOSStable: "linux", corev1.LabelArchStable: "arm64", "zone": "hall-a", "site": "x"}
	if f := forbiddenNodeLabels(modifiedLabels(agent, nil)); len(f) > 0 {
		t.Errorf("agent labels refused: %v", f)
	}
	for _, key := range []string{
		"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
		"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
		"failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
		"kubelet.kubernetes.io/anything", "node.kubernetes.io/anything", "a.node.kubernetes.io/b",
	} {
		if !isKubeletLabel(key) {
			t.Errorf("%s is not a kubelet label", key)
		}
	}
	for _, key := range []string{"kubernetes.io/role", "node-role.kubernetes.io/worker", "topology.kubernetes.io/rack", "k8s.io/x", "nodes.kubernetes.io/x", "anode.kubernetes.io/x"} {
		if isKubeletLabel(key) {
			t.Errorf("%s is a kubelet label", key)
		}
	}
}

// TestNodeRestrictionServer drives the plugin through the real API server, with the client
// certificate a host's components use (system:node:host-1 in system:nodes).
func TestNodeRestrictionServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and the API server")
	}
	ctx := context.Background()
	admin, clientFor, _ := startCertServer(t)
	node := clientFor("system:node:host-1", user.NodesGroup)
	forbidden := func(what string, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want 403 containing %q", what, err, want)
		}
	}

	// The host registers its Node, as the agent does; another host's Node exists.
	if _, err := node.CoreV1().Nodes().Create(ctx, nrNode("host-1", map[string]string{corev1.LabelHostname: "host-1", "zone": "a"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node creates its own Node: %v", err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, nrNode("host-2", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := node.CoreV1().Nodes().Create(ctx, nrNode("host-3", nil), metav1.CreateOptions{})
	forbidden("create Node host-3", err, `node "host-1" is not allowed to modify node "host-3"`)

	// The system:node role has no patch on nodes (the agent updates): grant it, so that the
	// patches below reach admission.
	rbacv1c := admin.RbacV1()
	if _, err := rbacv1c.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-node-patch"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"patch"}, APIGroups: []string{""}, Resources: []string{"nodes"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbacv1c.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-node-patch"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-node-patch"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: user.NodesGroup}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := func(name, labels string) error {
		_, err := node.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`), metav1.PatchOptions{})
		return err
	}
	// Until the RBAC authorizer sees the binding, patches are refused by RBAC.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err := patch("host-1", `{"zone":"b"}`)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("node patches its own Node's labels: %v", patch("host-1", `{"zone":"b"}`))
	}
	forbidden("patch Node host-2", patch("host-2", `{"zone":"b"}`), `node "host-1" is not allowed to modify node "host-2"`)
	forbidden("set node-restriction.kubernetes.io/x", patch("host-1", `{"node-restriction.kubernetes.io/x":"y"}`),
		`node "host-1" is not allowed to modify labels: node-restriction.kubernetes.io/x`)
	if n, err := admin.CoreV1().Nodes().Get(ctx, "host-1", metav1.GetOptions{}); err != nil || n.Labels["zone"] != "b" || n.Labels["node-restriction.kubernetes.io/x"] != "" {
		t.Errorf("Node host-1 labels = %v (%v), want zone=b only", n.GetLabels(), err)
	}

	// Pod status: only of pods bound to the host.
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for name, host := range map[string]string{"mine": "host-1", "theirs": "host-2"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: host,
			AutomountServiceAccountToken: new(false), Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if pods[name], err = admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(pod *corev1.Pod) *corev1.Pod {
		pod = pod.DeepCopy()
		pod.Status.Phase = corev1.PodRunning
		return pod
	}
	_, err = node.CoreV1().Pods("default").UpdateStatus(ctx, running(pods["theirs"]), metav1.UpdateOptions{})
	forbidden("update status of a pod on host-2", err, `node "host-1" can only update pod status for pods with spec.nodeName set to itself`)
	if _, err := node.CoreV1().Pods("default").UpdateStatus(ctx, running(pods["mine"]), metav1.UpdateOptions{}); err != nil {
		t.Errorf("update status of its own pod: %v", err)
	}
	err = node.CoreV1().Pods("default").Delete(ctx, "theirs", metav1.DeleteOptions{})
	forbidden("delete a pod on host-2", err, "can only delete pods with spec.nodeName set to itself")
}

// TestNodeRestrictionCSRs: a node files kubelet certificate requests for itself only.
func TestNodeRestrictionCSRs(t *testing.T) {
	p := newNodeRestriction(fake.NewClientset())
	csrsGVR := certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	request := func(cn string) []byte {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	csr := func(signer string, req []byte) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: signer, Request: req}}
	}
	for _, c := range []struct {
		name string
		obj  *certificatesv1.CertificateSigningRequest
		ok   bool
	}{
		{"own client certificate", csr(certificatesv1.KubeAPIServerClientKubeletSignerName, request("system:node:host-1")), true},
		{"own serving certificate", csr(certificatesv1.KubeletServingSignerName, request("system:node:host-1")), true},
		{"another node's client certificate", csr(certificatesv1.KubeAPIServerClientKubeletSignerName, request("system:node:host-2")), false},
		{"another node's serving certificate", csr(certificatesv1.KubeletServingSignerName, request("system:node:host-2")), false},
		{"not PEM", csr(certificatesv1.KubeletServingSignerName, []byte("junk")), false},
		{"another signer: left to its approver", csr("example.com/signer", request("anything")), true},
	} {
		err := p.Validate(context.Background(), nrAttrs(c.obj, nil, csrsGVR, "", "", "c", admission.Create, nrHost1), nil)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed=%v", c.name, err, c.ok)
		}
	}
}
