package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
)

// namespaceREST deletes namespaces in two steps, as Kubernetes does: the first delete marks
// the namespace Terminating; the namespace controller empties it, clears spec.finalizers
// through namespaces/finalize and deletes it again, which then removes it.
type namespaceREST struct {
	*store
}

func (r *namespaceREST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	obj, err := r.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	ns := obj.(*corev1.Namespace)
	if options == nil {
		options = metav1.NewDeleteOptions(0)
	}
	if options.Preconditions != nil {
		if uid := options.Preconditions.UID; uid != nil && *uid != ns.UID {
			return nil, false, apierrors.NewConflict(corev1.Resource("namespaces"), name, fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *uid, ns.UID))
		}
		if rv := options.Preconditions.ResourceVersion; rv != nil && *rv != ns.ResourceVersion {
			return nil, false, apierrors.NewConflict(corev1.Resource("namespaces"), name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *rv, ns.ResourceVersion))
		}
	}
	if ns.DeletionTimestamp == nil && len(ns.Spec.Finalizers) > 0 {
		if deleteValidation != nil {
			if err := deleteValidation(ctx, ns); err != nil {
				return nil, false, err
			}
		}
		if len(options.DryRun) > 0 {
			return ns, false, nil
		}
		key, err := r.KeyFunc(ctx, name)
		if err != nil {
			return nil, false, err
		}
		out := &corev1.Namespace{}
		err = r.Storage.GuaranteedUpdate(ctx, key, out, false, &storage.Preconditions{UID: &ns.UID},
			storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
				cur := obj.(*corev1.Namespace)
				if cur.DeletionTimestamp == nil {
					now := metav1.Now()
					cur.DeletionTimestamp = &now
				}
				cur.Status.Phase = corev1.NamespaceTerminating
				return cur, nil
			}), false, nil)
		if err != nil {
			return nil, false, err
		}
		return out, false, nil
	}
	if len(ns.Spec.Finalizers) > 0 {
		// Still being emptied by the namespace controller.
		return ns, false, nil
	}
	return r.store.Delete(ctx, name, deleteValidation, options)
}

// finalizeREST serves namespaces/finalize: only spec.finalizers change.
type finalizeREST struct {
	store *genericregistry.Store
}

func newFinalizeREST(main *genericregistry.Store, strat *strategy) *finalizeREST {
	st := *main
	st.UpdateStrategy = finalizeStrategy{strat}
	st.CreateStrategy = nil
	return &finalizeREST{store: &st}
}

func (r *finalizeREST) New() runtime.Object { return &corev1.Namespace{} }
func (r *finalizeREST) Destroy()            {}

func (r *finalizeREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

type finalizeStrategy struct {
	*strategy
}

func (finalizeStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	finalizers := ns.Spec.Finalizers
	*ns = *oldNS.DeepCopy()
	ns.Spec.Finalizers = finalizers
}

func (finalizeStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	var errs field.ErrorList
	for i, f := range obj.(*corev1.Namespace).Spec.Finalizers {
		if f == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "finalizers").Index(i), "a finalizer name"))
		}
	}
	return errs
}
