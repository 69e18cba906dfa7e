package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// bindingBatchREST serves flotilla.dev/v1alpha1 bindingbatches: several pods/binding
// creates of one namespace in one request. Each binding is authorized, admitted and
// committed as pods/binding would do it (bindingREST), concurrently, and the response
// carries each one's outcome. A batch never binds what its sender could not bind one by one.
type bindingBatchREST struct {
	binding *bindingREST
	authz   authorizer.Authorizer
	admit   admission.Interface // nil: no admission (tests)
	objects admission.ObjectInterfaces
}

var (
	_ rest.Creater              = (*bindingBatchREST)(nil)
	_ rest.Scoper               = (*bindingBatchREST)(nil)
	_ rest.SingularNameProvider = (*bindingBatchREST)(nil)
	_ rest.Storage              = (*bindingBatchREST)(nil)
)

// bindingsInFlightPerBatch bounds the commits one batch has in flight at a time.
const bindingsInFlightPerBatch = 128

var (
	podsBindingGVR = corev1.SchemeGroupVersion.WithResource("pods")
	bindingGVK     = corev1.SchemeGroupVersion.WithKind("Binding")
)

func (*bindingBatchREST) New() runtime.Object     { return &flotillav1alpha1.BindingBatch{} }
func (*bindingBatchREST) Destroy()                {}
func (*bindingBatchREST) NamespaceScoped() bool   { return true }
func (*bindingBatchREST) GetSingularName() string { return "bindingbatch" }

func (r *bindingBatchREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	batch, ok := obj.(*flotillav1alpha1.BindingBatch)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a BindingBatch: %T", obj))
	}
	ns := genericapirequest.NamespaceValue(ctx)
	if ns == "" {
		return nil, apierrors.NewBadRequest("a BindingBatch is created in a namespace: POST /apis/flotilla.dev/v1alpha1/namespaces/<namespace>/bindingbatches")
	}
	batch.Status = flotillav1alpha1.BindingBatchStatus{}
	if errs := validateBindingBatch(batch); len(errs) > 0 {
		return nil, apierrors.NewInvalid(flotillav1alpha1.Kind("BindingBatch"), batch.Name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, batch.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user in the request")
	}
	if options == nil {
		options = &metav1.CreateOptions{}
	}
	// One decision for the namespace serves every pod; a sender allowed only some pods by
	// name (resourceNames) is asked about each.
	allowedAll := r.allowed(ctx, u, ns, "")

	results := make([]flotillav1alpha1.PodBindingResult, len(batch.Spec.Bindings))
	sem := make(chan struct{}, bindingsInFlightPerBatch)
	var wg sync.WaitGroup
	for i, b := range batch.Spec.Bindings {
		results[i].Pod = b.Pod
		if !allowedAll && !r.allowed(ctx, u, ns, b.Pod) {
			setBindingResult(&results[i], apierrors.NewForbidden(corev1.Resource("pods/binding"), b.Pod,
				fmt.Errorf("user %q cannot create pods/binding in the namespace %q", u.GetName(), ns)))
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int, b flotillav1alpha1.PodBinding) {
			defer func() { <-sem; wg.Done() }()
			setBindingResult(&results[i], r.bindOne(ctx, u, ns, b, options))
		}(i, b)
	}
	wg.Wait()
	batch.Namespace = ns
	batch.Status.Results = results
	return batch, nil
}

// bindOne admits and commits one binding as a pods/binding create would.
func (r *bindingBatchREST) bindOne(ctx context.Context, u user.Info, ns string, b flotillav1alpha1.PodBinding, options *metav1.CreateOptions) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: b.Pod, UID: b.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: b.Node},
	}
	var validate rest.ValidateObjectFunc
	if r.admit != nil {
		attrs := admission.NewAttributesRecord(binding, nil, bindingGVK, ns, b.Pod, podsBindingGVR, "binding",
			admission.Create, options, len(options.DryRun) > 0, u)
		if m, ok := r.admit.(admission.MutationInterface); ok && m.Handles(admission.Create) {
			if err := m.Admit(ctx, attrs, r.objects); err != nil {
				return err
			}
		}
		if v, ok := r.admit.(admission.ValidationInterface); ok && v.Handles(admission.Create) {
			validate = func(ctx context.Context, _ runtime.Object) error { return v.Validate(ctx, attrs, r.objects) }
		}
	}
	_, err := r.binding.Create(ctx, b.Pod, binding, validate, options)
	return err
}

func (r *bindingBatchREST) allowed(ctx context.Context, u user.Info, ns, name string) bool {
	if r.authz == nil {
		return true // a server without an authorizer allows every request
	}
	decision, _, err := r.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: "create", Namespace: ns, APIGroup: corev1.GroupName, APIVersion: "v1",
		Resource: "pods", Subresource: "binding", Name: name, ResourceRequest: true,
	})
	return err == nil && decision == authorizer.DecisionAllow
}

// setBindingResult records err (nil: bound) as pods/binding would have answered it.
func setBindingResult(res *flotillav1alpha1.PodBindingResult, err error) {
	if err == nil {
		res.Code = http.StatusCreated
		return
	}
	st := responsewriters.ErrorToAPIStatus(err)
	res.Code, res.Reason, res.Message = st.Code, st.Reason, st.Message
}

func validateBindingBatch(batch *flotillav1alpha1.BindingBatch) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "bindings")
	switch n := len(batch.Spec.Bindings); {
	case n == 0:
		errs = append(errs, field.Required(p, "at least one binding"))
	case n > flotillav1alpha1.MaxBindingsPerBatch:
		errs = append(errs, field.TooMany(p, n, flotillav1alpha1.MaxBindingsPerBatch))
	}
	seen := map[string]bool{}
	for i, b := range batch.Spec.Bindings {
		if b.Pod == "" {
			errs = append(errs, field.Required(p.Index(i).Child("pod"), "the name of the pod to bind"))
		} else if seen[b.Pod] {
			errs = append(errs, field.Duplicate(p.Index(i).Child("pod"), b.Pod))
		}
		seen[b.Pod] = true
		if b.Node == "" {
			errs = append(errs, field.Required(p.Index(i).Child("node"), "the node to bind the pod to"))
		}
	}
	return errs
}
