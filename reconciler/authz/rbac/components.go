package rbac

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Identities of flotilla's components. Each authenticates with a client certificate whose
// common name is its user and whose organizations are its groups, and is granted by
// ComponentClusterRoles exactly what its code calls on the API.
const (
	// ControllerManagerUser is the identity of what the controllers share: the informer
	// factories (Informers and MetadataInformers of the controllers' Context), the event
	// recorder every controller reports with, and the record of the elected leaders in the Leases
	// kube-system/flotilla-controllers and kube-system/flotilla-scheduler.
	ControllerManagerUser = "system:kube-controller-manager"
	// SchedulerUser is the identity of the scheduler, the controller named "scheduler":
	// ControllerUser("scheduler") returns it.
	SchedulerUser = "system:kube-scheduler"
	// NodesGroup is the group of every host's identity (NodeUser).
	NodesGroup = "system:nodes"
	// GitWebhookUser is the identity of the git push webhook every host serves
	// (gitsync.Webhook); its ClusterRole and binding have the same name.
	GitWebhookUser = "system:flotilla:git-webhook"
)

const (
	controllerUserPrefix = "system:controller:"
	// NodeUserPrefix starts the user name (and a certificate's common name) of every
	// host's identity.
	NodeUserPrefix      = "system:node:"
	nodeRoleName        = "system:node"
	schedulerController = "scheduler"
	gitsyncController   = "gitsync"
)

// ControllerUser is the identity a controller writes with (and reads with, where it asks
// the API directly rather than the shared informers): "system:controller:" + name, except
// SchedulerUser for "scheduler". Its rules are those of the ClusterRole of the same name
// (system:kube-scheduler for the scheduler).
func ControllerUser(name string) string {
	if name == schedulerController {
		return SchedulerUser
	}
	return controllerUserPrefix + name
}

// NodeUser is the identity of host name: "system:node:" + name, in NodesGroup. It is what
// the host runs for itself: the node agent, the pod network routes, the Service proxy,
// cluster DNS and the Ingress proxy.
func NodeUser(name string) string { return NodeUserPrefix + name }

