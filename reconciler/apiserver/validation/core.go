package validation

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// coreValidators lists the validation of the core/v1 kinds.
func coreValidators(opts Options) map[schema.GroupKind]Funcs {
	gk := func(kind string) schema.GroupKind { return schema.GroupKind{Group: "", Kind: kind} }
	return map[schema.GroupKind]Funcs{
		gk("Pod"): {
			Create:       coreTyped(coreValidatePod),
			Update:       coreTyped2(coreValidatePodUpdate),
			StatusUpdate: coreTyped2(coreValidatePodStatusUpdate),
		},
		gk("Service"): coreServiceValidators(opts),
		gk("Namespace"): {
			Create:       coreTyped(coreValidateNamespace),
			Update:       coreTyped2(coreValidateNamespaceUpdate),
			StatusUpdate: coreTyped2(coreValidateNamespaceStatusUpdate),
		},
		gk("ConfigMap"): {
			Create: coreTyped(coreValidateConfigMap),
			Update: coreTyped2(coreValidateConfigMapUpdate),
		},
		gk("Secret"): {
			Create: coreTyped(coreValidateSecret),
			Update: coreTyped2(coreValidateSecretUpdate),
		},
		gk("ServiceAccount"): {
			Create: coreTyped(coreValidateServiceAccount),
			Update: coreTyped2(func(sa, old *corev1.ServiceAccount) field.ErrorList {
				return append(coreMetaUpdate(&sa.ObjectMeta, &old.ObjectMeta), coreValidateServiceAccountRefs(sa)...)
			}),
		},
		gk("Node"): {
			Create:       coreTyped(coreValidateNode),
			Update:       coreTyped2(coreValidateNodeUpdate),
			StatusUpdate: coreTyped2(coreValidateNodeStatusUpdate),
		},
		gk("Event"): {
			Create: coreTyped(coreValidateEvent),
			Update: coreTyped2(coreValidateEventUpdate),
		},
		gk("PersistentVolume"): {
			Create:       coreTyped(coreValidatePV),
			Update:       coreTyped2(coreValidatePVUpdate),
			StatusUpdate: coreTyped2(coreValidatePVStatusUpdate),
		},
		gk("PersistentVolumeClaim"): {
			Create:       coreTyped(coreValidatePVC),
			Update:       coreTyped2(coreValidatePVCUpdate),
			StatusUpdate: coreTyped2(coreValidatePVCStatusUpdate),
		},
		gk("ResourceQuota"): {
			Create:       coreTyped(coreValidateResourceQuota),
			Update:       coreTyped2(coreValidateResourceQuotaUpdate),
			StatusUpdate: coreTyped2(coreValidateResourceQuotaStatusUpdate),
		},
		gk("LimitRange"): {
			Create: coreTyped(coreValidateLimitRange),
			Update: coreTyped2(coreValidateLimitRangeUpdate),
		},
		gk("Endpoints"): {
			Create: coreTyped(coreValidateEndpoints),
			Update: coreTyped2(func(e, old *corev1.Endpoints) field.ErrorList {
				return append(coreMetaUpdate(&e.ObjectMeta, &old.ObjectMeta), coreValidateEndpointSubsets(e.Subsets)...)
			}),
		},
	}
}

// ValidatePodTemplateSpec validates a pod template as embedded in workload kinds: template
// labels and annotations, and the pod spec under fldPath.Child("spec").
func ValidatePodTemplateSpec(spec *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	return coreValidatePodTemplateSpec(spec, nil, fldPath)
}
