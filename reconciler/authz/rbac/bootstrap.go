package rbac

import (
	"errors"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/component-helpers/auth/rbac/reconciliation"

	"github.com/flotilla-dev/flotilla/reconciler/authz"
)

// Labels of the bootstrap policy.
const (
	// BootstrappingLabel marks every bootstrap ClusterRole and ClusterRoleBinding, with the
	// value "rbac-defaults".
	BootstrappingLabel = "kubernetes.io/bootstrapping"
	// AggregateToAdmin, AggregateToEdit and AggregateToView, set to "true" on a ClusterRole,
	// add its rules to admin, edit and view. edit is itself aggregated to admin, and view
	// to edit.
	AggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	AggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	AggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"
)

var (
	read      = []string{"get", "list", "watch"}
	write     = []string{"create", "delete", "deletecollection", "patch", "update"}
	readWrite = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)

func rule(verbs []string, group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{group}, Resources: resources}
}

func urls(verbs []string, urls ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: urls}
}

func aggregatedFrom(label string) *rbacv1.AggregationRule {
	return &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
		{MatchLabels: map[string]string{label: "true"}},
	}}
}

// BootstrapClusterRoles returns the ClusterRoles every cluster starts with:
//   - cluster-admin, which may do anything;
//   - admin, edit and view, whose rules are aggregated from the ClusterRoles labeled
//     AggregateToAdmin, AggregateToEdit and AggregateToView, with
//     system:aggregate-to-admin, system:aggregate-to-edit and system:aggregate-to-view
//     holding the Kubernetes defaults for the resources flotilla serves;
//   - system:discovery, system:basic-user and system:public-info-viewer, which let users
//     discover the API, review their own access and read the health and version endpoints.
//
// Each is labeled BootstrappingLabel and annotated for reconciliation
// (rbac.authorization.kubernetes.io/autoupdate: "true"). A new slice is returned on
// every call.
func BootstrapClusterRoles() []rbacv1.ClusterRole {
	const core, apps, autoscaling, batch = "", "apps", "autoscaling", "batch"
	const networking, policy, coordination = "networking.k8s.io", "policy", "coordination.k8s.io"
	roles := []rbacv1.ClusterRole{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"},
			Rules: []rbacv1.PolicyRule{
				rule([]string{"*"}, "*", "*"),
				urls([]string{"*"}, "*"),
			},
		},
		{
			// A namespace's administrator: edit, and granting access within the namespace.
			ObjectMeta:      metav1.ObjectMeta{Name: "admin"},
			AggregationRule: aggregatedFrom(AggregateToAdmin),
		},
		{
			// Everything a user does in a namespace, without changing who may do what.
			ObjectMeta:      metav1.ObjectMeta{Name: "edit", Labels: map[string]string{AggregateToAdmin: "true"}},
			AggregationRule: aggregatedFrom(AggregateToEdit),
		},
		{
			// Reading a namespace's objects, except secrets and what would reveal them.
			ObjectMeta:      metav1.ObjectMeta{Name: "view", Labels: map[string]string{AggregateToEdit: "true"}},
			AggregationRule: aggregatedFrom(AggregateToView),
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-admin", Labels: map[string]string{AggregateToAdmin: "true"}},
			Rules: []rbacv1.PolicyRule{
				rule([]string{"create"}, "authorization.k8s.io", "localsubjectaccessreviews"),
				rule(readWrite, rbacv1.GroupName, "rolebindings", "roles"),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-edit", Labels: map[string]string{AggregateToEdit: "true"}},
			Rules: []rbacv1.PolicyRule{
				rule(read, core, "pods/exec", "pods/portforward", "secrets"),
				rule([]string{"impersonate"}, core, "serviceaccounts"),
				rule(write, core, "pods", "pods/exec", "pods/portforward"),
				rule([]string{"create"}, core, "pods/eviction"),
				rule(write, core, "configmaps", "events", "persistentvolumeclaims", "secrets", "serviceaccounts", "services"),
				rule(write, apps, "daemonsets", "deployments", "deployments/scale", "replicasets", "replicasets/scale",
					"statefulsets", "statefulsets/scale"),
				rule(write, autoscaling, "horizontalpodautoscalers"),
				rule(write, batch, "cronjobs", "jobs"),
				rule(write, policy, "poddisruptionbudgets"),
				rule(write, networking, "ingresses", "networkpolicies"),
				rule(readWrite, coordination, "leases"),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-view", Labels: map[string]string{AggregateToView: "true"}},
			Rules: []rbacv1.PolicyRule{
				rule(read, core, "configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
					"serviceaccounts", "services", "services/status"),
				rule(read, core, "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "resourcequotas",
					"resourcequotas/status"),
				// Reading namespaces in a namespace reads that namespace only.
				rule(read, core, "namespaces"),
				rule(read, "discovery.k8s.io", "endpointslices"),
				rule(read, apps, "controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
					"deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets",
					"statefulsets/scale", "statefulsets/status"),
				rule(read, autoscaling, "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
				rule(read, batch, "cronjobs", "cronjobs/status", "jobs", "jobs/status"),
				rule(read, policy, "poddisruptionbudgets", "poddisruptionbudgets/status"),
				rule(read, networking, "ingresses", "ingresses/status", "networkpolicies"),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"},
			Rules: []rbacv1.PolicyRule{
				urls([]string{"get"}, "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
					"/readyz", "/version", "/version/"),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"},
			Rules: []rbacv1.PolicyRule{
				rule([]string{"create"}, "authorization.k8s.io", "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
				rule([]string{"create"}, "authentication.k8s.io", "selfsubjectreviews"),
			},
		},
		{
			// Plan-only credentials: read everything (Secret values come back as digests)
			// and write anything, including roles and bindings, but only as a dry-run —
			// the API refuses their other writes and every connection to a pod.
			ObjectMeta: metav1.ObjectMeta{Name: PlannerRole},
			Rules: []rbacv1.PolicyRule{
				rule([]string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "bind", "escalate"}, "*", "*"),
				urls([]string{"get"}, "*"),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"},
			Rules: []rbacv1.PolicyRule{
				urls([]string{"get"}, "/healthz", "/livez", "/readyz", "/version", "/version/"),
			},
		},
	}
	for i := range roles {
		addBootstrapMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// BootstrapClusterRoleBindings returns the ClusterRoleBindings every cluster starts with:
// cluster-admin to system:masters, system:discovery and system:basic-user to every
// authenticated user, and system:public-info-viewer to every user, authenticated or not.
// They carry the same label and annotation as BootstrapClusterRoles.
func BootstrapClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	bindings := []rbacv1.ClusterRoleBinding{
		clusterBinding("cluster-admin", user.SystemPrivilegedGroup),
		clusterBinding("system:discovery", user.AllAuthenticated),
		clusterBinding("system:basic-user", user.AllAuthenticated),
		clusterBinding("system:public-info-viewer", user.AllAuthenticated, user.AllUnauthenticated),
		clusterBindingTo(PlannerRole, PlannerRole, authz.PlannersGroup),
	}
	for i := range bindings {
		addBootstrapMetadata(&bindings[i].ObjectMeta)
	}
	return bindings
}

// PlannerRole is the ClusterRole of plan-only credentials, bound to authz.PlannersGroup.
const PlannerRole = "flotilla:planner"

// clusterBinding binds the ClusterRole named name to groups, in a binding of that name.
func clusterBinding(name string, groups ...string) rbacv1.ClusterRoleBinding {
	return clusterBindingTo(name, name, groups...)
}

// clusterBindingTo binds the ClusterRole role to groups, in a binding named name.
func clusterBindingTo(name, role string, groups ...string) rbacv1.ClusterRoleBinding {
	b := rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}
	for _, g := range groups {
		b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
	}
	return b
}

func addBootstrapMetadata(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[BootstrappingLabel] = "rbac-defaults"
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[rbacv1.AutoUpdateAnnotationKey] = "true"
}

// Bootstrapped is what Reconcile reconciles.
type Bootstrapped interface {
	*rbacv1.ClusterRole | *rbacv1.ClusterRoleBinding
}

// Operation is the write a reconciliation needs.
type Operation string

const (
	// OperationNone: the stored object is as it should be, or is protected.
	OperationNone Operation = "none"
	// OperationCreate: no object is stored; create Object.
	OperationCreate Operation = "create"
	// OperationUpdate: update the stored object to Object.
	OperationUpdate Operation = "update"
	// OperationRecreate: the stored binding refers to another role, which cannot be
	// changed in place; delete it and create Object.
	OperationRecreate Operation = "recreate"
)

// Reconciliation is the result of Reconcile.
type Reconciliation[T Bootstrapped] struct {
	// Object is what to write for Operation: the stored object with what is missing added,
	// or the desired object to create. With OperationNone it is the stored object.
	Object    T
	Operation Operation
	// Protected is set when the stored object opted out of reconciliation with the
	// annotation rbac.authorization.kubernetes.io/autoupdate: "false". Operation is then
	// OperationNone, and MissingRules and MissingSubjects say what it lacks.
	Protected bool
	// MissingRules are the desired rules (of a ClusterRole) the stored object did not
	// cover; MissingSubjects the desired subjects (of a binding) it did not have.
	MissingRules    []rbacv1.PolicyRule
	MissingSubjects []rbacv1.Subject
}

// Reconcile computes what to write so that existing, the stored object (nil when there is
// none), holds at least what desired holds, as the API server does with its bootstrap
// policy at start: missing rules, aggregation selectors, subjects, labels and annotations
// are added; what users added (rules, subjects, labels, annotations, and the rules filled
// in by aggregation) is kept, and existing values win over desired ones for the same
// label or annotation key. A binding whose roleRef differs is recreated. An object
// annotated rbac.authorization.kubernetes.io/autoupdate: "false" is left alone. Neither
// argument is modified.
func Reconcile[T Bootstrapped](existing, desired T) (Reconciliation[T], error) {
	switch d := any(desired).(type) {
	case *rbacv1.ClusterRole:
		e := any(existing).(*rbacv1.ClusterRole)
		if d == nil {
			return Reconciliation[T]{}, errors.New("no desired ClusterRole")
		}
		trimmed, retired := withoutRetiredRules(e)
		res, err := (&reconciliation.ReconcileRoleOptions{
			Role:   reconciliation.ClusterRoleRuleOwner{ClusterRole: d.DeepCopy()},
			Client: storedRole{trimmed},
		}).Run()
		if err != nil {
			return Reconciliation[T]{}, err
		}
		r := Reconciliation[T]{
			Object:       any(res.Role.(reconciliation.ClusterRoleRuleOwner).ClusterRole).(T),
			Operation:    Operation(res.Operation),
			Protected:    res.Protected,
			MissingRules: res.MissingRules,
		}
		if r.Protected {
			r.Object, r.Operation = existing, OperationNone
		} else if retired && r.Operation == OperationNone {
			r.Object, r.Operation = any(trimmed).(T), OperationUpdate
		}
		return r, nil
	case *rbacv1.ClusterRoleBinding:
		e := any(existing).(*rbacv1.ClusterRoleBinding)
		if d == nil {
			return Reconciliation[T]{}, errors.New("no desired ClusterRoleBinding")
		}
		res, err := (&reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: d.DeepCopy()},
			Client:      storedBinding{e},
		}).Run()
		if err != nil {
			return Reconciliation[T]{}, err
		}
		r := Reconciliation[T]{
			Object:          any(res.RoleBinding.(reconciliation.ClusterRoleBindingAdapter).ClusterRoleBinding).(T),
			Operation:       Operation(res.Operation),
			Protected:       res.Protected,
			MissingSubjects: res.MissingSubjects,
		}
		if r.Protected {
			r.Object, r.Operation = existing, OperationNone
		}
		return r, nil
	}
	return Reconciliation[T]{}, fmt.Errorf("cannot reconcile %T", desired)
}

// retiredRules are rules earlier versions of flotilla gave a ClusterRole of their bootstrap
// policy and took back, by ClusterRole name: Reconcile removes them from a stored role
// (unless it is protected), where it otherwise keeps every rule it does not know.
var retiredRules = map[string][]rbacv1.PolicyRule{
	// The Node authorizer (reconciler/authz/node) lets a host read what its pods use;
	// system:node no longer lists and watches these in every namespace.
	nodeRoleName: {
		rule(verbs("list", "watch"), coreGroup, "configmaps", "persistentvolumeclaims", "persistentvolumes", "pods", "secrets", "services"),
	},
}

// withoutRetiredRules returns a copy of cr without its retiredRules, and whether it had
// any; cr itself when it had none.
func withoutRetiredRules(cr *rbacv1.ClusterRole) (*rbacv1.ClusterRole, bool) {
	if cr == nil || len(retiredRules[cr.Name]) == 0 {
		return cr, false
	}
	var keep []rbacv1.PolicyRule
	removed := false
	for _, r := range cr.Rules {
		if slices.ContainsFunc(retiredRules[cr.Name], func(old rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(old, r) }) {
			removed = true
			continue
		}
		keep = append(keep, r)
	}
	if !removed {
		return cr, false
	}
	cp := cr.DeepCopy()
	cp.Rules = keep
	return cp, true
}

// storedRole serves the reconciliation's dry run the stored ClusterRole, if any. The
// reconciliation never writes through it.
type storedRole struct{ cr *rbacv1.ClusterRole }

func (s storedRole) Get(_, name string) (reconciliation.RuleOwner, error) {
	if s.cr == nil {
		return nil, apierrors.NewNotFound(rbacv1.Resource("clusterroles"), name)
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: s.cr.DeepCopy()}, nil
}

func (storedRole) Create(reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	return nil, errors.New("dry run")
}

func (storedRole) Update(reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	return nil, errors.New("dry run")
}

// storedBinding is storedRole for a ClusterRoleBinding.
type storedBinding struct{ b *rbacv1.ClusterRoleBinding }

func (s storedBinding) Get(_, name string) (reconciliation.RoleBinding, error) {
	if s.b == nil {
		return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrolebindings"), name)
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: s.b.DeepCopy()}, nil
}

func (storedBinding) Delete(string, string, types.UID) error { return errors.New("dry run") }

func (storedBinding) Create(reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	return nil, errors.New("dry run")
}

func (storedBinding) Update(reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	return nil, errors.New("dry run")
}
