// Package node authorizes a host's reads of the Secrets, ConfigMaps,
// PersistentVolumeClaims and PersistentVolumes its pods use, as Kubernetes' Node
// authorizer does for kubelets: a host (user system:node:<name> in group system:nodes)
// may get, list and watch such an object by name when a pod bound to it (spec.nodeName)
// references it. Every host may also read, by name, the Secrets the Ingresses name in
// spec.tls[].secretName, in their own namespace: flotilla runs its Ingress proxy on every
// host, which terminates TLS with them.
//
// Anything else gets no opinion, and the next authorizer (RBAC, whose role system:node
// grants none of these reads) decides: a host cannot list every Secret of the site, nor
// read one no pod of its own uses. A list or watch names its object with the field
// selector metadata.name=<name> (the API server's RequestInfo turns it into the
// request's name); one without it is refused.
//
// Local volumes (reclaim of flotilla.dev/local volumes, package localpv) are the one
// exception to "by name": a host may list and watch the PersistentVolumes whose label
// selector requires flotilla.dev/local-volume-node=<its name> (k8s.io/apiserver hands the
// request's label selector to authorizers; the API server filters the answer by it), and
// get, update and patch by name a PersistentVolume so labelled, to remove its cleanup
// finalizer once it removed the volume's directory. NodeRestriction admission
// (reconciler/apiserver) refuses every other change a host makes to a volume, and checks
// the label on the stored object rather than on this authorizer's cache.
//
// Decisions are computed from the API server's shared informers at each request (pods
// indexed by spec.nodeName, claims, Ingresses indexed by their TLS Secrets, volumes), not
// from a maintained graph: a pod just bound to a host may be refused for the moment the
// informer takes to see it, and the host retries.
package node

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

const (
	// podsByNodeIndex indexes the pods by spec.nodeName.
	podsByNodeIndex = "flotilla.dev/node-authorizer-node-name"
	// ingressesByTLSSecretIndex indexes the Ingresses by "<namespace>/<secretName>" of
	// their spec.tls entries.
	ingressesByTLSSecretIndex = "flotilla.dev/node-authorizer-tls-secret"
)

// Resources the authorizer decides, all in the core group.
const (
	secrets    = "secrets"
	configMaps = "configmaps"
	pvcs       = "persistentvolumeclaims"
	pvs        = "persistentvolumes"
)

// Authorizer is the Node authorizer. It implements authorizer.Authorizer.
type Authorizer struct {
	pods      cache.Indexer
	pvcs      cache.Indexer
	ingresses cache.Indexer
	// volumes holds the PersistentVolumes, for their node label; nil allows no host a
	// volume by its label.
	volumes cache.Indexer
	synced  []cache.InformerSynced
}

var _ authorizer.Authorizer = (*Authorizer)(nil)

// NewFromInformers makes the authorizer on f's pods, PersistentVolumeClaims, Ingresses and
// PersistentVolumes informers, adding its indexes to them. Call it before f is started; the
// decisions wait for f to be started and synced (they are NoOpinion until then).
func NewFromInformers(f informers.SharedInformerFactory) (*Authorizer, error) {
	podIdx, ingIdx := Indexers()
	podInf := f.Core().V1().Pods().Informer()
	if err := podInf.AddIndexers(podIdx); err != nil {
		return nil, fmt.Errorf("node authorizer: pod index: %w", err)
	}
	ingInf := f.Networking().V1().Ingresses().Informer()
	if err := ingInf.AddIndexers(ingIdx); err != nil {
		return nil, fmt.Errorf("node authorizer: Ingress index: %w", err)
	}
	pvcInf := f.Core().V1().PersistentVolumeClaims().Informer()
	pvInf := f.Core().V1().PersistentVolumes().Informer()
	a := New(podInf.GetIndexer(), pvcInf.GetIndexer(), ingInf.GetIndexer(), podInf.HasSynced, pvcInf.HasSynced, ingInf.HasSynced, pvInf.HasSynced)
	a.volumes = pvInf.GetIndexer()
	return a, nil
}

// WithVolumes sets the indexer of PersistentVolumes whose node label lets a host get,
// update and patch them (New sets none) and returns a.
func (a *Authorizer) WithVolumes(volumes cache.Indexer) *Authorizer {
	a.volumes = volumes
	return a
}

// New makes the authorizer on indexers of pods (with the index of Indexers), claims and
// Ingresses (with theirs); synced tells when they hold what the API does.
func New(pods, claims, ingresses cache.Indexer, synced ...cache.InformerSynced) *Authorizer {
	return &Authorizer{pods: pods, pvcs: claims, ingresses: ingresses, synced: synced}
}

