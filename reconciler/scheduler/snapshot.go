package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/version"
	basever "k8s.io/component-base/version"
	"k8s.io/component-helpers/nodedeclaredfeatures"
)

// VolumeSource gives the claims and volumes the VolumeBinding filter needs.
type VolumeSource interface {
	// Claim returns the claim or nil when it does not exist.
	Claim(namespace, name string) *corev1.PersistentVolumeClaim
	// Volume returns the volume or nil when it does not exist.
	Volume(name string) *corev1.PersistentVolume
	// Volumes lists every volume.
	Volumes() []*corev1.PersistentVolume
}

// Snapshot is what one scheduling decision looks at: every node with the pods counted on it.
// The scheduler holds the cache read-locked while a Snapshot is in use.
type Snapshot struct {
	Nodes  []*NodeInfo
	byName map[string]*NodeInfo
	// ImageNodes counts, per normalized image name, the nodes that have it.
	ImageNodes map[string]int
	// NamespaceLabels returns a namespace's labels (nil: none known).
	NamespaceLabels func(ns string) labels.Set
	// Volumes looks up claims and volumes (nil: the pod's claims are reported missing).
	Volumes VolumeSource
	// PodsWithAffinity is the number of counted pods that have pod (anti-)affinity terms.
	PodsWithAffinity int
}

// NewSnapshot builds a snapshot over nodes (for tests and the cache).
func NewSnapshot(nodes ...*NodeInfo) *Snapshot {
	s := &Snapshot{Nodes: nodes, byName: map[string]*NodeInfo{}, ImageNodes: map[string]int{}}
	for _, ni := range nodes {
		s.byName[ni.Name()] = ni
		s.PodsWithAffinity += ni.PodsWithAffinity
		for img := range ni.Images {
			s.ImageNodes[img]++
		}
	}
	return s
}

// Get returns the named node's info or nil.
func (s *Snapshot) Get(name string) *NodeInfo { return s.byName[name] }

// AddPod counts pi on the named node, as the cache counts a pod it assumes there, so that the
// next decision made on s sees it (its requests, ports and affinity terms). It reports false
// when s has no such node. A simulation (flotilla plan) places pod after pod on one snapshot
// this way.
func (s *Snapshot) AddPod(node string, pi *PodInfo) bool {
	ni := s.byName[node]
	if ni == nil || ni.Node == nil {
		return false
	}
	before := ni.PodsWithAffinity
	ni.AddPod(pi)
	s.PodsWithAffinity += ni.PodsWithAffinity - before
	return true
}

// featureVersion is the version feature requirements are inferred for: this binary's
// Kubernetes API level, which every host of a site runs.
var featureVersion = version.MustParse(basever.DefaultKubeBinaryVersion + ".0")

// cycle is the per-pod state computed once before the nodes are filtered (upstream's
// PreFilter/PreScore results).
type cycle struct {
	pod  *PodInfo
	snap *Snapshot

	spread   *spreadState
	affinity *affinityState
	volumes  *volumeState
	features nodedeclaredfeatures.FeatureSet
	// nodeNames, when not nil, are the only nodes the pod's required node affinity allows
	// by name (matchFields metadata.name In, as DaemonSet pods have): the others are not
	// filtered at all, as upstream's PreFilterResult.
	nodeNames []string
	// preFilter is set when the pod cannot fit any node whatever the node.
	preFilter *Status
}

// newCycle runs the pre-filter computations for pod on snap.
func newCycle(pod *PodInfo, snap *Snapshot) *cycle {
	c := &cycle{pod: pod, snap: snap}
	if pod.parseErr != nil {
		c.preFilter = unresolvable(pod.parseErr.Error())
		return c
	}
	var ok bool
	if c.nodeNames, ok = affinityNodeNames(pod.Pod); !ok {
		c.preFilter = unresolvable(reasonNodeAffinity)
		return c
	}
	c.spread = newSpreadState(pod, snap, corev1.DoNotSchedule)
	c.affinity = newAffinityState(pod, snap)
	var st *Status
	c.volumes, st = newVolumeState(pod.Pod, snap.Volumes)
	if st != nil {
		c.preFilter = st
		return c
	}
	fs, err := nodedeclaredfeatures.DefaultFramework.InferForPodScheduling(
		&nodedeclaredfeatures.PodInfo{Spec: &pod.Pod.Spec, Status: &pod.Pod.Status}, featureVersion)
	if err != nil {
		c.preFilter = unresolvable(err.Error())
		return c
	}
	c.features = fs
	return c
}

// affinityNodeNames returns the node names the pod's required node affinity pins it to with
// matchFields metadata.name In (nil: no such pin); ok is false when the pin allows no node.
func affinityNodeNames(pod *corev1.Pod) (names []string, ok bool) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, true
	}
	union := sets.New[string]()
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var term sets.Set[string]
		for _, r := range t.MatchFields {
			if r.Key == metav1.ObjectNameField && r.Operator == corev1.NodeSelectorOpIn {
				if term == nil {
					term = sets.New(r.Values...)
				} else {
					term = term.Intersection(sets.New(r.Values...))
				}
			}
		}
		if term == nil {
			return nil, true // terms are ORed: this one allows any name
		}
		union = union.Union(term)
	}
	if union.Len() == 0 {
		return nil, false
	}
	return sets.List(union), true
}
