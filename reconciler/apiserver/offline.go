package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kube-aggregator/pkg/registry/apiservice"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// ValidateOffline checks obj, without a cluster, as the API server checks an object created by
// server-side apply with fieldValidation=Strict, and returns what the server would refuse
// (nil when it would accept it):
//
//   - its kind and version must be served: by this server (servedResources), or be a
//     CustomResourceDefinition or an APIService, which the extensions and aggregator servers
//     of the same API serve (otherwise: "kind: Not found: no kind "X" in group "Y" is served
//     by flotilla", or the apiVersions its kind is served in);
//   - it is decoded strictly into its Go type: a field the type does not declare, or a value
//     of the wrong type, is an error naming the field;
//   - it is defaulted (the scheme's defaulting functions) and converted to the kind's stored
//     type, as a request body is;
//   - the namespace follows the kind's scope as clients send it (gitsync, kubectl): a
//     namespaced object without one is checked in "default", a cluster-scoped one without
//     any;
//   - a Service gets what allocation does to it before validation (clusterIPs follow
//     clusterIP, node ports are dropped from types without them), without allocating;
//   - the kind's create strategy prepares it (PrepareForCreate) and validates it
//     (rest.ValidateCreate: the kind's validation, then the generic metadata checks).
//
// What depends on the site is not checked: other objects (a ClusterIP or node port already
// taken, a PriorityClass or RuntimeClass that must exist, the namespace being deleted,
// admission webhooks), and the site's ranges (--service-cidr, --service-node-port-range):
// only that addresses and ports are well-formed.
//
// ValidateOffline does not change obj and is safe for concurrent use.
func ValidateOffline(obj *unstructured.Unstructured) field.ErrorList {
	api := offlineAPIs()
	gvk := obj.GroupVersionKind()
	k, ok := api.kinds[gvk]
	if !ok {
		return api.notServed(obj)
	}
	u := obj.DeepCopy()
	switch {
	case !k.namespaced:
		u.SetNamespace("")
	case u.GetNamespace() == "":
		u.SetNamespace("default")
	}
	if u.GetName() == "" && u.GetGenerateName() != "" {
		// Apply addresses the object by name: generateName is not used.
		return field.ErrorList{field.Required(field.NewPath("metadata", "name"), "server-side apply needs a name; generateName is not used")}
	}

	versioned, err := k.scheme.New(gvk)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, versioned, true); err != nil {
		return offlineDecodeErrors(u, k.scheme, gvk, err)
	}
	k.scheme.Default(versioned)
	obj2, err := k.scheme.ConvertToVersion(versioned, schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	m, err := meta.Accessor(obj2)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	// As a create through apply: the system fields are the server's.
	rest.WipeObjectMetaSystemFields(m)
	rest.FillObjectMetaSystemFields(m)
	if svc, ok := obj2.(*corev1.Service); ok {
		offlineServiceAllocation(svc)
	}
	ctx := genericapirequest.WithNamespace(context.Background(), m.GetNamespace())
	k.strategy.PrepareForCreate(ctx, obj2)
	return rest.ValidateCreate(ctx, obj2, k.strategy)
}

// offlineValidation is the validation.Options of ValidateOffline: no service CIDR and no node
// port range, as the site's are not known (addresses and ports are still checked for form).
var offlineValidation = validation.Options{}

// offlineDefaultTolerationSeconds is the agent's default --default-toleration-seconds, for
// the tolerations new Pods get.
const offlineDefaultTolerationSeconds = 300

// OfflineRESTMapper maps every kind ValidateOffline accepts to its resource and scope, as
// the API's discovery does, for clients that must know the scope of a kind without a
// cluster.
func OfflineRESTMapper() meta.RESTMapper { return offlineAPIs().mapper }

// offlineKind is what ValidateOffline needs to check one served kind and version.
type offlineKind struct {
	scheme     *runtime.Scheme
	strategy   rest.RESTCreateStrategy
	namespaced bool
}

// offlineAPI lists the kinds of the whole API: this server's, and the extensions' and
// aggregator's.
type offlineAPI struct {
	kinds map[schema.GroupVersionKind]offlineKind
	// versions are the served apiVersions of each kind, in the order served.
	versions map[schema.GroupKind][]string
	mapper   *meta.DefaultRESTMapper
}

