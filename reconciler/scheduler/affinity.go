package scheduler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// parseTerms parses the required or the preferred pod (anti-)affinity terms of pod.
func parseTerms(pod *corev1.Pod, required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) ([]affinityTerm, error) {
	var out []affinityTerm
	for _, t := range required {
		at, err := newAffinityTerm(pod, &t, 1)
		if err != nil {
			return nil, err
		}
		out = append(out, at)
	}
	for _, w := range preferred {
		at, err := newAffinityTerm(pod, &w.PodAffinityTerm, w.Weight)
		if err != nil {
			return nil, err
		}
		out = append(out, at)
	}
	return out, nil
}

func newAffinityTerm(pod *corev1.Pod, t *corev1.PodAffinityTerm, weight int32) (affinityTerm, error) {
	at := affinityTerm{topologyKey: t.TopologyKey, weight: weight, namespaces: map[string]bool{}}
	for _, ns := range t.Namespaces {
		at.namespaces[ns] = true
	}
	if t.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
		if err != nil {
			return at, fmt.Errorf("pod affinity namespaceSelector: %w", err)
		}
		at.nsSelector = sel
	} else if len(t.Namespaces) == 0 {
		at.namespaces[pod.Namespace] = true
	}
	sel := labels.Nothing()
	if t.LabelSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(t.LabelSelector); err != nil {
			return at, fmt.Errorf("pod affinity labelSelector: %w", err)
		}
	}
	sel = withLabelKeys(sel, pod.Labels, t.MatchLabelKeys, t.MismatchLabelKeys)
	at.selector = sel
	return at, nil
}

// withLabelKeys adds matchLabelKeys (key in [pod's value]) and mismatchLabelKeys (key notin
// [pod's value]) to sel; the API server usually merged them already, which changes nothing.
func withLabelKeys(sel labels.Selector, podLabels map[string]string, match, mismatch []string) labels.Selector {
	if sel.Empty() && len(match)+len(mismatch) > 0 {
		sel = labels.NewSelector()
	}
	for _, k := range match {
		if v, ok := podLabels[k]; ok {
			if r, err := labels.NewRequirement(k, selection.In, []string{v}); err == nil {
				sel = sel.Add(*r)
			}
		}
	}
	for _, k := range mismatch {
		if v, ok := podLabels[k]; ok {
			if r, err := labels.NewRequirement(k, selection.NotIn, []string{v}); err == nil {
				sel = sel.Add(*r)
			}
		}
	}
	return sel
}

// matches reports whether pod is selected by the term; nsLabels gives a namespace's labels.
func (t *affinityTerm) matches(pod *corev1.Pod, nsLabels func(string) labels.Set) bool {
	if !t.namespaces[pod.Namespace] {
		if t.nsSelector == nil {
			return false
		}
		// An empty namespaceSelector selects every namespace.
		if !t.nsSelector.Empty() && (nsLabels == nil || !t.nsSelector.Matches(nsLabels(pod.Namespace))) {
			return false
		}
	}
	return t.selector.Matches(labels.Set(pod.Labels))
}

// topologyPair is one topology domain: a label key and value.
type topologyPair struct{ key, value string }

// affinityState holds the required inter-pod affinity counts for one incoming pod.
type affinityState struct {
	// existingAnti counts, per domain, existing pods whose required anti-affinity selects
	// the incoming pod.
	existingAnti map[topologyPair]int
	// affinity counts, per domain of each required affinity term, existing pods that match
	// every affinity term of the incoming pod.
	affinity map[topologyPair]int
	// anti counts, per domain, existing pods the incoming pod's required anti-affinity selects.
	anti map[topologyPair]int
	// selfMatch: the pod matches all its own affinity terms (so the first of a group may go
	// anywhere).
	selfMatch bool
}

func newAffinityState(pi *PodInfo, snap *Snapshot) *affinityState {
	if snap.PodsWithAffinity == 0 && len(pi.requiredAffinity)+len(pi.requiredAnti) == 0 {
		return nil // nothing placed has terms, and the pod has none: nothing to check
	}
	st := &affinityState{existingAnti: map[topologyPair]int{}, affinity: map[topologyPair]int{}, anti: map[topologyPair]int{}}
	nsLabels := snap.NamespaceLabels
	needAll := len(pi.requiredAffinity)+len(pi.requiredAnti) > 0
	for _, ni := range snap.Nodes {
		if ni.Node == nil {
			continue
		}
		for _, existing := range ni.PodsWithRequiredAnti {
			for _, t := range existing.requiredAnti {
				if v, ok := ni.Node.Labels[t.topologyKey]; ok && t.matches(pi.Pod, nsLabels) {
					st.existingAnti[topologyPair{t.topologyKey, v}]++
				}
			}
		}
		if !needAll {
			continue
		}
		for _, existing := range ni.Pods {
			if len(pi.requiredAffinity) > 0 && matchesAll(pi.requiredAffinity, existing.Pod, nsLabels) {
				for _, t := range pi.requiredAffinity {
					if v, ok := ni.Node.Labels[t.topologyKey]; ok {
						st.affinity[topologyPair{t.topologyKey, v}]++
					}
				}
			}
			for _, t := range pi.requiredAnti {
				if v, ok := ni.Node.Labels[t.topologyKey]; ok && t.matches(existing.Pod, nsLabels) {
					st.anti[topologyPair{t.topologyKey, v}]++
				}
			}
		}
	}
	st.selfMatch = matchesAll(pi.requiredAffinity, pi.Pod, nsLabels)
	return st
}

