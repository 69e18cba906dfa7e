package gitsync

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/operation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// crdGroupKind is the kind of CustomResourceDefinitions.
var crdGroupKind = schema.GroupKind{Group: apiextensionsv1.GroupName, Kind: "CustomResourceDefinition"}

// crdResource is the API resource of CustomResourceDefinitions.
var crdResource = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

func isCRD(o Object) bool { return o.Obj.GroupVersionKind().GroupKind() == crdGroupKind }

// CRDCheck validates a revision's custom resources against the CustomResourceDefinitions of
// the same revision, offline, the way the API server will once those definitions are
// established: a custom resource whose definition is only in the revision cannot be dry-run
// against the server before the revision is applied. Custom resources whose definition is
// not in the revision are left to the server's dry-run.
//
// Each definition is checked as the server checks a new one (its defaults, then the
// apiextensions validation: a schema that is not structural is refused with apiextensions'
// message). A custom resource goes through what the server does to a created object with
// fieldValidation=Strict: fields the schema does not declare are errors, status is dropped
// when the version has the status subresource, defaults are applied, then the OpenAPI
// schema, metadata, list-type and CEL (x-kubernetes-validations) rules are checked.
//
// A CRDCheck is safe for concurrent use.
type CRDCheck struct {
	byKind map[schema.GroupKind]*revisionCRD
	// byName are the definitions by metadata.name.
	byName map[string]*revisionCRD
}

// revisionCRD is one CustomResourceDefinition of the revision.
type revisionCRD struct {
	name string
	obj  Object
	// invalid is the definition's failure line; its resources are not checked.
	invalid string
	// namespaced is spec.scope == Namespaced.
	namespaced bool
	// versions by name; only those the definition serves.
	versions map[string]*crdVersion
	// served lists the served apiVersions ("group/version"), for messages.
	served []string
}

// crdVersion holds what the server builds to validate one version's resources.
type crdVersion struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
	// status: the version has the status subresource (status is not written on create).
	status bool
}

// NewCRDCheck reads and checks the CustomResourceDefinitions (apiextensions.k8s.io/v1)
// among objs.
func NewCRDCheck(objs []Object) *CRDCheck {
	c := &CRDCheck{byKind: map[schema.GroupKind]*revisionCRD{}, byName: map[string]*revisionCRD{}}
	for _, o := range objs {
		if !isCRD(o) {
			continue
		}
		rc := loadCRD(o)
		if rc.gk != (schema.GroupKind{}) {
			if other := c.byKind[rc.gk]; other != nil && rc.invalid == "" {
				rc.invalid = fmt.Sprintf("%s: spec.names.kind: Duplicate value: %q: kind %s of group %s is also defined by CustomResourceDefinition %s in this revision",
					describe(o), rc.gk.Kind, rc.gk.Kind, rc.gk.Group, other.name)
			} else if other == nil {
				c.byKind[rc.gk] = &rc.revisionCRD
			}
		}
		c.byName[rc.name] = &rc.revisionCRD
	}
	return c
}

// Defines reports whether a CustomResourceDefinition of the revision defines kind gk.
func (c *CRDCheck) Defines(gk schema.GroupKind) bool {
	_, ok := c.byKind[gk]
	return ok
}

// Resource is the plural resource name (spec.names.plural) of the kind gk a definition of
// the revision defines, "" when none does.
func (c *CRDCheck) Resource(gk schema.GroupKind) string {
	d := c.byKind[gk]
	if d == nil {
		return ""
	}
	plural, _, _ := unstructured.NestedString(d.obj.Obj.Object, "spec", "names", "plural")
	return plural
}

// crdScopes maps each kind the CustomResourceDefinitions among objs define to whether its
// resources are namespaced (spec.scope), without checking the definitions.
func crdScopes(objs []Object) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, o := range objs {
		if !isCRD(o) {
			continue
		}
		gk, _ := crdKinds(o.Obj)
		scope, _, _ := unstructured.NestedString(o.Obj.Object, "spec", "scope")
		if _, dup := out[gk]; !dup {
			out[gk] = scope == string(apiextensionsv1.NamespaceScoped)
		}
	}
	return out
}

// CheckCRD returns the failure line of a CustomResourceDefinition of the revision
// ("file: CustomResourceDefinition name: field: message; ..."), or "" when it is valid.
func (c *CRDCheck) CheckCRD(o Object) string {
	if rc := c.byName[o.Obj.GetName()]; rc != nil {
		return rc.invalid
	}
	return ""
}

// Check validates the custom resource o against its definition in the revision and
// returns its failure line ("file: Kind namespace/name: field: message; ..."), or "" when
// it is valid or the revision does not define its kind.
func (c *CRDCheck) Check(ctx context.Context, o Object) string {
	_, errs := c.validate(ctx, o)
	if len(errs) == 0 {
		return ""
	}
	return describe(o) + ": " + strings.Join(errs, "; ")
}

// Default returns o as the server would store it on create (unknown fields pruned,
// defaults applied), or nil when it is not valid or its kind is not defined here.
func (c *CRDCheck) Default(ctx context.Context, o Object) *unstructured.Unstructured {
	u, errs := c.validate(ctx, o)
	if len(errs) > 0 {
		return nil
	}
	return u
}

