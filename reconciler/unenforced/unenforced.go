// Package unenforced lists the kinds the API stores, as every Kubernetes API server does, but
// that nothing in flotilla carries out. The API server answers their creation and update with a
// warning and the unenforced controller records an event on them; both take the list and the
// message from here.
package unenforced

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is a kind that is stored but not carried out.
type Kind struct {
	Resource schema.GroupResource
	// Version is the version the controller watches the kind in.
	Version string
	Kind    string
	// Effect says what does not happen, completing "<Kind> is stored but not enforced by
	// flotilla: ".
	Effect string
}

// GroupVersionResource is the resource of k in k.Version.
func (k Kind) GroupVersionResource() schema.GroupVersionResource {
	return k.Resource.WithVersion(k.Version)
}

// Kinds lists the kinds whose creation and update are answered with a warning, so that
// `kubectl apply` prints "Warning: <Kind> is stored but not enforced by flotilla: ...", and
// that get a NotEnforced event. Remove an entry in the change that implements the kind. None
// is left: the last one, ResourceQuota, is enforced by the API's ResourceQuota admission and
// the resourcequota controller.
var Kinds = []Kind{}

// Message is the warning and event message for k.
func Message(k Kind) string {
	return k.Kind + " is stored but not enforced by flotilla: " + k.Effect
}

// ServiceSettings lists, one message each, the settings of svc that flotilla stores but does
// not carry out; the API server answers with them as warnings and the unenforced controller
// records them as events.
func ServiceSettings(svc *corev1.Service) []string {
	var out []string
	// Topology Aware Routing: upstream's EndpointSlice controller then hints endpoints to
	// zones in proportion to their nodes' CPUs. Its "Auto" is what turns it on.
	for _, key := range []string{corev1.AnnotationTopologyMode, corev1.DeprecatedAnnotationTopologyAwareHints} {
		if v, ok := svc.Annotations[key]; ok && strings.EqualFold(v, "auto") {
			out = append(out, "annotation "+key+": "+v+" is not carried out by flotilla: no endpoint is hinted to a zone by this annotation; set spec.trafficDistribution: PreferSameZone to keep traffic in its zone")
		}
	}
	return out
}
