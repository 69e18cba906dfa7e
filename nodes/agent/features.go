package agent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/extendwebsocketstokubelet"
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"
)

// implementedFeatures are the features of the node-declared-features registry (KEP-5328) this
// agent implements: exec and attach over WebSockets are served by the agent itself
// (server.go). Features it does not implement (restartPolicyRules RestartAllContainers,
// in-place resize, DRA, user namespaces) are absent, so the node does not declare them and pods
// that need them are kept off it.
var implementedFeatures = ndftypes.FeatureGateMap{
	extendwebsocketstokubelet.ExtendWebSocketsToKubeletFeatureGate: true,
}

// DeclaredFeatures returns the Node's status.declaredFeatures: the implemented features of the
// registry, sorted, without those past their
// MaxVersion for an agent of agentVersion (e.g. "v1.37.2"). It is computed once at start.
func DeclaredFeatures(agentVersion string) []string {
	return nodedeclaredfeatures.DefaultFramework.DiscoverNodeFeatures(&ndftypes.NodeConfiguration{
		FeatureGates: implementedFeatures, Version: parseVersion(agentVersion),
	})
}

// builtFor is the Kubernetes version of the k8s.io modules the agent is built with; it stands
// in for a version string that does not parse (a build without version stamping).
var builtFor = version.MajorMinor(1, 37)

func parseVersion(s string) *version.Version {
	if v, err := version.ParseGeneric(s); err == nil {
		return v
	}
	return builtFor
}

// MissingFeatures is the node-side admission of declared features: the features the
// pod needs to run, as the scheduler infers them, that declared lacks. A pod bound by hand
// (spec.nodeName) skips the scheduler's filter; this is the final safeguard.
func MissingFeatures(pod *corev1.Pod, declared []string, agentVersion string) ([]string, error) {
	fw := nodedeclaredfeatures.DefaultFramework
	reqs, err := fw.InferForPodScheduling(&ndftypes.PodInfo{Spec: &pod.Spec, Status: &pod.Status}, parseVersion(agentVersion))
	if err != nil {
		return nil, err
	}
	res, err := fw.MatchNodeFeatureSet(reqs, fw.TryMap(declared))
	if err != nil {
		return nil, err
	}
	return res.UnsatisfiedRequirements, nil
}

// featureRejection is the pod's Failed reason and message when MissingFeatures is not empty.
func featureRejection(node string, missing []string) (reason, message string) {
	return "NodeDeclaredFeatures", fmt.Sprintf("node %s does not declare the feature(s) this pod needs: %s; "+
		"the pod can run only on a host whose agent supports them", node, strings.Join(missing, ", "))
}
