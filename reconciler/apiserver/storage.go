package apiserver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/printers"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// store is a generic registry Store that also reports kubectl's short names and categories.
type store struct {
	*genericregistry.Store
	shortNames []string
	categories []string
}

func (s *store) ShortNames() []string { return s.shortNames }
func (s *store) Categories() []string { return s.categories }

var (
	_ rest.ShortNamesProvider = &store{}
	_ rest.CategoriesProvider = &store{}
)

// newStrategy builds the strategy of a resource from its validation and kind hooks.
func newStrategy(scheme *runtime.Scheme, r resource, opts validation.Options) *strategy {
	s := &strategy{
		ObjectTyper:   scheme,
		NameGenerator: names.SimpleNameGenerator,
		gvk:           r.gvk(),
		namespaced:    r.namespaced,
		hasStatus:     r.status,
	}
	s.funcs, s.hasFuncs = validation.For(r.gvk().GroupKind(), opts)
	applyKindHooks(s)
	return s
}

// DefaultEventTTL is how long an Event is kept after its last write, as in Kubernetes.
const DefaultEventTTL = time.Hour

// eventResources are the kinds kept for a time only: both API groups' Events.
var eventResources = map[schema.GroupResource]bool{
	{Resource: "events"}:                         true,
	{Group: "events.k8s.io", Resource: "events"}: true,
}

// eventTTLFunc gives every write of an Event a lease of ttl (DefaultEventTTL when 0): etcd
// deletes the Event when no write has renewed it in that time. Without it the Events of a
// site that runs for months fill its etcd.
func eventTTLFunc(ttl time.Duration) func(runtime.Object, uint64, bool) (uint64, error) {
	if ttl <= 0 {
		ttl = DefaultEventTTL
	}
	seconds := uint64(ttl.Seconds())
	if seconds == 0 {
		seconds = 1
	}
	return func(runtime.Object, uint64, bool) (uint64, error) { return seconds, nil }
}

// newStore creates the registry Store of one resource.
func newStore(scheme *runtime.Scheme, r resource, optsGetter generic.RESTOptionsGetter, vopts validation.Options) (*genericregistry.Store, *strategy, error) {
	strat := newStrategy(scheme, r, vopts)
	var deleteStrategy rest.RESTDeleteStrategy = strat
	if r.kind == "Pod" && r.gv.Group == "" {
		deleteStrategy = podDeleteStrategy{strat}
	}
	s := &genericregistry.Store{
		NewFunc:                   r.newObj,
		NewListFunc:               r.newList,
		DefaultQualifiedResource:  r.groupResource(),
		SingularQualifiedResource: r.gv.WithResource(r.singular).GroupResource(),
		CreateStrategy:            strat,
		UpdateStrategy:            strat,
		DeleteStrategy:            deleteStrategy,
		ResetFieldsStrategy:       strat,
		TableConvertor:            printers.TableConvertor(r.groupResource()),
	}
	if r.groupResource() == corev1.Resource("namespaces") {
		// A Terminating namespace stays until the namespace controller has emptied it and
		// cleared spec.finalizers: an update must not remove it early.
		s.ShouldDeleteDuringUpdate = func(ctx context.Context, key string, obj, existing runtime.Object) bool {
			ns, ok := obj.(*corev1.Namespace)
			return ok && len(ns.Spec.Finalizers) == 0 && genericregistry.ShouldDeleteDuringUpdate(ctx, key, obj, existing)
		}
	}
	opts := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: attrFuncFor(r)}
	if ix, ok := watchIndexFor(r); ok {
		ix.apply(s, opts)
	}
	if err := s.CompleteWithOptions(opts); err != nil {
		return nil, nil, fmt.Errorf("storage for %s: %w", r.groupResource(), err)
	}
	return s, strat, nil
}

// watchIndex is a selectable field the watch cache indexes, as kube-apiserver indexes the same
// ones: a watch or list whose field selector requires one value of it (the node agents' pods,
// spec.nodeName=<host>, and their own Node) is served from the watch cache's index, and a
// change is dispatched only to the watchers of its old and new values, not offered to every
// watcher of the resource. With an index, the cacher also gives a watcher that does not
// select by it a buffer of up to 1,000 events rather than 100, so that a busy client (the
// scheduler's informer of every pod during a burst of creates and bindings) is not cut off
// and sent the events since its last one again.
type watchIndex struct {
	field string
	value func(runtime.Object) (string, bool)
}

// watchIndexFor returns the indexed field of r, if it has one.
func watchIndexFor(r resource) (watchIndex, bool) {
	if r.gv.Group != "" {
		return watchIndex{}, false
	}
	switch r.kind {
	case "Pod":
		return watchIndex{field: "spec.nodeName", value: func(obj runtime.Object) (string, bool) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return "", false
			}
			return p.Spec.NodeName, true
		}}, true
	case "Node":
		return watchIndex{field: "metadata.name", value: func(obj runtime.Object) (string, bool) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return "", false
			}
			return n.Name, true
		}}, true
	}
	return watchIndex{}, false
}

// apply makes the store's selection predicates name the field as indexed and gives the watch
// cache its trigger and list index.
func (ix watchIndex) apply(s *genericregistry.Store, opts *generic.StoreOptions) {
	attrs := opts.AttrFunc
	s.PredicateFunc = func(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
		return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: attrs, IndexFields: []string{ix.field}}
	}
	opts.TriggerFunc = storage.IndexerFuncs{ix.field: func(obj runtime.Object) string {
		v, _ := ix.value(obj)
		return v
	}}
	opts.Indexers = &cache.Indexers{storage.FieldIndex(ix.field): func(obj any) ([]string, error) {
		o, ok := obj.(runtime.Object)
		if !ok {
			return nil, fmt.Errorf("index %s: %T is not an API object", ix.field, obj)
		}
		v, ok := ix.value(o)
		if !ok {
			return nil, fmt.Errorf("index %s: unexpected %T", ix.field, obj)
		}
		return []string{v}, nil
	}}
}

// statusREST serves the status subresource: only status is written.
type statusREST struct {
	store *genericregistry.Store
}

func newStatusREST(main *genericregistry.Store, strat *strategy) *statusREST {
	return newSubresourceREST(main, statusStrategy{strat})
}

// subresourceStrategy is the strategy of a subresource that updates a part of the object.
type subresourceStrategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}

// newSubresourceREST serves a subresource on the main resource's storage: updates through
// strat, nothing created.
func newSubresourceREST(main *genericregistry.Store, strat subresourceStrategy) *statusREST {
	st := *main
	st.UpdateStrategy = strat
	st.ResetFieldsStrategy = strat
	st.CreateStrategy = nil
	st.BeginCreate, st.BeginUpdate, st.AfterDelete = nil, nil, nil
	return &statusREST{store: &st}
}

var (
	_ rest.Patcher             = &statusREST{}
	_ rest.ResetFieldsStrategy = &statusREST{}
)

func (r *statusREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the storage is shared with the main resource.
func (r *statusREST) Destroy() {}

func (r *statusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *statusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Subresources never create.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *statusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *statusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

func objectMeta(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("%T has no object meta: %v", obj, err))
	}
	return m
}
