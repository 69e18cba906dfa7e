package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/selection"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// The review APIs answer questions about authentication and authorization without storing
// anything: every resource is create-only and the created object comes back with its status
// filled in, as in every Kubernetes API server.
//
//	authentication.k8s.io/v1
//	  tokenreviews                 who is this bearer token? (the server's authenticator)
//	  selfsubjectreviews           who am I? (kubectl auth whoami)
//	authorization.k8s.io/v1
//	  subjectaccessreviews         may this user do this? (the server's authorizer)
//	  localsubjectaccessreviews    the same, within the namespace of the request
//	  selfsubjectaccessreviews     may I do this? (kubectl auth can-i)
//	  selfsubjectrulesreviews      what may I do in this namespace? (kubectl auth can-i --list)

// installReviewAPIs serves authentication.k8s.io/v1 and authorization.k8s.io/v1. authn
// authenticates the tokens of TokenReviews and apiAudiences are the audiences a token is
// checked for when a review names none (both as the server authenticates requests with);
// authz answers the access reviews and rules the rules reviews (nil: they are refused as not
// supported). The scheme must have both groups' types (NewScheme).
func installReviewAPIs(s *genericapiserver.GenericAPIServer, scheme *runtime.Scheme, codecs serializer.CodecFactory,
	authn authenticator.Request, apiAudiences authenticator.Audiences, authz authorizer.Authorizer, rules authorizer.RuleResolver) error {
	authnInfo := genericapiserver.NewDefaultAPIGroupInfo(authenticationv1.GroupName, scheme, metav1.ParameterCodec, codecs)
	authnInfo.VersionedResourcesStorageMap[authenticationv1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"tokenreviews":       &tokenReviewREST{authn: authn, apiAudiences: apiAudiences},
		"selfsubjectreviews": &selfSubjectReviewREST{},
	}
	authzInfo := genericapiserver.NewDefaultAPIGroupInfo(authorizationv1.GroupName, scheme, metav1.ParameterCodec, codecs)
	authzInfo.VersionedResourcesStorageMap[authorizationv1.SchemeGroupVersion.Version] = newAuthorizationStorage(authz, rules)
	if err := s.InstallAPIGroups(&authnInfo, &authzInfo); err != nil {
		return fmt.Errorf("install review APIs: %w", err)
	}
	forgetOpenAPIModels(&authnInfo, &authzInfo)
	return nil
}

// newAuthorizationStorage returns the storages of authorization.k8s.io/v1 by resource.
func newAuthorizationStorage(authz authorizer.Authorizer, rules authorizer.RuleResolver) map[string]rest.Storage {
	return map[string]rest.Storage{
		"subjectaccessreviews":      &subjectAccessReviewREST{authz: authz},
		"localsubjectaccessreviews": &localSubjectAccessReviewREST{authz: authz},
		"selfsubjectaccessreviews":  &selfSubjectAccessReviewREST{authz: authz},
		"selfsubjectrulesreviews":   &selfSubjectRulesReviewREST{rules: rules},
	}
}

// reviewStorage is what the review storages have in common: nothing to clean up.
type reviewStorage struct{}

func (reviewStorage) Destroy() {}

var (
	errNoUser                      = apierrors.NewBadRequest("no user present on request")
	errBadAuthenticatorAudiences   = apierrors.NewInternalError(errors.New("error validating audiences"))
	errRulesResolutionNotSupported = errors.New("the authorizer does not support rule resolution")
)

// tokenReviewREST serves tokenreviews.
type tokenReviewREST struct {
	reviewStorage
	authn        authenticator.Request
	apiAudiences authenticator.Audiences
}

var (
	_ rest.Creater              = (*tokenReviewREST)(nil)
	_ rest.Scoper               = (*tokenReviewREST)(nil)
	_ rest.SingularNameProvider = (*tokenReviewREST)(nil)
)

func (*tokenReviewREST) New() runtime.Object     { return &authenticationv1.TokenReview{} }
func (*tokenReviewREST) NamespaceScoped() bool   { return false }
func (*tokenReviewREST) GetSingularName() string { return "tokenreview" }