// ControllerNames returns, sorted, the name of every controller that has an identity:
// those the hosts run, and rootca and clusterroleaggregation.
func ControllerNames() []string {
	names := make([]string, 0, len(controllerPolicies)+1)
	names = append(names, gitsyncController)
	for name := range controllerPolicies {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// controllerRoleName is the name of the ClusterRole (and of its binding) of a controller.
func controllerRoleName(name string) string {
	if name == schedulerController {
		return SchedulerUser
	}
	return ControllerUser(name)
}

// API groups of the component rules.
const (
	coreGroup         = ""
	appsGroup         = "apps"
	batchGroup        = "batch"
	autoscalingGroup  = "autoscaling"
	coordinationGroup = "coordination.k8s.io"
	discoveryGroup    = "discovery.k8s.io"
	networkingGroup   = "networking.k8s.io"
	storageGroup      = "storage.k8s.io"
	metricsGroup      = "metrics.k8s.io"
	policyGroup       = "policy"
	flotillaGroup     = "flotilla.dev"
	certificatesGroup = "certificates.k8s.io"
	authzGroup        = "authorization.k8s.io"
)

// named restricts a rule to the objects of the given names. Only requests that name an
// object (get, update, patch, delete) can match it.
func named(r rbacv1.PolicyRule, resourceNames ...string) rbacv1.PolicyRule {
	r.ResourceNames = resourceNames
	return r
}

func verbs(v ...string) []string { return v }

// controllerManagerRules are the rules of ControllerManagerUser.
//
// The informer factories list and watch every resource: the garbage collector and the
// unenforced controller register metadata informers for every served resource, custom
// ones included. They need no get, and none is granted on "*": a get on every resource
// would also be a get on pods/exec, pods/portforward and the proxy subresources, which
// the API serves as connections to pods and nodes.
//
// Other calls:
//   - the event recorder (record.EventBroadcaster): events create, and patch when it
//     counts a repeated event; it never updates them, and writes no events.k8s.io events;
//   - leader election (controllers.RunWhileLeader) runs on an etcd lease; the host that
//     wins records itself as the holder of its Lease: get, create when there is none,
//     update; only the Leases flotilla-controllers and flotilla-scheduler (nodes/host
//     startControllers).
//
// gitsync's warm-cache watcher (gitsync.RunWarm) runs as gitsync, not with this identity.
var controllerManagerRules = []rbacv1.PolicyRule{
	rule(verbs("list", "watch"), "*", "*"),
	rule(verbs("create", "patch"), coreGroup, "events"),
	rule(verbs("create"), coordinationGroup, "leases"),
	named(rule(verbs("get", "update"), coordinationGroup, "leases"), "flotilla-controllers", "flotilla-scheduler"),
}

// controllerPolicies are the rules of each controller but gitsync, by controller name: the
// requests it makes with its own client (Context.Client, Dynamic, Metadata, or a client
// made from Context.Config). What it reads through the shared informers, and the events it
// records, are ControllerManagerUser's.
//
// Controllers that give what they create (or adopt) a controller reference set
// blockOwnerDeletion on it (metav1.NewControllerRef, internal.ControllerRefPatch). Like in
// Kubernetes they may update the finalizers subresource of their owner kind, which is what
// the OwnerReferencesPermissionEnforcement admission check asks of such a write. The API
// does not run that check yet; the rules grant nothing else.
var controllerPolicies = map[string][]rbacv1.PolicyRule{
	// replicaset/sync.go: Get of the ReplicaSet before adopting (CanAdopt), UpdateStatus (and
	// Get on a conflict); pods Create, Delete, and Patch to adopt and release.
	"replicaset": {
		rule(verbs("get"), appsGroup, "replicasets"),
		rule(verbs("update"), appsGroup, "replicasets/status", "replicasets/finalizers"),
		rule(verbs("create", "delete", "patch"), coreGroup, "pods"),
	},
	// deployment/sync.go, progress.go: Get of the Deployment before adopting, UpdateStatus;
	// ReplicaSets Create, Update (scale, annotations), Patch (adopt, release), Delete
	// (history limit).
	"deployment": {
		rule(verbs("get"), appsGroup, "deployments"),
		rule(verbs("update"), appsGroup, "deployments/status", "deployments/finalizers"),
		rule(verbs("create", "delete", "patch", "update"), appsGroup, "replicasets"),
	},
	// statefulset/sync.go: Get of the StatefulSet (CanAdopt, and on a status conflict),
	// UpdateStatus; ControllerRevisions Create, Get, Update, Patch (adopt, release), Delete;
	// pods Create, Delete, Patch (adopt, release), Update (identity labels);
	// PersistentVolumeClaims Create, Update (owners per the retention policy).
	"statefulset": {
		rule(verbs("get"), appsGroup, "statefulsets"),
		rule(verbs("update"), appsGroup, "statefulsets/status", "statefulsets/finalizers"),
		rule(verbs("create", "delete", "get", "patch", "update"), appsGroup, "controllerrevisions"),
		rule(verbs("create", "delete", "patch", "update"), coreGroup, "pods"),
		rule(verbs("create", "update"), coreGroup, "persistentvolumeclaims"),
	},
	// daemonset/sync.go, history.go: Get of the DaemonSet, UpdateStatus; ControllerRevisions
	// Create, Get, Update, Patch, Delete; pods Create, Delete, Patch (adopt, release). Pods
	// are pinned to their node with node affinity, not bound.
	"daemonset": {
		rule(verbs("get"), appsGroup, "daemonsets"),
		rule(verbs("update"), appsGroup, "daemonsets/status", "daemonsets/finalizers"),
		rule(verbs("create", "delete", "get", "patch", "update"), appsGroup, "controllerrevisions"),
		rule(verbs("create", "delete", "patch"), coreGroup, "pods"),
	},
	// job/controller.go, sync.go: Get of the Job before adopting, Delete once its TTL after
	// finishing has passed, UpdateStatus; pods Create, Delete, Patch (adopt, release, drop
	// the tracking finalizer).
	"job": {
		rule(verbs("delete", "get"), batchGroup, "jobs"),
		rule(verbs("update"), batchGroup, "jobs/status", "jobs/finalizers"),
		rule(verbs("create", "delete", "patch"), coreGroup, "pods"),
	},
	// cronjob/sync.go: Jobs Create, Get (a Job the lister does not have yet), List (the
	// running Jobs, uncached), Delete (history limits); UpdateStatus, and Get on a conflict.
	"cronjob": {
		rule(verbs("get"), batchGroup, "cronjobs"),
		rule(verbs("update"), batchGroup, "cronjobs/status", "cronjobs/finalizers"),
		rule(verbs("create", "delete", "get", "list"), batchGroup, "jobs"),
	},
	// podautoscaler/sync.go, metrics.go: the scale client Gets and Updates the /scale of the
	// target, whatever its group (the RESTMapper resolves the kind); PodMetricses List of
	// metrics.k8s.io; UpdateStatus of the HorizontalPodAutoscaler (autoscaling/v2). It reads
	// no node metrics.
	"podautoscaler": {
		rule(verbs("update"), autoscalingGroup, "horizontalpodautoscalers/status"),
		rule(verbs("get", "update"), "*", "*/scale"),
		rule(verbs("list"), metricsGroup, "pods"),
	},
	// servicelb/controller.go: UpdateStatus of LoadBalancer Services.
	"servicelb": {
		rule(verbs("update"), coreGroup, "services/status"),
	},
	// volumebinding/sync.go: PersistentVolumes Get (a miss of the cache), Update (claimRef),
	// UpdateStatus (phase), Delete (released, reclaim policy Delete); claims Get (a miss of
	// the cache), Update (volumeName, annotations), UpdateStatus (phase, capacity).
	"volumebinding": {
		rule(verbs("delete", "get", "update"), coreGroup, "persistentvolumes"),
		rule(verbs("get", "update"), coreGroup, "persistentvolumeclaims"),
		rule(verbs("update"), coreGroup, "persistentvolumes/status", "persistentvolumeclaims/status"),
	},
	// volumeprotection/sync.go: Update of claims and volumes (their in-use finalizers); Pods
	// List of a deleted claim's namespace (the informer may not have a pod created a moment
	// ago).
	"volumeprotection": {
		rule(verbs("update"), coreGroup, "persistentvolumeclaims", "persistentvolumes"),
		rule(verbs("list"), coreGroup, "pods"),
	},
	// ephemeralvolume/controller.go: Create of the claims of ephemeral volumes, Get of one
	// that already existed (made a moment ago, the informer not yet aware).
	"ephemeralvolume": {
		rule(verbs("create", "get"), coreGroup, "persistentvolumeclaims"),
	},
	// localvolume/controller.go, sync.go: Get and Create of StorageClass flotilla-local;
	// PersistentVolumes Create, Delete and Update (the node label and cleanup finalizer of
	// volumes provisioned before them, the finalizer of a removed node's volume); Nodes Get
	// (a miss of the cache, before deciding a node is gone).
	"localvolume": {
		rule(verbs("create", "delete", "update"), coreGroup, "persistentvolumes"),
		rule(verbs("create", "get"), storageGroup, "storageclasses"),
		rule(verbs("get"), coreGroup, "nodes"),
	},
	// serviceaccount/sync.go: Create of the default ServiceAccount of each namespace.
	"serviceaccount": {
		rule(verbs("create"), coreGroup, "serviceaccounts"),
	},
	// unenforced/controller.go only reads through the shared metadata informers and records
	// events with the shared recorder: its role is empty.
	"unenforced": {},
	// policyinventory/controller.go: Create and Update of the policy inventory, ConfigMap
	// kube-system/flotilla-policy-inventory (create cannot be limited to a name); it reads
	// Ingresses, PodDisruptionBudgets and the inventory through the shared informers.
	"policyinventory": {
		rule(verbs("create"), coreGroup, "configmaps"),
		named(rule(verbs("update"), coreGroup, "configmaps"), "flotilla-policy-inventory"),
	},
	// garbagecollector/sync.go: through the metadata client, on any resource: Get (the live
	// object, and its owners), Delete (a dependent without owners), Patch (ownerReferences,
	// and the orphan and foregroundDeletion finalizers). Discovery is the shared client's.
	"garbagecollector": {
		rule(verbs("delete", "get", "patch"), "*", "*"),
	},
	// endpointslice/sync.go: EndpointSlices Create, Update, Delete (owned by their Service);
	// the legacy Endpoints Create, Update, Delete.
	"endpointslice": {
		rule(verbs("create", "delete", "update"), discoveryGroup, "endpointslices"),
		rule(verbs("create", "delete", "update"), coreGroup, "endpoints"),
		rule(verbs("update"), coreGroup, "services/finalizers"),
	},
	// nodelifecycle/controller.go: Nodes Update (taints), UpdateStatus (Ready=Unknown);
	// pods Get (uncached, before evicting) and Delete (eviction for NoExecute taints, not
	// the eviction subresource).
	"nodelifecycle": {
		rule(verbs("update"), coreGroup, "nodes", "nodes/status"),
		rule(verbs("delete", "get"), coreGroup, "pods"),
	},
	// disruption/sync.go: UpdateStatus of PodDisruptionBudgets; the scale subresource Get of
	// a pod's controller that is not a ReplicaSet, Deployment or StatefulSet (those come from
	// the shared informers), whatever its group (the RESTMapper resolves the kind).
	"disruption": {
		rule(verbs("update"), policyGroup, "poddisruptionbudgets/status"),
		rule(verbs("get"), "*", "*/scale"),
	},
	// resourcequota/controller.go: UpdateStatus of ResourceQuotas (status.hard and
	// status.used). It reads the quotas and what they count through the shared informers,
	// typed or metadata-only, whatever the kind (count/<resource>.<group>).
	"resourcequota": {
		rule(verbs("update"), coreGroup, "resourcequotas/status"),
	},
	// reconciler/scheduler: pods Bind (pods/binding, and BindingBatches of several, which
	// the API server authorizes binding by binding as pods/binding), Patch of pods/status
	// (PodScheduled False), Patch of the claims of pods waiting for a consumer (selected node).
	schedulerController: {
		rule(verbs("create"), coreGroup, "pods/binding"),
		rule(verbs("create"), flotillaGroup, "bindingbatches"),
		rule(verbs("patch"), coreGroup, "pods/status"),
		rule(verbs("patch"), coreGroup, "persistentvolumeclaims"),
	},
	// nodeipam/controller.go: Nodes List (uncached, to find the free pod CIDRs) and Patch
	// (spec.podCIDR).
	"nodeipam": {
		rule(verbs("list", "patch"), coreGroup, "nodes"),
	},
	// namespace/sync.go: for every namespaced resource discovery serves, DeleteCollection
	// (dynamic client), or List and Delete of each object when the resource has no
	// deletecollection, then List (metadata client) of what is left; Namespaces
	// UpdateStatus (conditions), Finalize (namespaces/finalize) and Delete.
	"namespace": {
		rule(verbs("delete", "deletecollection", "list"), "*", "*"),
		rule(verbs("update"), coreGroup, "namespaces/finalize", "namespaces/status"),
	},
	// rootca keeps ConfigMap kube-root-ca.crt in every namespace; it reads them through the
	// shared informers.
	"rootca": {
		rule(verbs("create", "update"), coreGroup, "configmaps"),
	},
	// csrsigning/sync.go: UpdateStatus of CertificateSigningRequests (the certificate, or the
	// Failed condition); sign on the signers it issues for, as upstream's csrsigning. It
	// reads the requests through the shared informers.
	"csrsigning": {
		rule(verbs("update"), certificatesGroup, "certificatesigningrequests/status"),
		named(rule(verbs("sign"), certificatesGroup, "signers"),
			"kubernetes.io/kube-apiserver-client", "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"),
	},
	// csrapproving/sync.go: UpdateApproval of CertificateSigningRequests; approve on the
	// signers whose requests it approves, as upstream's csrapproving; SubjectAccessReviews
	// Create (may the requester create certificatesigningrequests/selfnodeclient?). It reads
	// the requests and Nodes through the shared informers.
	"csrapproving": {
		rule(verbs("update"), certificatesGroup, "certificatesigningrequests/approval"),
		named(rule(verbs("approve"), certificatesGroup, "signers"),
			"kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"),
		rule(verbs("create"), authzGroup, "subjectaccessreviews"),
	},
	// clusterroleaggregation rewrites the rules of aggregated ClusterRoles. A ClusterRole
	// with an aggregationRule may only be written by who holds every permission or may
	// escalate clusterroles (the RBAC escalation admission check).
	"clusterroleaggregation": {
		rule(verbs("escalate", "get", "list", "patch", "update", "watch"), rbacv1.GroupName, "clusterroles"),
	},
}

// nodeRules are the rules of every host (NodesGroup): the node agent, the pod network
// routes, the Service proxy, cluster DNS and the Ingress proxy, which share the host's
// client and informer factories (nodes/host). The API server's loopback identity, not
// this one, keeps the kubernetes Service, Service kube-system/kube-dns and IngressClass
// flotilla (dns.EnsureService and ingress.EnsureClass in nodes/host/nodeagent.go) and
// records GitSource kube-system/root and its webhook Secret; the git webhooks have an
// identity of their own, GitWebhookUser.
//
// Reads through the host's informers, in every namespace (list and watch):
//   - pods: the agent's own, by field selector spec.nodeName (a selector RBAC does not see),
//     and every pod for cluster DNS (proxy/dns: pod records);
//   - services: the Service proxy, cluster DNS, the Ingress proxy, and the agent's
//     Service environment variables;
//   - nodes: the pod network routes (nodes/network/routes.go), the Service proxy (its own
//     Node) and the Ingress proxy (addresses);
//   - endpointslices: the Service proxy, cluster DNS, the Ingress proxy;
//   - ingresses, ingressclasses: the Ingress proxy.
//
// No rule grants configmaps, secrets, persistentvolumeclaims or persistentvolumes: a host
// reads only those its pods use (the agent's volumes and environment) and the
// kubernetes.io/tls Secrets the Ingresses name (the Ingress proxy), each by name with a
// watch of its own (nodes/refcache: fieldSelector metadata.name=<name>), and the Node
// authorizer (reconciler/authz/node), which the API server asks before RBAC, allows
// exactly those. A host cannot list them, nor read one no pod of its own references. The
// one exception, also the Node authorizer's: the local volumes labelled
// flotilla.dev/local-volume-node=<its name>, which the agent lists and watches with that
// label selector and whose cleanup finalizer it removes once it removed their directory
// (NodeRestriction admission allows no other change). StorageClasses: Get, for the path
// under which a class's local volumes live (nodes/agent/localvolumes.go).
//
// Requests of the node agent (nodes/agent, nodes/host/nodeagent.go):
//   - Node: Create, Get, Update (labels, taints) when registering; Get and UpdateStatus for
//     the heartbeat; Get while waiting for the pod CIDR;
//   - Lease kube-node-lease/<node>: Get, Create, Update;
//   - pods: Delete once their containers are gone, UpdateStatus;
//   - serviceaccounts/token: CreateToken for projected serviceAccountToken sources
//     (nodes/agent/tokens.go);
//   - events (record.EventBroadcaster, as kubelet): create, patch.
//
// Requests of the Ingress proxy (proxy/ingress):
//   - ingresses/status: UpdateStatus with the host's address;
//   - events (flotilla-ingress): create, patch.
//
// CertificateSigningRequests: create, get, list and watch, as upstream's system:node (a
// kubelet asks for its certificates and waits for them), and create of
// certificatesigningrequests/selfnodeclient, which csrapproving checks with a
// SubjectAccessReview before it approves a node's request for its own client certificate
// (upstream's system:certificates.k8s.io:certificatesigningrequests:selfnodeclient, which
// kubeadm binds to system:nodes).
var nodeRules = []rbacv1.PolicyRule{
	rule(verbs("list", "watch"), coreGroup, "pods", "services"),
	rule(verbs("get", "list", "watch"), coreGroup, "nodes"),
	rule(verbs("list", "watch"), discoveryGroup, "endpointslices"),
	rule(verbs("list", "watch"), networkingGroup, "ingresses"),
	rule(verbs("list", "watch"), networkingGroup, "ingressclasses"),
	rule(verbs("list", "watch"), networkingGroup, "networkpolicies"),
	rule(verbs("list", "watch"), coreGroup, "namespaces"),

	rule(verbs("create", "update"), coreGroup, "nodes"),
	rule(verbs("update"), coreGroup, "nodes/status"),
	rule(verbs("create", "get", "update"), coordinationGroup, "leases"),
	rule(verbs("get"), storageGroup, "storageclasses"),
	rule(verbs("delete"), coreGroup, "pods"),
	rule(verbs("update"), coreGroup, "pods/status"),
	rule(verbs("create"), coreGroup, "serviceaccounts/token"),
	rule(verbs("create", "patch"), coreGroup, "events"),
	rule(verbs("update"), networkingGroup, "ingresses/status"),
	rule(verbs("create", "get", "list", "watch"), certificatesGroup, "certificatesigningrequests"),
	rule(verbs("create"), certificatesGroup, "certificatesigningrequests/selfnodeclient"),
}

// gitWebhookRules are the rules of GitWebhookUser (gitsync/webhook.go). For each delivery
// it gets the GitSource the path names and the Secret its spec.webhookSecretRef names (a
// Secret of an invalid name when there is none, so that both answers take as long), and
// patches the GitSource's flotilla.dev/requested-at annotation. Every request names its
// object: it neither lists nor watches, nor writes Secrets.
var gitWebhookRules = []rbacv1.PolicyRule{
	rule(verbs("get", "patch"), flotillaGroup, "gitsources"),
	rule(verbs("get"), coreGroup, "secrets"),
}

// ComponentClusterRoles returns the ClusterRoles of flotilla's components:
// system:kube-controller-manager (ControllerManagerUser), system:node (NodesGroup),
// system:flotilla:git-webhook (GitWebhookUser),
// system:kube-scheduler (SchedulerUser) and system:controller:NAME for every other name of
// ControllerNames but gitsync, which is bound to cluster-admin (see
// ComponentClusterRoleBindings). They carry the metadata of BootstrapClusterRoles, and a
// new slice is returned on every call.
func ComponentClusterRoles() []rbacv1.ClusterRole {
	roles := []rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: ControllerManagerUser}, Rules: copyRules(controllerManagerRules)},
		{ObjectMeta: metav1.ObjectMeta{Name: nodeRoleName}, Rules: copyRules(nodeRules)},
		{ObjectMeta: metav1.ObjectMeta{Name: GitWebhookUser}, Rules: copyRules(gitWebhookRules)},
		joinClusterRole(),
	}
	for _, name := range ControllerNames() {
		rules, ok := controllerPolicies[name]
		if !ok {
			continue // gitsync
		}
		roles = append(roles, rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: controllerRoleName(name)},
			Rules:      copyRules(rules),
		})
	}
	for i := range roles {
		addBootstrapMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// ComponentClusterRoleBindings returns the ClusterRoleBindings of flotilla's components,
// each named like the ClusterRole it grants: system:kube-controller-manager to User
// ControllerManagerUser, system:node to Group NodesGroup, system:flotilla:git-webhook to
// User GitWebhookUser, and for every name of
// ControllerNames its ClusterRole to User ControllerUser(name).
//
// gitsync is the exception: it applies whatever the site's git repositories hold,
// ClusterRoles, bindings and CustomResourceDefinitions included, and may only grant
// what it holds itself, so binding system:controller:gitsync refers to cluster-admin.
// That also holds what it needs to apply every other GitSource as the ServiceAccount its
// spec.serviceAccountName names (gitsync.Impersonation): impersonate on serviceaccounts and
// on the groups system:serviceaccounts, system:serviceaccounts:<namespace> and
// system:authenticated; a role of its own could not be narrower than cluster-admin while
// kube-system/root applies with gitsync's identity. The
// bindings carry the metadata of BootstrapClusterRoleBindings, and a new slice is
// returned on every call.
func ComponentClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	bindings := []rbacv1.ClusterRoleBinding{
		componentBinding(ControllerManagerUser, ControllerManagerUser, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ControllerManagerUser}),
		componentBinding(nodeRoleName, nodeRoleName, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: NodesGroup}),
		componentBinding(GitWebhookUser, GitWebhookUser, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: GitWebhookUser}),
		joinClusterRoleBinding(),
	}
	for _, name := range ControllerNames() {
		roleName := controllerRoleName(name)
		if name == gitsyncController {
			roleName = "cluster-admin"
		}
		bindings = append(bindings, componentBinding(controllerRoleName(name), roleName,
			rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ControllerUser(name)}))
	}
	for i := range bindings {
		addBootstrapMetadata(&bindings[i].ObjectMeta)
	}
	return bindings
}

// componentBinding binds the ClusterRole roleName to subject, in a binding named name.
func componentBinding(name, roleName string, subject rbacv1.Subject) rbacv1.ClusterRoleBinding {
	return rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   []rbacv1.Subject{subject},
	}
}

func copyRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, len(rules))
	for i := range rules {
		rules[i].DeepCopyInto(&out[i])
	}
	return out
}
