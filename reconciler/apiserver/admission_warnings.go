package apiserver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"

	"github.com/flotilla-dev/flotilla/reconciler/unenforced"
)

// UnenforcedKindsPluginName names the admission plugin that warns about unenforced kinds.
const UnenforcedKindsPluginName = "FlotillaUnenforcedKinds"

// unenforcedKindsWarner is a validating admission plugin that adds the warning of
// unenforced.Kinds to the CREATE and UPDATE of those kinds (remove an entry there when the
// kind is implemented), and those of unenforced.ServiceSettings to a Service's. It never
// refuses anything.
type unenforcedKindsWarner struct {
	*admission.Handler
}

var _ admission.ValidationInterface = (*unenforcedKindsWarner)(nil)

func newUnenforcedKindsWarner() *unenforcedKindsWarner {
	return &unenforcedKindsWarner{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// Validate implements admission.ValidationInterface.
func (w *unenforcedKindsWarner) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	for _, k := range unenforced.Kinds {
		if a.GetResource().GroupResource() == k.Resource {
			warning.AddWarning(ctx, "", unenforced.Message(k))
		}
	}
	if svc, ok := a.GetObject().(*corev1.Service); ok {
		for _, msg := range unenforced.ServiceSettings(svc) {
			warning.AddWarning(ctx, "", msg)
		}
	}
	return nil
}