var offlineAPIs = sync.OnceValue(func() *offlineAPI {
	api := &offlineAPI{kinds: map[schema.GroupVersionKind]offlineKind{}, versions: map[schema.GroupKind][]string{},
		mapper: meta.NewDefaultRESTMapper(nil)}
	add := func(gvk schema.GroupVersionKind, plural, singular string, k offlineKind) {
		api.kinds[gvk] = k
		api.versions[gvk.GroupKind()] = append(api.versions[gvk.GroupKind()], gvk.GroupVersion().String())
		scope := meta.RESTScopeRoot
		if k.namespaced {
			scope = meta.RESTScopeNamespace
		}
		api.mapper.AddSpecific(gvk, gvk.GroupVersion().WithResource(plural), gvk.GroupVersion().WithResource(singular), scope)
	}
	scheme := NewScheme()
	for _, r := range servedResources() {
		s := newStrategy(scheme, r, offlineValidation)
		s.defaultTolerationSeconds = offlineDefaultTolerationSeconds
		add(r.gvk(), r.plural, r.singular, offlineKind{scheme: scheme, strategy: s, namespaced: r.namespaced})
	}
	add(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"), "customresourcedefinitions", "customresourcedefinition",
		offlineKind{scheme: apiextensionsapiserver.Scheme, strategy: customresourcedefinition.NewStrategy(apiextensionsapiserver.Scheme)})
	add(apiregistrationv1.SchemeGroupVersion.WithKind("APIService"), "apiservices", "apiservice",
		offlineKind{scheme: aggregatorscheme.Scheme, strategy: apiservice.NewStrategy(aggregatorscheme.Scheme)})
	return api
})

// notServed is the error for an object whose kind, or version of it, is not served.
func (api *offlineAPI) notServed(obj *unstructured.Unstructured) field.ErrorList {
	gvk := obj.GroupVersionKind()
	if versions := api.versions[gvk.GroupKind()]; len(versions) > 0 {
		return field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), obj.GetAPIVersion(), versions)}
	}
	return field.ErrorList{&field.Error{Type: field.ErrorTypeNotFound, Field: "kind", BadValue: field.OmitValueType{},
		Detail: fmt.Sprintf("no kind %q in group %q is served by flotilla", gvk.Kind, gvk.Group)}}
}

// offlineDecodeErrors turns a failed strict decode of u into field errors: one per undeclared
// field, or the field whose value has the wrong type.
func offlineDecodeErrors(u *unstructured.Unstructured, scheme *runtime.Scheme, gvk schema.GroupVersionKind, err error) field.ErrorList {
	var errs field.ErrorList
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		for _, e := range strict.Errors() {
			// The converter names each field "unknown field \"spec.template.spec.x\"".
			path := strings.TrimSuffix(strings.TrimPrefix(e.Error(), `unknown field "`), `"`)
			errs = append(errs, &field.Error{Type: field.ErrorTypeForbidden, Field: path, Detail: "field not declared in schema"})
		}
		return errs
	}
	// The converter does not say where a value has the wrong type; encoding/json does.
	msg := err.Error()
	b, jerr := json.Marshal(u.Object)
	typed, serr := scheme.New(gvk)
	if jerr == nil && serr == nil {
		var te *json.UnmarshalTypeError
		switch uerr := json.Unmarshal(b, typed); {
		case errors.As(uerr, &te) && te.Field != "":
			return field.ErrorList{&field.Error{Type: field.ErrorTypeTypeInvalid, Field: te.Field, BadValue: field.OmitValueType{},
				Detail: fmt.Sprintf("expected %s, got %s", offlineJSONType(te.Type), te.Value)}}
		case uerr != nil:
			msg = uerr.Error()
		}
	}
	return field.ErrorList{field.Invalid(nil, field.OmitValueType{}, fmt.Sprintf("cannot be decoded as %s %s: %s", gvk.GroupVersion(), gvk.Kind, msg))}
}

// offlineJSONType names the JSON type a Go type is decoded from.
func offlineJSONType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string"
		}
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.String()
}

// offlineServiceAllocation does to a new Service what serviceAllocators.assign does before
// it is validated, without allocating: clusterIPs follow clusterIP (or clusterIP takes the
// first of clusterIPs), an ExternalName Service has neither, and node ports are dropped from
// types that have none. An empty clusterIP or nodePort stays empty (validation allows it).
func offlineServiceAllocation(svc *corev1.Service) {
	if needsClusterIP(svc) {
		if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) > 0 {
			svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		}
		if svc.Spec.ClusterIP != "" {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	} else if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	}
	if !needsNodePorts(svc) {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
}
