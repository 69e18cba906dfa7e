package apiserver

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
)

// NodeRestrictionPluginName is the admission plugin's upstream name.
const NodeRestrictionPluginName = "NodeRestriction"

// flotillaNoPodsTaint is the taint a host that runs no pods puts on its own Node
// (nodes/agent.TaintNoPods; the agent adds or removes it when it registers again with a
// different --pods). It is the one taint a node may change on update.
const flotillaNoPodsTaint = "node.flotilla.dev/no-pods"

var (
	nrPods        = corev1.Resource("pods")
	nrNodes       = corev1.Resource("nodes")
	nrPVCs        = corev1.Resource("persistentvolumeclaims")
	nrPVs         = corev1.Resource("persistentvolumes")
	nrSvcAccounts = corev1.Resource("serviceaccounts")
	nrLeases      = coordinationv1.Resource("leases")
	nrCSRs        = certificatesv1.Resource("certificatesigningrequests")
)

// nodeRestriction is the NodeRestriction admission plugin of kube-apiserver
// (plugin/pkg/admission/noderestriction, followed as of v1.36/v1.37): it limits what a host's
// identity, user system:node:<name> in group system:nodes (the node agent, the pod network
// and the proxies), may write to what is its own. RBAC (the system:node ClusterRole) decides
// which verbs a node has at all; this plugin decides on which objects. It restricts no
// reads: the Node authorizer (reconciler/authz/node) keeps a node's reads of Secrets,
// ConfigMaps and volumes to those its pods use; it may still read every Pod of the site.
//
//   - Nodes: only the Node named <name> may be created, updated (also through nodes/status)
//     or deleted. On create it may not set spec.configSource, nor labels in the
//     node-restriction.kubernetes.io namespace or in the kubernetes.io / k8s.io namespaces
//     other than the kubelet's (isKubeletLabel); on update it may not set a new
//     spec.configSource, change those labels, its spec.taints or its ownerReferences.
//     Flotilla's one deviation: the node may add or remove its own flotillaNoPodsTaint.
//   - Pods: a node creates none (upstream lets it create mirror pods of its static pods;
//     flotilla has none) and updates none; it may delete, update the status of (labels and
//     resource claim statuses unchanged) and evict only pods with spec.nodeName <name>. Other
//     pod subresources are refused.
//   - PersistentVolumeClaims: only status updates that change nothing but status.capacity,
//     conditions, allocatedResources and allocatedResourceStatuses.
//   - PersistentVolumes (flotilla's own; upstream's nodes write none): only an update of a
//     deleted volume labelled flotilla.dev/local-volume-node=<name> that removes its
//     finalizer flotilla.dev/local-volume-cleanup and changes nothing else (the node agent
//     has removed the local volume's directory, package localpv).
//   - serviceaccounts/token: only tokens bound (boundObjectRef, with its uid) to an existing
//     pod with spec.nodeName <name>. Unlike upstream (ServiceAccountNodeAudienceRestriction)
//     the audience is not checked against the pod's volumes.
//   - Leases: only in kube-node-lease, only the one named <name>.
//
// CertificateSigningRequests (upstream checks a kubelet CSR's CN), Events and everything else
// are not restricted here. CSINodes and ResourceSlices, which upstream restricts too, are not
// served. The checks run in the validating phase, on the object as it will be stored (upstream
// runs them as a mutating plugin): a stale update gets its 409 Conflict before them.
type nodeRestriction struct {
	*admission.Handler
	// client reads the pod of an eviction or of a token request (as upstream reads its pod
	// informer; the API server keeps no informer of every pod).
	client kubernetes.Interface
}

var _ admission.ValidationInterface = (*nodeRestriction)(nil)

func newNodeRestriction(client kubernetes.Interface) *nodeRestriction {
	return &nodeRestriction{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), client: client}
}

