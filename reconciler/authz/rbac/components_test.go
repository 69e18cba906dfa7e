package rbac

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// hostControllers are the controllers the hosts run (controllerList of nodes/host).
var hostControllers = []string{"gitsync", "replicaset", "deployment", "statefulset", "daemonset", "job", "cronjob",
	"podautoscaler", "servicelb", "volumebinding", "volumeprotection", "ephemeralvolume", "localvolume", "serviceaccount", "unenforced", "policyinventory",
	"garbagecollector", "endpointslice", "nodelifecycle", "scheduler", "nodeipam", "namespace", "disruption", "csrsigning", "csrapproving", "resourcequota"}

func TestControllerNames(t *testing.T) {
	names := ControllerNames()
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("names not sorted and unique: %v", names)
	}
	want := append(slices.Clone(hostControllers), "rootca", "clusterroleaggregation")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("ControllerNames() = %v, want %v", names, want)
	}
	for name, u := range map[string]string{
		"replicaset":             "system:controller:replicaset",
		"gitsync":                "system:controller:gitsync",
		"clusterroleaggregation": "system:controller:clusterroleaggregation",
		"scheduler":              SchedulerUser,
	} {
		if got := ControllerUser(name); got != u {
			t.Errorf("ControllerUser(%q) = %q, want %q", name, got, u)
		}
	}
	if NodeUser("h1") != "system:node:h1" || SchedulerUser != "system:kube-scheduler" {
		t.Error("node or scheduler identity")
	}
}

func TestComponentPolicy(t *testing.T) {
	roles := map[string]rbacv1.ClusterRole{}
	for _, r := range BootstrapClusterRoles() {
		roles[r.Name] = r
	}
	bootstrapRoles := len(roles)
	for _, r := range ComponentClusterRoles() {
		if _, dup := roles[r.Name]; dup {
			t.Errorf("ClusterRole %s defined twice", r.Name)
		}
		roles[r.Name] = r
		if r.Labels[BootstrappingLabel] != "rbac-defaults" || r.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("%s: metadata %v %v", r.Name, r.Labels, r.Annotations)
		}
		if r.AggregationRule != nil {
			t.Errorf("%s is aggregated", r.Name)
		}
		for _, rl := range r.Rules {
			if len(rl.Verbs) == 0 || len(rl.APIGroups) == 0 || len(rl.Resources) == 0 || len(rl.NonResourceURLs) > 0 {
				t.Errorf("%s: rule %+v", r.Name, rl)
			}
			if slices.Contains(rl.Verbs, "*") {
				t.Errorf("%s: rule with every verb %+v", r.Name, rl)
			}
		}
	}
	if n := len(roles) - bootstrapRoles; n != len(ControllerNames())+3 { // + controller manager + node + git webhook + join - gitsync
		t.Errorf("%d component roles", n)
	}

	bound := map[string]rbacv1.ClusterRoleBinding{}
	for _, b := range ComponentClusterRoleBindings() {
		if _, dup := bound[b.Name]; dup {
			t.Errorf("ClusterRoleBinding %s defined twice", b.Name)
		}
		bound[b.Name] = b
		if b.Labels[BootstrappingLabel] != "rbac-defaults" || b.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("%s: metadata %v %v", b.Name, b.Labels, b.Annotations)
		}
		if _, ok := roles[b.RoleRef.Name]; !ok || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName {
			t.Errorf("%s refers to %+v", b.Name, b.RoleRef)
		}
		if len(b.Subjects) != 1 || b.Subjects[0].APIGroup != rbacv1.GroupName {
			t.Errorf("%s: subjects %+v", b.Name, b.Subjects)
		}
	}
	for _, b := range BootstrapClusterRoleBindings() {
		if _, dup := bound[b.Name]; dup {
			t.Errorf("ClusterRoleBinding %s is also a bootstrap binding", b.Name)
		}
	}

	wantBinding := func(name, roleName, kind, subject string) {
		t.Helper()
		b, ok := bound[name]
		if !ok {
			t.Errorf("no ClusterRoleBinding %s", name)
			return
		}
		if b.RoleRef.Name != roleName || len(b.Subjects) != 1 || b.Subjects[0].Kind != kind || b.Subjects[0].Name != subject {
			t.Errorf("%s binds %s to %+v, want %s to %s %s", name, b.RoleRef.Name, b.Subjects, roleName, kind, subject)
		}
	}
	wantBinding(ControllerManagerUser, ControllerManagerUser, rbacv1.UserKind, ControllerManagerUser)
	wantBinding("system:node", "system:node", rbacv1.GroupKind, NodesGroup)
	wantBinding("system:flotilla:git-webhook", "system:flotilla:git-webhook", rbacv1.UserKind, GitWebhookUser)
	wantBinding("system:controller:gitsync", "cluster-admin", rbacv1.UserKind, ControllerUser("gitsync"))
	wantBinding("system:kube-scheduler", "system:kube-scheduler", rbacv1.UserKind, SchedulerUser)
	for _, name := range ControllerNames() {
		if name == "gitsync" || name == "scheduler" {
			continue
		}
		wantBinding("system:controller:"+name, "system:controller:"+name, rbacv1.UserKind, ControllerUser(name))
	}
	wantBinding(JoinUser, JoinUser, rbacv1.UserKind, JoinUser)
	if len(bound) != len(ControllerNames())+4 {
		t.Errorf("%d component bindings", len(bound))
	}
	// Every component role is bound.
	for _, r := range ComponentClusterRoles() {
		if b, ok := bound[r.Name]; !ok || b.RoleRef.Name != r.Name {
			t.Errorf("ClusterRole %s is not bound by its binding", r.Name)
		}
	}

	// Every call returns new objects.
	ComponentClusterRoles()[0].Rules[0].Verbs[0] = "changed"
	ComponentClusterRoleBindings()[0].Subjects[0].Name = "changed"
	if ComponentClusterRoles()[0].Rules[0].Verbs[0] == "changed" || ComponentClusterRoleBindings()[0].Subjects[0].Name == "changed" {
		t.Error("component objects are shared")
	}

	// The policy is what the API server reconciles at start: each object is created as is.
	for _, r := range ComponentClusterRoles() {
		res, err := Reconcile(nil, &r)
		if err != nil || res.Operation != OperationCreate {
			t.Errorf("reconcile %s: %v %v", r.Name, res.Operation, err)
		}
	}
	for _, b := range ComponentClusterRoleBindings() {
		res, err := Reconcile(nil, &b)
		if err != nil || res.Operation != OperationCreate {
			t.Errorf("reconcile %s: %v %v", b.Name, res.Operation, err)
		}
	}
}

