package rbac

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
)

// store holds the four kinds in indexers, as informers would, for an Authorizer on them.
type store struct {
	roles, roleBindings, clusterRoles, clusterRoleBindings cache.Indexer
}

func newStore() *store {
	ix := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	return &store{ix(), ix(), ix(), ix()}
}

func (s *store) add(t testing.TB, objs ...any) {
	t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *rbacv1.Role:
			err = s.roles.Add(o)
		case *rbacv1.RoleBinding:
			err = s.roleBindings.Add(o)
		case *rbacv1.ClusterRole:
			err = s.clusterRoles.Add(o)
		case *rbacv1.ClusterRoleBinding:
			err = s.clusterRoleBindings.Add(o)
		default:
			t.Fatalf("cannot store %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (s *store) authorizer() *Authorizer {
	return New(rbaclisters.NewRoleLister(s.roles), rbaclisters.NewRoleBindingLister(s.roleBindings),
		rbaclisters.NewClusterRoleLister(s.clusterRoles), rbaclisters.NewClusterRoleBindingLister(s.clusterRoleBindings))
}

func newAuthorizer(t testing.TB, objs ...any) *Authorizer {
	t.Helper()
	s := newStore()
	s.add(t, objs...)
	return s.authorizer()
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func role(namespace, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules}
}

func clusterRoleRef(name string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
}

func roleRef(name string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
}

func clusterRoleBinding(name string, ref rbacv1.RoleRef, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}
}

func roleBinding(namespace, name string, ref rbacv1.RoleRef, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, RoleRef: ref, Subjects: subjects}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

func saSubject(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
}

// newRule builds a rule: verbs, then groups, resources, names or urls as set.
func newRule(verbs ...string) rbacv1.PolicyRule { return rbacv1.PolicyRule{Verbs: verbs} }

func groups(r rbacv1.PolicyRule, g ...string) rbacv1.PolicyRule    { r.APIGroups = g; return r }
func resources(r rbacv1.PolicyRule, s ...string) rbacv1.PolicyRule { r.Resources = s; return r }
func names(r rbacv1.PolicyRule, n ...string) rbacv1.PolicyRule     { r.ResourceNames = n; return r }
func nonResource(r rbacv1.PolicyRule, u ...string) rbacv1.PolicyRule {
	r.NonResourceURLs = u
	return r
}

// coreRule is a rule on core resources.
func coreRule(verbs []string, res ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{""}, Resources: res}
}

func usr(name string, groups ...string) user.Info {
	return &user.DefaultInfo{Name: name, Groups: groups}
}

// resourceAttrs is a resource request: "pods" or "pods/log" for resource.
func resourceAttrs(u user.Info, verb, group, resource, namespace, name string) authorizer.AttributesRecord {
	a := authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "v1",
		Namespace: namespace, Name: name, ResourceRequest: true}
	a.Resource, a.Subresource = resource, ""
	for i := 0; i < len(resource); i++ {
		if resource[i] == '/' {
			a.Resource, a.Subresource = resource[:i], resource[i+1:]
			break
		}
	}
	return a
}

func pathAttrs(u user.Info, verb, path string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, Path: path}
}