func (c *CRDCheck) validate(ctx context.Context, o Object) (*unstructured.Unstructured, []string) {
	gvk := o.Obj.GroupVersionKind()
	rc := c.byKind[gvk.GroupKind()]
	if rc == nil {
		return nil, nil
	}
	if rc.invalid != "" {
		return nil, []string{fmt.Sprintf("not checked: its CustomResourceDefinition %s in this revision is invalid", rc.name)}
	}
	v := rc.versions[gvk.Version]
	if v == nil {
		return nil, []string{field.NotSupported(field.NewPath("apiVersion"), o.Obj.GetAPIVersion(), rc.served).Error() +
			fmt.Sprintf(" (the versions CustomResourceDefinition %s of this revision serves)", rc.name)}
	}
	u := o.Obj.DeepCopy()
	// As Prepare: the namespace follows the definition's scope.
	switch {
	case !rc.namespaced:
		u.SetNamespace("")
	case u.GetNamespace() == "":
		u.SetNamespace("default")
	}
	obj := u.Object
	if v.status {
		// A create through the main resource does not write status.
		delete(obj, "status")
	}
	var errs field.ErrorList
	// fieldValidation=Strict: what the schema does not declare is refused, not pruned.
	meta, _, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return nil, []string{field.Invalid(field.NewPath("metadata"), obj["metadata"], err.Error()).Error()}
	}
	unknown = append(unknown, structuralpruning.PruneWithOptions(obj, v.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, v.structural)
	ferr, more := schemaobjectmeta.CoerceWithOptions(nil, obj, v.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		errs = append(errs, ferr)
	}
	unknown = append(unknown, more...)
	slices.Sort(unknown)
	var out []string
	for _, p := range slices.Compact(unknown) {
		// As the server's apply answers for an undeclared field.
		out = append(out, p+": field not declared in schema")
	}
	structuraldefaulting.Default(obj, v.structural)

	errs = append(errs, metavalidation.ValidateObjectMetaDeclaratively(ctx, operation.Create, meta, nil, rc.namespaced,
		metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"), utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, v.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, v.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	// As the server: CEL rules are evaluated only when nothing would make them misleading.
	if blocking := slices.ContainsFunc(errs, func(e *field.Error) bool {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
		return false
	}); blocking {
		errs = append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	} else if v.cel != nil {
		celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	for _, e := range errs {
		out = append(out, strings.TrimPrefix(e.Error(), "<nil>: "))
	}
	return u, out
}

// loadedCRD is a revisionCRD and the kind it defines (zero when unreadable).
type loadedCRD struct {
	revisionCRD
	gk schema.GroupKind
}

// loadCRD reads one CustomResourceDefinition, checks it as the server checks a new one and
// builds the validators of its served versions.
func loadCRD(o Object) loadedCRD {
	rc := loadedCRD{revisionCRD: revisionCRD{name: o.Obj.GetName(), obj: o, versions: map[string]*crdVersion{}}}
	fail := func(msgs ...string) loadedCRD {
		rc.invalid = describe(o) + ": " + strings.Join(msgs, "; ")
		return rc
	}
	if o.Obj.GroupVersionKind().Version != apiextensionsv1.SchemeGroupVersion.Version {
		return fail(fmt.Sprintf("apiVersion: Unsupported value: %q: supported values: %q", o.Obj.GetAPIVersion(), apiextensionsv1.SchemeGroupVersion.String()))
	}
	b, err := json.Marshal(o.Obj.Object)
	if err != nil {
		return fail(err.Error())
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := json.Unmarshal(b, crd); err != nil {
		return fail(err.Error())
	}
	rc.gk = schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	rc.namespaced = crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)

	// What the server does to a created definition before validating it.
	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		return fail(err.Error())
	}
	internal.Status = apiextensions.CustomResourceDefinitionStatus{}
	internal.Generation = 1
	for _, v := range internal.Spec.Versions {
		if v.Storage {
			internal.Status.StoredVersions = []string{v.Name}
			break
		}
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		return fail(msgs...)
	}

	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		rc.served = append(rc.served, crd.Spec.Group+"/"+v.Name)
		cv, err := buildVersion(crd, v)
		if err != nil {
			return fail(fmt.Sprintf("version %s: %v", v.Name, err))
		}
		rc.versions[v.Name] = cv
	}
	return rc
}

// buildVersion builds the validators of one served version as the server's handler does.
func buildVersion(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) (*crdVersion, error) {
	val, err := apihelpers.GetSchemaForVersion(crd, v.Name)
	if err != nil {
		return nil, err
	}
	if val == nil || val.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("no schema")
	}
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, err
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	cv := &crdVersion{structural: s, validator: validator, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
	if sub, err := apihelpers.GetSubresourcesForVersion(crd, v.Name); err == nil && sub != nil && sub.Status != nil {
		cv.status = true
	}
	return cv, nil
}

// crdEstablished reads the conditions of a live CustomResourceDefinition: established, and
// otherwise why not ("" when it does not say yet). namesRefused is set when the server
// refused its names, which waiting does not change.
func crdEstablished(u *unstructured.Unstructured) (established bool, why string, namesRefused bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	get := func(typ string) (status, reason, msg string, ok bool) {
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == typ {
				status, _ = m["status"].(string)
				reason, _ = m["reason"].(string)
				msg, _ = m["message"].(string)
				return status, reason, msg, true
			}
		}
		return "", "", "", false
	}
	if s, reason, msg, ok := get(string(apiextensionsv1.NamesAccepted)); ok && s == string(apiextensionsv1.ConditionFalse) {
		return false, fmt.Sprintf("NamesAccepted=False (%s): %s", reason, msg), true
	}
	s, reason, msg, ok := get(string(apiextensionsv1.Established))
	switch {
	case ok && s == string(apiextensionsv1.ConditionTrue):
		return true, "", false
	case ok:
		return false, fmt.Sprintf("Established=%s (%s): %s", s, reason, msg), false
	}
	return false, "", false
}