// Create authenticates spec.token as if a request had carried it in its Authorization header,
// for spec.audiences or, when there are none, the API audiences.
func (r *tokenReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.TokenReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenReview: %#v", obj))
	}
	if ns := genericapirequest.NamespaceValue(ctx); ns != "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("namespace is not allowed on this type: %v", ns))
	}
	if review.Spec.Token == "" {
		return nil, apierrors.NewBadRequest("token is required for TokenReview in authentication")
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	// The status is the server's answer, never the client's.
	review.Status = authenticationv1.TokenReviewStatus{}
	if r.authn == nil {
		return review, nil
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	req.Header.Set("Authorization", "Bearer "+review.Spec.Token)
	auds := authenticator.Audiences(review.Spec.Audiences)
	if len(auds) == 0 {
		auds = r.apiAudiences
	}
	if len(auds) > 0 {
		req = req.WithContext(authenticator.WithAudiences(req.Context(), auds))
	}
	resp, ok, err := r.authn.AuthenticateRequest(req)
	if err != nil {
		review.Status.Error = err.Error()
	}
	if !ok || resp == nil || resp.User == nil {
		return review, nil
	}
	tokenAuds := resp.Audiences
	if len(auds) > 0 {
		if len(tokenAuds) == 0 {
			// An audience-agnostic authenticator (a bearer token file) answers for the API
			// audiences only.
			if tokenAuds = r.apiAudiences.Intersect(auds); len(tokenAuds) == 0 {
				return review, nil
			}
		} else if len(auds.Intersect(tokenAuds)) == 0 {
			return nil, errBadAuthenticatorAudiences
		}
	}
	review.Status.Authenticated = true
	review.Status.User = userInfo(resp.User)
	review.Status.Audiences = tokenAuds
	return review, nil
}

// selfSubjectReviewREST serves selfsubjectreviews.
type selfSubjectReviewREST struct{ reviewStorage }

var (
	_ rest.Creater              = (*selfSubjectReviewREST)(nil)
	_ rest.Scoper               = (*selfSubjectReviewREST)(nil)
	_ rest.SingularNameProvider = (*selfSubjectReviewREST)(nil)
)

func (*selfSubjectReviewREST) New() runtime.Object     { return &authenticationv1.SelfSubjectReview{} }
func (*selfSubjectReviewREST) NamespaceScoped() bool   { return false }
func (*selfSubjectReviewREST) GetSingularName() string { return "selfsubjectreview" }

// Create returns the user that made the request.
func (*selfSubjectReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	if _, ok := obj.(*authenticationv1.SelfSubjectReview); !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectReview: %#v", obj))
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, errNoUser
	}
	return &authenticationv1.SelfSubjectReview{
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(time.Now())},
		Status:     authenticationv1.SelfSubjectReviewStatus{UserInfo: userInfo(u)},
	}, nil
}

// userInfo copies a user into the authentication.k8s.io form.
func userInfo(u user.Info) authenticationv1.UserInfo {
	out := authenticationv1.UserInfo{
		Username: u.GetName(),
		UID:      u.GetUID(),
		Groups:   append([]string(nil), u.GetGroups()...),
	}
	if extra := u.GetExtra(); len(extra) > 0 {
		out.Extra = make(map[string]authenticationv1.ExtraValue, len(extra))
		for k, v := range extra {
			out.Extra[k] = append(authenticationv1.ExtraValue(nil), v...)
		}
	}
	return out
}

// subjectAccessReviewREST serves subjectaccessreviews.
type subjectAccessReviewREST struct {
	reviewStorage
	authz authorizer.Authorizer
}

var (
	_ rest.Creater              = (*subjectAccessReviewREST)(nil)
	_ rest.Scoper               = (*subjectAccessReviewREST)(nil)
	_ rest.SingularNameProvider = (*subjectAccessReviewREST)(nil)
)

func (*subjectAccessReviewREST) New() runtime.Object     { return &authorizationv1.SubjectAccessReview{} }
func (*subjectAccessReviewREST) NamespaceScoped() bool   { return false }
func (*subjectAccessReviewREST) GetSingularName() string { return "subjectaccessreview" }