// nodeIdentity returns the node name of a host's identity, as upstream's default node
// identifier: ("", false) for anyone else, ("", true) for a node identity without a name.
func nodeIdentity(u user.Info) (string, bool) {
	if u == nil {
		return "", false
	}
	name, ok := strings.CutPrefix(u.GetName(), rbac.NodeUserPrefix)
	if !ok || !slices.Contains(u.GetGroups(), user.NodesGroup) {
		return "", false
	}
	return name, true
}

// Validate refuses a node's writes to what is not its own.
func (p *nodeRestriction) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	nodeName, isNode := nodeIdentity(a.GetUserInfo())
	if !isNode {
		return nil
	}
	if nodeName == "" {
		return admission.NewForbidden(a, fmt.Errorf("could not determine node from user %q", a.GetUserInfo().GetName()))
	}
	switch a.GetResource().GroupResource() {
	case nrPods:
		switch a.GetSubresource() {
		case "":
			return p.admitPod(nodeName, a)
		case "status":
			return p.admitPodStatus(nodeName, a)
		case "eviction":
			return p.admitPodEviction(ctx, nodeName, a)
		default:
			return admission.NewForbidden(a, fmt.Errorf("unexpected pod subresource %q, node %q may only write 'status' and 'eviction'", a.GetSubresource(), nodeName))
		}
	case nrNodes:
		return p.admitNode(nodeName, a)
	case nrPVs:
		return admitLocalVolumeCleanup(nodeName, a)
	case nrPVCs:
		if a.GetSubresource() != "status" {
			return admission.NewForbidden(a, fmt.Errorf("node %q may only update PVC status", nodeName))
		}
		return p.admitPVCStatus(nodeName, a)
	case nrSvcAccounts:
		return p.admitServiceAccount(ctx, nodeName, a)
	case nrLeases:
		return p.admitLease(nodeName, a)
	case nrCSRs:
		return admitNodeCSR(nodeName, a)
	}
	return nil
}

// admitNodeCSR lets a node file certificate requests for the kubelet signers only for its
// own identity (CN system:node:<name>), as upstream's NodeRestriction does: the approver
// approves a node's serving request on its word, so a request for another node's name must
// not even be filed.
func admitNodeCSR(nodeName string, a admission.Attributes) error {
	if a.GetOperation() != admission.Create || a.GetSubresource() != "" {
		return nil
	}
	csr, ok := a.GetObject().(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return nil
	}
	switch csr.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName:
	default:
		return nil
	}
	blk, _ := pem.Decode(csr.Spec.Request)
	if blk == nil {
		return admission.NewForbidden(a, fmt.Errorf("node %q sent a certificate request that is not PEM", nodeName))
	}
	req, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("node %q sent an unreadable certificate request: %v", nodeName, err))
	}
	if want := rbac.NodeUser(nodeName); req.Subject.CommonName != want {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only request certificates for %q, not %q", nodeName, want, req.Subject.CommonName))
	}
	return nil
}

// objectName is the name of the request's object: on create the name in the URL may be
// empty, so it is read from the object.
func objectName(a admission.Attributes) string {
	if a.GetOperation() == admission.Create && a.GetSubresource() == "" {
		if m, err := meta.Accessor(a.GetObject()); err == nil {
			return m.GetName()
		}
	}
	return a.GetName()
}

func (p *nodeRestriction) admitPod(nodeName string, a admission.Attributes) error {
	switch a.GetOperation() {
	case admission.Create:
		return admission.NewForbidden(a, fmt.Errorf("node %q may not create pods: flotilla has no static or mirror pods, pods are created through the API by their controllers", nodeName))
	case admission.Delete:
		pod, ok := a.GetOldObject().(*corev1.Pod)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetOldObject()))
		}
		if pod.Spec.NodeName != nodeName {
			return admission.NewForbidden(a, fmt.Errorf("node %q can only delete pods with spec.nodeName set to itself", nodeName))
		}
		return nil
	default:
		return admission.NewForbidden(a, fmt.Errorf("unexpected operation %q, node %q can only delete pods bound to it and update their status", a.GetOperation(), nodeName))
	}
}

