package rbac

import (
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
)

// grant is one binding as the index holds it: what it refers to and which of its
// subjects put it under the key it was found by.
type grant struct {
	namespace string // the RoleBinding's namespace; "" for a ClusterRoleBinding
	name      string
	roleRef   rbacv1.RoleRef
	subject   rbacv1.Subject
	id        int // the binding's; grants of one binding under different keys share it
	// shared is set when the binding is filed under more than one key, so that a user who
	// matches several of its subjects could reach it twice; only such grants are deduplicated
	// while visiting.
	shared bool
	// roles reads the Roles of a RoleBinding's namespace.
	roles rbaclisters.RoleNamespaceLister

	// The reasons' texts, made at first use.
	allowed, label atomic.Pointer[string]
}

// allowedReason is the reason of a decision g allows: the binding, its role and the
// subject that matched.
func (g *grant) allowedReason() string {
	if s := g.allowed.Load(); s != nil {
		return *s
	}
	var s string
	if g.namespace == "" {
		s = fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of %s %q to %s", g.name, g.roleRef.Kind, g.roleRef.Name, describeSubject(&g.subject))
	} else {
		s = fmt.Sprintf("RBAC: allowed by RoleBinding %q of %s %q to %s", g.name+"/"+g.namespace, g.roleRef.Kind, g.roleRef.Name, describeSubject(&g.subject))
	}
	g.allowed.Store(&s)
	return s
}

// binding names g's binding alone, for the list of bindings a denial evaluated.
func (g *grant) binding() string {
	if s := g.label.Load(); s != nil {
		return *s
	}
	var s string
	if g.namespace == "" {
		s = fmt.Sprintf("ClusterRoleBinding %q", g.name)
	} else {
		s = fmt.Sprintf("RoleBinding %q", g.name+"/"+g.namespace)
	}
	g.label.Store(&s)
	return s
}

// describeSubject names a subject; a service account's namespace is already filled in.
func describeSubject(s *rbacv1.Subject) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+s.Namespace)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// nsKey files a RoleBinding under its namespace and a user or group name.
type nsKey struct{ namespace, name string }

// index files every binding under the users and groups it names, so that a decision
// looks at the bindings of the requesting user and its groups only. A service account
// subject is filed under its user name, system:serviceaccount:<namespace>:<name>. The
// index holds bindings, not rules: roles are read from the listers at each decision, so
// a change to a role needs no rebuild.
type index struct {
	gen   uint64
	built time.Time

	clusterUsers  map[string][]*grant
	clusterGroups map[string][]*grant
	nsUsers       map[nsKey][]*grant
	nsGroups      map[nsKey][]*grant

	bindings int   // bindings filed; also the next binding's id
	err      error // listing failed: the index is incomplete and is rebuilt at next use
}

func (a *Authorizer) buildIndex(gen uint64) *index {
	var errs []error
	crbs, err := a.clusterRoleBindings.List(labels.Everything())
	if err != nil {
		errs = append(errs, err)
	}
	rbs, err := a.roleBindings.List(labels.Everything())
	if err != nil {
		errs = append(errs, err)
	}
	idx := &index{
		gen:           gen,
		built:         a.now(),
		clusterUsers:  make(map[string][]*grant, len(crbs)),
		clusterGroups: make(map[string][]*grant),
		nsUsers:       make(map[nsKey][]*grant, len(rbs)),
		nsGroups:      make(map[nsKey][]*grant),
	}

	sort.Slice(crbs, func(i, j int) bool { return crbs[i].Name < crbs[j].Name })
	for _, b := range crbs {
		idx.file("", b.Name, b.RoleRef, b.Subjects, nil)
	}

	// The namespace listers only hold the namespace: one per namespace is enough.
	nsRoles := map[string]rbaclisters.RoleNamespaceLister{}
	sort.Slice(rbs, func(i, j int) bool {
		if rbs[i].Namespace != rbs[j].Namespace {
			return rbs[i].Namespace < rbs[j].Namespace
		}
		return rbs[i].Name < rbs[j].Name
	})
	for _, b := range rbs {
		if b.Namespace == "" {
			continue
		}
		roles := nsRoles[b.Namespace]
		if roles == nil {
			roles = a.roles.Roles(b.Namespace)
			nsRoles[b.Namespace] = roles
		}
		idx.file(b.Namespace, b.Name, b.RoleRef, b.Subjects, roles)
	}
	if len(errs) > 0 {
		idx.err = fmt.Errorf("listing bindings: %v", errs)
	}
	return idx
}