// Create asks the authorizer whether spec's user may do what spec describes.
func (r *subjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SubjectAccessReview: %#v", obj))
	}
	// The status is the server's answer: it is neither validated nor kept.
	review.Status = authorizationv1.SubjectAccessReviewStatus{}
	if errs := validateSubjectAccessReview(review); len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview").GroupKind(), "", errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	review.Status = authorize(ctx, r.authz, subjectAttributes(review.Spec))
	return review, nil
}

// localSubjectAccessReviewREST serves localsubjectaccessreviews, the subjectaccessreviews
// of one namespace (so that RBAC can grant them in a namespace).
type localSubjectAccessReviewREST struct {
	reviewStorage
	authz authorizer.Authorizer
}

var (
	_ rest.Creater              = (*localSubjectAccessReviewREST)(nil)
	_ rest.Scoper               = (*localSubjectAccessReviewREST)(nil)
	_ rest.SingularNameProvider = (*localSubjectAccessReviewREST)(nil)
)

func (*localSubjectAccessReviewREST) New() runtime.Object {
	return &authorizationv1.LocalSubjectAccessReview{}
}
func (*localSubjectAccessReviewREST) NamespaceScoped() bool   { return true }
func (*localSubjectAccessReviewREST) GetSingularName() string { return "localsubjectaccessreview" }

// Create asks the authorizer whether spec's user may do what spec describes in the namespace
// of the request.
func (r *localSubjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.LocalSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a LocalSubjectAccessReview: %#v", obj))
	}
	review.Status = authorizationv1.SubjectAccessReviewStatus{}
	if errs := validateLocalSubjectAccessReview(review); len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("LocalSubjectAccessReview").GroupKind(), "", errs)
	}
	ns := genericapirequest.NamespaceValue(ctx)
	if ns == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("namespace is required on this type: %v", ns))
	}
	if ns != review.Namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.resourceAttributes.namespace must match namespace: %v", ns))
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	review.Status = authorize(ctx, r.authz, subjectAttributes(review.Spec))
	return review, nil
}

// selfSubjectAccessReviewREST serves selfsubjectaccessreviews.
type selfSubjectAccessReviewREST struct {
	reviewStorage
	authz authorizer.Authorizer
}

var (
	_ rest.Creater              = (*selfSubjectAccessReviewREST)(nil)
	_ rest.Scoper               = (*selfSubjectAccessReviewREST)(nil)
	_ rest.SingularNameProvider = (*selfSubjectAccessReviewREST)(nil)
)

func (*selfSubjectAccessReviewREST) New() runtime.Object {
	return &authorizationv1.SelfSubjectAccessReview{}
}
func (*selfSubjectAccessReviewREST) NamespaceScoped() bool   { return false }
func (*selfSubjectAccessReviewREST) GetSingularName() string { return "selfsubjectaccessreview" }

// Create asks the authorizer whether the user making the request may do what spec describes.
func (r *selfSubjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectAccessReview: %#v", obj))
	}
	review.Status = authorizationv1.SubjectAccessReviewStatus{}
	if errs := validateSelfSubjectAccessReview(review); len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "", errs)
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, errNoUser
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	var attrs authorizer.AttributesRecord
	if ra := review.Spec.ResourceAttributes; ra != nil {
		attrs = resourceAttributes(u, *ra)
	} else {
		attrs = nonResourceAttributes(u, *review.Spec.NonResourceAttributes)
	}
	review.Status = authorize(ctx, r.authz, attrs)
	return review, nil
}

// selfSubjectRulesReviewREST serves selfsubjectrulesreviews. rules is nil when the
// authorizer cannot list what a user may do.
type selfSubjectRulesReviewREST struct {
	reviewStorage
	rules authorizer.RuleResolver
}

var (
	_ rest.Creater              = (*selfSubjectRulesReviewREST)(nil)
	_ rest.Scoper               = (*selfSubjectRulesReviewREST)(nil)
	_ rest.SingularNameProvider = (*selfSubjectRulesReviewREST)(nil)
)

func (*selfSubjectRulesReviewREST) New() runtime.Object {
	return &authorizationv1.SelfSubjectRulesReview{}
}
func (*selfSubjectRulesReviewREST) NamespaceScoped() bool   { return false }
func (*selfSubjectRulesReviewREST) GetSingularName() string { return "selfsubjectrulesreview" }

