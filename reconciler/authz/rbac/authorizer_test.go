package rbac

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

var (
	readVerbs = []string{"get", "list", "watch"}
	get       = []string{"get"}
)

// policy is the fixture most tests decide against.
func policy() []any {
	return []any{
		clusterRole("pod-reader", coreRule(readVerbs, "pods")),
		clusterRole("log-reader", coreRule(get, "pods/log")),
		clusterRole("any-status", groups(resources(newRule("get"), "*/status"), "*")),
		clusterRole("named-configmaps", names(coreRule([]string{"get", "update", "create"}, "configmaps"), "cm1")),
		clusterRole("evict-p1", names(coreRule([]string{"create"}, "pods/eviction"), "p1")),
		clusterRole("health", nonResource(newRule("get"), "/healthz", "/logs/*")),
		clusterRole("deployer", groups(resources(newRule("*"), "deployments"), "apps")),
		clusterRole("widgets", groups(resources(newRule("get"), "widgets"), "*")),
		clusterRole("everything", groups(resources(newRule("*"), "*"), "*"), nonResource(newRule("*"), "*")),
		role("ns1", "secret-reader", coreRule(get, "secrets")),

		roleBinding("ns1", "alice-pods", clusterRoleRef("pod-reader"), userSubject("alice")),
		roleBinding("ns1", "devs-secrets", roleRef("secret-reader"), groupSubject("devs")),
		roleBinding("ns2", "devs-secrets", roleRef("secret-reader"), groupSubject("devs")), // no such Role in ns2
		roleBinding("ns1", "builder-logs", clusterRoleRef("log-reader"), saSubject("", "builder")),
		roleBinding("ns2", "ns1-builder-pods", clusterRoleRef("pod-reader"), saSubject("ns1", "builder")),
		clusterRoleBinding("ops-status", clusterRoleRef("any-status"), groupSubject("ops")),
		clusterRoleBinding("bob-configmaps", clusterRoleRef("named-configmaps"), userSubject("bob")),
		clusterRoleBinding("bob-evict", clusterRoleRef("evict-p1"), userSubject("bob")),
		clusterRoleBinding("health", clusterRoleRef("health"), groupSubject(user.AllAuthenticated)),
		clusterRoleBinding("deployers", clusterRoleRef("deployer"), groupSubject("deployers")),
		clusterRoleBinding("widgets", clusterRoleRef("widgets"), userSubject("wendy")),
		clusterRoleBinding("carol-missing", clusterRoleRef("missing"), userSubject("carol")),
		clusterRoleBinding("builder-no-namespace", clusterRoleRef("everything"), saSubject("", "builder")),
		clusterRoleBinding("ns3-serviceaccounts", clusterRoleRef("pod-reader"), groupSubject("system:serviceaccounts:ns3")),
		clusterRoleBinding("masters", clusterRoleRef("everything"), groupSubject(user.SystemPrivilegedGroup)),
	}
}

