// Package defaults fills in the fields Kubernetes defaults, so that `kubectl get -o yaml` against
// flotilla shows what it shows against upstream. Kubernetes' own defaulters live in
// k8s.io/kubernetes, which we do not import; these are written from the upstream API
// documentation and behaviour. Flotilla's own kinds (flotilla.dev) get theirs from the defaults
// their types document.
//
// The functions are registered with Scheme.AddTypeDefaultingFunc and so run on every decode
// (request bodies, patches, server-side apply, and reads from etcd). Every function is therefore
// idempotent, keeps explicit values, and never re-adds something a later step may legitimately
// clear (see namespace finalizers).
package defaults

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// Register adds the defaulting function of every served kind, and of its List, to scheme.
// Kinds without upstream defaults get a no-op so that the set of defaulted kinds is explicit.
func Register(scheme *runtime.Scheme) {
	// core/v1
	kind(scheme, &corev1.Pod{}, &corev1.PodList{}, func(l *corev1.PodList) []corev1.Pod { return l.Items }, setPod)
	kind(scheme, &corev1.PodTemplate{}, &corev1.PodTemplateList{}, func(l *corev1.PodTemplateList) []corev1.PodTemplate { return l.Items }, setPodTemplate)
	kind(scheme, &corev1.Service{}, &corev1.ServiceList{}, func(l *corev1.ServiceList) []corev1.Service { return l.Items }, setService)
	kind(scheme, &corev1.Namespace{}, &corev1.NamespaceList{}, func(l *corev1.NamespaceList) []corev1.Namespace { return l.Items }, setNamespace)
	kind(scheme, &corev1.ConfigMap{}, &corev1.ConfigMapList{}, func(l *corev1.ConfigMapList) []corev1.ConfigMap { return l.Items }, noop[corev1.ConfigMap])
	kind(scheme, &corev1.Secret{}, &corev1.SecretList{}, func(l *corev1.SecretList) []corev1.Secret { return l.Items }, setSecret)
	kind(scheme, &corev1.ServiceAccount{}, &corev1.ServiceAccountList{}, func(l *corev1.ServiceAccountList) []corev1.ServiceAccount { return l.Items }, noop[corev1.ServiceAccount])
	kind(scheme, &corev1.Node{}, &corev1.NodeList{}, func(l *corev1.NodeList) []corev1.Node { return l.Items }, setNode)
	kind(scheme, &corev1.Event{}, &corev1.EventList{}, func(l *corev1.EventList) []corev1.Event { return l.Items }, noop[corev1.Event])
	kind(scheme, &corev1.PersistentVolume{}, &corev1.PersistentVolumeList{}, func(l *corev1.PersistentVolumeList) []corev1.PersistentVolume { return l.Items }, setPersistentVolume)
	kind(scheme, &corev1.PersistentVolumeClaim{}, &corev1.PersistentVolumeClaimList{}, func(l *corev1.PersistentVolumeClaimList) []corev1.PersistentVolumeClaim { return l.Items }, setPersistentVolumeClaim)
	kind(scheme, &corev1.ResourceQuota{}, &corev1.ResourceQuotaList{}, func(l *corev1.ResourceQuotaList) []corev1.ResourceQuota { return l.Items }, noop[corev1.ResourceQuota])
	kind(scheme, &corev1.LimitRange{}, &corev1.LimitRangeList{}, func(l *corev1.LimitRangeList) []corev1.LimitRange { return l.Items }, setLimitRange)
	kind(scheme, &corev1.Endpoints{}, &corev1.EndpointsList{}, func(l *corev1.EndpointsList) []corev1.Endpoints { return l.Items }, setEndpoints)

	// apps/v1
	kind(scheme, &appsv1.Deployment{}, &appsv1.DeploymentList{}, func(l *appsv1.DeploymentList) []appsv1.Deployment { return l.Items }, setDeployment)
	kind(scheme, &appsv1.ReplicaSet{}, &appsv1.ReplicaSetList{}, func(l *appsv1.ReplicaSetList) []appsv1.ReplicaSet { return l.Items }, setReplicaSet)
	kind(scheme, &appsv1.StatefulSet{}, &appsv1.StatefulSetList{}, func(l *appsv1.StatefulSetList) []appsv1.StatefulSet { return l.Items }, setStatefulSet)
	kind(scheme, &appsv1.DaemonSet{}, &appsv1.DaemonSetList{}, func(l *appsv1.DaemonSetList) []appsv1.DaemonSet { return l.Items }, setDaemonSet)
	kind(scheme, &appsv1.ControllerRevision{}, &appsv1.ControllerRevisionList{}, func(l *appsv1.ControllerRevisionList) []appsv1.ControllerRevision { return l.Items }, noop[appsv1.ControllerRevision])

	// batch/v1
	kind(scheme, &batchv1.Job{}, &batchv1.JobList{}, func(l *batchv1.JobList) []batchv1.Job { return l.Items }, setJob)
	kind(scheme, &batchv1.CronJob{}, &batchv1.CronJobList{}, func(l *batchv1.CronJobList) []batchv1.CronJob { return l.Items }, setCronJob)

	// discovery.k8s.io/v1
	kind(scheme, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{}, func(l *discoveryv1.EndpointSliceList) []discoveryv1.EndpointSlice { return l.Items }, setEndpointSlice)

	// networking.k8s.io/v1
	kind(scheme, &networkingv1.Ingress{}, &networkingv1.IngressList{}, func(l *networkingv1.IngressList) []networkingv1.Ingress { return l.Items }, noop[networkingv1.Ingress])
	kind(scheme, &networkingv1.IngressClass{}, &networkingv1.IngressClassList{}, func(l *networkingv1.IngressClassList) []networkingv1.IngressClass { return l.Items }, setIngressClass)
	kind(scheme, &networkingv1.NetworkPolicy{}, &networkingv1.NetworkPolicyList{}, func(l *networkingv1.NetworkPolicyList) []networkingv1.NetworkPolicy { return l.Items }, setNetworkPolicy)

	// coordination.k8s.io/v1, policy/v1, events.k8s.io/v1
	kind(scheme, &coordinationv1.Lease{}, &coordinationv1.LeaseList{}, func(l *coordinationv1.LeaseList) []coordinationv1.Lease { return l.Items }, noop[coordinationv1.Lease])
	kind(scheme, &policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudgetList{}, func(l *policyv1.PodDisruptionBudgetList) []policyv1.PodDisruptionBudget { return l.Items }, noop[policyv1.PodDisruptionBudget])
	kind(scheme, &eventsv1.Event{}, &eventsv1.EventList{}, func(l *eventsv1.EventList) []eventsv1.Event { return l.Items }, noop[eventsv1.Event])

	// admissionregistration.k8s.io/v1
	kind(scheme, &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyList{},
		func(l *admissionregistrationv1.ValidatingAdmissionPolicyList) []admissionregistrationv1.ValidatingAdmissionPolicy {
			return l.Items
		}, setValidatingAdmissionPolicy)
	kind(scheme, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{},
		func(l *admissionregistrationv1.ValidatingAdmissionPolicyBindingList) []admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			return l.Items
		}, setValidatingAdmissionPolicyBinding)
	kind(scheme, &admissionregistrationv1.MutatingAdmissionPolicy{}, &admissionregistrationv1.MutatingAdmissionPolicyList{},
		func(l *admissionregistrationv1.MutatingAdmissionPolicyList) []admissionregistrationv1.MutatingAdmissionPolicy {
			return l.Items
		}, setMutatingAdmissionPolicy)
	kind(scheme, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}, &admissionregistrationv1.MutatingAdmissionPolicyBindingList{},
		func(l *admissionregistrationv1.MutatingAdmissionPolicyBindingList) []admissionregistrationv1.MutatingAdmissionPolicyBinding {
			return l.Items
		}, setMutatingAdmissionPolicyBinding)

	// storage.k8s.io/v1
	kind(scheme, &storagev1.StorageClass{}, &storagev1.StorageClassList{}, func(l *storagev1.StorageClassList) []storagev1.StorageClass { return l.Items }, setStorageClass)

	// rbac.authorization.k8s.io/v1, admissionregistration.k8s.io/v1 webhooks, certificates.k8s.io/v1
	registerRBACWebhooksCertificates(scheme)

	// scheduling.k8s.io/v1, node.k8s.io/v1, autoscaling/v1 and v2
	registerSchedulingNodeAutoscaling(scheme)

	// flotilla.dev/v1alpha1
	kind(scheme, &flotillav1alpha1.GitSource{}, &flotillav1alpha1.GitSourceList{}, func(l *flotillav1alpha1.GitSourceList) []flotillav1alpha1.GitSource { return l.Items }, setGitSource)
}

// kind registers fn for the object type and, item by item, for its list type. The scheme does not
// recurse into lists on its own.
func kind[T, L any](scheme *runtime.Scheme, obj, list runtime.Object, items func(*L) []T, fn func(*T)) {
	scheme.AddTypeDefaultingFunc(obj, func(o interface{}) { fn(o.(*T)) })
	scheme.AddTypeDefaultingFunc(list, func(o interface{}) {
		is := items(o.(*L))
		for i := range is {
			fn(&is[i])
		}
	})
}

func noop[T any](*T) {}
