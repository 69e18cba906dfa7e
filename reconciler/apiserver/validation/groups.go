package validation

import (
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// groupValidators lists the validation of the kinds outside core/v1.
func groupValidators(opts Options) map[schema.GroupKind]Funcs {
	apps := func(kind string) schema.GroupKind { return schema.GroupKind{Group: appsv1.GroupName, Kind: kind} }
	batch := func(kind string) schema.GroupKind { return schema.GroupKind{Group: batchv1.GroupName, Kind: kind} }
	networking := func(kind string) schema.GroupKind {
		return schema.GroupKind{Group: networkingv1.GroupName, Kind: kind}
	}
	admission := func(kind string) schema.GroupKind {
		return schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: kind}
	}
	return map[schema.GroupKind]Funcs{
		apps("Deployment"): {
			Create:       typed(ValidateDeployment),
			Update:       typed2(ValidateDeploymentUpdate),
			StatusUpdate: typed2(ValidateDeploymentStatusUpdate),
		},
		apps("ReplicaSet"): {
			Create:       typed(ValidateReplicaSet),
			Update:       typed2(ValidateReplicaSetUpdate),
			StatusUpdate: typed2(ValidateReplicaSetStatusUpdate),
		},
		apps("StatefulSet"): {
			Create:       typed(ValidateStatefulSet),
			Update:       typed2(ValidateStatefulSetUpdate),
			StatusUpdate: typed2(ValidateStatefulSetStatusUpdate),
		},
		apps("DaemonSet"): {
			Create:       typed(ValidateDaemonSet),
			Update:       typed2(ValidateDaemonSetUpdate),
			StatusUpdate: typed2(ValidateDaemonSetStatusUpdate),
		},
		apps("ControllerRevision"): {
			Create: typed(ValidateControllerRevision),
			Update: typed2(ValidateControllerRevisionUpdate),
		},
		batch("Job"): {
			Create:       typed(ValidateJob),
			Update:       typed2(ValidateJobUpdate),
			StatusUpdate: typed2(ValidateJobStatusUpdate),
		},
		batch("CronJob"): {
			Create:       typed(ValidateCronJob),
			Update:       typed2(ValidateCronJobUpdate),
			StatusUpdate: typed2(metaOnlyStatusUpdate[batchv1.CronJob]),
		},
		{Group: discoveryv1.GroupName, Kind: "EndpointSlice"}: {
			Create: typed(ValidateEndpointSlice),
			Update: typed2(ValidateEndpointSliceUpdate),
		},
		networking("Ingress"): {
			Create:       typed(ValidateIngress),
			Update:       typed2(ValidateIngressUpdate),
			StatusUpdate: typed2(ValidateIngressStatusUpdate),
		},
		networking("IngressClass"): {
			Create: typed(ValidateIngressClass),
			Update: typed2(ValidateIngressClassUpdate),
		},
		networking("NetworkPolicy"): {
			Create: typed(ValidateNetworkPolicy),
			Update: typed2(ValidateNetworkPolicyUpdate),
		},
		{Group: coordinationv1.GroupName, Kind: "Lease"}: {
			Create: typed(ValidateLease),
			Update: typed2(ValidateLeaseUpdate),
		},
		{Group: policyv1.GroupName, Kind: "PodDisruptionBudget"}: {
			Create:       typed(ValidatePodDisruptionBudget),
			Update:       typed2(ValidatePodDisruptionBudgetUpdate),
			StatusUpdate: typed2(ValidatePodDisruptionBudgetStatusUpdate),
		},
		{Group: eventsv1.GroupName, Kind: "Event"}: {
			Create: typed(ValidateEventsV1Event),
			Update: typed2(ValidateEventsV1EventUpdate),
		},
		admission("ValidatingAdmissionPolicy"): {
			Create:       typed(ValidateValidatingAdmissionPolicy),
			Update:       typed2(ValidateValidatingAdmissionPolicyUpdate),
			StatusUpdate: typed2(metaOnlyStatusUpdate[admissionregistrationv1.ValidatingAdmissionPolicy]),
		},
		admission("ValidatingAdmissionPolicyBinding"): {
			Create: typed(ValidateValidatingAdmissionPolicyBinding),
			Update: typed2(ValidateValidatingAdmissionPolicyBindingUpdate),
		},
		admission("MutatingAdmissionPolicy"): {
			Create: typed(ValidateMutatingAdmissionPolicy),
			Update: typed2(ValidateMutatingAdmissionPolicyUpdate),
		},
		admission("MutatingAdmissionPolicyBinding"): {
			Create: typed(ValidateMutatingAdmissionPolicyBinding),
			Update: typed2(ValidateMutatingAdmissionPolicyBindingUpdate),
		},
		{Group: storagev1.GroupName, Kind: "StorageClass"}: {
			Create: typed(ValidateStorageClass),
			Update: typed2(ValidateStorageClassUpdate),
		},
		rbac("Role"):               {Create: typed(ValidateRole), Update: typed2(ValidateRoleUpdate)},
		rbac("ClusterRole"):        {Create: typed(ValidateClusterRole), Update: typed2(ValidateClusterRoleUpdate)},
		rbac("RoleBinding"):        {Create: typed(ValidateRoleBinding), Update: typed2(ValidateRoleBindingUpdate)},
		rbac("ClusterRoleBinding"): {Create: typed(ValidateClusterRoleBinding), Update: typed2(ValidateClusterRoleBindingUpdate)},
		admission("ValidatingWebhookConfiguration"): {
			Create: typed(ValidateValidatingWebhookConfiguration),
			Update: typed2(ValidateValidatingWebhookConfigurationUpdate),
		},
		admission("MutatingWebhookConfiguration"): {
			Create: typed(ValidateMutatingWebhookConfiguration),
			Update: typed2(ValidateMutatingWebhookConfigurationUpdate),
		},
		flotillav1alpha1.Kind("GitSource"): {
			Create: typed(func(gs *flotillav1alpha1.GitSource) field.ErrorList {
				return validateGitSource(gs, opts.gitSourceMinInterval())
			}),
			Update: typed2(func(gs, old *flotillav1alpha1.GitSource) field.ErrorList {
				return validateGitSourceUpdate(gs, old, opts.gitSourceMinInterval())
			}),
			StatusUpdate: typed2(metaOnlyStatusUpdate[flotillav1alpha1.GitSource]),
			Warnings:     typedWarnings(GitSourceWarnings),
		},
		// /approval validates with ValidateCertificateSigningRequestApprovalUpdate.
		{Group: certificatesv1.GroupName, Kind: "CertificateSigningRequest"}: {
			Create:       typed(ValidateCertificateSigningRequest),
			Update:       typed2(ValidateCertificateSigningRequestUpdate),
			StatusUpdate: typed2(ValidateCertificateSigningRequestStatusUpdate),
		},
	}
}