func TestAuthorize(t *testing.T) {
	a := newAuthorizer(t, policy()...)
	alice := usr("alice", user.AllAuthenticated)
	bob := usr("bob", user.AllAuthenticated)
	dave := usr("dave", "devs", user.AllAuthenticated)
	olga := usr("olga", "ops")
	builder := serviceaccount.UserInfo("ns1", "builder", "uid")
	otherBuilder := serviceaccount.UserInfo("ns2", "builder", "uid")
	ns3SA := serviceaccount.UserInfo("ns3", "worker", "uid")

	for _, tc := range []struct {
		name   string
		attrs  authorizer.AttributesRecord
		allow  bool
		reason string // a part of the reason
	}{
		{"ClusterRole through RoleBinding in its namespace", resourceAttrs(alice, "get", "", "pods", "ns1", "p"), true,
			`RBAC: allowed by RoleBinding "alice-pods/ns1" of ClusterRole "pod-reader" to User "alice"`},
		{"list in the namespace", resourceAttrs(alice, "list", "", "pods", "ns1", ""), true, ""},
		{"RoleBinding grants nothing in another namespace", resourceAttrs(alice, "get", "", "pods", "ns2", "p"), false,
			`RBAC: no rule allows it in ClusterRoleBinding "health"`},
		{"RoleBinding grants nothing cluster-wide", resourceAttrs(alice, "list", "", "pods", "", ""), false, ""},
		{"verb not in rule", resourceAttrs(alice, "delete", "", "pods", "ns1", "p"), false, `RoleBinding "alice-pods/ns1"`},
		{"resource does not cover its subresource", resourceAttrs(alice, "get", "", "pods/log", "ns1", "p"), false, ""},
		{"group of another API group", resourceAttrs(alice, "get", "metrics.k8s.io", "pods", "ns1", "p"), false, ""},

		{"Role through group", resourceAttrs(dave, "get", "", "secrets", "ns1", "s"), true,
			`RoleBinding "devs-secrets/ns1" of Role "secret-reader" to Group "devs"`},
		{"Role missing in the binding's namespace", resourceAttrs(dave, "get", "", "secrets", "ns2", "s"), false,
			`role.rbac.authorization.k8s.io "secret-reader" not found`},
		{"user without the group", resourceAttrs(alice, "get", "", "secrets", "ns1", "s"), false, ""},

		{"service account of the binding's namespace", resourceAttrs(builder, "get", "", "pods/log", "ns1", "p"), true,
			`to ServiceAccount "builder/ns1"`},
		{"service account of another namespace", resourceAttrs(otherBuilder, "get", "", "pods/log", "ns1", "p"), false, ""},
		{"service account named with its namespace", resourceAttrs(builder, "list", "", "pods", "ns2", ""), true, ""},
		{"service account in a ClusterRoleBinding without namespace matches none",
			resourceAttrs(builder, "delete", "", "nodes", "", "n"), false, ""},
		{"service account group from the authenticator", resourceAttrs(ns3SA, "watch", "", "pods", "ns9", ""), true,
			`Group "system:serviceaccounts:ns3"`},

		{"*/subresource", resourceAttrs(olga, "get", "apps", "deployments/status", "ns1", "d"), true, ""},
		{"*/subresource cluster-scoped", resourceAttrs(olga, "get", "", "nodes/status", "", "n"), true, ""},
		{"*/subresource is not the resource", resourceAttrs(olga, "get", "apps", "deployments", "ns1", "d"), false, ""},
		{"*/subresource other subresource", resourceAttrs(olga, "get", "apps", "deployments/scale", "ns1", "d"), false, ""},
		{"*/subresource verb", resourceAttrs(olga, "update", "apps", "deployments/status", "ns1", "d"), false, ""},

		{"resourceNames listed", resourceAttrs(bob, "get", "", "configmaps", "ns1", "cm1"), true, ""},
		{"resourceNames update", resourceAttrs(bob, "update", "", "configmaps", "ns5", "cm1"), true, ""},
		{"resourceNames other name", resourceAttrs(bob, "get", "", "configmaps", "ns1", "cm2"), false, ""},
		{"resourceNames list has no name", resourceAttrs(bob, "list", "", "configmaps", "ns1", ""), false, ""},
		{"resourceNames create of the collection has no name", resourceAttrs(bob, "create", "", "configmaps", "ns1", ""), false, ""},
		{"resourceNames create of a named subresource", resourceAttrs(bob, "create", "", "pods/eviction", "ns1", "p1"), true, ""},
		{"resourceNames create of another pod's subresource", resourceAttrs(bob, "create", "", "pods/eviction", "ns1", "p2"), false, ""},

		{"nonResourceURL exact", pathAttrs(alice, "get", "/healthz"), true, `ClusterRoleBinding "health"`},
		{"nonResourceURL prefix", pathAttrs(alice, "get", "/logs/kubelet/x"), true, ""},
		{"nonResourceURL prefix needs the slash", pathAttrs(alice, "get", "/logs"), false, ""},
		{"nonResourceURL other path", pathAttrs(alice, "get", "/metrics"), false, ""},
		{"nonResourceURL verb", pathAttrs(alice, "post", "/healthz"), false, ""},
		{"nonResourceURL * for everything", pathAttrs(usr("root", user.SystemPrivilegedGroup), "delete", "/anything"), true, ""},

		{"verb *", resourceAttrs(usr("d", "deployers"), "deletecollection", "apps", "deployments", "ns1", ""), true, ""},
		{"apiGroup *", resourceAttrs(usr("wendy"), "get", "example.com", "widgets", "ns1", "w"), true, ""},
		{"resource * covers subresources", resourceAttrs(usr("root", user.SystemPrivilegedGroup), "create", "", "pods/exec", "ns1", "p"), true, ""},

		{"missing ClusterRole", resourceAttrs(usr("carol"), "get", "", "pods", "ns1", "p"), false,
			`RBAC: no rule allows it in ClusterRoleBinding "carol-missing"; clusterrole.rbac.authorization.k8s.io "missing" not found`},
		{"nobody", resourceAttrs(usr("nobody"), "get", "", "pods", "ns1", "p"), false,
			"RBAC: no binding applies to the user or its groups"},
		{"no user", authorizer.AttributesRecord{Verb: "get", Path: "/healthz"}, false, "RBAC: no user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, err := a.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			want := authorizer.DecisionNoOpinion
			if tc.allow {
				want = authorizer.DecisionAllow
			}
			if d != want {
				t.Errorf("decision %v (%q), want %v", d, reason, want)
			}
			if !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", reason, tc.reason)
			}
			if !tc.allow && !strings.HasPrefix(reason, "RBAC: ") {
				t.Errorf("reason %q", reason)
			}
			cd := a.ConditionsAwareAuthorize(context.Background(), tc.attrs)
			if cd.IsAllow() != tc.allow || cd.IsNoOpinion() == tc.allow {
				t.Errorf("conditions-aware decision %v", cd)
			}
		})
	}
}

