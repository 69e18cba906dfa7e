package apiserver

import (
	"fmt"
	"reflect"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/defaults"
)

// NewScheme returns the scheme of every served kind. The k8s.io/api Go types are registered
// for their external version and a second time as the group's internal version, so the scheme
// converts between the two by copying (there are no separate internal types). The exception is
// HorizontalPodAutoscaler, served as autoscaling/v2 and v1: the v2 type is the internal one
// and v1 converts to and from it (scheme_autoscaling.go explains how).
func NewScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	adders := []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, autoscalingv1.AddToScheme,
		discoveryv1.AddToScheme, networkingv1.AddToScheme, coordinationv1.AddToScheme,
		policyv1.AddToScheme, eventsv1.AddToScheme, admissionregistrationv1.AddToScheme,
		storagev1.AddToScheme,
		schedulingv1.AddToScheme, nodev1.AddToScheme, autoscalingv2.AddToScheme,
		rbacv1.AddToScheme, certificatesv1.AddToScheme,
		authenticationv1.AddToScheme, authorizationv1.AddToScheme,
		metricsv1beta1.AddToScheme,
		flotillav1alpha1.AddToScheme,
	}
	for _, add := range adders {
		utilruntime.Must(add(scheme))
	}
	// The unversioned meta types, as every API server registers them.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{},
		&metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})

	// A group served in several versions lists them in servedGroupVersions in priority order:
	// the first is the storage version and the one discovery prefers.
	priorities := map[string][]schema.GroupVersion{}
	var groups []string
	for _, gv := range servedGroupVersions() {
		internal := schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}
		for kind, t := range scheme.KnownTypes(gv) {
			// The kinds of hubVersions have one version registered as internal, and conversions.
			if isMetaOptionKind(kind) || !isHubVersion(gv, kind) {
				continue
			}
			scheme.AddKnownTypeWithName(internal.WithKind(kind), reflectNew(t))
		}
		if _, ok := priorities[gv.Group]; !ok {
			groups = append(groups, gv.Group)
		}
		priorities[gv.Group] = append(priorities[gv.Group], gv)
	}
	for _, g := range groups {
		utilruntime.Must(scheme.SetVersionPriority(priorities[g]...))
	}
	utilruntime.Must(addAutoscalingConversions(scheme))
	utilruntime.Must(addFieldLabelConversions(scheme))
	defaults.Register(scheme)
	return scheme
}

// NewCodecs returns the codec factory for a scheme from NewScheme.
func NewCodecs(scheme *runtime.Scheme) serializer.CodecFactory {
	return serializer.NewCodecFactory(scheme)
}

func servedGroupVersions() []schema.GroupVersion {
	return []schema.GroupVersion{
		corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion, batchv1.SchemeGroupVersion,
		autoscalingv2.SchemeGroupVersion, autoscalingv1.SchemeGroupVersion, discoveryv1.SchemeGroupVersion,
		networkingv1.SchemeGroupVersion, coordinationv1.SchemeGroupVersion,
		policyv1.SchemeGroupVersion, eventsv1.SchemeGroupVersion,
		admissionregistrationv1.SchemeGroupVersion, storagev1.SchemeGroupVersion,
		schedulingv1.SchemeGroupVersion, nodev1.SchemeGroupVersion,
		rbacv1.SchemeGroupVersion, certificatesv1.SchemeGroupVersion,
		authenticationv1.SchemeGroupVersion, authorizationv1.SchemeGroupVersion,
		metricsv1beta1.SchemeGroupVersion,
		flotillav1alpha1.SchemeGroupVersion,
	}
}

// isMetaOptionKind reports the request option and watch kinds that metav1.AddToGroupVersion
// registers in every version; registering them as internal breaks option decoding.
func isMetaOptionKind(kind string) bool {
	switch kind {
	case "ListOptions", "GetOptions", "DeleteOptions", "CreateOptions", "UpdateOptions",
		"PatchOptions", "ExportOptions", "WatchEvent", "InternalEvent", "Status", "APIVersions",
		"APIGroupList", "APIGroup", "APIResourceList", "TableOptions", "Table",
		"PartialObjectMetadata", "PartialObjectMetadataList":
		return true
	}
	return false
}

// fieldLabels lists the field selectors each kind accepts besides metadata.name and
// metadata.namespace, as upstream.
var fieldLabels = map[schema.GroupVersionKind][]string{
	corev1.SchemeGroupVersion.WithKind("Pod"): {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
		"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
		"status.nominatedNodeName"},
	corev1.SchemeGroupVersion.WithKind("Event"): {"involvedObject.kind", "involvedObject.namespace",
		"involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
		"involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
		"source", "type"},
	corev1.SchemeGroupVersion.WithKind("Secret"):                {"type"},
	corev1.SchemeGroupVersion.WithKind("Namespace"):             {"status.phase"},
	corev1.SchemeGroupVersion.WithKind("Node"):                  {"spec.unschedulable"},
	corev1.SchemeGroupVersion.WithKind("Service"):               {"spec.clusterIP", "spec.type"},
	corev1.SchemeGroupVersion.WithKind("PersistentVolume"):      {"name"},
	corev1.SchemeGroupVersion.WithKind("ReplicationController"): {"status.replicas"},
	appsv1.SchemeGroupVersion.WithKind("ReplicaSet"):            {"status.replicas"},
	batchv1.SchemeGroupVersion.WithKind("Job"):                  {"status.successful"},
	eventsv1.SchemeGroupVersion.WithKind("Event"): {"regarding.kind", "regarding.namespace", "regarding.name",
		"regarding.uid", "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
		"reason", "reportingController", "type"},
	certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"): {"spec.signerName"},
}

func addFieldLabelConversions(scheme *runtime.Scheme) error {
	for gvk, extra := range fieldLabels {
		allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
		for _, l := range extra {
			allowed[l] = true
		}
		kind := gvk
		if err := scheme.AddFieldLabelConversionFunc(kind, func(label, value string) (string, string, error) {
			if allowed[label] {
				return label, value, nil
			}
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}); err != nil {
			return err
		}
	}
	return nil
}

func reflectNew(t reflect.Type) runtime.Object {
	return reflect.New(t).Interface().(runtime.Object)
}

// jsonOnly hides the protobuf serializer: our own kinds have no protobuf encoding, so a client
// that accepts both (like the metadata client) must be answered in JSON.
type jsonOnly struct {
	runtime.NegotiatedSerializer
}

func (j jsonOnly) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, info := range j.NegotiatedSerializer.SupportedMediaTypes() {
		if info.MediaType != runtime.ContentTypeProtobuf {
			out = append(out, info)
		}
	}
	return out
}
