package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of Flotilla's own objects.
const GroupName = "flotilla.dev"

// SchemeGroupVersion is the group version the types of this package are registered under.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder collects the functions that add this package's types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers GitSource, GitSourceList and BindingBatch (and the meta types
	// of the group version) in a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified GroupResource of an unqualified resource ("gitsources").
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// Kind returns the group-qualified GroupKind of an unqualified kind ("GitSource").
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&GitSource{},
		&GitSourceList{},
		&BindingBatch{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
