package scheduler

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// spreadConstraint is one topologySpreadConstraint with its selector parsed.
type spreadConstraint struct {
	maxSkew      int32
	key          string
	minDomains   int32
	selector     labels.Selector
	honorAffinty bool // nodeAffinityPolicy Honor (default)
	honorTaints  bool // nodeTaintsPolicy Honor (default Ignore)
	selfMatch    int
}

// spreadState counts, per constraint, the matching pods in every topology domain of the
// nodes the constraint considers.
type spreadState struct {
	constraints []spreadConstraint
	counts      []map[string]int
	min         []int
}

func parseSpreadConstraints(pod *corev1.Pod, when corev1.UnsatisfiableConstraintAction) []spreadConstraint {
	var out []spreadConstraint
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		if tsc.WhenUnsatisfiable != when {
			continue
		}
		sel := labels.Nothing()
		if tsc.LabelSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
			if err != nil {
				continue // validation rejects such pods
			}
			sel = s
		}
		sel = withLabelKeys(sel, pod.Labels, tsc.MatchLabelKeys, nil)
		sc := spreadConstraint{
			maxSkew: tsc.MaxSkew, key: tsc.TopologyKey, selector: sel,
			honorAffinty: tsc.NodeAffinityPolicy == nil || *tsc.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
			honorTaints:  tsc.NodeTaintsPolicy != nil && *tsc.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor,
		}
		if tsc.MinDomains != nil {
			sc.minDomains = *tsc.MinDomains
		}
		if sel.Matches(labels.Set(pod.Labels)) {
			sc.selfMatch = 1
		}
		out = append(out, sc)
	}
	return out
}

// newSpreadState counts matching pods per domain for the pod's constraints of kind when.
// Nodes the pod could not go to anyway (node affinity, and taints when the policy says so)
// and nodes without every constraint's key are not domains, as upstream.
func newSpreadState(pi *PodInfo, snap *Snapshot, when corev1.UnsatisfiableConstraintAction) *spreadState {
	cs := parseSpreadConstraints(pi.Pod, when)
	if len(cs) == 0 {
		return nil
	}
	st := &spreadState{constraints: cs, counts: make([]map[string]int, len(cs)), min: make([]int, len(cs))}
	for i := range cs {
		st.counts[i] = map[string]int{}
	}
	for _, ni := range snap.Nodes {
		if ni.Node == nil || !nodeHasKeys(ni.Node, cs) {
			continue
		}
		for i, sc := range cs {
			if sc.honorAffinty {
				if ok, _ := pi.requiredNodeAffinity.Match(ni.Node); !ok {
					continue
				}
			}
			if sc.honorTaints {
				if _, bad := v1helper.FindMatchingUntoleratedTaint(klog.Background(), ni.Node.Spec.Taints, pi.Pod.Spec.Tolerations,
					func(t *corev1.Taint) bool {
						return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
					}, false); bad {
					continue
				}
			}
			domain := ni.Node.Labels[sc.key]
			st.counts[i][domain] += countMatching(ni, pi.Pod.Namespace, sc.selector)
		}
	}
	for i, sc := range cs {
		m := math.MaxInt
		for _, n := range st.counts[i] {
			m = min(m, n)
		}
		if m == math.MaxInt || int32(len(st.counts[i])) < sc.minDomains {
			m = 0 // fewer domains than minDomains: the global minimum is taken as 0
		}
		st.min[i] = m
	}
	return st
}

func nodeHasKeys(node *corev1.Node, cs []spreadConstraint) bool {
	for _, sc := range cs {
		if _, ok := node.Labels[sc.key]; !ok {
			return false
		}
	}
	return true
}

// countMatching counts the live pods on ni in namespace that sel selects.
func countMatching(ni *NodeInfo, namespace string, sel labels.Selector) int {
	n := 0
	for _, p := range ni.Pods {
		if p.Pod.Namespace == namespace && p.Pod.DeletionTimestamp == nil && sel.Matches(labels.Set(p.Pod.Labels)) {
			n++
		}
	}
	return n
}

// filterTopologySpread enforces DoNotSchedule constraints: placing the pod on ni must not
// make its domain exceed the least populated domain by more than maxSkew.
func filterTopologySpread(c *cycle, ni *NodeInfo) *Status {
	st := c.spread
	if st == nil {
		return nil
	}
	for i, sc := range st.constraints {
		domain, ok := ni.Node.Labels[sc.key]
		if !ok {
			return unresolvable(reasonSpreadMissingLabel)
		}
		skew := st.counts[i][domain] + sc.selfMatch - st.min[i]
		if skew > int(sc.maxSkew) {
			return unschedulable(reasonSpread)
		}
	}
	return nil
}

// scoreTopologySpread is the raw soft-spread score (lower is better, reversed when
// normalized): matching pods in the node's domain per ScheduleAnyway constraint, weighted by
// log(domains+2) so a constraint over many domains counts more, as upstream.
func scoreTopologySpread(st *spreadState, ni *NodeInfo) (int64, bool) {
	var score float64
	for i, sc := range st.constraints {
		domain, ok := ni.Node.Labels[sc.key]
		if !ok {
			return 0, false
		}
		w := math.Log(float64(len(st.counts[i]) + 2))
		score += float64(st.counts[i][domain])*w + float64(sc.maxSkew-1)
	}
	return int64(math.Round(score)), true
}
