package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MaxBindingsPerBatch bounds spec.bindings of one BindingBatch.
const MaxBindingsPerBatch = 1000

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BindingBatch binds several pods of its namespace to nodes in one request: create-only,
// never stored (as a LocalSubjectAccessReview). Each binding is carried out as pods/binding
// would carry it out (the sender must be allowed to create pods/binding in the namespace,
// admission sees each one as a pods/binding create, and it commits only while the pod is
// unbound), and status.results says what became of each. Flotilla's scheduler sends its
// bindings this way: one request instead of one per pod.
type BindingBatch struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object's metadata; only the namespace is used.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec lists the bindings to make.
	Spec BindingBatchSpec `json:"spec"`

	// Status is the outcome of each binding, in the order of spec.bindings.
	// +optional
	Status BindingBatchStatus `json:"status,omitempty"`
}

// BindingBatchSpec lists the bindings of a BindingBatch.
type BindingBatchSpec struct {
	// Bindings to make, at most 1000, each pod named once.
	// +listType=atomic
	Bindings []PodBinding `json:"bindings"`
}

// PodBinding binds one pod to one node.
type PodBinding struct {
	// Pod is the name of the pod in the batch's namespace.
	// +required
	Pod string `json:"pod"`

	// UID, when set, binds the pod only if it is still this object (a precondition, as
	// metadata.uid of a Binding).
	// +optional
	UID types.UID `json:"uid,omitempty"`

	// Node is the name of the node to bind the pod to.
	// +required
	Node string `json:"node"`
}

// BindingBatchStatus reports the outcome of each binding of a BindingBatch.
type BindingBatchStatus struct {
	// Results has one entry per spec.bindings entry, in the same order.
	// +optional
	// +listType=atomic
	Results []PodBindingResult `json:"results,omitempty"`
}

// PodBindingResult is the outcome of one binding: what pods/binding would have answered.
type PodBindingResult struct {
	// Pod is the name of the pod.
	Pod string `json:"pod"`

	// Code is the HTTP status code pods/binding would have answered: 201 when the pod was
	// bound, 409 when it was already bound or is being deleted, 404 when it does not exist
	// (or is no longer the object spec.bindings[].uid names), others for admission errors.
	Code int32 `json:"code"`

	// Reason is the machine-readable reason of a failure (metav1.StatusReason).
	// +optional
	Reason metav1.StatusReason `json:"reason,omitempty"`

	// Message says why the binding failed.
	// +optional
	Message string `json:"message,omitempty"`
}
