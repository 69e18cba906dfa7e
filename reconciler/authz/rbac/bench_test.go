package rbac

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// benchPolicy is 1,000 Roles and 1,000 RoleBindings across 100 namespaces, and 50
// ClusterRoles with 50 ClusterRoleBindings, two of which bind every authenticated user
// (as the bootstrap discovery and basic-user bindings do). RoleBinding i binds user-i,
// group team-(i%50) and a service account to Role i in namespace ns-(i%100); every tenth
// RoleBinding refers to a ClusterRole instead.
func benchPolicy(tb testing.TB) *store {
	const namespaces, roles, clusterRoles = 100, 1000, 50
	s := newStore()
	res := []string{"pods", "configmaps", "secrets", "services", "pods/log", "endpoints"}
	for i := 0; i < clusterRoles; i++ {
		var rules []rbacv1.PolicyRule
		for j := 0; j < 10; j++ {
			rules = append(rules, groups(resources(newRule("get", "list", "watch"), fmt.Sprintf("kind%d-%d", i, j)), "example.com"))
		}
		rules = append(rules, coreRule([]string{"get"}, res[i%len(res)]))
		s.add(tb, clusterRole(fmt.Sprintf("cr-%d", i), rules...))
		subjects := []rbacv1.Subject{groupSubject(fmt.Sprintf("cgroup-%d", i%10)), userSubject(fmt.Sprintf("admin-%d", i))}
		if i < 2 {
			subjects = append(subjects, groupSubject(user.AllAuthenticated))
		}
		s.add(tb, clusterRoleBinding(fmt.Sprintf("crb-%d", i), clusterRoleRef(fmt.Sprintf("cr-%d", i)), subjects...))
	}
	for i := 0; i < roles; i++ {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		s.add(tb, role(ns, fmt.Sprintf("role-%d", i),
			coreRule([]string{"get", "list"}, res[i%len(res)], res[(i+1)%len(res)]),
			names(coreRule([]string{"update"}, "configmaps"), fmt.Sprintf("cm-%d", i)),
			groups(resources(newRule("*"), "deployments", "deployments/scale"), "apps"),
		))
		ref := roleRef(fmt.Sprintf("role-%d", i))
		if i%10 == 0 {
			ref = clusterRoleRef(fmt.Sprintf("cr-%d", i%clusterRoles))
		}
		s.add(tb, roleBinding(ns, fmt.Sprintf("rb-%d", i), ref,
			userSubject(fmt.Sprintf("user-%d", i)), groupSubject(fmt.Sprintf("team-%d", i%50)), saSubject("", fmt.Sprintf("sa-%d", i))))
	}
	return s
}

// benchRequests are a mix of allowed and denied requests of users from benchPolicy.
func benchRequests(n int) []authorizer.AttributesRecord {
	rng := rand.New(rand.NewSource(1))
	verbs := []string{"get", "list", "update", "delete", "create"}
	res := []string{"pods", "configmaps", "secrets", "services", "pods/log", "deployments", "deployments/scale"}
	var out []authorizer.AttributesRecord
	for len(out) < n {
		i := rng.Intn(1000)
		u := usr(fmt.Sprintf("user-%d", i), fmt.Sprintf("team-%d", i%50), fmt.Sprintf("cgroup-%d", rng.Intn(10)), user.AllAuthenticated)
		if rng.Intn(10) == 0 {
			u = usr(fmt.Sprintf("system:serviceaccount:ns-%d:sa-%d", i%100, i), "system:serviceaccounts",
				fmt.Sprintf("system:serviceaccounts:ns-%d", i%100), user.AllAuthenticated)
		}
		ns := fmt.Sprintf("ns-%d", i%100)
		if rng.Intn(3) == 0 {
			ns = fmt.Sprintf("ns-%d", rng.Intn(100))
		}
		r := res[rng.Intn(len(res))]
		group := ""
		if r == "deployments" || r == "deployments/scale" {
			group = "apps"
		}
		name := ""
		if rng.Intn(2) == 0 {
			name = fmt.Sprintf("cm-%d", i)
		}
		out = append(out, resourceAttrs(u, verbs[rng.Intn(len(verbs))], group, r, ns, name))
	}
	return out
}

func BenchmarkAuthorize(b *testing.B) {
	a := benchPolicy(b).authorizer()
	a.refresh = 0 // measure decisions, not the periodic rebuild
	reqs := benchRequests(4096)
	ctx := context.Background()
	allowed := 0
	for _, r := range reqs {
		if d, _, _ := a.Authorize(ctx, r); d == authorizer.DecisionAllow {
			allowed++
		}
	}

	durations := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		a.Authorize(ctx, reqs[i%len(reqs)])
		durations[i] = time.Since(start)
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(allowed)/float64(len(reqs)), "allowed-frac")
}

// BenchmarkIndexBuild is the cost of the rebuild after a binding changes.
func BenchmarkIndexBuild(b *testing.B) {
	a := benchPolicy(b).authorizer()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		a.buildIndex(uint64(i))
	}
}