func rbac(kind string) schema.GroupKind { return schema.GroupKind{Group: rbacv1.GroupName, Kind: kind} }

// typed adapts a validation function of one Go type to Funcs.Create.
func typed[T any](fn func(*T) field.ErrorList) func(runtime.Object) field.ErrorList {
	return func(obj runtime.Object) field.ErrorList {
		o, ok := any(obj).(*T)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("validation: expected %T, got %T", (*T)(nil), obj))}
		}
		return fn(o)
	}
}

// typed2 adapts an update validation function of one Go type to Funcs.Update/StatusUpdate.
func typed2[T any](fn func(obj, old *T) field.ErrorList) func(obj, old runtime.Object) field.ErrorList {
	return func(obj, old runtime.Object) field.ErrorList {
		o, ok := any(obj).(*T)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("validation: expected %T, got %T", (*T)(nil), obj))}
		}
		p, ok := any(old).(*T)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("validation: expected %T, got %T", (*T)(nil), old))}
		}
		return fn(o, p)
	}
}

// typedWarnings adapts a warnings function of one Go type to Funcs.Warnings; old is nil on
// create. An object of another type gets no warnings (validation reports it).
func typedWarnings[T any](fn func(obj, old *T) []string) func(obj, old runtime.Object) []string {
	return func(obj, old runtime.Object) []string {
		o, ok := any(obj).(*T)
		if !ok {
			return nil
		}
		p, _ := any(old).(*T)
		return fn(o, p)
	}
}

// metaOnlyStatusUpdate is the status-update validation of kinds whose status has no rules of
// its own.
func metaOnlyStatusUpdate[T any, PT interface {
	*T
	metav1.Object
}](obj, old *T) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMetaAccessorUpdate(PT(obj), PT(old), field.NewPath("metadata"))
}

var (
	metaPath     = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
	selectorOpts = metav1validation.LabelSelectorValidationOptions{}
)

func validateMeta(m *metav1.ObjectMeta, namespaced bool, name apimachineryvalidation.ValidateNameFunc) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(m, namespaced, name, metaPath)
}

func validateMetaUpdate(m, old *metav1.ObjectMeta) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMetaUpdate(m, old, metaPath)
}

func nonNegative(v int64, p *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateNonnegativeField(v, p)
}

func nonNegative32(v *int32, p *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	return nonNegative(int64(*v), p)
}

func nonNegative64(v *int64, p *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	return nonNegative(int64(*v), p)
}

// validateWorkloadSelector checks a selector that controllers use to find their pods: it must be
// present, non-empty and well-formed.
func validateWorkloadSelector(sel *metav1.LabelSelector, p *field.Path, kind string) field.ErrorList {
	if sel == nil {
		return field.ErrorList{field.Required(p, "a label selector is required; set matchLabels to the template's labels")}
	}
	errs := metav1validation.ValidateLabelSelector(sel, selectorOpts, p)
	if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(p, sel, fmt.Sprintf("empty selector is invalid for %s; set matchLabels to the template's labels", kind)))
	}
	return errs
}