// Create lists what the user making the request may do in spec.namespace. An authorizer that
// cannot tell answers with no rules, incomplete.
func (r *selfSubjectRulesReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectRulesReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectRulesReview: %#v", obj))
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, errNoUser
	}
	if review.Spec.Namespace == "" {
		return nil, apierrors.NewBadRequest("no namespace on request")
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	var (
		resourceRules    []authorizer.ResourceRuleInfo
		nonResourceRules []authorizer.NonResourceRuleInfo
		incomplete       = true
		err              = errRulesResolutionNotSupported
	)
	if r.rules != nil {
		resourceRules, nonResourceRules, incomplete, err = r.rules.RulesFor(ctx, u, review.Spec.Namespace)
	}
	status := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules:    make([]authorizationv1.ResourceRule, len(resourceRules)),
		NonResourceRules: make([]authorizationv1.NonResourceRule, len(nonResourceRules)),
		Incomplete:       incomplete,
	}
	for i, rule := range resourceRules {
		status.ResourceRules[i] = authorizationv1.ResourceRule{Verbs: rule.GetVerbs(), APIGroups: rule.GetAPIGroups(),
			Resources: rule.GetResources(), ResourceNames: rule.GetResourceNames()}
	}
	for i, rule := range nonResourceRules {
		status.NonResourceRules[i] = authorizationv1.NonResourceRule{Verbs: rule.GetVerbs(), NonResourceURLs: rule.GetNonResourceURLs()}
	}
	if err != nil {
		status.EvaluationError = err.Error()
	}
	review.Status = status
	return review, nil
}

// authorize asks authz about attrs and returns the answer as a review status.
func authorize(ctx context.Context, authz authorizer.Authorizer, attrs authorizer.AttributesRecord) authorizationv1.SubjectAccessReviewStatus {
	decision, reason, err := authz.Authorize(ctx, attrs)
	return authorizationv1.SubjectAccessReviewStatus{
		Allowed:         decision == authorizer.DecisionAllow,
		Denied:          decision == authorizer.DecisionDeny,
		Reason:          reason,
		EvaluationError: evaluationError(err, attrs),
	}
}

// evaluationError is the status.evaluationError of a review: the authorizer's error and
// the selectors that could not be (fully) taken into account.
func evaluationError(err error, attrs authorizer.AttributesRecord) string {
	var msgs []string
	if err != nil {
		msgs = append(msgs, err.Error())
	}
	if reqs, err := attrs.GetFieldSelector(); err != nil {
		if len(reqs) > 0 {
			msgs = append(msgs, "spec.resourceAttributes.fieldSelector partially ignored due to parse error")
		} else {
			msgs = append(msgs, "spec.resourceAttributes.fieldSelector ignored due to parse error")
		}
	}
	if reqs, err := attrs.GetLabelSelector(); err != nil {
		if len(reqs) > 0 {
			msgs = append(msgs, "spec.resourceAttributes.labelSelector partially ignored due to parse error")
		} else {
			msgs = append(msgs, "spec.resourceAttributes.labelSelector ignored due to parse error")
		}
	}
	return strings.Join(msgs, "; ")
}

// subjectAttributes returns the attributes a SubjectAccessReviewSpec asks about.
func subjectAttributes(spec authorizationv1.SubjectAccessReviewSpec) authorizer.AttributesRecord {
	u := &user.DefaultInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	if spec.Extra != nil {
		u.Extra = make(map[string][]string, len(spec.Extra))
		for k, v := range spec.Extra {
			u.Extra[k] = []string(v)
		}
	}
	if spec.ResourceAttributes != nil {
		return resourceAttributes(u, *spec.ResourceAttributes)
	}
	return nonResourceAttributes(u, *spec.NonResourceAttributes)
}

