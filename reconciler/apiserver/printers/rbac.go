package printers

import (
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Roles and ClusterRoles have no printer upstream: they get the API server's default table,
// NAME and CREATED AT (RFC 3339, UTC).
var createdAtColumn = metav1.TableColumnDefinition{
	Name: "Created At", Type: "date",
	Description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
}

var rolePrinter = named([]metav1.TableColumnDefinition{createdAtColumn}, func(r *rbacv1.Role, _ clock) []any {
	return []any{createdAt(r.CreationTimestamp)}
})

var clusterRolePrinter = named([]metav1.TableColumnDefinition{createdAtColumn}, func(r *rbacv1.ClusterRole, _ clock) []any {
	return []any{createdAt(r.CreationTimestamp)}
})

func createdAt(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

// bindingColumns are the columns of RoleBindings and ClusterRoleBindings: ROLE is Kind/name,
// and -o wide lists the subjects by kind.
func bindingColumns(kind string) []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		col("Role", "string", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace."),
		ageColumn,
		wide("Users", "string", "Users in the "+kind),
		wide("Groups", "string", "Groups in the "+kind),
		wide("ServiceAccounts", "string", "ServiceAccounts in the "+kind),
	}
}

var roleBindingPrinter = named(bindingColumns("roleBinding"), func(b *rbacv1.RoleBinding, c clock) []any {
	return bindingCells(b.RoleRef, b.Subjects, c.age(b.CreationTimestamp))
})

var clusterRoleBindingPrinter = named(bindingColumns("clusterRoleBinding"), func(b *rbacv1.ClusterRoleBinding, c clock) []any {
	return bindingCells(b.RoleRef, b.Subjects, c.age(b.CreationTimestamp))
})

func bindingCells(ref rbacv1.RoleRef, subjects []rbacv1.Subject, age string) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		}
	}
	return []any{ref.Kind + "/" + ref.Name, age, strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}
