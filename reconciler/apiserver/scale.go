package apiserver

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
)

// scaleAccess reads and writes the replicas of a kind with a scale subresource.
type scaleAccess struct {
	get func(obj runtime.Object) (spec, status int32, selector *metav1.LabelSelector)
	set func(obj runtime.Object, replicas int32)
}

func replicasOrOne(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

var (
	deploymentScale = &scaleAccess{
		get: func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
			d := obj.(*appsv1.Deployment)
			return replicasOrOne(d.Spec.Replicas), d.Status.Replicas, d.Spec.Selector
		},
		set: func(obj runtime.Object, n int32) { obj.(*appsv1.Deployment).Spec.Replicas = &n },
	}
	replicaSetScale = &scaleAccess{
		get: func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
			r := obj.(*appsv1.ReplicaSet)
			return replicasOrOne(r.Spec.Replicas), r.Status.Replicas, r.Spec.Selector
		},
		set: func(obj runtime.Object, n int32) { obj.(*appsv1.ReplicaSet).Spec.Replicas = &n },
	}
	statefulSetScale = &scaleAccess{
		get: func(obj runtime.Object) (int32, int32, *metav1.LabelSelector) {
			s := obj.(*appsv1.StatefulSet)
			return replicasOrOne(s.Spec.Replicas), s.Status.Replicas, s.Spec.Selector
		},
		set: func(obj runtime.Object, n int32) { obj.(*appsv1.StatefulSet).Spec.Replicas = &n },
	}
)

// scaleREST serves <resource>/scale as an autoscaling/v1 Scale.
type scaleREST struct {
	store  *genericregistry.Store
	access *scaleAccess
	gr     schema.GroupResource
}

var (
	_ rest.Patcher                  = &scaleREST{}
	_ rest.GroupVersionKindProvider = &scaleREST{}
)

func (r *scaleREST) New() runtime.Object { return &autoscalingv1.Scale{} }
func (r *scaleREST) Destroy()            {}

func (r *scaleREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return autoscalingv1.SchemeGroupVersion.WithKind("Scale")
}

func (r *scaleREST) toScale(obj runtime.Object) (*autoscalingv1.Scale, error) {
	spec, status, sel := r.access.get(obj)
	selector := ""
	if sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return nil, err
		}
		selector = s.String()
	}
	m := objectMeta(obj)
	return &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: spec},
		Status: autoscalingv1.ScaleStatus{Replicas: status, Selector: selector},
	}, nil
}

func (r *scaleREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.store.Get(ctx, name, options)
	if err != nil {
		return nil, err
	}
	return r.toScale(obj)
}

func (r *scaleREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	obj, _, err := r.store.Update(ctx, name, &scaleUpdatedObjectInfo{name: name, inner: objInfo, rest: r}, rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, options)
	if err != nil {
		return nil, false, err
	}
	s, err := r.toScale(obj)
	return s, false, err
}

// scaleUpdatedObjectInfo turns an update of the Scale into an update of the owning object.
type scaleUpdatedObjectInfo struct {
	name  string
	inner rest.UpdatedObjectInfo
	rest  *scaleREST
}

func (i *scaleUpdatedObjectInfo) Preconditions() *metav1.Preconditions {
	return i.inner.Preconditions()
}

func (i *scaleUpdatedObjectInfo) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	if oldObj == nil {
		return nil, apierrors.NewNotFound(i.rest.gr, i.name)
	}
	oldScale, err := i.rest.toScale(oldObj)
	if err != nil {
		return nil, err
	}
	newObj, err := i.inner.UpdatedObject(ctx, oldScale)
	if err != nil {
		return nil, err
	}
	scale, ok := newObj.(*autoscalingv1.Scale)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an autoscaling/v1 Scale, got %T", newObj))
	}
	if scale.Spec.Replicas < 0 {
		return nil, apierrors.NewInvalid(autoscalingv1.SchemeGroupVersion.WithKind("Scale").GroupKind(), i.name,
			field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), scale.Spec.Replicas, "must be greater than or equal to 0")})
	}
	if rv := scale.ResourceVersion; rv != "" && rv != objectMeta(oldObj).GetResourceVersion() {
		return nil, apierrors.NewConflict(i.rest.gr, i.name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	out := oldObj.DeepCopyObject()
	i.rest.access.set(out, scale.Spec.Replicas)
	return out, nil
}
