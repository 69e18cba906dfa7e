package validation

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/util/webhook"
)

// Validating and MutatingWebhookConfiguration validation follows upstream's
// pkg/apis/admissionregistration/validation, rules and messages, for the v1 types. Match
// condition expressions are compiled as CEL with the environment the webhook admission plugin
// evaluates them in.

// acceptedAdmissionReviewVersions are the AdmissionReview versions the server can send; a
// webhook must accept one of them.
var acceptedAdmissionReviewVersions = []string{"v1", "v1beta1"}

var (
	webhookFailurePolicies = sets.New(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	webhookMatchPolicies   = sets.New(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	webhookSideEffects     = sets.New(string(admissionregistrationv1.SideEffectClassUnknown), string(admissionregistrationv1.SideEffectClassNone),
		string(admissionregistrationv1.SideEffectClassSome), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	webhookNoSideEffects = sets.New(string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	webhookOperations    = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Connect))
	webhookReinvocationPolicies = sets.New(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))
	webhookScopes               = sets.New(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
)

// webhookOptions are upstream's validationOptions: an update keeps accepting what the stored
// object already has (side effects, unknown review versions, duplicate names, invalid selector
// values, and match conditions that did not change).
type webhookOptions struct {
	ignoreMatchConditions bool
	// storedExpressions are the match conditions the stored object has: they compile with the
	// stored-expressions environment (which accepts library functions newer ones may not).
	storedExpressions                       sets.Set[string]
	requireNoSideEffects                    bool
	requireRecognizedAdmissionReviewVersion bool
	requireUniqueWebhookNames               bool
	allowInvalidLabelValueInSelector        bool
}

var webhookCreateOptions = webhookOptions{
	requireNoSideEffects:                    true,
	requireRecognizedAdmissionReviewVersion: true,
	requireUniqueWebhookNames:               true,
}

// webhookFields is the part of a ValidatingWebhook or MutatingWebhook that validation reads.
type webhookFields struct {
	name                    string
	clientConfig            *admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           *admissionregistrationv1.FailurePolicyType
	matchPolicy             *admissionregistrationv1.MatchPolicyType
	namespaceSelector       *metav1.LabelSelector
	objectSelector          *metav1.LabelSelector
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
	mutating                bool
	reinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType
}

func validatingHooks(ws []admissionregistrationv1.ValidatingWebhook) []webhookFields {
	out := make([]webhookFields, len(ws))
	for i := range ws {
		w := &ws[i]
		out[i] = webhookFields{name: w.Name, clientConfig: &w.ClientConfig, rules: w.Rules, failurePolicy: w.FailurePolicy,
			matchPolicy: w.MatchPolicy, namespaceSelector: w.NamespaceSelector, objectSelector: w.ObjectSelector,
			sideEffects: w.SideEffects, timeoutSeconds: w.TimeoutSeconds, admissionReviewVersions: w.AdmissionReviewVersions,
			matchConditions: w.MatchConditions}
	}
	return out
}

func mutatingHooks(ws []admissionregistrationv1.MutatingWebhook) []webhookFields {
	out := make([]webhookFields, len(ws))
	for i := range ws {
		w := &ws[i]
		out[i] = webhookFields{name: w.Name, clientConfig: &w.ClientConfig, rules: w.Rules, failurePolicy: w.FailurePolicy,
			matchPolicy: w.MatchPolicy, namespaceSelector: w.NamespaceSelector, objectSelector: w.ObjectSelector,
			sideEffects: w.SideEffects, timeoutSeconds: w.TimeoutSeconds, admissionReviewVersions: w.AdmissionReviewVersions,
			matchConditions: w.MatchConditions, mutating: true, reinvocationPolicy: w.ReinvocationPolicy}
	}
	return out
}

// ValidateValidatingWebhookConfiguration validates a ValidatingWebhookConfiguration on create.
func ValidateValidatingWebhookConfiguration(c *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	return validateWebhookConfiguration(&c.ObjectMeta, validatingHooks(c.Webhooks), webhookCreateOptions)
}

// ValidateValidatingWebhookConfigurationUpdate validates a ValidatingWebhookConfiguration update.
func ValidateValidatingWebhookConfigurationUpdate(c, old *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	return validateWebhookConfigurationUpdate(&c.ObjectMeta, &old.ObjectMeta, validatingHooks(c.Webhooks), validatingHooks(old.Webhooks))
}

// ValidateMutatingWebhookConfiguration validates a MutatingWebhookConfiguration on create.
func ValidateMutatingWebhookConfiguration(c *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	return validateWebhookConfiguration(&c.ObjectMeta, mutatingHooks(c.Webhooks), webhookCreateOptions)
}

// ValidateMutatingWebhookConfigurationUpdate validates a MutatingWebhookConfiguration update.
func ValidateMutatingWebhookConfigurationUpdate(c, old *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	return validateWebhookConfigurationUpdate(&c.ObjectMeta, &old.ObjectMeta, mutatingHooks(c.Webhooks), mutatingHooks(old.Webhooks))
}

// validateWebhookConfigurationUpdate validates the update of a webhook configuration of
// either kind, given its webhooks before and after.
func validateWebhookConfigurationUpdate(meta, oldMeta *metav1.ObjectMeta, hooks, oldHooks []webhookFields) field.ErrorList {
	errs := validateWebhookConfiguration(meta, hooks, webhookUpdateOptions(hooks, oldHooks))
	return append(errs, validateMetaUpdate(meta, oldMeta)...)
}

func webhookUpdateOptions(hooks, old []webhookFields) webhookOptions {
	opts := webhookOptions{
		ignoreMatchConditions:                   len(hooks) == len(old),
		requireNoSideEffects:                    true,
		requireRecognizedAdmissionReviewVersion: true,
		requireUniqueWebhookNames:               true,
	}
	for i := range hooks {
		if i < len(old) && !reflect.DeepEqual(hooks[i].matchConditions, old[i].matchConditions) {
			opts.ignoreMatchConditions = false
		}
	}
	names := sets.New[string]()
	strict := metav1validation.LabelSelectorValidationOptions{}
	opts.storedExpressions = sets.New[string]()
	for _, h := range old {
		for _, c := range h.matchConditions {
			opts.storedExpressions.Insert(c.Expression)
		}
		if h.sideEffects == nil || !webhookNoSideEffects.Has(string(*h.sideEffects)) {
			opts.requireNoSideEffects = false
		}
		recognized := false
		for _, v := range h.admissionReviewVersions {
			recognized = recognized || isAcceptedAdmissionReviewVersion(v)
		}
		if !recognized && len(h.admissionReviewVersions) > 0 {
			opts.requireRecognizedAdmissionReviewVersion = false
		}
		if names.Has(h.name) {
			opts.requireUniqueWebhookNames = false
		}
		names.Insert(h.name)
		if (h.namespaceSelector != nil && len(metav1validation.ValidateLabelSelector(h.namespaceSelector, strict, nil)) > 0) ||
			(h.objectSelector != nil && len(metav1validation.ValidateLabelSelector(h.objectSelector, strict, nil)) > 0) {
			opts.allowInvalidLabelValueInSelector = true
		}
	}
	return opts
}

func validateWebhookConfiguration(m *metav1.ObjectMeta, hooks []webhookFields, opts webhookOptions) field.ErrorList {
	errs := validateMeta(m, false, apimachineryvalidation.NameIsDNSSubdomain)
	names := sets.New[string]()
	for i := range hooks {
		p := field.NewPath("webhooks").Index(i)
		errs = append(errs, validateWebhook(&hooks[i], opts, p)...)
		errs = append(errs, validateAdmissionReviewVersions(hooks[i].admissionReviewVersions, opts.requireRecognizedAdmissionReviewVersion, p.Child("admissionReviewVersions"))...)
		if name := hooks[i].name; opts.requireUniqueWebhookNames && name != "" {
			if names.Has(name) {
				errs = append(errs, field.Duplicate(p.Child("name"), name))
			}
			names.Insert(name)
		}
	}
	return errs
}

func validateWebhook(h *webhookFields, opts webhookOptions, p *field.Path) field.ErrorList {
	// The name is a fully qualified domain name of at least three segments
	// ("policy.example.com").
	errs := utilvalidation.IsFullyQualifiedName(p.Child("name"), h.name)
	for i := range h.rules {
		errs = append(errs, validateRuleWithOperations(&h.rules[i], p.Child("rules").Index(i))...)
	}
	if h.failurePolicy != nil && !webhookFailurePolicies.Has(string(*h.failurePolicy)) {
		errs = append(errs, field.NotSupported(p.Child("failurePolicy"), *h.failurePolicy, sets.List(webhookFailurePolicies)))
	}
	if h.matchPolicy != nil && !webhookMatchPolicies.Has(string(*h.matchPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *h.matchPolicy, sets.List(webhookMatchPolicies)))
	}
	allowedSideEffects := webhookSideEffects
	if opts.requireNoSideEffects {
		allowedSideEffects = webhookNoSideEffects
	}
	if h.sideEffects == nil {
		errs = append(errs, field.Required(p.Child("sideEffects"), fmt.Sprintf("must specify one of %v", strings.Join(sets.List(allowedSideEffects), ", "))))
	} else if !allowedSideEffects.Has(string(*h.sideEffects)) {
		errs = append(errs, field.NotSupported(p.Child("sideEffects"), *h.sideEffects, sets.List(allowedSideEffects)))
	}
	if h.timeoutSeconds != nil && (*h.timeoutSeconds > 30 || *h.timeoutSeconds < 1) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *h.timeoutSeconds, "the timeout value must be between 1 and 30 seconds"))
	}
	selOpts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: opts.allowInvalidLabelValueInSelector}
	if h.namespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.namespaceSelector, selOpts, p.Child("namespaceSelector"))...)
	}
	if h.objectSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.objectSelector, selOpts, p.Child("objectSelector"))...)
	}
	if h.mutating && h.reinvocationPolicy != nil && !webhookReinvocationPolicies.Has(string(*h.reinvocationPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), *h.reinvocationPolicy, sets.List(webhookReinvocationPolicies)))
	}
	errs = append(errs, validateWebhookClientConfig(h.clientConfig, p.Child("clientConfig"))...)
	if !opts.ignoreMatchConditions {
		errs = append(errs, validateWebhookMatchConditions(h.matchConditions, opts.storedExpressions, p.Child("matchConditions"))...)
	}
	return errs
}

