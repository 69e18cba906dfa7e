package printers

import (
	"reflect"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRBACWebhookCSRTables(t *testing.T) {
	const age = "<age>" // the object was created 10 minutes ago
	created := ago(10 * time.Minute)
	rbac := func(r string) schema.GroupResource {
		return schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: r}
	}
	cases := []struct {
		name   string
		gr     schema.GroupResource
		obj    runtime.Object
		header []string
		wide   []string
		cells  []any
	}{
		{
			name:   "role: the default NAME and CREATED AT",
			gr:     rbac("roles"),
			obj:    obj(t, `{metadata: {name: pod-reader, namespace: default}}`, &rbacv1.Role{}),
			header: []string{"NAME", "CREATED AT"},
			cells:  []any{"pod-reader", "2026-03-01T11:50:00Z"},
		},
		{
			name:   "clusterrole",
			gr:     rbac("clusterroles"),
			obj:    obj(t, `{metadata: {name: secret-reader}, rules: [{apiGroups: [""], resources: [secrets], verbs: [get]}]}`, &rbacv1.ClusterRole{}),
			header: []string{"NAME", "CREATED AT"},
			cells:  []any{"secret-reader", "2026-03-01T11:50:00Z"},
		},
		{
			name: "rolebinding",
			gr:   rbac("rolebindings"),
			obj: obj(t, `
metadata: {name: read-pods, namespace: default}
subjects:
- {kind: User, name: jane}
- {kind: User, name: joe}
- {kind: Group, name: devs}
- {kind: ServiceAccount, name: default, namespace: default}
roleRef: {kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}
`, &rbacv1.RoleBinding{}),
			header: []string{"NAME", "ROLE", "AGE"},
			wide:   []string{"USERS", "GROUPS", "SERVICEACCOUNTS"},
			cells:  []any{"read-pods", "Role/pod-reader", age, "jane, joe", "devs", "default/default"},
		},
		{
			name: "clusterrolebinding without subjects",
			gr:   rbac("clusterrolebindings"),
			obj: obj(t, `
metadata: {name: read-secrets-global}
roleRef: {kind: ClusterRole, name: secret-reader, apiGroup: rbac.authorization.k8s.io}
`, &rbacv1.ClusterRoleBinding{}),
			header: []string{"NAME", "ROLE", "AGE"},
			wide:   []string{"USERS", "GROUPS", "SERVICEACCOUNTS"},
			cells:  []any{"read-secrets-global", "ClusterRole/secret-reader", age, "", "", ""},
		},
		{
			name: "validatingwebhookconfiguration",
			gr:   schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
			obj: obj(t, `{metadata: {name: pod-policy.example.com}, webhooks: [{name: a.example.com}, {name: b.example.com}]}`,
				&admissionregistrationv1.ValidatingWebhookConfiguration{}),
			header: []string{"NAME", "WEBHOOKS", "AGE"},
			cells:  []any{"pod-policy.example.com", int64(2), age},
		},
		{
			name:   "mutatingwebhookconfiguration",
			gr:     schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
			obj:    obj(t, `{metadata: {name: injector}}`, &admissionregistrationv1.MutatingWebhookConfiguration{}),
			header: []string{"NAME", "WEBHOOKS", "AGE"},
			cells:  []any{"injector", int64(0), age},
		},
		{
			name: "csr pending",
			gr:   schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
			obj: obj(t, `
metadata: {name: jane}
spec: {signerName: kubernetes.io/kube-apiserver-client, username: admin, expirationSeconds: 86400, usages: [client auth]}
`, &certificatesv1.CertificateSigningRequest{}),
			header: []string{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"},
			cells:  []any{"jane", age, "kubernetes.io/kube-apiserver-client", "admin", "24h", "Pending"},
		},
		{
			name: "csr approved and issued",
			gr:   schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
			obj: obj(t, `
metadata: {name: node-csr}
spec: {signerName: kubernetes.io/kubelet-serving, username: "system:node:a", usages: [server auth]}
status: {certificate: Zm9v, conditions: [{type: Approved, status: "True"}]}
`, &certificatesv1.CertificateSigningRequest{}),
			cells: []any{"node-csr", age, "kubernetes.io/kubelet-serving", "system:node:a", "<none>", "Approved,Issued"},
		},
		{
			name: "csr denied and failed",
			gr:   schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
			obj: obj(t, `
metadata: {name: bad}
spec: {username: u, expirationSeconds: 600}
status: {conditions: [{type: Approved, status: "True"}, {type: Denied, status: "True"}, {type: Failed, status: "True"}]}
`, &certificatesv1.CertificateSigningRequest{}),
			cells: []any{"bad", age, "<none>", "u", "10m", "Denied,Failed"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.obj.DeepCopyObject()
			setCreated(t, o, created)
			table := convert(t, tc.gr, o)
			if first := table.ColumnDefinitions[0]; first.Name != "Name" || first.Format != "name" {
				t.Errorf("first column = %+v, want Name with format name", first)
			}
			if tc.header != nil {
				checkColumns(t, table, tc.header, tc.wide)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("rows = %d, want 1", len(table.Rows))
			}
			want := make([]any, len(tc.cells))
			for i, c := range tc.cells {
				if c == age {
					c = "10m"
				}
				want[i] = c
			}
			if got := table.Rows[0].Cells; !reflect.DeepEqual(got, want) {
				t.Errorf("cells =\n  %#v\nwant\n  %#v", got, want)
			}
			if len(table.Rows[0].Cells) != len(table.ColumnDefinitions) {
				t.Errorf("%d cells for %d columns", len(table.Rows[0].Cells), len(table.ColumnDefinitions))
			}
		})
	}
}