func matchesAll(terms []affinityTerm, pod *corev1.Pod, nsLabels func(string) labels.Set) bool {
	for i := range terms {
		if !terms[i].matches(pod, nsLabels) {
			return false
		}
	}
	return true
}

// filterInterPodAffinity enforces required pod affinity, required pod anti-affinity, and
// the required anti-affinity of the pods already placed.
func filterInterPodAffinity(c *cycle, ni *NodeInfo) *Status {
	st := c.affinity
	if st == nil {
		return nil
	}
	node := ni.Node
	if len(c.pod.requiredAffinity) > 0 {
		ok := true
		for _, t := range c.pod.requiredAffinity {
			v, has := node.Labels[t.topologyKey]
			if !has || st.affinity[topologyPair{t.topologyKey, v}] <= 0 {
				ok = false
				break
			}
		}
		// No pod anywhere matches yet: the first pod of a group that selects itself may
		// go to any node that has the topology keys.
		if !ok && len(st.affinity) == 0 && st.selfMatch {
			ok = true
			for _, t := range c.pod.requiredAffinity {
				if _, has := node.Labels[t.topologyKey]; !has {
					ok = false
				}
			}
		}
		if !ok {
			return unresolvable(reasonAffinity)
		}
	}
	for _, t := range c.pod.requiredAnti {
		if v, has := node.Labels[t.topologyKey]; has && st.anti[topologyPair{t.topologyKey, v}] > 0 {
			return unschedulable(reasonAntiAffinity)
		}
	}
	for pair, n := range st.existingAnti {
		if v, has := node.Labels[pair.key]; has && n > 0 && v == pair.value {
			return unschedulable(reasonExistingAntiAffinty)
		}
	}
	return nil
}

// hardPodAffinityWeight is what an existing pod's required affinity that selects the
// incoming pod adds to the score of its domain, as upstream's default.
const hardPodAffinityWeight = 1

// affinityScores sums, per topology domain, the preferred affinity weights between the
// incoming pod and the pods already placed (both directions), minus anti-affinity weights.
// nil when nothing contributes.
func affinityScores(pi *PodInfo, snap *Snapshot) map[string]map[string]int64 {
	own := len(pi.preferredAffinity)+len(pi.preferredAnti) > 0
	if !own && snap.PodsWithAffinity == 0 {
		return nil
	}
	nsLabels := snap.NamespaceLabels
	scores := map[string]map[string]int64{}
	add := func(node *corev1.Node, key string, w int64) {
		v, ok := node.Labels[key]
		if !ok || w == 0 {
			return
		}
		if scores[key] == nil {
			scores[key] = map[string]int64{}
		}
		scores[key][v] += w
	}
	for _, ni := range snap.Nodes {
		if ni.Node == nil || (!own && ni.PodsWithAffinity == 0) {
			continue
		}
		for _, ex := range ni.Pods {
			for _, t := range pi.preferredAffinity {
				if t.matches(ex.Pod, nsLabels) {
					add(ni.Node, t.topologyKey, int64(t.weight))
				}
			}
			for _, t := range pi.preferredAnti {
				if t.matches(ex.Pod, nsLabels) {
					add(ni.Node, t.topologyKey, -int64(t.weight))
				}
			}
			for _, t := range ex.requiredAffinity {
				if t.matches(pi.Pod, nsLabels) {
					add(ni.Node, t.topologyKey, hardPodAffinityWeight)
				}
			}
			for _, t := range ex.preferredAffinity {
				if t.matches(pi.Pod, nsLabels) {
					add(ni.Node, t.topologyKey, int64(t.weight))
				}
			}
			for _, t := range ex.preferredAnti {
				if t.matches(pi.Pod, nsLabels) {
					add(ni.Node, t.topologyKey, -int64(t.weight))
				}
			}
		}
	}
	if len(scores) == 0 {
		return nil
	}
	return scores
}

// scoreInterPodAffinity is the raw affinity score of node: the sum over its domains.
func scoreInterPodAffinity(scores map[string]map[string]int64, node *corev1.Node) int64 {
	var s int64
	for key, byValue := range scores {
		if v, ok := node.Labels[key]; ok {
			s += byValue[v]
		}
	}
	return s
}
