// Package rbac authorizes requests with the Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings of rbac.authorization.k8s.io/v1, with Kubernetes' semantics: rules
// only grant, a RoleBinding grants its role (a Role, or a ClusterRole) in the binding's
// namespace only, and a ClusterRoleBinding grants its ClusterRole everywhere.
//
// Besides the Authorizer, the package has the checks that keep a user from granting what
// it does not hold (ConfirmNoEscalation, CanBind, ConfirmBinding), the rules of an
// aggregated ClusterRole (AggregatedRules) and the bootstrap policy with its
// reconciliation (BootstrapClusterRoles, BootstrapClusterRoleBindings, Reconcile).
package rbac

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbacinformers "k8s.io/client-go/informers/rbac/v1"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
)

// DefaultIndexRefresh is how old the binding index may grow before a decision rebuilds
// it although nothing called Invalidate. It bounds how long a change to the bindings
// goes unseen when the listers' informers do not report changes (see Invalidate).
const DefaultIndexRefresh = time.Second

// Authorizer decides requests with RBAC. It implements authorizer.Authorizer and
// authorizer.RuleResolver.
//
// It reads roles from its listers at every decision, and keeps an index of the bindings by
// the users, groups and service accounts they name, so that a decision reads only the
// bindings of the requesting user and its groups. The index is rebuilt from the listers
// at the first decision after Invalidate, or once it is older than DefaultIndexRefresh.
// An Authorizer is safe for concurrent use.
type Authorizer struct {
	roles               rbaclisters.RoleLister
	roleBindings        rbaclisters.RoleBindingLister
	clusterRoles        rbaclisters.ClusterRoleLister
	clusterRoleBindings rbaclisters.ClusterRoleBindingLister

	gen     atomic.Uint64 // counts invalidations
	idx     atomic.Pointer[index]
	mu      sync.Mutex // serializes rebuilds
	refresh time.Duration
	now     func() time.Time
}

var (
	_ authorizer.Authorizer   = (*Authorizer)(nil)
	_ authorizer.RuleResolver = (*Authorizer)(nil)
)

// New returns an Authorizer that reads the four kinds from the listers. The bindings are
// indexed: call Invalidate whenever a RoleBinding or ClusterRoleBinding changes (the
// handler of BindingEventHandler does), or a change is seen only when the index is
// refreshed, at most DefaultIndexRefresh later. NewFromInformers does the wiring.
func New(roles rbaclisters.RoleLister, roleBindings rbaclisters.RoleBindingLister,
	clusterRoles rbaclisters.ClusterRoleLister, clusterRoleBindings rbaclisters.ClusterRoleBindingLister) *Authorizer {
	return &Authorizer{
		roles:               roles,
		roleBindings:        roleBindings,
		clusterRoles:        clusterRoles,
		clusterRoleBindings: clusterRoleBindings,
		refresh:             DefaultIndexRefresh,
		now:                 time.Now,
	}
}

// NewFromInformers returns an Authorizer on the informers' listers, and registers
// BindingEventHandler with the RoleBinding and ClusterRoleBinding informers. The informers
// must be started (and synced before the Authorizer can allow anything) by the caller.
func NewFromInformers(informers rbacinformers.Interface) (*Authorizer, error) {
	a := New(informers.Roles().Lister(), informers.RoleBindings().Lister(),
		informers.ClusterRoles().Lister(), informers.ClusterRoleBindings().Lister())
	h := a.BindingEventHandler()
	if _, err := informers.RoleBindings().Informer().AddEventHandler(h); err != nil {
		return nil, fmt.Errorf("watching RoleBindings: %w", err)
	}
	if _, err := informers.ClusterRoleBindings().Informer().AddEventHandler(h); err != nil {
		return nil, fmt.Errorf("watching ClusterRoleBindings: %w", err)
	}
	return a, nil
}

// Invalidate makes the next decision rebuild the binding index from the listers. Call it
// after the listers' cache changed a RoleBinding or ClusterRoleBinding: a decision that
// starts after Invalidate returns sees the change.
func (a *Authorizer) Invalidate() { a.gen.Add(1) }

// BindingEventHandler returns an informer event handler that calls Invalidate on every
// added, changed or deleted binding. Updates that keep the resourceVersion (resyncs) are
// ignored.
func (a *Authorizer) BindingEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { a.Invalidate() },
		UpdateFunc: func(oldObj, newObj any) {
			o, err1 := meta.Accessor(oldObj)
			n, err2 := meta.Accessor(newObj)
			if err1 == nil && err2 == nil && o.GetResourceVersion() != "" && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			a.Invalidate()
		},
		DeleteFunc: func(any) { a.Invalidate() },
	}
}