func TestDenialReasonIsShort(t *testing.T) {
	objs := []any{clusterRole("nothing")}
	var groups []string
	for i := 0; i < 10; i++ {
		g := fmt.Sprintf("g%d", i)
		groups = append(groups, g)
		objs = append(objs, clusterRoleBinding(fmt.Sprintf("b%d", i), clusterRoleRef("nothing"), groupSubject(g)))
	}
	a := newAuthorizer(t, objs...)
	_, reason, _ := a.Authorize(context.Background(), resourceAttrs(usr("u", groups...), "get", "", "pods", "ns", "p"))
	want := `RBAC: no rule allows it in ClusterRoleBinding "b0", ClusterRoleBinding "b1", ClusterRoleBinding "b2" and 7 more`
	if reason != want {
		t.Errorf("reason\n%q, want\n%q", reason, want)
	}
}

func TestBindingMatchingSeveralSubjectsIsEvaluatedOnce(t *testing.T) {
	a := newAuthorizer(t,
		clusterRole("nothing"),
		roleBinding("ns", "b", clusterRoleRef("nothing"), userSubject("u"), groupSubject("g1"), groupSubject("g2"),
			groupSubject("g1"), saSubject("", "x")),
	)
	_, reason, _ := a.Authorize(context.Background(), resourceAttrs(usr("u", "g1", "g2", "g2"), "get", "", "pods", "ns", ""))
	if want := `RBAC: no rule allows it in RoleBinding "b/ns"`; reason != want {
		t.Errorf("reason %q, want %q", reason, want)
	}
}