// file adds one binding under each distinct key its subjects give. namespace is the
// RoleBinding's, "" for a ClusterRoleBinding, and roles reads the Roles of namespace.
func (idx *index) file(namespace, name string, roleRef rbacv1.RoleRef, subjects []rbacv1.Subject, roles rbaclisters.RoleNamespaceLister) {
	type key struct {
		group bool
		name  string
	}
	var keyBuf [4]key
	var grantBuf [4]*grant
	keys, grants := keyBuf[:0], grantBuf[:0]
	for _, s := range subjects {
		k := key{name: s.Name}
		switch s.Kind {
		case rbacv1.UserKind:
		case rbacv1.GroupKind:
			k.group = true
		case rbacv1.ServiceAccountKind:
			// A RoleBinding's service account defaults to the binding's namespace; one in a
			// ClusterRoleBinding must name its namespace.
			ns := s.Namespace
			if ns == "" {
				ns = namespace
			}
			if ns == "" {
				continue
			}
			s.Namespace = ns
			k.name = serviceaccount.MakeUsername(ns, s.Name)
		default:
			continue
		}
		dup := false
		for _, seen := range keys {
			if seen == k {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		keys = append(keys, k)
		g := &grant{namespace: namespace, name: name, roleRef: roleRef, subject: s, id: idx.bindings, roles: roles}
		grants = append(grants, g)
		switch {
		case namespace == "" && !k.group:
			idx.clusterUsers[k.name] = append(idx.clusterUsers[k.name], g)
		case namespace == "":
			idx.clusterGroups[k.name] = append(idx.clusterGroups[k.name], g)
		case !k.group:
			nk := nsKey{namespace, k.name}
			idx.nsUsers[nk] = append(idx.nsUsers[nk], g)
		default:
			nk := nsKey{namespace, k.name}
			idx.nsGroups[nk] = append(idx.nsGroups[nk], g)
		}
	}
	if len(grants) > 1 {
		for _, g := range grants {
			g.shared = true
		}
	}
	if len(grants) > 0 {
		idx.bindings++
	}
}

// applicable appends to buf the grants that apply to a user named name with groups:
// cluster-wide ones first, then, when namespace is set, the RoleBindings of that
// namespace. A binding that applies through several of its subjects is appended once.
func (idx *index) applicable(name string, groups []string, namespace string, buf []*grant) []*grant {
	start := len(buf)
	buf = appendGrants(buf, start, idx.clusterUsers[name])
	for i, g := range groups {
		if !repeated(groups, i) {
			buf = appendGrants(buf, start, idx.clusterGroups[g])
		}
	}
	if namespace != "" {
		buf = appendGrants(buf, start, idx.nsUsers[nsKey{namespace, name}])
		for i, g := range groups {
			if !repeated(groups, i) {
				buf = appendGrants(buf, start, idx.nsGroups[nsKey{namespace, g}])
			}
		}
	}
	return buf
}

// repeated reports whether groups[i] already appears before i.
func repeated(groups []string, i int) bool {
	for _, g := range groups[:i] {
		if g == groups[i] {
			return true
		}
	}
	return false
}

func appendGrants(buf []*grant, start int, gs []*grant) []*grant {
next:
	for _, g := range gs {
		if g.shared {
			for _, seen := range buf[start:] {
				if seen.id == g.id && seen.shared {
					continue next
				}
			}
		}
		buf = append(buf, g)
	}
	return buf
}
