// Package validation holds the per-kind validation of every object the API server stores,
// written to match upstream's rules and error messages (Kubernetes' own validation lives in
// k8s.io/kubernetes, which we do not import).
package validation

import (
	"net/netip"
	"time"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Funcs validates one kind. Create is required; Update and StatusUpdate may be nil, in which
// case the server validates updates with Create on the new object. Warnings, when set, lists
// the warnings the API answers to a create (old nil) or an update of the main resource, for
// an object that is valid but not what its author likely wants.
type Funcs struct {
	Create       func(obj runtime.Object) field.ErrorList
	Update       func(obj, old runtime.Object) field.ErrorList
	StatusUpdate func(obj, old runtime.Object) field.ErrorList
	Warnings     func(obj, old runtime.Object) []string
}

// Options carries the site settings that validation depends on.
type Options struct {
	// ServiceCIDR is the range ClusterIPs are allocated from (default 10.96.0.0/12).
	ServiceCIDR netip.Prefix
	// NodePortMin and NodePortMax bound spec.ports[].nodePort (default 30000-32767).
	NodePortMin, NodePortMax int32
	// GitSourceMinInterval is the shortest spec.interval of a GitSource (zero: the default,
	// 10s; tests lower it).
	GitSourceMinInterval time.Duration
}

func (o Options) gitSourceMinInterval() time.Duration {
	if o.GitSourceMinInterval <= 0 {
		return flotillav1alpha1.MinInterval
	}
	return o.GitSourceMinInterval
}

// DefaultOptions returns the site defaults, those of upstream: Service CIDR 10.96.0.0/12 and
// NodePorts 30000-32767.
func DefaultOptions() Options {
	return Options{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12"), NodePortMin: 30000, NodePortMax: 32767,
		GitSourceMinInterval: flotillav1alpha1.MinInterval}
}

// For returns the validation for a kind, and false when the kind has none.
func For(gk schema.GroupKind, opts Options) (Funcs, bool) {
	if f, ok := coreValidators(opts)[gk]; ok {
		return f, true
	}
	if f, ok := schedulingNodeAutoscalingValidators()[gk]; ok {
		return f, true
	}
	f, ok := groupValidators(opts)[gk]
	return f, ok
}