func (p *nodeRestriction) admitPodStatus(nodeName string, a admission.Attributes) error {
	if a.GetOperation() != admission.Update {
		return admission.NewForbidden(a, fmt.Errorf("unexpected operation %q", a.GetOperation()))
	}
	old, ok := a.GetOldObject().(*corev1.Pod)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetOldObject()))
	}
	if old.Spec.NodeName != nodeName {
		return admission.NewForbidden(a, fmt.Errorf("node %q can only update pod status for pods with spec.nodeName set to itself", nodeName))
	}
	pod, ok := a.GetObject().(*corev1.Pod)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
	}
	if !labels.Equals(old.Labels, pod.Labels) {
		return admission.NewForbidden(a, fmt.Errorf("node %q cannot update labels through pod status", nodeName))
	}
	if !resourceClaimStatusesEqual(old.Status.ResourceClaimStatuses, pod.Status.ResourceClaimStatuses) {
		return admission.NewForbidden(a, fmt.Errorf("node %q cannot update resource claim statuses", nodeName))
	}
	if !apiequality.Semantic.DeepEqual(old.Status.ExtendedResourceClaimStatus, pod.Status.ExtendedResourceClaimStatus) {
		return admission.NewForbidden(a, fmt.Errorf("node %q cannot update extended resource claim status", nodeName))
	}
	return nil
}

func resourceClaimStatusesEqual(a, b []corev1.PodResourceClaimStatus) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.PodResourceClaimStatus) bool {
		return x.Name == y.Name && (x.ResourceClaimName == nil) == (y.ResourceClaimName == nil) &&
			(x.ResourceClaimName == nil || *x.ResourceClaimName == *y.ResourceClaimName)
	})
}

func (p *nodeRestriction) admitPodEviction(ctx context.Context, nodeName string, a admission.Attributes) error {
	if a.GetOperation() != admission.Create {
		return admission.NewForbidden(a, fmt.Errorf("unexpected operation %q", a.GetOperation()))
	}
	eviction, ok := a.GetObject().(*policyv1.Eviction)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
	}
	// The pod named in the URL, rather than the one the Eviction names.
	name := a.GetName()
	if name == "" {
		if name = eviction.Name; name == "" {
			return admission.NewForbidden(a, errors.New("could not determine pod from request data"))
		}
	}
	pod, err := p.getPod(ctx, a.GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		return err
	}
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	if pod.Spec.NodeName != nodeName {
		return admission.NewForbidden(a, fmt.Errorf("node %q can only evict pods with spec.nodeName set to itself", nodeName))
	}
	return nil
}

func (p *nodeRestriction) getPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if p.client == nil {
		return nil, errors.New("no client to read pods")
	}
	return p.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (p *nodeRestriction) admitPVCStatus(nodeName string, a admission.Attributes) error {
	if a.GetOperation() != admission.Update {
		return admission.NewForbidden(a, fmt.Errorf("unexpected operation %q", a.GetOperation()))
	}
	old, ok := a.GetOldObject().(*corev1.PersistentVolumeClaim)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetOldObject()))
	}
	pvc, ok := a.GetObject().(*corev1.PersistentVolumeClaim)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
	}
	// Everything but the resize status must stay (no relabelling, finalizers, owners).
	strip := func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
		c = c.DeepCopy()
		c.ResourceVersion, c.ManagedFields = "", nil
		c.Status.Capacity, c.Status.Conditions = nil, nil
		c.Status.AllocatedResources, c.Status.AllocatedResourceStatuses = nil, nil
		return c
	}
	if !apiequality.Semantic.DeepEqual(strip(old), strip(pvc)) {
		return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to update fields other than status.capacity, status.conditions, status.allocatedResources and status.allocatedResourceStatuses", nodeName))
	}
	return nil
}