// resourceAttributes returns the attributes of a request for a resource. An empty version
// matches every version. Selectors that do not parse are left out (a requirement less only
// widens what is asked about) and reported by evaluationError.
func resourceAttributes(u user.Info, in authorizationv1.ResourceAttributes) authorizer.AttributesRecord {
	attrs := authorizer.AttributesRecord{
		User:            u,
		Verb:            in.Verb,
		Namespace:       in.Namespace,
		APIGroup:        in.Group,
		APIVersion:      in.Version,
		Resource:        in.Resource,
		Subresource:     in.Subresource,
		Name:            in.Name,
		ResourceRequest: true,
	}
	if attrs.APIVersion == "" {
		attrs.APIVersion = "*"
	}
	if sel := in.LabelSelector; sel != nil {
		if sel.RawSelector != "" {
			if parsed, err := labels.Parse(sel.RawSelector); err != nil {
				attrs.LabelSelectorParsingErr = err
			} else {
				attrs.LabelSelectorRequirements, _ = parsed.Requirements()
			}
		}
		if len(sel.Requirements) > 0 {
			attrs.LabelSelectorRequirements, attrs.LabelSelectorParsingErr = labelRequirements(sel.Requirements)
		}
	}
	if sel := in.FieldSelector; sel != nil {
		if sel.RawSelector != "" {
			if parsed, err := fields.ParseSelector(sel.RawSelector); err != nil {
				attrs.FieldSelectorParsingErr = err
			} else {
				attrs.FieldSelectorRequirements = parsed.Requirements()
			}
		}
		if len(sel.Requirements) > 0 {
			attrs.FieldSelectorRequirements, attrs.FieldSelectorParsingErr = fieldRequirements(sel.Requirements)
		}
	}
	return attrs
}

// nonResourceAttributes returns the attributes of a request for a non-resource path.
func nonResourceAttributes(u user.Info, in authorizationv1.NonResourceAttributes) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: in.Verb, Path: in.Path}
}

var labelSelectorOperators = map[metav1.LabelSelectorOperator]selection.Operator{
	metav1.LabelSelectorOpIn:           selection.In,
	metav1.LabelSelectorOpNotIn:        selection.NotIn,
	metav1.LabelSelectorOpExists:       selection.Exists,
	metav1.LabelSelectorOpDoesNotExist: selection.DoesNotExist,
}

// labelRequirements converts the requirements it can, and reports the others.
func labelRequirements(in []metav1.LabelSelectorRequirement) (labels.Requirements, error) {
	var reqs labels.Requirements
	var errs []error
	for _, r := range in {
		op, ok := labelSelectorOperators[r.Operator]
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not a valid label selector operator", r.Operator))
			continue
		}
		values := r.Values
		if len(values) == 0 {
			values = nil
		}
		req, err := labels.NewRequirement(r.Key, op, values)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reqs = append(reqs, *req)
	}
	return reqs, utilerrors.NewAggregate(errs)
}

// fieldRequirements converts the requirements it can (In and NotIn of one value, as field
// selectors can express), and reports the others.
func fieldRequirements(in []metav1.FieldSelectorRequirement) (fields.Requirements, error) {
	var reqs fields.Requirements
	var errs []error
	for _, r := range in {
		if len(r.Values) > 1 {
			errs = append(errs, errors.New("fieldSelectors do not yet support multiple values"))
			continue
		}
		switch r.Operator {
		case metav1.FieldSelectorOpIn, metav1.FieldSelectorOpNotIn:
			if len(r.Values) != 1 {
				errs = append(errs, fmt.Errorf("fieldSelectors %s must have one value", strings.ToLower(string(r.Operator))))
				continue
			}
			op := selection.Equals
			if r.Operator == metav1.FieldSelectorOpNotIn {
				op = selection.NotEquals
			}
			reqs = append(reqs, fields.Requirement{Field: r.Key, Operator: op, Value: r.Values[0]})
		case metav1.FieldSelectorOpExists, metav1.FieldSelectorOpDoesNotExist:
			errs = append(errs, fmt.Errorf("fieldSelectors do not yet support %v", r.Operator))
		default:
			errs = append(errs, fmt.Errorf("%q is not a valid field selector operator", r.Operator))
		}
	}
	return reqs, utilerrors.NewAggregate(errs)
}

// Validation of the access reviews.

const exactlyOneAttributes = "exactly one of nonResourceAttributes or resourceAttributes must be specified"

func validateSubjectAccessReviewSpec(spec authorizationv1.SubjectAccessReviewSpec, fldPath *field.Path) field.ErrorList {
	allErrs := validateAttributesUnion(spec.ResourceAttributes, spec.NonResourceAttributes, fldPath)
	if spec.User == "" && len(spec.Groups) == 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("user"), spec.User, "at least one of user or group must be specified"))
	}
	return append(allErrs, validateResourceAttributes(spec.ResourceAttributes, fldPath.Child("resourceAttributes"))...)
}

