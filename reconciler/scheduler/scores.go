package scheduler

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// maxNodeScore is the best score a plugin gives after normalization.
const maxNodeScore int64 = 100

// Score plugin weights, as upstream's default profile.
const (
	weightTaintToleration = 3
	weightNodeAffinity    = 2
	weightTopologySpread  = 2
	weightInterPod        = 2
	weightLeastAllocated  = 1
	weightBalanced        = 1
	weightImageLocality   = 1
)

// Image locality thresholds, as upstream: below 23 MB an image is not worth a move, and a
// container's image counts for at most 1000 MB.
const (
	imageMinThreshold          int64 = 23 * 1024 * 1024
	imageMaxContainerThreshold int64 = 1000 * 1024 * 1024
)

// scoreLeastAllocated favours nodes with the most free cpu and memory once the pod is there
// (requests of best-effort pods count with the non-zero defaults).
func scoreLeastAllocated(pi *PodInfo, ni *NodeInfo) int64 {
	free := func(req, alloc int64) int64 {
		if alloc == 0 || req > alloc {
			return 0
		}
		return (alloc - req) * maxNodeScore / alloc
	}
	cpu := free(ni.NonZeroRequested.MilliCPU+pi.NonZero.MilliCPU, ni.Allocatable.MilliCPU)
	mem := free(ni.NonZeroRequested.Memory+pi.NonZero.Memory, ni.Allocatable.Memory)
	return (cpu + mem) / 2
}

// scoreBalancedAllocation favours nodes where cpu and memory are used in the same proportion
// once the pod is there: 100 * (1 - standard deviation of the fractions).
func scoreBalancedAllocation(pi *PodInfo, ni *NodeInfo) int64 {
	frac := func(req, alloc int64) float64 {
		if alloc == 0 {
			return 0
		}
		return math.Min(1, float64(req)/float64(alloc))
	}
	cpu := frac(ni.Requested.MilliCPU+pi.Requests.MilliCPU, ni.Allocatable.MilliCPU)
	mem := frac(ni.Requested.Memory+pi.Requests.Memory, ni.Allocatable.Memory)
	std := math.Abs(cpu-mem) / 2
	return int64((1 - std) * float64(maxNodeScore))
}

// scoreNodeAffinity is the raw sum of the weights of the preferred node affinity terms the
// node matches.
func scoreNodeAffinity(pref *nodeaffinity.PreferredSchedulingTerms, node *corev1.Node) int64 {
	if pref == nil {
		return 0
	}
	return pref.Score(node)
}

// scoreTaintToleration is the raw number of PreferNoSchedule taints the pod does not
// tolerate (fewer is better).
func scoreTaintToleration(pod *corev1.Pod, node *corev1.Node) int64 {
	var tols []corev1.Toleration
	for _, t := range pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			tols = append(tols, t)
		}
	}
	var n int64
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule && !v1helper.TolerationsTolerateTaint(klog.Background(), tols, t, false) {
			n++
		}
	}
	return n
}

// scoreImageLocality favours nodes that already have the pod's images, scaled by how many
// nodes have them (an image everywhere is no reason to pick one node), as upstream.
func scoreImageLocality(pi *PodInfo, ni *NodeInfo, imageNodes map[string]int, totalNodes int) int64 {
	if totalNodes == 0 || len(ni.Images) == 0 {
		return 0
	}
	var sum int64
	n := len(pi.Images)
	for _, name := range pi.Images {
		if size, ok := ni.Images[name]; ok {
			sum += int64(float64(size) * float64(imageNodes[name]) / float64(totalNodes))
		}
	}
	maxThreshold := imageMaxContainerThreshold * int64(n)
	if sum < imageMinThreshold {
		sum = imageMinThreshold
	} else if sum > maxThreshold {
		sum = maxThreshold
	}
	if maxThreshold <= imageMinThreshold {
		return 0
	}
	return maxNodeScore * (sum - imageMinThreshold) / (maxThreshold - imageMinThreshold)
}

// normalize scales raw scores to 0..100 by the maximum (reverse: fewer is better), as
// upstream's DefaultNormalizeScore.
func normalize(scores []int64, reverse bool) {
	var hi int64
	for _, s := range scores {
		hi = max(hi, s)
	}
	for i, s := range scores {
		switch {
		case hi == 0 && reverse:
			scores[i] = maxNodeScore
		case hi == 0:
			scores[i] = 0
		case reverse:
			scores[i] = maxNodeScore - maxNodeScore*s/hi
		default:
			scores[i] = maxNodeScore * s / hi
		}
	}
}

// normalizeMinMax scales raw scores (which may be negative) to 0..100 between their
// minimum and maximum, as upstream's InterPodAffinity.
func normalizeMinMax(scores []int64) {
	if len(scores) == 0 {
		return
	}
	lo, hi := scores[0], scores[0]
	for _, s := range scores {
		lo, hi = min(lo, s), max(hi, s)
	}
	for i, s := range scores {
		if hi == lo {
			scores[i] = 0
		} else {
			scores[i] = maxNodeScore * (s - lo) / (hi - lo)
		}
	}
}

// normalizeSpread turns the raw soft-spread scores (lower is better) into 0..100 as upstream:
// nodes without the topology keys (ok false) get 0.
func normalizeSpread(scores []int64, ok []bool) {
	var lo, hi int64 = math.MaxInt64, 0
	for i, s := range scores {
		if !ok[i] {
			continue
		}
		lo, hi = min(lo, s), max(hi, s)
	}
	for i, s := range scores {
		switch {
		case !ok[i]:
			scores[i] = 0
		case hi == 0:
			scores[i] = maxNodeScore
		default:
			scores[i] = maxNodeScore * (hi + lo - s) / hi
		}
	}
}

// scoreNodes gives each feasible node its weighted total.
func scoreNodes(c *cycle, nodes []*NodeInfo) []int64 {
	n := len(nodes)
	total := make([]int64, n)
	raw := make([]int64, n)
	addWeighted := func(w int64) {
		for i := range raw {
			total[i] += w * raw[i]
		}
	}
	pod := c.pod.Pod

	for i, ni := range nodes {
		raw[i] = scoreTaintToleration(pod, ni.Node)
	}
	normalize(raw, true)
	addWeighted(weightTaintToleration)

	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
		pref, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		if err == nil {
			for i, ni := range nodes {
				raw[i] = scoreNodeAffinity(pref, ni.Node)
			}
			normalize(raw, false)
			addWeighted(weightNodeAffinity)
		}
	}

	if st := newSpreadState(c.pod, c.snap, corev1.ScheduleAnyway); st != nil {
		ok := make([]bool, n)
		for i, ni := range nodes {
			raw[i], ok[i] = scoreTopologySpread(st, ni)
		}
		normalizeSpread(raw, ok)
		addWeighted(weightTopologySpread)
	}

	if scores := affinityScores(c.pod, c.snap); scores != nil {
		for i, ni := range nodes {
			raw[i] = scoreInterPodAffinity(scores, ni.Node)
		}
		normalizeMinMax(raw)
		addWeighted(weightInterPod)
	}

	for i, ni := range nodes {
		raw[i] = scoreLeastAllocated(c.pod, ni)
	}
	addWeighted(weightLeastAllocated)

	for i, ni := range nodes {
		raw[i] = scoreBalancedAllocation(c.pod, ni)
	}
	addWeighted(weightBalanced)

	for i, ni := range nodes {
		raw[i] = scoreImageLocality(c.pod, ni, c.snap.ImageNodes, len(c.snap.Nodes))
	}
	addWeighted(weightImageLocality)
	return total
}
