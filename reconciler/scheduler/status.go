package scheduler

import (
	"fmt"
	"sort"
	"strings"
)

// Code says how a node (or the whole pod) failed.
type Code int

// Codes, as upstream's framework: Unschedulable may change when other pods go away;
// UnschedulableAndUnresolvable needs a change to the node or the pod.
const (
	Unschedulable Code = iota + 1
	UnschedulableAndUnresolvable
)

// Status is the verdict of a filter for one node: nil means the node passes.
type Status struct {
	Code    Code
	Reasons []string
}

func unschedulable(reasons ...string) *Status {
	return &Status{Code: Unschedulable, Reasons: reasons}
}

func unresolvable(reasons ...string) *Status {
	return &Status{Code: UnschedulableAndUnresolvable, Reasons: reasons}
}

// noNodesAvailable is the upstream prefix of every "cannot schedule" message.
const noNodesAvailable = "0/%v nodes are available"

// errNoNodes is upstream's message when the cluster has no node at all.
const errNoNodes = "no nodes available to schedule pods"

// FitError explains why a pod fits no node, in the upstream message shape.
type FitError struct {
	NumAllNodes int
	// PreFilterMsg is set when the pod failed before any node was looked at.
	PreFilterMsg string
	// NodeReasons holds, per node, the reasons of the first filter that rejected it.
	NodeReasons map[string][]string
}

// Error renders `0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2
// Insufficient cpu.`: every distinct reason with the number of nodes that gave it, sorted as
// strings like upstream does.
func (f *FitError) Error() string {
	if f.NumAllNodes == 0 && f.PreFilterMsg == "" {
		return errNoNodes
	}
	msg := fmt.Sprintf(noNodesAvailable+":", f.NumAllNodes)
	if f.PreFilterMsg != "" {
		return msg + " " + f.PreFilterMsg + "."
	}
	counts := map[string]int{}
	for _, reasons := range f.NodeReasons {
		for _, r := range reasons {
			counts[r]++
		}
	}
	if len(counts) == 0 {
		return msg[:len(msg)-1] + "."
	}
	parts := make([]string, 0, len(counts))
	for r, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	return msg + " " + strings.Join(parts, ", ") + "."
}