// Indexers are the indexes New needs on the pods and on the Ingresses.
func Indexers() (pods, ingresses cache.Indexers) {
	return cache.Indexers{podsByNodeIndex: podNodeName}, cache.Indexers{ingressesByTLSSecretIndex: ingressTLSSecrets}
}

func podNodeName(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

func ingressTLSSecrets(obj any) ([]string, error) {
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, t := range ing.Spec.TLS {
		if t.SecretName != "" {
			keys = append(keys, ing.Namespace+"/"+t.SecretName)
		}
	}
	return keys, nil
}

// NodeName returns the host a user is, and whether it is one: a name system:node:<name>
// (rbac.NodeUserPrefix) in group system:nodes.
func NodeName(u user.Info) (string, bool) {
	if u == nil {
		return "", false
	}
	name, ok := strings.CutPrefix(u.GetName(), rbac.NodeUserPrefix)
	if !ok || name == "" {
		return "", false
	}
	for _, g := range u.GetGroups() {
		if g == rbac.NodesGroup {
			return name, true
		}
	}
	return "", false
}

// Authorize allows a host's get, list and watch of a Secret, ConfigMap,
// PersistentVolumeClaim or PersistentVolume its pods reference (or, for a Secret, that an
// Ingress serves TLS with), by name; its list and watch of the PersistentVolumes labelled
// with its name, by that label selector, and its get, update and patch of one of them; it
// has no opinion on anything else.
func (a *Authorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	node, ok := NodeName(attrs.GetUser())
	if !ok || !attrs.IsResourceRequest() || attrs.GetAPIGroup() != "" || attrs.GetSubresource() != "" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	resource := attrs.GetResource()
	switch resource {
	case secrets, configMaps, pvcs, pvs:
	default:
		return authorizer.DecisionNoOpinion, "", nil
	}
	verb, name, ns := attrs.GetVerb(), attrs.GetName(), attrs.GetNamespace()
	switch verb {
	case "get", "list", "watch":
	case "update", "patch":
		if resource != pvs || name == "" {
			return authorizer.DecisionNoOpinion, "", nil
		}
	default:
		return authorizer.DecisionNoOpinion, "", nil
	}
	if resource == pvs && name == "" && (verb == "list" || verb == "watch") && selectsNode(attrs, node) {
		return authorizer.DecisionAllow, "", nil
	}
	if name == "" {
		msg := fmt.Sprintf("node %q may only read %s by name (fieldSelector metadata.name=<name> to list or watch)", node, resource)
		if resource == pvs {
			msg += fmt.Sprintf(" or by label selector %s", localpv.NodeSelector(node))
		}
		return authorizer.DecisionNoOpinion, msg, nil
	}
	for _, s := range a.synced {
		if !s() {
			return authorizer.DecisionNoOpinion, "node authorizer: caches not synced yet", nil
		}
	}
	var allowed bool
	switch {
	case resource == pvs && (verb == "update" || verb == "patch"):
		if a.volumeOfNode(node, name) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, fmt.Sprintf("node %q may only %s the persistentvolumes labelled %s", node, verb, localpv.NodeSelector(node)), nil
	case resource == pvs:
		allowed = a.volumeUsed(node, name) || a.volumeOfNode(node, name)
	case resource == secrets:
		allowed = a.ingressSecret(ns, name) || a.referenced(node, ns, resource, name)
	default:
		allowed = a.referenced(node, ns, resource, name)
	}
	if allowed {
		return authorizer.DecisionAllow, "", nil
	}
	what := ns + "/" + name
	if ns == "" {
		what = name
	}
	return authorizer.DecisionNoOpinion, fmt.Sprintf("no relationship found between node %q and %s %s", node, resource, what), nil
}

// ConditionsAwareAuthorize is Authorize: the Authorizer sets no conditions.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions fails closed: the Authorizer sets no conditions to evaluate.
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// nodePods returns the pods bound to node.
func (a *Authorizer) nodePods(node string) []*corev1.Pod {
	objs, err := a.pods.ByIndex(podsByNodeIndex, node)
	if err != nil {
		return nil
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods
}

// referenced reports whether a pod of node in namespace ns references the named object.
func (a *Authorizer) referenced(node, ns, resource, name string) bool {
	for _, p := range a.nodePods(node) {
		if p.Namespace == ns && PodReferences(p, resource, name) {
			return true
		}
	}
	return false
}

// volumeUsed reports whether a claim a pod of node uses is bound to PersistentVolume pv.
func (a *Authorizer) volumeUsed(node, pv string) bool {
	for _, p := range a.nodePods(node) {
		found := false
		visitClaims(p, func(claim string) bool {
			o, ok, err := a.pvcs.GetByKey(p.Namespace + "/" + claim)
			if err == nil && ok {
				if c, isClaim := o.(*corev1.PersistentVolumeClaim); isClaim && c.Spec.VolumeName == pv {
					found = true
				}
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// selectsNode reports whether the request's label selector requires the label
// flotilla.dev/local-volume-node to be node (=, == or "in" with that one value): every
// requirement of a selector holds for what it selects, so the answer holds node's volumes
// only.
func selectsNode(attrs authorizer.Attributes, node string) bool {
	reqs, err := attrs.GetLabelSelector()
	if err != nil {
		return false
	}
	for _, r := range reqs {
		if r.Key() != localpv.LabelNode {
			continue
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if v := r.Values(); v.Len() == 1 && v.Has(node) {
				return true
			}
		}
	}
	return false
}

// volumeOfNode reports whether PersistentVolume name is labelled as a local volume of node.
func (a *Authorizer) volumeOfNode(node, name string) bool {
	if a.volumes == nil {
		return false
	}
	o, ok, err := a.volumes.GetByKey(name)
	if err != nil || !ok {
		return false
	}
	pv, isPV := o.(*corev1.PersistentVolume)
	return isPV && pv.Labels[localpv.LabelNode] == node
}

// ingressSecret reports whether an Ingress of namespace ns names Secret name in its TLS.
func (a *Authorizer) ingressSecret(ns, name string) bool {
	if a.ingresses == nil {
		return false
	}
	objs, err := a.ingresses.ByIndex(ingressesByTLSSecretIndex, ns+"/"+name)
	return err == nil && len(objs) > 0
}

// PodReferences reports whether pod references the object of resource (secrets,
// configmaps or persistentvolumeclaims) and name in its namespace: Secrets of volumes,
// projected sources, environment (valueFrom and envFrom of every container, init and
// ephemeral ones included) and imagePullSecrets; ConfigMaps of volumes, projected sources
// and environment; claims of persistentVolumeClaim volumes and of generic ephemeral
// volumes (<pod>-<volume>).
func PodReferences(pod *corev1.Pod, resource, name string) bool {
	found := false
	match := func(n string) bool {
		if n == name {
			found = true
		}
		return !found
	}
	switch resource {
	case secrets:
		visitSecrets(pod, match)
	case configMaps:
		visitConfigMaps(pod, match)
	case pvcs:
		visitClaims(pod, match)
	}
	return found
}

// containers calls fn for every container of pod; fn returns false to stop.
func containers(pod *corev1.Pod, fn func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool) bool {
	for _, c := range pod.Spec.InitContainers {
		if !fn(c.Env, c.EnvFrom) {
			return false
		}
	}
	for _, c := range pod.Spec.Containers {
		if !fn(c.Env, c.EnvFrom) {
			return false
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if !fn(c.Env, c.EnvFrom) {
			return false
		}
	}
	return true
}

// visitSecrets calls fn with the name of every Secret pod references until fn returns false.
func visitSecrets(pod *corev1.Pod, fn func(string) bool) {
	for _, s := range pod.Spec.ImagePullSecrets {
		if !fn(s.Name) {
			return
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Secret != nil:
			if !fn(v.Secret.SecretName) {
				return
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && !fn(src.Secret.Name) {
					return
				}
			}
		}
	}
	containers(pod, func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool {
		for _, e := range from {
			if e.SecretRef != nil && !fn(e.SecretRef.Name) {
				return false
			}
		}
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !fn(e.ValueFrom.SecretKeyRef.Name) {
				return false
			}
		}
		return true
	})
}

// visitConfigMaps calls fn with the name of every ConfigMap pod references until fn
// returns false.
func visitConfigMaps(pod *corev1.Pod, fn func(string) bool) {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			if !fn(v.ConfigMap.Name) {
				return
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil && !fn(src.ConfigMap.Name) {
					return
				}
			}
		}
	}
	containers(pod, func(env []corev1.EnvVar, from []corev1.EnvFromSource) bool {
		for _, e := range from {
			if e.ConfigMapRef != nil && !fn(e.ConfigMapRef.Name) {
				return false
			}
		}
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && !fn(e.ValueFrom.ConfigMapKeyRef.Name) {
				return false
			}
		}
		return true
	})
}

// visitClaims calls fn with the name of every PersistentVolumeClaim pod uses until fn
// returns false.
func visitClaims(pod *corev1.Pod, fn func(string) bool) {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			if !fn(v.PersistentVolumeClaim.ClaimName) {
				return
			}
		case v.Ephemeral != nil:
			if !fn(volumebinding.EphemeralClaimName(pod, &v)) {
				return
			}
		}
	}
}
