package apiserver

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// resource describes one served resource: its REST name, kind, scope and subresources.
type resource struct {
	gv         schema.GroupVersion
	plural     string
	singular   string
	kind       string
	namespaced bool
	shortNames []string
	categories []string
	newObj     func() runtime.Object
	newList    func() runtime.Object
	status     bool
	// scale names the replicas accessors when the resource has a scale subresource.
	scale *scaleAccess
}

func (r resource) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.gv.Group, Resource: r.plural}
}

func (r resource) gvk() schema.GroupVersionKind { return r.gv.WithKind(r.kind) }

var all = []string{"all"}

// apiExtensions is the category of the kinds that extend the API (kubectl get api-extensions).
var apiExtensions = []string{"api-extensions"}

// servedResources is the list of resources the API server serves, with kubectl's short names
// and categories.
func servedResources() []resource {
	core, apps, batch := corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion, batchv1.SchemeGroupVersion
	return []resource{
		{gv: core, plural: "namespaces", singular: "namespace", kind: "Namespace", shortNames: []string{"ns"}, status: true,
			newObj: func() runtime.Object { return &corev1.Namespace{} }, newList: func() runtime.Object { return &corev1.NamespaceList{} }},
		{gv: core, plural: "pods", singular: "pod", kind: "Pod", namespaced: true, shortNames: []string{"po"}, categories: all, status: true,
			newObj: func() runtime.Object { return &corev1.Pod{} }, newList: func() runtime.Object { return &corev1.PodList{} }},
		{gv: core, plural: "services", singular: "service", kind: "Service", namespaced: true, shortNames: []string{"svc"}, categories: all, status: true,
			newObj: func() runtime.Object { return &corev1.Service{} }, newList: func() runtime.Object { return &corev1.ServiceList{} }},
		{gv: core, plural: "endpoints", singular: "endpoints", kind: "Endpoints", namespaced: true, shortNames: []string{"ep"},
			newObj: func() runtime.Object { return &corev1.Endpoints{} }, newList: func() runtime.Object { return &corev1.EndpointsList{} }},
		{gv: core, plural: "configmaps", singular: "configmap", kind: "ConfigMap", namespaced: true, shortNames: []string{"cm"},
			newObj: func() runtime.Object { return &corev1.ConfigMap{} }, newList: func() runtime.Object { return &corev1.ConfigMapList{} }},
		{gv: core, plural: "secrets", singular: "secret", kind: "Secret", namespaced: true,
			newObj: func() runtime.Object { return &corev1.Secret{} }, newList: func() runtime.Object { return &corev1.SecretList{} }},
		{gv: core, plural: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", namespaced: true, shortNames: []string{"sa"},
			newObj: func() runtime.Object { return &corev1.ServiceAccount{} }, newList: func() runtime.Object { return &corev1.ServiceAccountList{} }},
		{gv: core, plural: "nodes", singular: "node", kind: "Node", shortNames: []string{"no"}, status: true,
			newObj: func() runtime.Object { return &corev1.Node{} }, newList: func() runtime.Object { return &corev1.NodeList{} }},
		{gv: core, plural: "events", singular: "event", kind: "Event", namespaced: true, shortNames: []string{"ev"},
			newObj: func() runtime.Object { return &corev1.Event{} }, newList: func() runtime.Object { return &corev1.EventList{} }},
		{gv: core, plural: "persistentvolumes", singular: "persistentvolume", kind: "PersistentVolume", shortNames: []string{"pv"}, status: true,
			newObj: func() runtime.Object { return &corev1.PersistentVolume{} }, newList: func() runtime.Object { return &corev1.PersistentVolumeList{} }},
		{gv: core, plural: "persistentvolumeclaims", singular: "persistentvolumeclaim", kind: "PersistentVolumeClaim", namespaced: true, shortNames: []string{"pvc"}, status: true,
			newObj: func() runtime.Object { return &corev1.PersistentVolumeClaim{} }, newList: func() runtime.Object { return &corev1.PersistentVolumeClaimList{} }},
		{gv: core, plural: "resourcequotas", singular: "resourcequota", kind: "ResourceQuota", namespaced: true, shortNames: []string{"quota"}, status: true,
			newObj: func() runtime.Object { return &corev1.ResourceQuota{} }, newList: func() runtime.Object { return &corev1.ResourceQuotaList{} }},
		{gv: core, plural: "limitranges", singular: "limitrange", kind: "LimitRange", namespaced: true, shortNames: []string{"limits"},
			newObj: func() runtime.Object { return &corev1.LimitRange{} }, newList: func() runtime.Object { return &corev1.LimitRangeList{} }},

		{gv: apps, plural: "deployments", singular: "deployment", kind: "Deployment", namespaced: true, shortNames: []string{"deploy"}, categories: all, status: true,
			newObj: func() runtime.Object { return &appsv1.Deployment{} }, newList: func() runtime.Object { return &appsv1.DeploymentList{} }, scale: deploymentScale},
		{gv: apps, plural: "replicasets", singular: "replicaset", kind: "ReplicaSet", namespaced: true, shortNames: []string{"rs"}, categories: all, status: true,
			newObj: func() runtime.Object { return &appsv1.ReplicaSet{} }, newList: func() runtime.Object { return &appsv1.ReplicaSetList{} }, scale: replicaSetScale},
		{gv: apps, plural: "statefulsets", singular: "statefulset", kind: "StatefulSet", namespaced: true, shortNames: []string{"sts"}, categories: all, status: true,
			newObj: func() runtime.Object { return &appsv1.StatefulSet{} }, newList: func() runtime.Object { return &appsv1.StatefulSetList{} }, scale: statefulSetScale},
		{gv: apps, plural: "daemonsets", singular: "daemonset", kind: "DaemonSet", namespaced: true, shortNames: []string{"ds"}, categories: all, status: true,
			newObj: func() runtime.Object { return &appsv1.DaemonSet{} }, newList: func() runtime.Object { return &appsv1.DaemonSetList{} }},
		{gv: apps, plural: "controllerrevisions", singular: "controllerrevision", kind: "ControllerRevision", namespaced: true,
			newObj: func() runtime.Object { return &appsv1.ControllerRevision{} }, newList: func() runtime.Object { return &appsv1.ControllerRevisionList{} }},

		{gv: batch, plural: "jobs", singular: "job", kind: "Job", namespaced: true, categories: all, status: true,
			newObj: func() runtime.Object { return &batchv1.Job{} }, newList: func() runtime.Object { return &batchv1.JobList{} }},
		{gv: batch, plural: "cronjobs", singular: "cronjob", kind: "CronJob", namespaced: true, shortNames: []string{"cj"}, categories: all, status: true,
			newObj: func() runtime.Object { return &batchv1.CronJob{} }, newList: func() runtime.Object { return &batchv1.CronJobList{} }},

		{gv: discoveryv1.SchemeGroupVersion, plural: "endpointslices", singular: "endpointslice", kind: "EndpointSlice", namespaced: true,
			newObj: func() runtime.Object { return &discoveryv1.EndpointSlice{} }, newList: func() runtime.Object { return &discoveryv1.EndpointSliceList{} }},
		{gv: networkingv1.SchemeGroupVersion, plural: "ingresses", singular: "ingress", kind: "Ingress", namespaced: true, shortNames: []string{"ing"}, status: true,
			newObj: func() runtime.Object { return &networkingv1.Ingress{} }, newList: func() runtime.Object { return &networkingv1.IngressList{} }},
		{gv: networkingv1.SchemeGroupVersion, plural: "ingressclasses", singular: "ingressclass", kind: "IngressClass",
			newObj: func() runtime.Object { return &networkingv1.IngressClass{} }, newList: func() runtime.Object { return &networkingv1.IngressClassList{} }},
		{gv: networkingv1.SchemeGroupVersion, plural: "networkpolicies", singular: "networkpolicy", kind: "NetworkPolicy", namespaced: true, shortNames: []string{"netpol"},
			newObj: func() runtime.Object { return &networkingv1.NetworkPolicy{} }, newList: func() runtime.Object { return &networkingv1.NetworkPolicyList{} }},
		{gv: coordinationv1.SchemeGroupVersion, plural: "leases", singular: "lease", kind: "Lease", namespaced: true,
			newObj: func() runtime.Object { return &coordinationv1.Lease{} }, newList: func() runtime.Object { return &coordinationv1.LeaseList{} }},
		{gv: policyv1.SchemeGroupVersion, plural: "poddisruptionbudgets", singular: "poddisruptionbudget", kind: "PodDisruptionBudget", namespaced: true, shortNames: []string{"pdb"}, status: true,
			newObj: func() runtime.Object { return &policyv1.PodDisruptionBudget{} }, newList: func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} }},
		{gv: eventsv1.SchemeGroupVersion, plural: "events", singular: "event", kind: "Event", namespaced: true, shortNames: []string{"ev"},
			newObj: func() runtime.Object { return &eventsv1.Event{} }, newList: func() runtime.Object { return &eventsv1.EventList{} }},
		{gv: admissionregistrationv1.SchemeGroupVersion, plural: "validatingadmissionpolicies", singular: "validatingadmissionpolicy", kind: "ValidatingAdmissionPolicy", status: true,
			newObj:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
			newList: func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} }},
		{gv: admissionregistrationv1.SchemeGroupVersion, plural: "validatingadmissionpolicybindings", singular: "validatingadmissionpolicybinding", kind: "ValidatingAdmissionPolicyBinding",
			newObj:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
			newList: func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} }},
		// MutatingAdmissionPolicy has no status in admissionregistration.k8s.io/v1. Both kinds are
		// in the api-extensions category, as upstream.
		{gv: admissionregistrationv1.SchemeGroupVersion, plural: "mutatingadmissionpolicies", singular: "mutatingadmissionpolicy", kind: "MutatingAdmissionPolicy", categories: apiExtensions,
			newObj:  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
			newList: func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} }},
		{gv: admissionregistrationv1.SchemeGroupVersion, plural: "mutatingadmissionpolicybindings", singular: "mutatingadmissionpolicybinding", kind: "MutatingAdmissionPolicyBinding", categories: apiExtensions,
			newObj:  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
			newList: func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} }},
		{gv: storagev1.SchemeGroupVersion, plural: "storageclasses", singular: "storageclass", kind: "StorageClass", shortNames: []string{"sc"},
			newObj: func() runtime.Object { return &storagev1.StorageClass{} }, newList: func() runtime.Object { return &storagev1.StorageClassList{} }},
		{gv: schedulingv1.SchemeGroupVersion, plural: "priorityclasses", singular: "priorityclass", kind: "PriorityClass", shortNames: []string{"pc"},
			newObj: func() runtime.Object { return &schedulingv1.PriorityClass{} }, newList: func() runtime.Object { return &schedulingv1.PriorityClassList{} }},
		{gv: nodev1.SchemeGroupVersion, plural: "runtimeclasses", singular: "runtimeclass", kind: "RuntimeClass",
			newObj: func() runtime.Object { return &nodev1.RuntimeClass{} }, newList: func() runtime.Object { return &nodev1.RuntimeClassList{} }},
		// Both versions of the HPA hold the stored autoscaling/v2 type (scheme_autoscaling.go).
		{gv: autoscalingv2.SchemeGroupVersion, plural: "horizontalpodautoscalers", singular: "horizontalpodautoscaler", kind: "HorizontalPodAutoscaler", namespaced: true, shortNames: []string{"hpa"}, categories: all, status: true,
			newObj: func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscaler{} }, newList: func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} }},
		{gv: autoscalingv1.SchemeGroupVersion, plural: "horizontalpodautoscalers", singular: "horizontalpodautoscaler", kind: "HorizontalPodAutoscaler", namespaced: true, shortNames: []string{"hpa"}, categories: all, status: true,
			newObj: func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscaler{} }, newList: func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} }},
		{gv: rbacv1.SchemeGroupVersion, plural: "roles", singular: "role", kind: "Role", namespaced: true,
			newObj: func() runtime.Object { return &rbacv1.Role{} }, newList: func() runtime.Object { return &rbacv1.RoleList{} }},
		{gv: rbacv1.SchemeGroupVersion, plural: "clusterroles", singular: "clusterrole", kind: "ClusterRole",
			newObj: func() runtime.Object { return &rbacv1.ClusterRole{} }, newList: func() runtime.Object { return &rbacv1.ClusterRoleList{} }},
		{gv: rbacv1.SchemeGroupVersion, plural: "rolebindings", singular: "rolebinding", kind: "RoleBinding", namespaced: true,
			newObj: func() runtime.Object { return &rbacv1.RoleBinding{} }, newList: func() runtime.Object { return &rbacv1.RoleBindingList{} }},
		{gv: rbacv1.SchemeGroupVersion, plural: "clusterrolebindings", singular: "clusterrolebinding", kind: "ClusterRoleBinding",
			newObj: func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }, newList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} }},
		{gv: admissionregistrationv1.SchemeGroupVersion, plural: "validatingwebhookconfigurations", singular: "validatingwebhookconfiguration", kind: "ValidatingWebhookConfiguration", categories: apiExtensions,
			newObj:  func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
			newList: func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} }},
		{gv: admissionregistrationv1.SchemeGroupVersion, plural: "mutatingwebhookconfigurations", singular: "mutatingwebhookconfiguration", kind: "MutatingWebhookConfiguration", categories: apiExtensions,
			newObj:  func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
			newList: func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} }},
		// /approval is installed by extraSubresources (certificates.go).
		{gv: certificatesv1.SchemeGroupVersion, plural: "certificatesigningrequests", singular: "certificatesigningrequest", kind: "CertificateSigningRequest", shortNames: []string{"csr"}, status: true,
			newObj:  func() runtime.Object { return &certificatesv1.CertificateSigningRequest{} },
			newList: func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} }},

		{gv: flotillav1alpha1.SchemeGroupVersion, plural: "gitsources", singular: "gitsource", kind: "GitSource", namespaced: true, shortNames: []string{"gs"}, categories: []string{"flotilla"}, status: true,
			newObj: func() runtime.Object { return &flotillav1alpha1.GitSource{} }, newList: func() runtime.Object { return &flotillav1alpha1.GitSourceList{} }},
	}
}