// admitLocalVolumeCleanup lets a node remove the cleanup finalizer of a deleted local
// volume of its own, judged by the stored object's node label, and nothing else.
func admitLocalVolumeCleanup(nodeName string, a admission.Attributes) error {
	if a.GetOperation() != admission.Update || a.GetSubresource() != "" {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only remove the finalizer %s of its own deleted local volumes", nodeName, localpv.Finalizer))
	}
	old, ok := a.GetOldObject().(*corev1.PersistentVolume)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetOldObject()))
	}
	pv, ok := a.GetObject().(*corev1.PersistentVolume)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
	}
	if old.Labels[localpv.LabelNode] != nodeName {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only update the persistentvolumes labelled %s", nodeName, localpv.NodeSelector(nodeName)))
	}
	if old.DeletionTimestamp == nil {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only remove the finalizer %s once the volume is deleted", nodeName, localpv.Finalizer))
	}
	if !localpv.HasFinalizer(old) || localpv.HasFinalizer(pv) || !slices.Equal(localpv.WithoutFinalizer(old.Finalizers), pv.Finalizers) {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only remove the finalizer %s, no other", nodeName, localpv.Finalizer))
	}
	strip := func(v *corev1.PersistentVolume) *corev1.PersistentVolume {
		v = v.DeepCopy()
		v.ResourceVersion, v.ManagedFields, v.Finalizers = "", nil, nil
		return v
	}
	if !apiequality.Semantic.DeepEqual(strip(old), strip(pv)) {
		return admission.NewForbidden(a, fmt.Errorf("node %q may only remove the finalizer %s of a volume, and change nothing else", nodeName, localpv.Finalizer))
	}
	return nil
}

func (p *nodeRestriction) admitNode(nodeName string, a admission.Attributes) error {
	if requested := objectName(a); requested != nodeName {
		return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to modify node %q", nodeName, requested))
	}
	switch a.GetOperation() {
	case admission.Create:
		node, ok := a.GetObject().(*corev1.Node)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
		}
		// Node access is scoped by what Node.Spec lists: a configSource would be a view escalation.
		if node.Spec.ConfigSource != nil {
			return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to create its Node with a non-nil configSource", nodeName))
		}
		// Labels outside the allowed set would let a node steer privileged workloads to itself.
		if forbidden := forbiddenNodeLabels(modifiedLabels(node.Labels, nil)); len(forbidden) > 0 {
			return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to set the following labels: %s", nodeName, strings.Join(forbidden, ", ")))
		}
	case admission.Update:
		node, ok := a.GetObject().(*corev1.Node)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
		}
		old, ok := a.GetOldObject().(*corev1.Node)
		if !ok {
			return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetOldObject()))
		}
		if node.Spec.ConfigSource != nil && !apiequality.Semantic.DeepEqual(node.Spec.ConfigSource, old.Spec.ConfigSource) {
			return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to update configSource to a new non-nil configSource", nodeName))
		}
		// Removing or changing its taints would let a node take workloads meant to stay off it.
		if !apiequality.Semantic.DeepEqual(taintsOtherThan(node.Spec.Taints, flotillaNoPodsTaint), taintsOtherThan(old.Spec.Taints, flotillaNoPodsTaint)) {
			return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to modify taints (other than %s)", nodeName, flotillaNoPodsTaint))
		}
		if !apiequality.Semantic.DeepEqual(node.OwnerReferences, old.OwnerReferences) {
			return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to modify ownerReferences", nodeName))
		}
		if forbidden := forbiddenNodeLabels(modifiedLabels(node.Labels, old.Labels)); len(forbidden) > 0 {
			return admission.NewForbidden(a, fmt.Errorf("node %q is not allowed to modify labels: %s", nodeName, strings.Join(forbidden, ", ")))
		}
	}
	return nil
}

// taintsOtherThan returns taints without those of key (nil when none is left).
func taintsOtherThan(taints []corev1.Taint, key string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != key {
			out = append(out, t)
		}
	}
	return out
}

// modifiedLabels returns the keys added, removed or changed between a and b.
func modifiedLabels(a, b map[string]string) sets.Set[string] {
	out := sets.New[string]()
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			out.Insert(k)
		}
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || v != w {
			out.Insert(k)
		}
	}
	return out
}

