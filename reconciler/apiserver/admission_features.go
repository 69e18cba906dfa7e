package apiserver

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"
)

// NodeDeclaredFeatureValidatorName is the admission plugin's upstream name.
const NodeDeclaredFeatureValidatorName = "NodeDeclaredFeatureValidator"

// nodeFeatureValidator is the NodeDeclaredFeatureValidator admission plugin, as upstream: a Pod
// UPDATE of a bound pod that needs a node feature (an in-place resize of a non-sidecar init
// container, for example) is refused unless the pod's Node declares that feature in
// status.declaredFeatures. Requirements are inferred for the Node's agent version, so features
// past their MaxVersion are not checked.
//
// Pod spec updates that need a declared feature in the v1.37 registry (resource and volume
// changes) are also refused by pod update validation, which runs first, as long as
// pods/resize is not served; the plugin is the gate for the day it is.
type nodeFeatureValidator struct {
	*admission.Handler
	nodes  corelisters.NodeLister
	synced func() bool
}

var _ admission.ValidationInterface = (*nodeFeatureValidator)(nil)

// newNodeFeatureValidator reads Nodes from the API server's own informers.
func newNodeFeatureValidator(f informers.SharedInformerFactory) *nodeFeatureValidator {
	inf := f.Core().V1().Nodes()
	v := &nodeFeatureValidator{Handler: admission.NewHandler(admission.Update), nodes: inf.Lister()}
	v.synced = inf.Informer().HasSynced
	v.SetReadyFunc(v.synced)
	return v
}

// Validate implements admission.ValidationInterface.
func (v *nodeFeatureValidator) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetOperation() != admission.Update || a.GetResource().GroupResource() != corev1.Resource("pods") {
		return nil
	}
	pod, ok := a.GetObject().(*corev1.Pod)
	if !ok {
		return nil
	}
	old, ok := a.GetOldObject().(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil
	}
	if len(old.Spec.InitContainers) != len(pod.Spec.InitContainers) || len(old.Spec.Containers) != len(pod.Spec.Containers) ||
		len(old.Spec.Volumes) != len(pod.Spec.Volumes) {
		return nil // pod update validation refuses these with its own message
	}
	node, err := v.nodes.Get(pod.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("read node %s to check its declared features: %w", pod.Spec.NodeName, err))
	}
	missing, err := updateNeedsFeatures(old, pod, node)
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	if len(missing) > 0 {
		return admission.NewForbidden(a, fmt.Errorf("node %s does not declare the feature(s) this update needs: %s; "+
			"leave the fields as they are, or recreate the pod so that it is scheduled on a host that declares them",
			node.Name, strings.Join(missing, ", ")))
	}
	return nil
}

// updateNeedsFeatures returns the features the old -> pod update needs that node does not declare.
func updateNeedsFeatures(old, pod *corev1.Pod, node *corev1.Node) ([]string, error) {
	target, err := version.ParseGeneric(node.Status.NodeInfo.KubeletVersion)
	if err != nil {
		target = version.MajorMinor(1, 37)
	}
	fw := nodedeclaredfeatures.DefaultFramework
	reqs, err := fw.InferForPodUpdate(&ndftypes.PodInfo{Spec: &old.Spec, Status: &old.Status},
		&ndftypes.PodInfo{Spec: &pod.Spec, Status: &pod.Status}, target)
	if err != nil {
		return nil, fmt.Errorf("the update's feature requirements for node %s: %w", node.Name, err)
	}
	res, err := fw.MatchNode(reqs, node)
	if err != nil {
		return nil, err
	}
	return res.UnsatisfiedRequirements, nil
}