func validateAttributesUnion(ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes, fldPath *field.Path) field.ErrorList {
	if (ra == nil) == (nra == nil) {
		return field.ErrorList{field.Invalid(fldPath, nra, exactlyOneAttributes)}
	}
	return nil
}

func validateSubjectAccessReview(sar *authorizationv1.SubjectAccessReview) field.ErrorList {
	allErrs := validateSubjectAccessReviewSpec(sar.Spec, field.NewPath("spec"))
	if !emptyMeta(sar.ObjectMeta, false) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata"), sar.ObjectMeta, "must be empty"))
	}
	return allErrs
}

func validateSelfSubjectAccessReview(sar *authorizationv1.SelfSubjectAccessReview) field.ErrorList {
	spec := field.NewPath("spec")
	allErrs := validateAttributesUnion(sar.Spec.ResourceAttributes, sar.Spec.NonResourceAttributes, spec)
	allErrs = append(allErrs, validateResourceAttributes(sar.Spec.ResourceAttributes, spec.Child("resourceAttributes"))...)
	if !emptyMeta(sar.ObjectMeta, false) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata"), sar.ObjectMeta, "must be empty"))
	}
	return allErrs
}

func validateLocalSubjectAccessReview(sar *authorizationv1.LocalSubjectAccessReview) field.ErrorList {
	allErrs := validateSubjectAccessReviewSpec(sar.Spec, field.NewPath("spec"))
	if !emptyMeta(sar.ObjectMeta, true) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata"), sar.ObjectMeta, "must be empty except for namespace"))
	}
	if ra := sar.Spec.ResourceAttributes; ra != nil && ra.Namespace != sar.Namespace {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "resourceAttributes", "namespace"), ra.Namespace, "must match metadata.namespace"))
	}
	if sar.Spec.NonResourceAttributes != nil {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), sar.Spec.NonResourceAttributes, "disallowed on this kind of request"))
	}
	return allErrs
}

// emptyMeta reports whether a review's metadata is empty but for the managed fields (which
// the server adds) and, if allowed, the namespace.
func emptyMeta(m metav1.ObjectMeta, namespaceAllowed bool) bool {
	m.ManagedFields = nil
	if namespaceAllowed {
		m.Namespace = ""
	}
	return apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, m)
}

func validateResourceAttributes(ra *authorizationv1.ResourceAttributes, fldPath *field.Path) field.ErrorList {
	if ra == nil {
		return nil
	}
	var allErrs field.ErrorList
	if sel := ra.FieldSelector; sel != nil {
		p := fldPath.Child("fieldSelector")
		allErrs = append(allErrs, validateSelectorForm(sel.RawSelector, len(sel.Requirements), p)...)
		// Operators unknown here are let through: a newer client may be asking.
		opts := metav1validation.FieldSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}
		for i, r := range sel.Requirements {
			allErrs = append(allErrs, metav1validation.ValidateFieldSelectorRequirement(r, opts, p.Child("requirements").Index(i))...)
		}
	}
	if sel := ra.LabelSelector; sel != nil {
		p := fldPath.Child("labelSelector")
		allErrs = append(allErrs, validateSelectorForm(sel.RawSelector, len(sel.Requirements), p)...)
		opts := metav1validation.LabelSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}
		for i, r := range sel.Requirements {
			allErrs = append(allErrs, metav1validation.ValidateLabelSelectorRequirement(r, opts, p.Child("requirements").Index(i))...)
		}
	}
	return allErrs
}

// validateSelectorForm checks that a selector has either a raw form or requirements.
func validateSelectorForm(raw string, requirements int, fldPath *field.Path) field.ErrorList {
	switch {
	case raw != "" && requirements > 0:
		return field.ErrorList{field.Invalid(fldPath.Child("rawSelector"), raw, "may not specified at the same time as requirements")}
	case raw == "" && requirements == 0:
		return field.ErrorList{field.Required(fldPath.Child("requirements"), fmt.Sprintf("when %s is specified, requirements or rawSelector is required", fldPath))}
	}
	return nil
}