func labelNamespace(key string) string {
	if ns, _, ok := strings.Cut(key, "/"); ok {
		return ns
	}
	return ""
}

// inLabelNamespace reports whether key's prefix is ns or a subdomain of it.
func inLabelNamespace(key, ns string) bool {
	p := labelNamespace(key)
	return p == ns || strings.HasSuffix(p, "."+ns)
}

// kubeletLabels are the labels of the kubernetes.io namespaces a kubelet may set on its Node
// (k8s.io/kubelet/pkg/apis, well_known_labels.go); so are those of the namespaces
// [*.]kubelet.kubernetes.io and [*.]node.kubernetes.io.
var kubeletLabels = sets.New(
	corev1.LabelHostname,
	corev1.LabelTopologyZone,
	corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone,
	corev1.LabelFailureDomainBetaRegion,
	corev1.LabelInstanceType,
	corev1.LabelInstanceTypeStable,
	corev1.LabelOSStable,
	corev1.LabelArchStable,
	"beta.kubernetes.io/os",
	"beta.kubernetes.io/arch",
)

func isKubeletLabel(key string) bool {
	return kubeletLabels.Has(key) || inLabelNamespace(key, corev1.LabelNamespaceSuffixKubelet) || inLabelNamespace(key, corev1.LabelNamespaceSuffixNode)
}

// forbiddenNodeLabels returns, sorted, the labels of modified a node may not add, remove or
// change: those of [*.]node-restriction.kubernetes.io, and those of the kubernetes.io and
// k8s.io namespaces that are not kubelet labels.
func forbiddenNodeLabels(modified sets.Set[string]) []string {
	var out []string
	for key := range modified {
		reserved := inLabelNamespace(key, "kubernetes.io") || inLabelNamespace(key, "k8s.io")
		if inLabelNamespace(key, corev1.LabelNamespaceNodeRestriction) || reserved && !isKubeletLabel(key) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

func (p *nodeRestriction) admitServiceAccount(ctx context.Context, nodeName string, a admission.Attributes) error {
	if a.GetOperation() != admission.Create || a.GetSubresource() != "token" {
		return nil
	}
	tr, ok := a.GetObject().(*authenticationv1.TokenRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
	}
	// A node's token must be bound to a pod scheduled on it (the token then also names the node).
	ref := tr.Spec.BoundObjectRef
	if ref == nil || ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name == "" {
		return admission.NewForbidden(a, fmt.Errorf("node %q requested a token not bound to a pod", nodeName))
	}
	if ref.UID == "" {
		return admission.NewForbidden(a, fmt.Errorf("node %q requested a token with a pod binding without a uid", nodeName))
	}
	pod, err := p.getPod(ctx, a.GetNamespace(), ref.Name)
	if apierrors.IsNotFound(err) {
		return err
	}
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	if ref.UID != pod.UID {
		return admission.NewForbidden(a, fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	if pod.Spec.NodeName != nodeName {
		return admission.NewForbidden(a, fmt.Errorf("node %q requested a token bound to a pod scheduled on a different node", nodeName))
	}
	return nil
}

func (p *nodeRestriction) admitLease(nodeName string, a admission.Attributes) error {
	if a.GetNamespace() != corev1.NamespaceNodeLease {
		return admission.NewForbidden(a, fmt.Errorf("node %q can only access leases in the %q system namespace", nodeName, corev1.NamespaceNodeLease))
	}
	if objectName(a) != nodeName {
		return admission.NewForbidden(a, fmt.Errorf("node %q can only access the node lease with the same name as the requesting node", nodeName))
	}
	return nil
}

// ForbiddenNodeLabels returns, sorted, those of labels a host may not set on its own Node
// (NodeRestriction would refuse its registration): for checking --node-label at start.
func ForbiddenNodeLabels(labels map[string]string) []string {
	return forbiddenNodeLabels(sets.KeySet(labels))
}