// componentAuthorizer serves the bootstrap policy with the components'.
func componentAuthorizer(t *testing.T) *Authorizer {
	t.Helper()
	s := newStore()
	for _, r := range aggregateAll(t, append(BootstrapClusterRoles(), ComponentClusterRoles()...)) {
		s.add(t, r)
	}
	for _, b := range append(BootstrapClusterRoleBindings(), ComponentClusterRoleBindings()...) {
		s.add(t, b.DeepCopy())
	}
	return s.authorizer()
}

// call is a request a component makes: verb, group, resource (with "/subresource"),
// namespace and name.
type call struct{ verb, group, resource, namespace, name string }

func (c call) attrs(u user.Info) authorizer.AttributesRecord {
	return resourceAttrs(u, c.verb, c.group, c.resource, c.namespace, c.name)
}

func componentUser(name string, groups ...string) user.Info {
	return usr(name, append(groups, user.AllAuthenticated)...)
}

// TestComponentCalls checks that every call read in the components' code is allowed to the
// identity that makes it.
func TestComponentCalls(t *testing.T) {
	a := componentAuthorizer(t)
	const core, apps, batch = "", "apps", "batch"
	calls := map[string][]call{
		ControllerManagerUser: {
			{"list", core, "pods", "", ""}, {"watch", core, "secrets", "", ""}, {"watch", apps, "replicasets", "", ""},
			{"list", "example.com", "widgets", "", ""}, {"watch", "example.com", "widgets", "", ""},
			{"create", core, "events", "ns1", ""}, {"patch", core, "events", "ns1", "e"},
			{"get", coordinationGroup, "leases", "kube-system", "flotilla-controllers"},
			{"create", coordinationGroup, "leases", "kube-system", ""},
			{"update", coordinationGroup, "leases", "kube-system", "flotilla-controllers"},
			{"update", coordinationGroup, "leases", "kube-system", "flotilla-scheduler"},
			{"list", "flotilla.dev", "gitsources", "", ""}, {"list", core, "secrets", "", ""},
		},
		ControllerUser("replicaset"): {
			{"get", apps, "replicasets", "ns1", "rs"}, {"update", apps, "replicasets/status", "ns1", "rs"},
			{"update", apps, "replicasets/finalizers", "ns1", "rs"},
			{"create", core, "pods", "ns1", ""}, {"delete", core, "pods", "ns1", "p"}, {"patch", core, "pods", "ns1", "p"},
		},
		ControllerUser("deployment"): {
			{"get", apps, "deployments", "ns1", "d"}, {"update", apps, "deployments/status", "ns1", "d"},
			{"create", apps, "replicasets", "ns1", ""}, {"update", apps, "replicasets", "ns1", "rs"},
			{"patch", apps, "replicasets", "ns1", "rs"}, {"delete", apps, "replicasets", "ns1", "rs"},
		},
		ControllerUser("statefulset"): {
			{"get", apps, "statefulsets", "ns1", "s"}, {"update", apps, "statefulsets/status", "ns1", "s"},
			{"create", apps, "controllerrevisions", "ns1", ""}, {"get", apps, "controllerrevisions", "ns1", "r"},
			{"update", apps, "controllerrevisions", "ns1", "r"}, {"patch", apps, "controllerrevisions", "ns1", "r"},
			{"delete", apps, "controllerrevisions", "ns1", "r"},
			{"create", core, "pods", "ns1", ""}, {"update", core, "pods", "ns1", "s-0"}, {"delete", core, "pods", "ns1", "s-0"},
			{"create", core, "persistentvolumeclaims", "ns1", ""}, {"update", core, "persistentvolumeclaims", "ns1", "data-s-0"},
		},
		ControllerUser("daemonset"): {
			{"get", apps, "daemonsets", "ns1", "ds"}, {"update", apps, "daemonsets/status", "ns1", "ds"},
			{"create", apps, "controllerrevisions", "ns1", ""}, {"delete", apps, "controllerrevisions", "ns1", "r"},
			{"create", core, "pods", "ns1", ""}, {"patch", core, "pods", "ns1", "p"}, {"delete", core, "pods", "ns1", "p"},
		},
		ControllerUser("job"): {
			{"get", batch, "jobs", "ns1", "j"}, {"delete", batch, "jobs", "ns1", "j"}, {"update", batch, "jobs/status", "ns1", "j"},
			{"create", core, "pods", "ns1", ""}, {"patch", core, "pods", "ns1", "p"}, {"delete", core, "pods", "ns1", "p"},
		},
		ControllerUser("cronjob"): {
			{"get", batch, "cronjobs", "ns1", "c"}, {"update", batch, "cronjobs/status", "ns1", "c"},
			{"create", batch, "jobs", "ns1", ""}, {"get", batch, "jobs", "ns1", "j"}, {"list", batch, "jobs", "ns1", ""},
			{"delete", batch, "jobs", "ns1", "j"},
		},
		ControllerUser("podautoscaler"): {
			{"get", apps, "deployments/scale", "ns1", "d"}, {"update", apps, "deployments/scale", "ns1", "d"},
			{"update", "example.com", "widgets/scale", "ns1", "w"}, {"get", core, "replicationcontrollers/scale", "ns1", "rc"},
			{"list", "metrics.k8s.io", "pods", "ns1", ""},
			{"update", "autoscaling", "horizontalpodautoscalers/status", "ns1", "h"},
		},
		ControllerUser("servicelb"): {{"update", core, "services/status", "ns1", "s"}},
		ControllerUser("volumebinding"): {
			{"get", core, "persistentvolumes", "", "pv"}, {"update", core, "persistentvolumes", "", "pv"},
			{"update", core, "persistentvolumes/status", "", "pv"}, {"delete", core, "persistentvolumes", "", "pv"},
			{"get", core, "persistentvolumeclaims", "ns1", "c"}, {"update", core, "persistentvolumeclaims", "ns1", "c"},
			{"update", core, "persistentvolumeclaims/status", "ns1", "c"},
		},
		ControllerUser("volumeprotection"): {
			{"update", core, "persistentvolumeclaims", "ns1", "c"}, {"update", core, "persistentvolumes", "", "pv"},
			{"list", core, "pods", "ns1", ""},
		},
		ControllerUser("ephemeralvolume"): {
			{"create", core, "persistentvolumeclaims", "ns1", ""}, {"get", core, "persistentvolumeclaims", "ns1", "c"},
		},
		ControllerUser("localvolume"): {
			{"create", core, "persistentvolumes", "", ""}, {"delete", core, "persistentvolumes", "", "pv"},
			{"update", core, "persistentvolumes", "", "pv"}, {"get", core, "nodes", "", "h1"},
			{"get", storageGroup, "storageclasses", "", "flotilla-local"}, {"create", storageGroup, "storageclasses", "", ""},
		},
		ControllerUser("serviceaccount"): {{"create", core, "serviceaccounts", "ns1", ""}},
		ControllerUser("garbagecollector"): {
			{"get", "example.com", "widgets", "ns1", "w"}, {"delete", "example.com", "widgets", "ns1", "w"},
			{"patch", apps, "replicasets", "ns1", "rs"}, {"patch", rbacv1.GroupName, "clusterroles", "", "r"},
			{"delete", core, "namespaces", "", "n"},
		},
		ControllerUser("endpointslice"): {
			{"create", discoveryGroup, "endpointslices", "ns1", ""}, {"update", discoveryGroup, "endpointslices", "ns1", "s"},
			{"delete", discoveryGroup, "endpointslices", "ns1", "s"},
			{"create", core, "endpoints", "ns1", ""}, {"update", core, "endpoints", "ns1", "s"}, {"delete", core, "endpoints", "ns1", "s"},
		},
		ControllerUser("nodelifecycle"): {
			{"update", core, "nodes", "", "h1"}, {"update", core, "nodes/status", "", "h1"},
			{"get", core, "pods", "ns1", "p"}, {"delete", core, "pods", "ns1", "p"},
		},
		ControllerUser("disruption"): {
			{"update", "policy", "poddisruptionbudgets/status", "ns1", "pdb"},
			{"get", apps, "deployments/scale", "ns1", "d"}, {"get", "example.com", "widgets/scale", "ns1", "w"},
		},
		ControllerUser("resourcequota"): {{"update", core, "resourcequotas/status", "ns1", "q"}},
		SchedulerUser: {
			{"create", core, "pods/binding", "ns1", "p"}, {"patch", core, "pods/status", "ns1", "p"},
			{"patch", core, "persistentvolumeclaims", "ns1", "c"}, {"create", "flotilla.dev", "bindingbatches", "ns1", ""},
		},
		ControllerUser("nodeipam"): {{"list", core, "nodes", "", ""}, {"patch", core, "nodes", "", "h1"}},
		ControllerUser("namespace"): {
			{"deletecollection", core, "configmaps", "ns1", ""}, {"deletecollection", "example.com", "widgets", "ns1", ""},
			{"list", core, "pods", "ns1", ""}, {"delete", "example.com", "widgets", "ns1", "w"},
			{"update", core, "namespaces/status", "", "ns1"}, {"update", core, "namespaces/finalize", "", "ns1"},
			{"delete", core, "namespaces", "", "ns1"},
		},
		ControllerUser("rootca"): {{"create", core, "configmaps", "ns1", ""}, {"update", core, "configmaps", "ns1", "kube-root-ca.crt"}},
		ControllerUser("policyinventory"): {
			{"create", core, "configmaps", "kube-system", ""}, {"update", core, "configmaps", "kube-system", "flotilla-policy-inventory"},
		},
		ControllerUser("clusterroleaggregation"): {
			{"update", rbacv1.GroupName, "clusterroles", "", "admin"}, {"escalate", rbacv1.GroupName, "clusterroles", "", "admin"},
		},
		ControllerUser("csrsigning"): {
			{"update", certificatesGroup, "certificatesigningrequests/status", "", "csr-1"},
			{"sign", certificatesGroup, "signers", "", "kubernetes.io/kube-apiserver-client"},
			{"sign", certificatesGroup, "signers", "", "kubernetes.io/kube-apiserver-client-kubelet"},
			{"sign", certificatesGroup, "signers", "", "kubernetes.io/kubelet-serving"},
		},
		ControllerUser("csrapproving"): {
			{"update", certificatesGroup, "certificatesigningrequests/approval", "", "csr-1"},
			{"approve", certificatesGroup, "signers", "", "kubernetes.io/kube-apiserver-client-kubelet"},
			{"approve", certificatesGroup, "signers", "", "kubernetes.io/kubelet-serving"},
			{"create", authzGroup, "subjectaccessreviews", "", ""},
		},
		ControllerUser("gitsync"): {
			{"create", rbacv1.GroupName, "clusterrolebindings", "", ""}, {"escalate", rbacv1.GroupName, "clusterroles", "", "r"},
			{"create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""}, {"delete", "example.com", "widgets", "ns1", "w"},
			// A GitSource's spec.serviceAccountName: gitsync.Impersonation's user and groups.
			{"impersonate", core, "serviceaccounts", "ns1", "deployer"}, {"impersonate", core, "groups", "", "system:serviceaccounts"},
			{"impersonate", core, "groups", "", "system:serviceaccounts:ns1"}, {"impersonate", core, "groups", "", "system:authenticated"},
		},
		GitWebhookUser: {
			{"get", flotillaGroup, "gitsources", "ns1", "apps"}, {"patch", flotillaGroup, "gitsources", "ns1", "apps"},
			{"get", core, "secrets", "ns1", "hook"}, {"get", core, "secrets", "ns1", "flotilla-no-webhook-secret-"},
		},
		NodeUser("h1"): {
			{"list", core, "pods", "", ""}, {"watch", core, "pods", "", ""},
			{"list", core, "services", "", ""}, {"watch", core, "nodes", "", ""},
			{"list", discoveryGroup, "endpointslices", "", ""}, {"watch", networkingGroup, "ingresses", "", ""},
			{"list", networkingGroup, "ingressclasses", "", ""},
			// The network policy controller.
			{"watch", networkingGroup, "networkpolicies", "", ""}, {"list", core, "namespaces", "", ""},
			{"create", core, "nodes", "", ""}, {"get", core, "nodes", "", "h1"}, {"update", core, "nodes", "", "h1"},
			{"update", core, "nodes/status", "", "h1"},
			{"get", coordinationGroup, "leases", "kube-node-lease", "h1"}, {"create", coordinationGroup, "leases", "kube-node-lease", ""},
			{"update", coordinationGroup, "leases", "kube-node-lease", "h1"},
			{"get", storageGroup, "storageclasses", "", "flotilla-local"},
			{"delete", core, "pods", "ns1", "p"}, {"update", core, "pods/status", "ns1", "p"},
			{"create", core, "serviceaccounts/token", "ns1", "default"},
			{"create", core, "events", "ns1", ""}, {"patch", core, "events", "ns1", "e"},
			{"update", networkingGroup, "ingresses/status", "ns1", "i"},
			{"create", certificatesGroup, "certificatesigningrequests", "", ""},
			{"get", certificatesGroup, "certificatesigningrequests", "", "csr-1"},
			{"watch", certificatesGroup, "certificatesigningrequests", "", ""},
			{"create", certificatesGroup, "certificatesigningrequests/selfnodeclient", "", ""},
		},
	}
	for _, name := range ControllerNames() {
		if name != "unenforced" && len(calls[ControllerUser(name)]) == 0 {
			t.Errorf("no calls listed for controller %s", name)
		}
	}
	for name, cs := range calls {
		u := componentUser(name)
		if name == NodeUser("h1") {
			u = componentUser(name, NodesGroup)
		}
		for _, c := range cs {
			if d, reason, _ := a.Authorize(context.Background(), c.attrs(u)); d != authorizer.DecisionAllow {
				t.Errorf("%s may not %s %s/%s in %q: %s", name, c.verb, c.group, c.resource, c.namespace, reason)
			}
		}
	}
}

// TestComponentLimits checks what the components' roles do not grant.
func TestComponentLimits(t *testing.T) {
	a := componentAuthorizer(t)
	const core, apps = "", "apps"
	h1 := componentUser(NodeUser("h1"), NodesGroup)
	cm := componentUser(ControllerManagerUser)
	hook := componentUser(GitWebhookUser)
	ctrl := func(name string) user.Info { return componentUser(ControllerUser(name)) }

	for _, tc := range []struct {
		name  string
		u     user.Info
		attrs call
		allow bool
	}{
		{"node creates tokens", h1, call{"create", core, "serviceaccounts/token", "ns1", "sa"}, true},
		{"node updates pod status", h1, call{"update", core, "pods/status", "ns1", "p"}, true},
		// The Node authorizer, not RBAC, lets a host read what its pods use, by name.
		{"node lists secrets", h1, call{"list", core, "secrets", "", ""}, false},
		{"node watches secrets", h1, call{"watch", core, "secrets", "ns1", ""}, false},
		{"node lists configmaps", h1, call{"list", core, "configmaps", "", ""}, false},
		{"node watches persistentvolumeclaims", h1, call{"watch", core, "persistentvolumeclaims", "", ""}, false},
		{"node lists persistentvolumes", h1, call{"list", core, "persistentvolumes", "", ""}, false},
		// The Node authorizer and NodeRestriction, not RBAC, let a host remove the cleanup
		// finalizer of its own local volumes.
		{"node updates persistentvolumes", h1, call{"update", core, "persistentvolumes", "", "pv"}, false},
		{"node writes storageclasses", h1, call{"update", storageGroup, "storageclasses", "", "flotilla-local"}, false},
		{"node gets configmaps by name", h1, call{"get", core, "configmaps", "ns1", "c"}, false},
		{"node creates pods", h1, call{"create", core, "pods", "ns1", ""}, false},
		{"node updates pods", h1, call{"update", core, "pods", "ns1", "p"}, false},
		{"node deletes secrets", h1, call{"delete", core, "secrets", "ns1", "s"}, false},
		{"node writes secrets", h1, call{"update", core, "secrets", "ns1", "s"}, false},
		{"node creates roles", h1, call{"create", rbacv1.GroupName, "roles", "ns1", ""}, false},
		{"node creates clusterrolebindings", h1, call{"create", rbacv1.GroupName, "clusterrolebindings", "", ""}, false},
		{"node deletes nodes", h1, call{"delete", core, "nodes", "", "h2"}, false},
		{"node creates services", h1, call{"create", core, "services", "kube-system", ""}, false},
		{"node updates services", h1, call{"update", core, "services", "kube-system", "kube-dns"}, false},
		{"node gets secrets by name", h1, call{"get", core, "secrets", "ns1", "s"}, false},
		{"node creates namespaces", h1, call{"create", core, "namespaces", "", ""}, false},
		{"node execs", h1, call{"create", core, "pods/exec", "ns1", "p"}, false},
		{"node evicts", h1, call{"create", core, "pods/eviction", "ns1", "p"}, false},
		{"node user without the group", componentUser(NodeUser("h1")), call{"update", core, "pods/status", "ns1", "p"}, false},

		{"replicaset creates pods", ctrl("replicaset"), call{"create", core, "pods", "ns1", ""}, true},
		{"replicaset deletes deployments", ctrl("replicaset"), call{"delete", apps, "deployments", "ns1", "d"}, false},
		{"replicaset updates replicasets", ctrl("replicaset"), call{"update", apps, "replicasets", "ns1", "rs"}, false},
		{"replicaset lists pods itself", ctrl("replicaset"), call{"list", core, "pods", "ns1", ""}, false},
		{"replicaset records events itself", ctrl("replicaset"), call{"create", core, "events", "ns1", ""}, false},
		{"deployment creates pods", ctrl("deployment"), call{"create", core, "pods", "ns1", ""}, false},
		{"job deletes deployments", ctrl("job"), call{"delete", apps, "deployments", "ns1", "d"}, false},
		{"unenforced reads", ctrl("unenforced"), call{"get", core, "pods", "ns1", "p"}, false},
		{"servicelb updates services", ctrl("servicelb"), call{"update", core, "services", "ns1", "s"}, false},
		{"nodelifecycle evicts through the subresource", ctrl("nodelifecycle"), call{"create", core, "pods/eviction", "ns1", "p"}, false},
		{"disruption updates budgets", ctrl("disruption"), call{"update", "policy", "poddisruptionbudgets", "ns1", "pdb"}, false},
		{"disruption updates scale", ctrl("disruption"), call{"update", apps, "deployments/scale", "ns1", "d"}, false},
		{"disruption evicts", ctrl("disruption"), call{"create", core, "pods/eviction", "ns1", "p"}, false},
		{"resourcequota updates quotas", ctrl("resourcequota"), call{"update", core, "resourcequotas", "ns1", "q"}, false},
		{"resourcequota lists pods itself", ctrl("resourcequota"), call{"list", core, "pods", "ns1", ""}, false},
		{"disruption gets pods itself", ctrl("disruption"), call{"get", core, "pods", "ns1", "p"}, false},
		{"podautoscaler updates deployments", ctrl("podautoscaler"), call{"update", apps, "deployments", "ns1", "d"}, false},
		{"podautoscaler reads node metrics", ctrl("podautoscaler"), call{"list", "metrics.k8s.io", "nodes", "", ""}, false},
		{"garbagecollector creates", ctrl("garbagecollector"), call{"create", core, "pods", "ns1", ""}, false},
		{"namespace controller creates", ctrl("namespace"), call{"create", core, "configmaps", "ns1", ""}, false},
		{"namespace controller updates", ctrl("namespace"), call{"update", core, "configmaps", "ns1", "c"}, false},
		{"scheduler deletes pods", componentUser(SchedulerUser), call{"delete", core, "pods", "ns1", "p"}, false},
		{"scheduler binds as a controller name", componentUser("system:controller:scheduler"), call{"create", core, "pods/binding", "ns1", "p"}, false},
		{"rootca deletes configmaps", ctrl("rootca"), call{"delete", core, "configmaps", "ns1", "c"}, false},
		{"policyinventory updates another configmap", ctrl("policyinventory"), call{"update", core, "configmaps", "kube-system", "flotilla-required-labels"}, false},
		{"policyinventory reads secrets", ctrl("policyinventory"), call{"get", core, "secrets", "kube-system", "s"}, false},
		{"clusterroleaggregation binds", ctrl("clusterroleaggregation"), call{"create", rbacv1.GroupName, "clusterrolebindings", "", ""}, false},
		{"csrsigning signs for another signer", ctrl("csrsigning"), call{"sign", certificatesGroup, "signers", "", "example.com/signer"}, false},
		{"csrsigning approves", ctrl("csrsigning"), call{"update", certificatesGroup, "certificatesigningrequests/approval", "", "c"}, false},
		{"csrsigning approves for a signer", ctrl("csrsigning"), call{"approve", certificatesGroup, "signers", "", "kubernetes.io/kube-apiserver-client"}, false},
		{"csrsigning updates requests", ctrl("csrsigning"), call{"update", certificatesGroup, "certificatesigningrequests", "", "c"}, false},
		{"csrapproving approves admin clients", ctrl("csrapproving"), call{"approve", certificatesGroup, "signers", "", "kubernetes.io/kube-apiserver-client"}, false},
		{"csrapproving signs", ctrl("csrapproving"), call{"update", certificatesGroup, "certificatesigningrequests/status", "", "c"}, false},
		{"csrapproving signs for a signer", ctrl("csrapproving"), call{"sign", certificatesGroup, "signers", "", "kubernetes.io/kubelet-serving"}, false},
		{"csrapproving deletes requests", ctrl("csrapproving"), call{"delete", certificatesGroup, "certificatesigningrequests", "", "c"}, false},
		{"node approves requests", h1, call{"update", certificatesGroup, "certificatesigningrequests/approval", "", "c"}, false},
		{"node signs requests", h1, call{"update", certificatesGroup, "certificatesigningrequests/status", "", "c"}, false},
		{"node creates selfnodeclient", h1, call{"create", certificatesGroup, "certificatesigningrequests/selfnodeclient", "", ""}, true},
		{"node deletes requests", h1, call{"delete", certificatesGroup, "certificatesigningrequests", "", "c"}, false},
		{"unknown controller", ctrl("nosuch"), call{"create", core, "pods", "ns1", ""}, false},

		{"git webhook updates gitsources", hook, call{"update", flotillaGroup, "gitsources", "ns1", "apps"}, false},
		{"git webhook writes status", hook, call{"update", flotillaGroup, "gitsources/status", "ns1", "apps"}, false},
		{"git webhook deletes gitsources", hook, call{"delete", flotillaGroup, "gitsources", "ns1", "apps"}, false},
		{"git webhook creates gitsources", hook, call{"create", flotillaGroup, "gitsources", "ns1", ""}, false},
		{"git webhook lists gitsources", hook, call{"list", flotillaGroup, "gitsources", "", ""}, false},
		{"git webhook lists secrets", hook, call{"list", core, "secrets", "ns1", ""}, false},
		{"git webhook watches secrets", hook, call{"watch", core, "secrets", "", ""}, false},
		{"git webhook writes secrets", hook, call{"update", core, "secrets", "ns1", "hook"}, false},
		{"git webhook gets configmaps", hook, call{"get", core, "configmaps", "ns1", "c"}, false},
		{"git webhook patches pods", hook, call{"patch", core, "pods", "ns1", "p"}, false},

		{"controller manager writes", cm, call{"create", core, "pods", "ns1", ""}, false},
		{"controller manager execs through get", cm, call{"get", core, "pods/exec", "ns1", "p"}, false},
		{"controller manager proxies to nodes", cm, call{"get", core, "nodes/proxy", "", "h1"}, false},
		{"controller manager gets pods", cm, call{"get", core, "pods", "ns1", "p"}, false},
		{"controller manager updates another lease", cm, call{"update", coordinationGroup, "leases", "ns1", "app"}, false},
		{"controller manager deletes its lease", cm, call{"delete", coordinationGroup, "leases", "kube-system", "flotilla-controllers"}, false},
		{"controller manager writes secrets", cm, call{"update", core, "secrets", "ns1", "s"}, false},
		{"controller manager gets secrets", cm, call{"get", core, "secrets", "ns1", "s"}, false},
		{"controller manager writes events.k8s.io events", cm, call{"create", "events.k8s.io", "events", "ns1", ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, _ := a.Authorize(context.Background(), tc.attrs.attrs(tc.u))
			if (d == authorizer.DecisionAllow) != tc.allow {
				t.Errorf("decision %v (%s), want allow=%v", d, reason, tc.allow)
			}
		})
	}
}

// TestComponentRulesAllow checks single rules of the roles with RulesAllow.
func TestComponentRulesAllow(t *testing.T) {
	byName := map[string][]rbacv1.PolicyRule{}
	for _, r := range ComponentClusterRoles() {
		byName[r.Name] = r.Rules
	}
	rs := byName[ControllerUser("replicaset")]
	if !RulesAllow(resourceAttrs(usr("x"), "create", "", "pods", "ns1", ""), rs...) {
		t.Error("replicaset role does not create pods")
	}
	if RulesAllow(resourceAttrs(usr("x"), "delete", "apps", "deployments", "ns1", "d"), rs...) {
		t.Error("replicaset role deletes deployments")
	}
	if rules, ok := byName[ControllerUser("unenforced")]; !ok || len(rules) != 0 {
		t.Errorf("unenforced role: %v %v", ok, rules)
	}
	if _, ok := byName[ControllerUser("gitsync")]; ok {
		t.Error("gitsync has a role of its own besides cluster-admin")
	}
	if _, ok := byName["system:controller:scheduler"]; ok {
		t.Error("the scheduler's role is named system:controller:scheduler")
	}
	cm := byName[ControllerManagerUser]
	if !RulesAllow(resourceAttrs(usr("x"), "update", coordinationGroup, "leases", "kube-system", "flotilla-scheduler"), cm...) ||
		RulesAllow(resourceAttrs(usr("x"), "update", coordinationGroup, "leases", "kube-system", "other"), cm...) {
		t.Error("controller manager role: lease updates")
	}
}

// TestGitWebhookRole pins the rules of the git webhook: it reads the GitSource a delivery
// names and the Secret that source names, and annotates the source; nothing else.
func TestGitWebhookRole(t *testing.T) {
	var role *rbacv1.ClusterRole
	for _, r := range ComponentClusterRoles() {
		if r.Name == GitWebhookUser {
			role = &r
		}
	}
	if role == nil {
		t.Fatalf("no ClusterRole %s", GitWebhookUser)
	}
	want := []rbacv1.PolicyRule{
		{Verbs: []string{"get", "patch"}, APIGroups: []string{"flotilla.dev"}, Resources: []string{"gitsources"}},
		{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}},
	}
	if len(role.Rules) != len(want) {
		t.Fatalf("rules %+v, want %+v", role.Rules, want)
	}
	for i := range want {
		got := role.Rules[i]
		if !slices.Equal(got.Verbs, want[i].Verbs) || !slices.Equal(got.APIGroups, want[i].APIGroups) ||
			!slices.Equal(got.Resources, want[i].Resources) || len(got.ResourceNames) > 0 || len(got.NonResourceURLs) > 0 {
			t.Errorf("rule %d = %+v, want %+v", i, got, want[i])
		}
	}
	if GitWebhookUser != "system:flotilla:git-webhook" {
		t.Errorf("GitWebhookUser = %q: the name is in client certificates already issued", GitWebhookUser)
	}
	rules := role.Rules
	if !RulesAllow(resourceAttrs(usr("x"), "patch", "flotilla.dev", "gitsources", "ns1", "apps"), rules...) ||
		RulesAllow(resourceAttrs(usr("x"), "patch", "flotilla.dev", "gitsources/status", "ns1", "apps"), rules...) ||
		RulesAllow(resourceAttrs(usr("x"), "list", "", "secrets", "ns1", ""), rules...) {
		t.Error("git webhook role: patch gitsources only, no list of secrets")
	}
}
