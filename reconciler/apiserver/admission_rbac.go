package apiserver

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// rbacEscalationGuard refuses Roles, ClusterRoles and bindings that would give someone
// more than the writer holds, as Kubernetes' RBAC storage does:
//   - a Role or ClusterRole may grant only rules the writer holds where it applies, unless
//     the writer may "escalate" roles (clusterroles) there;
//   - a ClusterRole with an aggregationRule may be written only by who holds every
//     permission, or may escalate, since its rules come from any labeled role;
//   - a RoleBinding or ClusterRoleBinding may refer only to a role whose rules the writer
//     holds where the binding applies, unless the writer may "bind" that role.
//
// system:masters may write anything. Updates that keep the rules (or the roleRef and
// subjects) are not checked, so the garbage collector and finalizers work on any role.
type rbacEscalationGuard struct {
	*admission.Handler
	authz *rbac.Authorizer
}

func newRBACEscalationGuard(authz *rbac.Authorizer) *rbacEscalationGuard {
	return &rbacEscalationGuard{Handler: admission.NewHandler(admission.Create, admission.Update), authz: authz}
}

var _ admission.ValidationInterface = (*rbacEscalationGuard)(nil)

// fullAuthority is what writing an aggregated ClusterRole needs.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

func (g *rbacEscalationGuard) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().Group != rbacv1.GroupName || a.GetSubresource() != "" {
		return nil
	}
	u := a.GetUserInfo()
	if rbac.IsPrivileged(u) {
		return nil
	}
	var err error
	switch obj := a.GetObject().(type) {
	case *rbacv1.Role:
		if old, ok := a.GetOldObject().(*rbacv1.Role); ok && apiequality.Semantic.DeepEqual(old.Rules, obj.Rules) {
			return nil
		}
		err = g.authz.ConfirmNoEscalationForRole(ctx, u, a.GetNamespace(), obj.Name, obj.Rules)
	case *rbacv1.ClusterRole:
		if old, ok := a.GetOldObject().(*rbacv1.ClusterRole); ok && apiequality.Semantic.DeepEqual(old.Rules, obj.Rules) &&
			apiequality.Semantic.DeepEqual(old.AggregationRule, obj.AggregationRule) {
			return nil
		}
		if obj.AggregationRule != nil {
			if e := g.authz.ConfirmNoEscalationForRole(ctx, u, "", obj.Name, fullAuthority); e != nil {
				err = fmt.Errorf("user %q must hold every permission, or may escalate clusterroles, to write a ClusterRole with an aggregationRule", u.GetName())
			}
			break
		}
		err = g.authz.ConfirmNoEscalationForRole(ctx, u, "", obj.Name, obj.Rules)
	case *rbacv1.RoleBinding:
		if old, ok := a.GetOldObject().(*rbacv1.RoleBinding); ok && old.RoleRef == obj.RoleRef &&
			apiequality.Semantic.DeepEqual(old.Subjects, obj.Subjects) {
			return nil
		}
		err = g.authz.ConfirmBinding(ctx, u, obj.RoleRef, a.GetNamespace())
	case *rbacv1.ClusterRoleBinding:
		if old, ok := a.GetOldObject().(*rbacv1.ClusterRoleBinding); ok && old.RoleRef == obj.RoleRef &&
			apiequality.Semantic.DeepEqual(old.Subjects, obj.Subjects) {
			return nil
		}
		err = g.authz.ConfirmBinding(ctx, u, obj.RoleRef, "")
	default:
		return nil
	}
	if err != nil {
		return admission.NewForbidden(a, err)
	}
	return nil
}

// connectCreateGuard requires "create" on pods/exec, pods/attach and pods/portforward for
// every connection, as Kubernetes does: kubectl's websocket upgrade arrives as a GET, which a
// role granting "get" on every resource (a reader, the garbage collector) would otherwise
// turn into a shell in any pod.
type connectCreateGuard struct {
	*admission.Handler
	authz authorizer.Authorizer
}

func newConnectCreateGuard(authz authorizer.Authorizer) *connectCreateGuard {
	return &connectCreateGuard{Handler: admission.NewHandler(admission.Connect), authz: authz}
}

var _ admission.ValidationInterface = (*connectCreateGuard)(nil)

func (g *connectCreateGuard) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != corev1.Resource("pods") {
		return nil
	}
	switch a.GetSubresource() {
	case "exec", "attach", "portforward":
	default:
		return nil
	}
	d, reason, err := g.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: "create", Namespace: a.GetNamespace(), APIGroup: "", APIVersion: "v1",
		Resource: "pods", Subresource: a.GetSubresource(), Name: a.GetName(), ResourceRequest: true,
	})
	if d == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot create resource \"pods/%s\" in the namespace %q: connecting to a pod needs create, not only get",
		a.GetUserInfo().GetName(), a.GetSubresource(), a.GetNamespace())
	if reason != "" {
		msg += ": " + reason
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	return admission.NewForbidden(a, errors.New(msg))
}
