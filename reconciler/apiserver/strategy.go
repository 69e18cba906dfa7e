package apiserver

import (
	"context"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	genericvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// strategy is the create/update/delete behaviour of one kind: the generic rules of the API
// (status is written only through the status subresource, generation follows spec changes)
// plus the kind's hooks, defaulting having run on decode.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator

	gvk        schema.GroupVersionKind
	namespaced bool
	// hasStatus is true when the kind has a status subresource: the main resource then
	// ignores status changes and the status resource ignores everything else.
	hasStatus bool
	funcs     validation.Funcs
	hasFuncs  bool

	// prepareCreate and prepareUpdate are the kind's own normalisation, run after the
	// generic one.
	prepareCreate func(ctx context.Context, obj runtime.Object)
	prepareUpdate func(ctx context.Context, obj, old runtime.Object)
	// prepareStatusUpdate is the kind's own normalisation of a status update, run after the
	// generic one.
	prepareStatusUpdate func(ctx context.Context, obj, old runtime.Object)
	// resetFields and statusResetFields, when set, replace the fields that the main and the
	// status resource reset (by default status, and spec).
	resetFields, statusResetFields *fieldpath.Set
	// keepStatusOnCreate lets a kind (Node) be created with its status.
	keepStatusOnCreate bool
	// defaultTolerationSeconds is the tolerationSeconds of the not-ready/unreachable
	// tolerations new pods get (negative: none).
	defaultTolerationSeconds int64
}

var (
	_ rest.RESTCreateUpdateStrategy = &strategy{}
	_ rest.RESTDeleteStrategy       = &strategy{}
	_ rest.ResetFieldsStrategy      = &strategy{}
)

func (s *strategy) NamespaceScoped() bool { return s.namespaced }

func (s *strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	if s.hasStatus && !s.keepStatusOnCreate {
		resetField(obj, "Status")
	}
	if hasField(obj, "Spec") {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetGeneration(1)
		}
	}
	mergeStringData(obj)
	if s.prepareCreate != nil {
		s.prepareCreate(ctx, obj)
	}
}

// mergeStringData folds a Secret's write-only stringData into data, overwriting the keys
// it names, as the API does on every write; stringData is never stored or returned.
func mergeStringData(obj runtime.Object) {
	sec, ok := obj.(*corev1.Secret)
	if !ok || len(sec.StringData) == 0 {
		return
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	for k, v := range sec.StringData {
		sec.Data[k] = []byte(v)
	}
	sec.StringData = nil
}

func (s *strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	if s.hasStatus {
		copyField(obj, old, "Status")
	}
	bumpGeneration(obj, old)
	mergeStringData(obj)
	if s.prepareUpdate != nil {
		s.prepareUpdate(ctx, obj, old)
	}
}

func (s *strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	if s.hasFuncs && s.funcs.Create != nil {
		return s.funcs.Create(obj)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("metadata"), err)}
	}
	return genericvalidation.ValidateObjectMetaAccessor(m, s.namespaced, genericvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

func (s *strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if s.hasFuncs && s.funcs.Update != nil {
		return s.funcs.Update(obj, old)
	}
	errs := s.Validate(ctx, obj)
	if m, err := meta.Accessor(obj); err == nil {
		if om, err := meta.Accessor(old); err == nil {
			errs = append(errs, genericvalidation.ValidateObjectMetaAccessorUpdate(m, om, field.NewPath("metadata"))...)
		}
	}
	return errs
}

// WarningsOnCreate and WarningsOnUpdate return the kind's warnings, which the registry adds to
// the response (warning.AddWarning) and kubectl prints as "Warning: ...".
func (s *strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	if s.hasFuncs && s.funcs.Warnings != nil {
		return s.funcs.Warnings(obj, nil)
	}
	return nil
}

func (s *strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	if s.hasFuncs && s.funcs.Warnings != nil {
		return s.funcs.Warnings(obj, old)
	}
	return nil
}

func (s *strategy) Canonicalize(obj runtime.Object)               {}
func (s *strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (s *strategy) AllowUnconditionalUpdate(context.Context) bool { return true }
func (s *strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if s.resetFields != nil {
		return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(s.gvk.GroupVersion().String()): s.resetFields}
	}
	if !s.hasStatus {
		return nil
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.gvk.GroupVersion().String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// statusStrategy is the strategy of a kind's status subresource: only status changes.
type statusStrategy struct {
	*strategy
}

func (s statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	copyField(obj, old, "Spec")
	if m, err := meta.Accessor(obj); err == nil {
		if om, err := meta.Accessor(old); err == nil {
			m.SetGeneration(om.GetGeneration())
		}
	}
	if s.prepareStatusUpdate != nil {
		s.prepareStatusUpdate(ctx, obj, old)
	}
}

// WarningsOnUpdate is quiet: the warnings are about the spec, which a status update keeps.
func (s statusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func (s statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if s.hasFuncs && s.funcs.StatusUpdate != nil {
		return s.funcs.StatusUpdate(obj, old)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return nil
	}
	return genericvalidation.ValidateObjectMetaAccessorUpdate(m, om, field.NewPath("metadata"))
}

func (s statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if s.statusResetFields != nil {
		return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(s.gvk.GroupVersion().String()): s.statusResetFields}
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.gvk.GroupVersion().String()): fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// bumpGeneration keeps metadata.generation server-owned: it increments when the spec changed.
func bumpGeneration(obj, old runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return
	}
	m.SetGeneration(om.GetGeneration())
	ns, os := fieldValue(obj, "Spec"), fieldValue(old, "Spec")
	if !ns.IsValid() || !os.IsValid() {
		return
	}
	if !apiequality.Semantic.DeepEqual(ns.Interface(), os.Interface()) {
		m.SetGeneration(om.GetGeneration() + 1)
	}
}

func fieldValue(obj runtime.Object, name string) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return reflect.Value{}
	}
	v = v.Elem()
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.FieldByName(name)
}

func hasField(obj runtime.Object, name string) bool { return fieldValue(obj, name).IsValid() }

func resetField(obj runtime.Object, name string) {
	f := fieldValue(obj, name)
	if f.IsValid() && f.CanSet() {
		f.Set(reflect.Zero(f.Type()))
	}
}

func copyField(dst, src runtime.Object, name string) {
	d, s := fieldValue(dst, name), fieldValue(src.DeepCopyObject(), name)
	if d.IsValid() && s.IsValid() && d.CanSet() {
		d.Set(s)
	}
}
