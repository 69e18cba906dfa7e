package scheduler

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// Filter reasons, worded as upstream's plugins so messages read the same.
const (
	reasonUnschedulable       = "node(s) were unschedulable"
	reasonNodeName            = "node(s) didn't match the requested node name"
	reasonNodeAffinity        = "node(s) didn't match Pod's node affinity/selector"
	reasonPorts               = "node(s) didn't have free ports for the requested pod ports"
	reasonTooManyPods         = "Too many pods"
	reasonSpread              = "node(s) didn't match pod topology spread constraints"
	reasonSpreadMissingLabel  = "node(s) didn't match pod topology spread constraints (missing required label)"
	reasonAffinity            = "node(s) didn't match pod affinity rules"
	reasonAntiAffinity        = "node(s) didn't match pod anti-affinity rules"
	reasonExistingAntiAffinty = "node(s) didn't satisfy existing pods anti-affinity rules"
	reasonNodeNotFound        = "node(s) not found"
	reasonNotInPreFilter      = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
)

// taintUnschedulable is the taint equivalent of spec.unschedulable; a pod tolerating it may
// go to a cordoned node (DaemonSets do).
const taintUnschedulable = "node.kubernetes.io/unschedulable"

// filterFunc decides whether the cycle's pod may go to ni.
type filterFunc func(c *cycle, ni *NodeInfo) *Status

// namedFilter is a filter plugin.
type namedFilter struct {
	name string
	fn   filterFunc
}

// filters run in upstream's order; a node stops at its first failure, so a node reports the
// reasons of one plugin only (and the message counts nodes per reason).
var filters = []namedFilter{
	{"NodeUnschedulable", filterNodeUnschedulable},
	{"NodeName", filterNodeName},
	{"TaintToleration", filterTaintToleration},
	{"NodeAffinity", filterNodeAffinity},
	{"NodeDeclaredFeatures", filterDeclaredFeatures},
	{"NodePorts", filterNodePorts},
	{"NodeResourcesFit", filterResourcesFit},
	{"VolumeBinding", filterVolumeBinding},
	{"PodTopologySpread", filterTopologySpread},
	{"InterPodAffinity", filterInterPodAffinity},
}

// runFilters returns nil when every filter accepts ni.
func runFilters(c *cycle, ni *NodeInfo) *Status {
	if ni.Node == nil {
		return unresolvable(reasonNodeNotFound)
	}
	for _, f := range filters {
		if st := f.fn(c, ni); st != nil {
			return st
		}
	}
	return nil
}

func filterNodeUnschedulable(c *cycle, ni *NodeInfo) *Status {
	if !ni.Node.Spec.Unschedulable {
		return nil
	}
	taint := &corev1.Taint{Key: taintUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if v1helper.TolerationsTolerateTaint(klog.Background(), c.pod.Pod.Spec.Tolerations, taint, false) {
		return nil
	}
	return unresolvable(reasonUnschedulable)
}

func filterNodeName(c *cycle, ni *NodeInfo) *Status {
	if n := c.pod.Pod.Spec.NodeName; n != "" && n != ni.Node.Name {
		return unresolvable(reasonNodeName)
	}
	return nil
}

func filterTaintToleration(c *cycle, ni *NodeInfo) *Status {
	taint, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), ni.Node.Spec.Taints, c.pod.Pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
	if !untolerated {
		return nil
	}
	return unresolvable(fmt.Sprintf("node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value))
}

func filterNodeAffinity(c *cycle, ni *NodeInfo) *Status {
	ok, err := c.pod.requiredNodeAffinity.Match(ni.Node)
	if err != nil {
		return unresolvable(err.Error())
	}
	if !ok {
		return unresolvable(reasonNodeAffinity)
	}
	return nil
}

// filterDeclaredFeatures keeps a pod off nodes whose agent does not declare a feature the
// pod's spec relies on, as inferred by the node-declared-features framework.
func filterDeclaredFeatures(c *cycle, ni *NodeInfo) *Status {
	if c.features.IsEmpty() {
		return nil
	}
	res, err := nodedeclaredfeatures.DefaultFramework.MatchNode(c.features, ni.Node)
	if err != nil {
		return unresolvable(err.Error())
	}
	if res.IsMatch {
		return nil
	}
	missing := append([]string(nil), res.UnsatisfiedRequirements...)
	sort.Strings(missing)
	return unresolvable("node(s) didn't declare required features: " + strings.Join(missing, ", "))
}

func filterNodePorts(c *cycle, ni *NodeInfo) *Status {
	for _, want := range c.pod.HostPorts {
		if portConflicts(ni.UsedPorts, want) {
			return unschedulable(reasonPorts)
		}
	}
	return nil
}

// portConflicts applies upstream's rule: the same protocol and port conflict when either
// side listens on every address (0.0.0.0) or both use the same address.
func portConflicts(used map[hostPort]int, want hostPort) bool {
	if want.IP == "0.0.0.0" {
		for hp := range used {
			if hp.Port == want.Port && hp.Protocol == want.Protocol {
				return true
			}
		}
		return false
	}
	if used[want] > 0 {
		return true
	}
	return used[hostPort{IP: "0.0.0.0", Protocol: want.Protocol, Port: want.Port}] > 0
}

// filterResourcesFit checks the pod's requests (init containers by the max rule, sidecars,
// overhead: see NewPodInfo) against what is left of the node's allocatable. Like upstream it
// reports every insufficient resource, and checks a resource only when the pod asks for it.
func filterResourcesFit(c *cycle, ni *NodeInfo) *Status {
	var reasons []string
	if int64(len(ni.Pods))+1 > ni.Allocatable.Pods {
		reasons = append(reasons, reasonTooManyPods)
	}
	req, alloc, used := c.pod.Requests, ni.Allocatable, ni.Requested
	if req.MilliCPU > 0 && req.MilliCPU > alloc.MilliCPU-used.MilliCPU {
		reasons = append(reasons, "Insufficient cpu")
	}
	if req.Memory > 0 && req.Memory > alloc.Memory-used.Memory {
		reasons = append(reasons, "Insufficient memory")
	}
	if req.EphemeralStorage > 0 && req.EphemeralStorage > alloc.EphemeralStorage-used.EphemeralStorage {
		reasons = append(reasons, "Insufficient ephemeral-storage")
	}
	if len(req.Scalar) > 0 {
		var names []string
		for name, v := range req.Scalar {
			if v > 0 && v > alloc.Scalar[name]-used.Scalar[name] {
				names = append(names, "Insufficient "+string(name))
			}
		}
		sort.Strings(names)
		reasons = append(reasons, names...)
	}
	if len(reasons) > 0 {
		return unschedulable(reasons...)
	}
	return nil
}
