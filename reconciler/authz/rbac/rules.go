package rbac

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// RuleAllows reports whether rule allows the request described by attrs.
//
// A resource request matches when the rule names its verb, its API group, its resource
// (as "resource" or, for a subresource, "resource/subresource" or "*/subresource") and,
// when the rule lists resourceNames, the request's name. A request without a name
// (list, watch, deletecollection, and create of a collection) never matches a rule that
// lists resourceNames. A non-resource request matches when the rule names its verb and
// its path, where a URL ending in "*" matches every path with that prefix. "*" in verbs,
// apiGroups, resources or nonResourceURLs matches anything.
func RuleAllows(attrs authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if attrs.IsResourceRequest() {
		combined := attrs.GetResource()
		if sub := attrs.GetSubresource(); sub != "" {
			combined += "/" + sub
		}
		return ruleAllowsResource(rule, attrs.GetVerb(), attrs.GetAPIGroup(), combined, attrs.GetSubresource(), attrs.GetName())
	}
	return verbMatches(rule, attrs.GetVerb()) && nonResourceURLMatches(rule, attrs.GetPath())
}

// RulesAllow reports whether any of rules allows the request described by attrs.
func RulesAllow(attrs authorizer.Attributes, rules ...rbacv1.PolicyRule) bool {
	for i := range rules {
		if RuleAllows(attrs, &rules[i]) {
			return true
		}
	}
	return false
}

// request is a request's attributes read once, so that matching it against many rules
// does not call the Attributes interface or build the combined resource again.
type request struct {
	resource    bool
	verb        string
	group       string
	combined    string // resource, or resource/subresource
	subresource string
	name        string
	path        string
}

func newRequest(attrs authorizer.Attributes) request {
	r := request{resource: attrs.IsResourceRequest(), verb: attrs.GetVerb()}
	if !r.resource {
		r.path = attrs.GetPath()
		return r
	}
	r.group, r.subresource, r.name = attrs.GetAPIGroup(), attrs.GetSubresource(), attrs.GetName()
	r.combined = attrs.GetResource()
	if r.subresource != "" {
		r.combined += "/" + r.subresource
	}
	return r
}

func (r *request) allowedBy(rule *rbacv1.PolicyRule) bool {
	if r.resource {
		return ruleAllowsResource(rule, r.verb, r.group, r.combined, r.subresource, r.name)
	}
	return verbMatches(rule, r.verb) && nonResourceURLMatches(rule, r.path)
}

func ruleAllowsResource(rule *rbacv1.PolicyRule, verb, group, combined, subresource, name string) bool {
	return verbMatches(rule, verb) &&
		apiGroupMatches(rule, group) &&
		resourceMatches(rule, combined, subresource) &&
		resourceNameMatches(rule, name)
}

func verbMatches(rule *rbacv1.PolicyRule, verb string) bool {
	for _, v := range rule.Verbs {
		if v == rbacv1.VerbAll || v == verb {
			return true
		}
	}
	return false
}

func apiGroupMatches(rule *rbacv1.PolicyRule, group string) bool {
	for _, g := range rule.APIGroups {
		if g == rbacv1.APIGroupAll || g == group {
			return true
		}
	}
	return false
}

// resourceMatches matches combined ("pods" or "pods/log") against the rule's resources:
// "*", the exact combined resource, or "*/<subresource>" for a subresource request.
func resourceMatches(rule *rbacv1.PolicyRule, combined, subresource string) bool {
	for _, res := range rule.Resources {
		if res == rbacv1.ResourceAll || res == combined {
			return true
		}
		if subresource != "" && len(res) == len(subresource)+2 &&
			strings.HasPrefix(res, "*/") && strings.HasSuffix(res, subresource) {
			return true
		}
	}
	return false
}

// resourceNameMatches is true for a rule without resourceNames, and otherwise only when
// the request has a name the rule lists.
func resourceNameMatches(rule *rbacv1.PolicyRule, name string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == name {
			return true
		}
	}
	return false
}

func nonResourceURLMatches(rule *rbacv1.PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == rbacv1.NonResourceAll || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}
