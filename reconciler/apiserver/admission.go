package apiserver

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// admissionPlugins returns the admission chain, in the order the plugins run: NamespaceLifecycle
// first (nothing is created in a namespace being deleted), then flotilla's own plugins. Mutating
// plugins run before validating ones whatever their place here (admission.NewChainHandler runs
// every Admit before any Validate).
func admissionPlugins(f informers.SharedInformerFactory, client kubernetes.Interface) ([]admission.Interface, error) {
	nsLifecycle, err := lifecycle.NewLifecycle(sets.New(SystemNamespaces...))
	if err != nil {
		return nil, err
	}
	nsLifecycle.SetExternalKubeClientSet(client)
	nsLifecycle.SetExternalKubeInformerFactory(f)
	if err := nsLifecycle.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("namespace lifecycle admission: %w", err)
	}
	return []admission.Interface{
		nsLifecycle,
		newNodeFeatureValidator(f),
	}, nil
}
