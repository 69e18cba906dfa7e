// Package localpv is what the flotilla.dev/local provisioner (reconciler/controllers/localvolume),
// the API server (the Node authorizer, reconciler/authz/node, and NodeRestriction admission)
// and the node agents (nodes/agent) agree on about local volumes. It depends on the API types
// only, so that each of them can import it.
//
// The provisioner labels each volume it creates with the node it lives on (LabelNode) and
// holds it with the finalizer Finalizer. Once such a volume is deleted, the node agent of that
// node, which lists and watches the volumes labelled with its own name (NodeSelector), removes
// the volume's directory and then the finalizer; the API server lets a host do exactly that
// and nothing more with PersistentVolumes.
package localpv

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
)

const (
	// Provisioner is the provisioner name of the classes of local volumes.
	Provisioner = "flotilla.dev/local"
	// DefaultPath is the directory under which volumes live when the class has no "path"
	// parameter.
	DefaultPath = "/var/lib/flotilla/volumes"
	// ParamPath is the StorageClass parameter naming the volumes' parent directory.
	ParamPath = "path"
	// AnnProvisionedBy marks a volume with the provisioner that created it, as upstream.
	AnnProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// LabelNode names the node whose disk holds the volume's directory.
	LabelNode = "flotilla.dev/local-volume-node"
	// Finalizer holds a deleted volume until the node agent of LabelNode has removed its
	// directory (or, for reclaim policy Retain, seen that it keeps it).
	Finalizer = "flotilla.dev/local-volume-cleanup"
)

// Root returns the directory under which the volumes of a class with parameters params live:
// its "path" parameter, cleaned, or DefaultPath. The path must be absolute.
func Root(params map[string]string) (string, error) {
	p, ok := params[ParamPath]
	if !ok {
		return DefaultPath, nil
	}
	if !path.IsAbs(p) {
		return "", fmt.Errorf("parameter %q must be an absolute path, got %q", ParamPath, p)
	}
	return path.Clean(p), nil
}

// VolumePath is the directory of the volume named name under root.
func VolumePath(root, name string) string {
	return path.Join(root, name)
}

// Dir returns the directory of pv on its node: spec.local.path, or spec.hostPath.path; ""
// for any other source.
func Dir(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	}
	return ""
}

// NodeSelector is the label selector of the volumes on node.
func NodeSelector(node string) string {
	return LabelNode + "=" + node
}

// AffinityNode returns the node pv is pinned to by a required node affinity of one term on
// kubernetes.io/hostname with one value, as the provisioner makes it.
func AffinityNode(pv *corev1.PersistentVolume) (string, bool) {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 {
		return "", false
	}
	for _, e := range na.Required.NodeSelectorTerms[0].MatchExpressions {
		if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] != "" {
			return e.Values[0], true
		}
	}
	return "", false
}

// HasFinalizer reports whether pv carries Finalizer.
func HasFinalizer(pv *corev1.PersistentVolume) bool {
	for _, f := range pv.Finalizers {
		if f == Finalizer {
			return true
		}
	}
	return false
}

// WithoutFinalizer returns finalizers without Finalizer, in order.
func WithoutFinalizer(finalizers []string) []string {
	var out []string
	for _, f := range finalizers {
		if f != Finalizer {
			out = append(out, f)
		}
	}
	return out
}