// validateSelectorMatchesTemplate checks that the pods created from a template are selected by
// the selector, so the controller sees what it creates.
func validateSelectorMatchesTemplate(sel *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec, tmplPath *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		// The selector's own errors are reported by validateWorkloadSelector.
		return nil
	}
	if !s.Matches(labels.Set(tmpl.Labels)) {
		return field.ErrorList{field.Invalid(tmplPath.Child("metadata", "labels"), tmpl.Labels, "`selector` does not match template `labels`")}
	}
	return nil
}

// validateLongRunningTemplate is the template validation shared by Deployment, ReplicaSet,
// StatefulSet and DaemonSet: their pods are restarted forever and have no deadline.
// claims are a StatefulSet's volumeClaimTemplates, which the pods mount as volumes.
func validateLongRunningTemplate(sel *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec, p *field.Path, kind string, claims []corev1.PersistentVolumeClaim) field.ErrorList {
	errs := validateSelectorMatchesTemplate(sel, tmpl, p)
	errs = append(errs, ValidatePodTemplateSpec(withClaimVolumes(tmpl, claims), p)...)
	// An empty policy is defaulted to Always before validation; accept it for callers that skip
	// defaulting (flotilla plan).
	if rp := tmpl.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(p.Child("spec", "restartPolicy"), rp, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if tmpl.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(p.Child("spec", "activeDeadlineSeconds"),
			fmt.Sprintf("activeDeadlineSeconds in %s is not supported; remove it (pods of a %s run until replaced)", kind, kind)))
	}
	return errs
}

// intOrPercent reads an int-or-percent value; isPercent is true for "N%".
func intOrPercent(v intstr.IntOrString) (n int, isPercent bool, ok bool) {
	if v.Type == intstr.Int {
		return int(v.IntVal), false, true
	}
	s, found := strings.CutSuffix(v.StrVal, "%")
	if !found {
		return 0, false, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, true, false
	}
	return n, true, true
}

// validateIntOrPercent checks a non-negative integer or a percentage such as "25%".
func validateIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	if v.Type == intstr.String {
		if len(utilvalidation.IsValidPercent(v.StrVal)) != 0 {
			return field.ErrorList{field.Invalid(p, v.StrVal, "must be an integer or percentage (e.g '5%')")}
		}
		return nil
	}
	return nonNegative(int64(v.IntVal), p)
}

// notMoreThan100Percent rejects percentages above 100%.
func notMoreThan100Percent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	if n, pct, ok := intOrPercent(v); ok && pct && n > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
	}
	return nil
}

// isZero reports whether an int-or-percent is 0 or "0%" (nil counts as zero).
func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	n, _, ok := intOrPercent(*v)
	return ok && n == 0
}

// nameErrs turns the messages of a name check into Invalid errors.
func nameErrs(p *field.Path, value string, msgs []string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range msgs {
		errs = append(errs, field.Invalid(p, value, m))
	}
	return errs
}

func isDNSSubdomain(p *field.Path, value string) field.ErrorList {
	return nameErrs(p, value, utilvalidation.IsDNS1123Subdomain(value))
}

func isDNSLabel(p *field.Path, value string) field.ErrorList {
	return nameErrs(p, value, utilvalidation.IsDNS1123Label(value))
}

// validateTemplateLabelsAndAnnotations checks metadata embedded in a template that is not a pod
// template (volumeClaimTemplates, jobTemplate).
func validateTemplateMeta(m *metav1.ObjectMeta, p *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(m.Labels, p.Child("labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(m.Annotations, p.Child("annotations"))...)
	return errs
}

// validateSelector checks a label selector's syntax.
func validateSelector(sel *metav1.LabelSelector, p *field.Path) field.ErrorList {
	return metav1validation.ValidateLabelSelector(sel, selectorOpts, p)
}

// withClaimVolumes returns the template as the StatefulSet controller creates pods from it: each
// claim template becomes a persistentVolumeClaim volume of the same name, so that volumeMounts
// naming a claim resolve. The added volumes come after the template's own, so error paths into
// spec.volumes still point at what the user wrote.
func withClaimVolumes(tmpl *corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim) *corev1.PodTemplateSpec {
	if len(claims) == 0 {
		return tmpl
	}
	have := map[string]bool{}
	for _, v := range tmpl.Spec.Volumes {
		have[v.Name] = true
	}
	out := tmpl.DeepCopy()
	for _, c := range claims {
		if c.Name == "" || have[c.Name] {
			continue
		}
		have[c.Name] = true
		out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name},
		}})
	}
	return out
}