// index returns an index built after the last Invalidate and not older than the refresh
// interval, building one if needed.
func (a *Authorizer) index() *index {
	if idx := a.idx.Load(); a.fresh(idx) {
		return idx
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if idx := a.idx.Load(); a.fresh(idx) {
		return idx
	}
	// Read the generation before listing: an Invalidate during the build leaves the new
	// index stale, so the next decision builds again.
	idx := a.buildIndex(a.gen.Load())
	a.idx.Store(idx)
	return idx
}

func (a *Authorizer) fresh(idx *index) bool {
	return idx != nil && idx.err == nil && idx.gen == a.gen.Load() &&
		(a.refresh <= 0 || a.now().Sub(idx.built) < a.refresh)
}

// Authorize allows the request when a rule of a role bound to its user, or to one of the
// user's groups, allows it: a ClusterRoleBinding's rules count in every namespace and for
// cluster-scoped and non-resource requests, a RoleBinding's only for requests in its
// namespace. Otherwise it has no opinion, with a reason naming the bindings it evaluated
// and the roles it could not read. It never denies and never returns an error.
func (a *Authorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "RBAC: no user", nil
	}
	idx := a.index()
	var buf [32]*grant
	grants := idx.applicable(u.GetName(), u.GetGroups(), attrs.GetNamespace(), buf[:0])
	req := newRequest(attrs)
	var errs []error
	for _, g := range grants {
		rules, err := a.grantRules(g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range rules {
			if req.allowedBy(&rules[i]) {
				return authorizer.DecisionAllow, g.allowedReason(), nil
			}
		}
	}
	if idx.err != nil {
		errs = append(errs, idx.err)
	}
	return authorizer.DecisionNoOpinion, denialReason(grants, errs), nil
}

// reasonBindings is how many bindings a denial's reason names.
const reasonBindings = 3

// denialReason says which bindings were evaluated without a rule allowing the request, and
// which errors kept rules from being read. The API server appends it to its "cannot"
// message, so it is kept short.
func denialReason(grants []*grant, errs []error) string {
	var b strings.Builder
	b.Grow(160)
	b.WriteString("RBAC: ")
	if len(grants) == 0 {
		b.WriteString("no binding applies to the user or its groups")
	} else {
		b.WriteString("no rule allows it in ")
		for i, g := range grants {
			if i == reasonBindings {
				b.WriteString(" and ")
				b.WriteString(strconv.Itoa(len(grants) - reasonBindings))
				b.WriteString(" more")
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(g.binding())
		}
	}
	if len(errs) > 0 {
		b.WriteString("; ")
		b.WriteString(utilerrors.NewAggregate(errs).Error())
	}
	return b.String()
}

// ConditionsAwareAuthorize is Authorize: the Authorizer sets no conditions.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions fails closed: the Authorizer sets no conditions to evaluate.
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// RulesFor returns the rules u holds in namespace (the cluster-wide ones only when
// namespace is ""), as the rules reviews report them. The list is complete unless err is
// set; the rules found are valid either way, since rules only grant.
func (a *Authorizer) RulesFor(_ context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	var (
		resourceRules    []authorizer.ResourceRuleInfo
		nonResourceRules []authorizer.NonResourceRuleInfo
	)
	rules, err := a.PolicyRulesFor(u, namespace)
	for _, r := range rules {
		if len(r.Resources) > 0 {
			resourceRules = append(resourceRules, &authorizer.DefaultResourceRuleInfo{
				Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames,
			})
		}
		if len(r.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, &authorizer.DefaultNonResourceRuleInfo{
				Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs,
			})
		}
	}
	return resourceRules, nonResourceRules, false, err
}

// PolicyRulesFor returns the rules of every role bound to u or its groups that applies in
// namespace: those of ClusterRoleBindings and, when namespace is set, those of the
// namespace's RoleBindings. On error (a binding refers to a role that does not exist) the
// rules that could be read are returned with it. The rules share their slices with the
// listers' objects: do not modify them.
func (a *Authorizer) PolicyRulesFor(u user.Info, namespace string) ([]rbacv1.PolicyRule, error) {
	if u == nil {
		return nil, fmt.Errorf("no user")
	}
	idx := a.index()
	var buf [32]*grant
	var rules []rbacv1.PolicyRule
	var errs []error
	for _, g := range idx.applicable(u.GetName(), u.GetGroups(), namespace, buf[:0]) {
		rs, err := a.grantRules(g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rules = append(rules, rs...)
	}
	if idx.err != nil {
		errs = append(errs, idx.err)
	}
	return rules, utilerrors.NewAggregate(errs)
}

// grantRules returns the rules of the role g's binding refers to.
func (a *Authorizer) grantRules(g *grant) ([]rbacv1.PolicyRule, error) {
	if g.roleRef.Kind == "Role" && g.roles != nil {
		r, err := g.roles.Get(g.roleRef.Name)
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	}
	return a.roleRefRules(g.roleRef, g.namespace)
}

// roleRefRules returns the rules of the role a binding refers to; bindingNamespace is the
// RoleBinding's namespace, "" for a ClusterRoleBinding.
func (a *Authorizer) roleRefRules(ref rbacv1.RoleRef, bindingNamespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "ClusterRole":
		cr, err := a.clusterRoles.Get(ref.Name)
		if err != nil {
			return nil, err
		}
		return cr.Rules, nil
	case "Role":
		if bindingNamespace == "" {
			return nil, fmt.Errorf("a ClusterRoleBinding cannot refer to Role %q", ref.Name)
		}
		r, err := a.roles.Roles(bindingNamespace).Get(ref.Name)
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	default:
		return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
	}
}
