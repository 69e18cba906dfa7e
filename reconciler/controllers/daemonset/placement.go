package daemonset

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/klog/v2"
)

// Labels the controller puts on its pods, as upstream.
const (
	RevisionHashLabel          = appsv1.ControllerRevisionHashLabelKey // "controller-revision-hash"
	PodTemplateGenerationLabel = "pod-template-generation"
)

// Node taint keys the automatic tolerations of daemon pods cover.
const (
	TaintNodeNotReady           = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable        = "node.kubernetes.io/unreachable"
	TaintNodeDiskPressure       = "node.kubernetes.io/disk-pressure"
	TaintNodeMemoryPressure     = "node.kubernetes.io/memory-pressure"
	TaintNodePIDPressure        = "node.kubernetes.io/pid-pressure"
	TaintNodeUnschedulable      = "node.kubernetes.io/unschedulable"
	TaintNodeNetworkUnavailable = "node.kubernetes.io/network-unavailable"
)

// AddDaemonTolerations adds the automatic tolerations of daemon pods to spec, in upstream's
// order, after the user's own. A toleration the user already wrote identically is not
// repeated; one with the same key, operator, value and effect is replaced in place. None
// carries tolerationSeconds: a daemon pod stays on a not-ready or unreachable node forever.
func AddDaemonTolerations(spec *corev1.PodSpec) {
	add := func(key string, effect corev1.TaintEffect) {
		addOrUpdateToleration(spec, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect})
	}
	add(TaintNodeNotReady, corev1.TaintEffectNoExecute)
	add(TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	add(TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodePIDPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)
	if spec.HostNetwork {
		add(TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)
	}
}

func addOrUpdateToleration(spec *corev1.PodSpec, t corev1.Toleration) {
	for i := range spec.Tolerations {
		if spec.Tolerations[i].MatchToleration(&t) {
			if !apiequality.Semantic.DeepEqual(spec.Tolerations[i], t) {
				spec.Tolerations[i] = t
			}
			return
		}
	}
	spec.Tolerations = append(spec.Tolerations, t)
}

// PinToNode makes the pod's required node affinity select exactly the node named nodeName
// (as upstream's ReplaceDaemonSetPodNodeNameNodeAffinity): every nodeSelectorTerm gets the matchFields requirement metadata.name In
// [nodeName] in place of any earlier one, and keeps the user's matchExpressions. The
// scheduler then binds the pod; the controller never sets spec.nodeName.
func PinToNode(affinity *corev1.Affinity, nodeName string) *corev1.Affinity {
	pin := corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}
	only := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin}}}}
	if affinity == nil {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: only}}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: only}
		return affinity
	}
	req := affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = only
		return affinity
	}
	for i := range req.NodeSelectorTerms {
		term := &req.NodeSelectorTerms[i]
		var fields []corev1.NodeSelectorRequirement
		for _, f := range term.MatchFields {
			if f.Key != metav1.ObjectNameField {
				fields = append(fields, f)
			}
		}
		term.MatchFields = append(fields, pin)
	}
	return affinity
}

// TargetNode returns the node a daemon pod belongs to: its spec.nodeName once bound, else the
// node its required affinity pins (PinToNode), else "".
func TargetNode(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// NewPod is the pod the DaemonSet would run on node, before the API fills its name: the
// template with the revision labels, the automatic tolerations and the node pin.
func NewPod(ds *appsv1.DaemonSet, nodeName, hash string) *corev1.Pod {
	tmpl := podTemplate(ds, hash)
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace = ds.Namespace
	pod.Spec.Affinity = PinToNode(pod.Spec.Affinity, nodeName)
	return pod
}

// podTemplate is the DaemonSet's template as its pods get it: revision labels and automatic
// tolerations added.
func podTemplate(ds *appsv1.DaemonSet, hash string) *corev1.PodTemplateSpec {
	t := ds.Spec.Template.DeepCopy()
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[PodTemplateGenerationLabel] = strconv.FormatInt(ds.Generation, 10)
	if hash != "" {
		t.Labels[RevisionHashLabel] = hash
	}
	AddDaemonTolerations(&t.Spec)
	return t
}

// ShouldRun reports whether the DaemonSet wants a pod on node (shouldRun) and whether a pod
// already there may stay (shouldContinue), as upstream's NodeShouldRunDaemonPod: a node that
// the template's nodeName, nodeSelector or required node affinity excludes gets neither; an
// untolerated NoSchedule or NoExecute taint stops new pods, and an existing pod stays unless
// one of those taints is NoExecute. A cordoned node still runs its daemon pod.
func ShouldRun(node *corev1.Node, ds *appsv1.DaemonSet) (shouldRun, shouldContinue bool) {
	spec := ds.Spec.Template.Spec.DeepCopy()
	if spec.NodeName != "" && spec.NodeName != node.Name {
		return false, false
	}
	AddDaemonTolerations(spec)
	if !matchesNodeSelector(spec, node) {
		return false, false
	}
	if _, bad := untoleratedTaint(node.Spec.Taints, spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}); !bad {
		return true, true
	}
	_, noExec := untoleratedTaint(node.Spec.Taints, spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute
	})
	return false, !noExec
}

func untoleratedTaint(taints []corev1.Taint, tolerations []corev1.Toleration, include func(*corev1.Taint) bool) (corev1.Taint, bool) {
	log := klog.Background()
	for i := range taints {
		t := &taints[i]
		if !include(t) {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(log, t, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return *t, true
		}
	}
	return corev1.Taint{}, false
}

// matchesNodeSelector applies spec.nodeSelector and the required node affinity to node, with
// the scheduler's semantics: terms are ORed, the requirements of a term ANDed, a term with no
// requirement matches nothing.
func matchesNodeSelector(spec *corev1.PodSpec, node *corev1.Node) bool {
	if len(spec.NodeSelector) > 0 && !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, node) {
			return true
		}
	}
	return false
}

func termMatches(term corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	if len(term.MatchExpressions) > 0 {
		sel, err := requirementsSelector(term.MatchExpressions)
		if err != nil || !sel.Matches(labels.Set(node.Labels)) {
			return false
		}
	}
	for _, f := range term.MatchFields {
		// metadata.name is the only field the scheduler supports, with In and NotIn.
		if f.Key != metav1.ObjectNameField {
			return false
		}
		in := slices.Contains(f.Values, node.Name)
		switch f.Operator {
		case corev1.NodeSelectorOpIn:
			if !in {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if in {
				return false
			}
		default:
			return false
		}
	}
	return true
}

var nodeSelectorOps = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn:           selection.In,
	corev1.NodeSelectorOpNotIn:        selection.NotIn,
	corev1.NodeSelectorOpExists:       selection.Exists,
	corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt:           selection.GreaterThan,
	corev1.NodeSelectorOpLt:           selection.LessThan,
}

func requirementsSelector(reqs []corev1.NodeSelectorRequirement) (labels.Selector, error) {
	sel := labels.NewSelector()
	for _, r := range reqs {
		op, ok := nodeSelectorOps[r.Operator]
		if !ok {
			return nil, fmt.Errorf("unknown node selector operator %q", r.Operator)
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	return sel, nil
}

// byCreation sorts pods oldest first; bound pods before unbound ones of the same age, then by
// name, as upstream's podByCreationTimestampAndPhase.
func byCreation(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
			return a.Spec.NodeName != ""
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}