func TestRulesFor(t *testing.T) {
	a := newAuthorizer(t, policy()...)
	dave := usr("dave", "devs", user.AllAuthenticated)

	res, nonRes, incomplete, err := a.RulesFor(context.Background(), dave, "ns1")
	if err != nil || incomplete {
		t.Fatalf("err %v, incomplete %v", err, incomplete)
	}
	if len(res) != 1 || res[0].GetResources()[0] != "secrets" || res[0].GetVerbs()[0] != "get" {
		t.Errorf("resource rules %+v", res)
	}
	if len(nonRes) != 1 || strings.Join(nonRes[0].GetNonResourceURLs(), ",") != "/healthz,/logs/*" {
		t.Errorf("non-resource rules %+v", nonRes)
	}

	// Cluster-wide only without a namespace.
	res, _, _, _ = a.RulesFor(context.Background(), dave, "")
	if len(res) != 0 {
		t.Errorf("cluster-wide resource rules %+v", res)
	}

	// A missing role is an error, with the rules that could be read.
	rules, err := a.PolicyRulesFor(dave, "ns2")
	if err == nil || !strings.Contains(err.Error(), `"secret-reader" not found`) {
		t.Errorf("err %v", err)
	}
	if len(rules) != 1 || rules[0].NonResourceURLs == nil {
		t.Errorf("rules %+v", rules)
	}
}

func TestInvalidateAndRefresh(t *testing.T) {
	s := newStore()
	s.add(t, clusterRole("pod-reader", coreRule(readVerbs, "pods")))
	a := s.authorizer()
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	attrs := resourceAttrs(usr("alice"), "get", "", "pods", "ns1", "p")
	decide := func() authorizer.Decision {
		d, _, _ := a.Authorize(context.Background(), attrs)
		return d
	}
	if decide() != authorizer.DecisionNoOpinion {
		t.Fatal("allowed without binding")
	}

	// A new binding is unseen until Invalidate...
	s.add(t, roleBinding("ns1", "b", clusterRoleRef("pod-reader"), userSubject("alice")))
	if decide() != authorizer.DecisionNoOpinion {
		t.Fatal("index rebuilt without Invalidate")
	}
	a.Invalidate()
	if decide() != authorizer.DecisionAllow {
		t.Fatal("not allowed after Invalidate")
	}

	// ...or until the index is older than the refresh interval.
	if err := s.roleBindings.Delete(roleBinding("ns1", "b", clusterRoleRef("pod-reader"))); err != nil {
		t.Fatal(err)
	}
	now = now.Add(DefaultIndexRefresh - time.Millisecond)
	if decide() != authorizer.DecisionAllow {
		t.Fatal("index rebuilt before the refresh interval")
	}
	now = now.Add(time.Millisecond)
	if decide() != authorizer.DecisionNoOpinion {
		t.Fatal("deleted binding still allows after the refresh interval")
	}

	// Roles are read at each decision: a rule removed from a role stops allowing at once.
	s.add(t, roleBinding("ns1", "b", clusterRoleRef("pod-reader"), userSubject("alice")))
	a.Invalidate()
	if decide() != authorizer.DecisionAllow {
		t.Fatal("not allowed")
	}
	if err := s.clusterRoles.Update(clusterRole("pod-reader")); err != nil {
		t.Fatal(err)
	}
	if decide() != authorizer.DecisionNoOpinion {
		t.Fatal("emptied role still allows")
	}
}

func TestNewFromInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	a, err := NewFromInformers(factory.Rbac().V1())
	if err != nil {
		t.Fatal(err)
	}
	a.refresh = time.Hour // only the event handler may make the change visible
	factory.Start(ctx.Done())
	defer func() {
		cancel() // stops the informers, which Shutdown waits for
		factory.Shutdown()
	}()
	factory.WaitForCacheSync(ctx.Done())

	attrs := resourceAttrs(usr("alice"), "get", "", "pods", "ns1", "p")
	if d, _, _ := a.Authorize(ctx, attrs); d != authorizer.DecisionNoOpinion {
		t.Fatal("allowed without binding")
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, clusterRole("pod-reader", coreRule(readVerbs, "pods")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings("ns1").Create(ctx,
		roleBinding("ns1", "b", clusterRoleRef("pod-reader"), userSubject("alice")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { d, _, _ := a.Authorize(ctx, attrs); return d == authorizer.DecisionAllow })

	if err := client.RbacV1().RoleBindings("ns1").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { d, _, _ := a.Authorize(ctx, attrs); return d == authorizer.DecisionNoOpinion })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 10s")
}

// TestIndexMatchesScan compares the indexed decisions with a plain scan of every binding
// on random policies and requests.
func TestIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	pick := func(list ...string) string { return list[rng.Intn(len(list))] }
	namespaces := []string{"a", "b", "c"}
	users := []string{"u0", "u1", "u2", "system:serviceaccount:a:sa", "system:serviceaccount:b:sa"}
	groupNames := []string{"g0", "g1", "g2", "system:serviceaccounts:a"}
	verbs := []string{"get", "list", "create", "delete", "*"}
	res := []string{"pods", "pods/log", "secrets", "*", "*/status", "pods/status"}
	randRules := func() []rbacv1.PolicyRule {
		var rules []rbacv1.PolicyRule
		for i := rng.Intn(3); i >= 0; i-- {
			r := rbacv1.PolicyRule{Verbs: []string{pick(verbs...)}, APIGroups: []string{pick("", "", "apps", "*")},
				Resources: []string{pick(res...)}}
			if rng.Intn(4) == 0 {
				r.ResourceNames = []string{pick("n1", "n2")}
			}
			rules = append(rules, r)
		}
		return rules
	}
	randSubjects := func() []rbacv1.Subject {
		var subs []rbacv1.Subject
		for i := rng.Intn(3); i >= 0; i-- {
			switch rng.Intn(3) {
			case 0:
				subs = append(subs, userSubject(pick(users...)))
			case 1:
				subs = append(subs, groupSubject(pick(groupNames...)))
			default:
				subs = append(subs, saSubject(pick("", "a", "b"), "sa"))
			}
		}
		return subs
	}

	for round := 0; round < 20; round++ {
		var roles []*rbacv1.Role
		var crs []*rbacv1.ClusterRole
		var rbs []*rbacv1.RoleBinding
		var crbs []*rbacv1.ClusterRoleBinding
		for i := 0; i < 5; i++ {
			crs = append(crs, clusterRole(fmt.Sprintf("cr%d", i), randRules()...))
			roles = append(roles, role(pick(namespaces...), fmt.Sprintf("r%d", i), randRules()...))
		}
		for i := 0; i < 8; i++ {
			ref := clusterRoleRef(fmt.Sprintf("cr%d", rng.Intn(6))) // cr5 does not exist
			if rng.Intn(2) == 0 {
				ref = roleRef(fmt.Sprintf("r%d", rng.Intn(5)))
			}
			rbs = append(rbs, roleBinding(pick(namespaces...), fmt.Sprintf("rb%d", i), ref, randSubjects()...))
			crbs = append(crbs, clusterRoleBinding(fmt.Sprintf("crb%d", i), clusterRoleRef(fmt.Sprintf("cr%d", rng.Intn(6))), randSubjects()...))
		}
		s := newStore()
		for _, o := range roles {
			s.add(t, o)
		}
		for _, o := range crs {
			s.add(t, o)
		}
		for _, o := range rbs {
			s.add(t, o)
		}
		for _, o := range crbs {
			s.add(t, o)
		}
		a := s.authorizer()

		for i := 0; i < 500; i++ {
			var gs []string
			for j := rng.Intn(3); j > 0; j-- {
				gs = append(gs, pick(groupNames...))
			}
			u := usr(pick(users...), gs...)
			attrs := resourceAttrs(u, pick("get", "list", "create", "delete"), pick("", "apps"),
				pick("pods", "pods/log", "pods/status", "secrets", "deployments/status"), pick("", "a", "b", "c"), pick("", "n1", "n2"))
			d, _, _ := a.Authorize(context.Background(), attrs)
			want := scanAllows(attrs, roles, crs, rbs, crbs)
			if (d == authorizer.DecisionAllow) != want {
				t.Fatalf("round %d: %+v %+v: indexed %v, scan %v", round, u, attrs, d, want)
			}
		}
	}
}