// validateWebhookClientConfig checks that exactly one of url and service is set: an https URL
// without user, query or fragment, or a service with name, namespace, a valid port (443 when
// not defaulted) and a path of DNS subdomain segments.
func validateWebhookClientConfig(cc *admissionregistrationv1.WebhookClientConfig, p *field.Path) field.ErrorList {
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		return field.ErrorList{field.Required(p, "exactly one of url or service is required")}
	case cc.URL != nil:
		return webhook.ValidateWebhookURL(p.Child("url"), *cc.URL, true)
	default:
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		return webhook.ValidateWebhookService(p.Child("service"), cc.Service.Name, cc.Service.Namespace, cc.Service.Path, port)
	}
}

func isAcceptedAdmissionReviewVersion(v string) bool {
	for _, a := range acceptedAdmissionReviewVersions {
		if v == a {
			return true
		}
	}
	return false
}

func validateAdmissionReviewVersions(versions []string, requireRecognized bool, p *field.Path) field.ErrorList {
	if len(versions) < 1 {
		return field.ErrorList{field.Required(p, fmt.Sprintf("must specify one of %v", strings.Join(acceptedAdmissionReviewVersions, ", ")))}
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	accepted := false
	for i, v := range versions {
		if seen[v] {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
			continue
		}
		seen[v] = true
		errs = append(errs, nameErrs(p.Index(i), v, utilvalidation.IsDNS1035Label(v))...)
		accepted = accepted || isAcceptedAdmissionReviewVersion(v)
	}
	if requireRecognized && !accepted {
		errs = append(errs, field.Invalid(p, versions, fmt.Sprintf("must include at least one of %v", strings.Join(acceptedAdmissionReviewVersions, ", "))))
	}
	return errs
}

func webhookHasWildcard(list []string) bool {
	for _, s := range list {
		if s == "*" {
			return true
		}
	}
	return false
}

func validateRuleWithOperations(r *admissionregistrationv1.RuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	op := p.Child("operations")
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(op, ""))
	}
	hasAll := false
	for _, o := range r.Operations {
		hasAll = hasAll || o == admissionregistrationv1.OperationAll
	}
	if len(r.Operations) > 1 && hasAll {
		errs = append(errs, field.Invalid(op, r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, o := range r.Operations {
		if !webhookOperations.Has(string(o)) {
			errs = append(errs, field.NotSupported(op.Index(i), o, sets.List(webhookOperations)))
		}
	}
	return append(errs, validateWebhookRule(&r.Rule, p)...)
}

func validateWebhookRule(r *admissionregistrationv1.Rule, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && webhookHasWildcard(r.APIGroups) {
		errs = append(errs, field.Invalid(p.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	// A group may be empty (the core group); a version may not.
	if len(r.APIVersions) == 0 {
		errs = append(errs, field.Required(p.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && webhookHasWildcard(r.APIVersions) {
		errs = append(errs, field.Invalid(p.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(p.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateWebhookResources(r.Resources, p.Child("resources"))...)
	if r.Scope != nil && !webhookScopes.Has(string(*r.Scope)) {
		errs = append(errs, field.NotSupported(p.Child("scope"), *r.Scope, sets.List(webhookScopes)))
	}
	return errs
}

// validateWebhookResources checks resources of the forms "x", "x/y", "x/*", "*/y", "*" and "*/*"
// without overlaps between the wildcards and the names.
func validateWebhookResources(resources []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(p, ""))
	}
	withWildcardSub := sets.New[string]()    // x/*
	subWithWildcardRes := sets.New[string]() // */x
	hasDoubleWildcard, hasSingleWildcard, hasResourceWithoutSub := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		if rs == "*/*" {
			hasDoubleWildcard = true
		}
		if rs == "*" {
			hasSingleWildcard = true
		}
		res, sub, found := strings.Cut(rs, "/")
		if !found {
			// Upstream keeps the last plain resource's answer.
			hasResourceWithoutSub = rs != "*"
			continue
		}
		if withWildcardSub.Has(res) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if subWithWildcardRes.Has(sub) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		if sub == "*" {
			withWildcardSub.Insert(res)
		}
		if res == "*" {
			subWithWildcardRes.Insert(sub)
		}
	}
	if len(resources) > 1 && hasDoubleWildcard {
		errs = append(errs, field.Invalid(p, resources, "if '*/*' is present, must not specify other resources"))
	}
	if hasSingleWildcard && hasResourceWithoutSub {
		errs = append(errs, field.Invalid(p, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

// validateWebhookMatchConditions checks at most 64 conditions with unique qualified names and
// expressions that compile.
func validateWebhookMatchConditions(cs []admissionregistrationv1.MatchCondition, stored sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(cs) > maxMatchConditions {
		errs = append(errs, field.TooMany(p, len(cs), maxMatchConditions))
	}
	names := sets.New[string]()
	for i, c := range cs {
		cp := p.Index(i)
		if expr := strings.TrimSpace(c.Expression); expr == "" {
			errs = append(errs, field.Required(cp.Child("expression"), ""))
		} else {
			errs = append(errs, compileMatchCondition(expr, stored.Has(expr), cp.Child("expression"))...)
		}
		if c.Name == "" {
			errs = append(errs, field.Required(cp.Child("name"), ""))
		} else {
			errs = append(errs, nameErrs(cp.Child("name"), c.Name, utilvalidation.IsQualifiedName(c.Name))...)
			if names.Has(c.Name) {
				errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
			}
			names.Insert(c.Name)
		}
	}
	return errs
}

// matchConditionCompiler is the CEL compiler of webhook match conditions, built once: its
// environments take a while to build.
var matchConditionCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// compileMatchCondition compiles a match condition with the variables a webhook's conditions
// see (object, oldObject, request, authorizer; no params), to a bool.
func compileMatchCondition(expr string, stored bool, p *field.Path) field.ErrorList {
	envType := environment.NewExpressions
	if stored {
		envType = environment.StoredExpressions
	}
	res := matchConditionCompiler().CompileCELExpression(&matchconditions.MatchCondition{Expression: expr},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, envType)
	if res.Error == nil {
		return nil
	}
	switch res.Error.Type {
	case apiservercel.ErrorTypeRequired:
		return field.ErrorList{field.Required(p, res.Error.Detail)}
	case apiservercel.ErrorTypeInvalid:
		return field.ErrorList{field.Invalid(p, expr, res.Error.Detail)}
	default:
		return field.ErrorList{field.InternalError(p, res.Error)}
	}
}
