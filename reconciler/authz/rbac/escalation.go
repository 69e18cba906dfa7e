package rbac

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// IsPrivileged reports whether u is in system:masters, the group of the API server's own
// loopback client, which may grant anything.
func IsPrivileged(u user.Info) bool {
	if u == nil {
		return false
	}
	for _, g := range u.GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return true
		}
	}
	return false
}

// ConfirmNoEscalation returns nil when u may write a role with rules: a Role in namespace,
// or a ClusterRole when namespace is "". That is when u is privileged, may "escalate"
// roles (clusterroles) there, or already holds every one of rules there, per
// PolicyRulesFor. Otherwise the error lists the rules u does not hold.
func (a *Authorizer) ConfirmNoEscalation(ctx context.Context, u user.Info, namespace string, rules []rbacv1.PolicyRule) error {
	return a.ConfirmNoEscalationForRole(ctx, u, namespace, "", rules)
}

// ConfirmNoEscalationForRole is ConfirmNoEscalation for the role named name, so that an
// "escalate" permission limited to some resourceNames counts for it.
func (a *Authorizer) ConfirmNoEscalationForRole(ctx context.Context, u user.Info, namespace, name string, rules []rbacv1.PolicyRule) error {
	if u == nil {
		return errors.New("no user")
	}
	if IsPrivileged(u) {
		return nil
	}
	resource := "roles"
	if namespace == "" {
		resource = "clusterroles"
	}
	if a.allowed(ctx, authorizer.AttributesRecord{
		User: u, Verb: "escalate", APIGroup: rbacv1.GroupName, APIVersion: "*",
		Resource: resource, Name: name, Namespace: namespace, ResourceRequest: true,
	}) {
		return nil
	}
	return a.confirmHeld(u, namespace, rules)
}

// CanBind reports whether u may "bind" the role roleRef refers to in namespace (where the
// binding is written; "" for a ClusterRoleBinding): binding a role one may bind needs no
// other check. It does not count privilege (see ConfirmBinding).
func (a *Authorizer) CanBind(ctx context.Context, u user.Info, roleRef rbacv1.RoleRef, namespace string) bool {
	if u == nil {
		return false
	}
	var resource string
	switch roleRef.Kind {
	case "ClusterRole":
		resource = "clusterroles"
	case "Role":
		resource = "roles"
	default:
		return false
	}
	return a.allowed(ctx, authorizer.AttributesRecord{
		User: u, Verb: "bind", APIGroup: roleRef.APIGroup, APIVersion: "*",
		Resource: resource, Name: roleRef.Name, Namespace: namespace, ResourceRequest: true,
	})
}

// ConfirmBinding returns nil when u may write a binding in namespace ("" for a
// ClusterRoleBinding) that refers to roleRef: u is privileged, may bind the role
// (CanBind), or already holds every rule of the role in that namespace. Otherwise the
// error says why: the role cannot be read, or the rules u does not hold.
func (a *Authorizer) ConfirmBinding(ctx context.Context, u user.Info, roleRef rbacv1.RoleRef, namespace string) error {
	if u == nil {
		return errors.New("no user")
	}
	if IsPrivileged(u) || a.CanBind(ctx, u, roleRef, namespace) {
		return nil
	}
	rules, err := a.roleRefRules(roleRef, namespace)
	if err != nil {
		return err
	}
	return a.confirmHeld(u, namespace, rules)
}

func (a *Authorizer) allowed(ctx context.Context, attrs authorizer.AttributesRecord) bool {
	d, _, err := a.Authorize(ctx, attrs)
	return err == nil && d == authorizer.DecisionAllow
}

// confirmHeld returns nil when the rules u holds in namespace cover rules, and otherwise
// an error listing, compacted, what is missing.
func (a *Authorizer) confirmHeld(u user.Info, namespace string, rules []rbacv1.PolicyRule) error {
	owned, resolveErr := a.PolicyRulesFor(u, namespace)
	covered, missing := validation.Covers(owned, rules)
	if covered {
		return nil
	}
	seen := map[string]bool{}
	var lines []string
	for _, r := range compactRules(missing) {
		if s := compactString(r); !seen[s] {
			seen[s] = true
			lines = append(lines, s)
		}
	}
	sort.Strings(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s",
		u.GetName(), u.GetGroups(), strings.Join(lines, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", []error{resolveErr})
	}
	return errors.New(msg)
}

// simpleResource is the part of a rule with one API group, one resource and at most one
// resource name that compactRules merges on.
type simpleResource struct {
	group, resource string
	named           bool
	name            string
}

// compactRules merges the rules that differ only in their verbs, as the one-verb rules of
// validation.Covers do, so that the missing permissions read as few rules.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	merged := map[simpleResource]int{} // index in out
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.APIGroups) != 1 || len(r.Resources) != 1 || len(r.ResourceNames) > 1 {
			out = append(out, r)
			continue
		}
		k := simpleResource{group: r.APIGroups[0], resource: r.Resources[0], named: len(r.ResourceNames) == 1}
		if k.named {
			k.name = r.ResourceNames[0]
		}
		i, ok := merged[k]
		if !ok {
			merged[k] = len(out)
			out = append(out, *r.DeepCopy())
			continue
		}
		for _, v := range r.Verbs {
			if !contains(out[i].Verbs, v) {
				out[i].Verbs = append(out[i].Verbs, v)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// compactString writes a rule as escalation errors show it:
// {APIGroups:[""], Resources:["pods"], Verbs:["get"]}.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, v))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}