// scanAllows is the reference: every binding is checked against the user.
func scanAllows(attrs authorizer.Attributes, roles []*rbacv1.Role, crs []*rbacv1.ClusterRole,
	rbs []*rbacv1.RoleBinding, crbs []*rbacv1.ClusterRoleBinding) bool {
	u := attrs.GetUser()
	applies := func(subjects []rbacv1.Subject, ns string) bool {
		for _, s := range subjects {
			switch s.Kind {
			case rbacv1.UserKind:
				if s.Name == u.GetName() {
					return true
				}
			case rbacv1.GroupKind:
				for _, g := range u.GetGroups() {
					if g == s.Name {
						return true
					}
				}
			case rbacv1.ServiceAccountKind:
				sns := s.Namespace
				if sns == "" {
					sns = ns
				}
				if sns != "" && serviceaccount.MatchesUsername(sns, s.Name, u.GetName()) {
					return true
				}
			}
		}
		return false
	}
	rulesOf := func(ref rbacv1.RoleRef, ns string) []rbacv1.PolicyRule {
		if ref.Kind == "ClusterRole" {
			for _, cr := range crs {
				if cr.Name == ref.Name {
					return cr.Rules
				}
			}
		} else if ns != "" {
			for _, r := range roles {
				if r.Namespace == ns && r.Name == ref.Name {
					return r.Rules
				}
			}
		}
		return nil
	}
	for _, b := range crbs {
		if applies(b.Subjects, "") && RulesAllow(attrs, rulesOf(b.RoleRef, "")...) {
			return true
		}
	}
	if ns := attrs.GetNamespace(); ns != "" {
		for _, b := range rbs {
			if b.Namespace == ns && applies(b.Subjects, ns) && RulesAllow(attrs, rulesOf(b.RoleRef, ns)...) {
				return true
			}
		}
	}
	return false
}

func TestBindingEventHandler(t *testing.T) {
	a := newAuthorizer(t)
	h := a.BindingEventHandler()
	b := func(rv string) *rbacv1.RoleBinding {
		rb := roleBinding("ns", "b", clusterRoleRef("r"))
		rb.ResourceVersion = rv
		return rb
	}
	for _, step := range []struct {
		name       string
		do         func()
		invalidate bool
	}{
		{"add", func() { h.OnAdd(b("1"), false) }, true},
		{"update", func() { h.OnUpdate(b("1"), b("2")) }, true},
		{"resync", func() { h.OnUpdate(b("2"), b("2")) }, false},
		{"delete", func() { h.OnDelete(b("2")) }, true},
		{"delete of an unknown final state", func() {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: b("2")})
		}, true},
	} {
		before := a.gen.Load()
		step.do()
		if (a.gen.Load() != before) != step.invalidate {
			t.Errorf("%s: invalidated %v, want %v", step.name, a.gen.Load() != before, step.invalidate)
		}
	}
}

// TestConcurrentUse decides while bindings change; run with -race to check the index
// swaps.
func TestConcurrentUse(t *testing.T) {
	s := newStore()
	s.add(t, clusterRole("pod-reader", coreRule(readVerbs, "pods")),
		roleBinding("ns1", "stable", clusterRoleRef("pod-reader"), userSubject("alice")))
	a := s.authorizer()
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rb := roleBinding("ns1", fmt.Sprintf("churn-%d", i%10), clusterRoleRef("pod-reader"), userSubject(fmt.Sprintf("u%d", i)))
			if err := s.roleBindings.Update(rb); err != nil {
				t.Error(err)
				return
			}
			a.Invalidate()
		}
	}()
	errs := make(chan string, 4)
	for w := 0; w < 4; w++ {
		go func() {
			for i := 0; i < 2000; i++ {
				d, reason, _ := a.Authorize(ctx, resourceAttrs(usr("alice"), "get", "", "pods", "ns1", "p"))
				if d != authorizer.DecisionAllow || reason == "" {
					errs <- fmt.Sprintf("decision %v %q", d, reason)
					return
				}
				a.Authorize(ctx, resourceAttrs(usr("bob"), "get", "", "pods", "ns1", "p"))
			}
			errs <- ""
		}()
	}
	for w := 0; w < 4; w++ {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	close(stop)
	<-done
}
