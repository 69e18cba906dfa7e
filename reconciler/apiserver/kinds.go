package apiserver

import (
	"context"
	"strconv"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/defaults"
	"github.com/flotilla-dev/flotilla/reconciler/quota"
)

// applyKindHooks adds the per-kind normalisation that Kubernetes' own strategies do.
func applyKindHooks(s *strategy) {
	switch s.gvk.GroupKind().String() {
	case "Pod":
		s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
			pod := obj.(*corev1.Pod)
			pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: quota.PodQOSClass(pod)}
			addDefaultTolerations(pod, s.defaultTolerationSeconds)
			applySchedulingGatedCondition(pod)
		}
	case "Namespace":
		s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
			ns := obj.(*corev1.Namespace)
			ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
			defaults.PrepareNamespaceForCreate(ns)
			setNamespaceNameLabel(ns)
		}
		s.prepareUpdate = func(ctx context.Context, obj, old runtime.Object) {
			ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
			// spec.finalizers change only through namespaces/finalize.
			ns.Spec.Finalizers = oldNS.Spec.Finalizers
			setNamespaceNameLabel(ns)
		}
	case "Node":
		s.keepStatusOnCreate = true
	case "PersistentVolume":
		s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
			obj.(*corev1.PersistentVolume).Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending}
		}
	case "PersistentVolumeClaim":
		s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
			obj.(*corev1.PersistentVolumeClaim).Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
		}
	case "Job.batch":
		s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
			defaults.PrepareJobForCreate(obj.(*batchv1.Job))
		}
	case "CertificateSigningRequest.certificates.k8s.io":
		csrHooks(s)
	case "ValidatingWebhookConfiguration.admissionregistration.k8s.io", "MutatingWebhookConfiguration.admissionregistration.k8s.io":
		webhookConfigurationHooks(s)
	case "Deployment.apps":
		s.prepareUpdate = func(ctx context.Context, obj, old runtime.Object) {
			d, od := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
			// A changed annotation set can ask for a rollback: count it as a new generation
			// like upstream does.
			if d.Generation == od.Generation && !equalStringMaps(d.Annotations, od.Annotations) && d.Annotations[deprecatedRollbackTo] != "" {
				d.Generation = od.Generation + 1
			}
		}
	}
}

// applySchedulingGatedCondition says why a pod created with scheduling gates waits: the
// condition PodScheduled=False, reason SchedulingGated (kubectl shows the pod as
// SchedulingGated), as upstream's pod strategy sets it. The scheduler leaves such a pod alone
// until its gates are removed, and then replaces the condition when it places it or cannot.
func applySchedulingGatedCondition(pod *corev1.Pod) {
	if len(pod.Spec.SchedulingGates) == 0 {
		return
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type:               corev1.PodScheduled,
		Status:             corev1.ConditionFalse,
		Reason:             corev1.PodReasonSchedulingGated,
		Message:            "Scheduling is blocked due to non-empty scheduling gates",
		LastTransitionTime: metav1.Now(),
	})
}

// Annotations of the default StorageClass (upstream DefaultStorageClass admission).
const (
	annIsDefaultStorageClass     = "storageclass.kubernetes.io/is-default-class"
	annBetaIsDefaultStorageClass = "storageclass.beta.kubernetes.io/is-default-class"
	annBetaStorageClass          = "volume.beta.kubernetes.io/storage-class"
)

// installDefaultStorageClass makes PVC creation fill spec.storageClassName with the default
// StorageClass, like upstream's DefaultStorageClass admission plugin. A claim that names a
// class, even "", or carries the deprecated class annotation is left alone.
func installDefaultStorageClass(pvcs *strategy, classes *genericregistry.Store) {
	prev := pvcs.prepareCreate
	pvcs.prepareCreate = func(ctx context.Context, obj runtime.Object) {
		if prev != nil {
			prev(ctx, obj)
		}
		pvc := obj.(*corev1.PersistentVolumeClaim)
		if pvc.Spec.StorageClassName != nil {
			return
		}
		if _, ok := pvc.Annotations[annBetaStorageClass]; ok {
			return
		}
		// StorageClasses are cluster-scoped: list without the claim's namespace.
		list, err := classes.List(genericapirequest.WithNamespace(ctx, ""), &metainternalversion.ListOptions{})
		if err != nil {
			// PrepareForCreate cannot fail; the claim then keeps no class, as upstream
			// does when no default exists.
			logrus.WithError(err).WithField("pvc", pvc.Namespace+"/"+pvc.Name).Warn("list StorageClasses for the default class")
			return
		}
		scl, ok := list.(*storagev1.StorageClassList)
		if !ok {
			return
		}
		if name := defaultStorageClass(scl.Items); name != "" {
			pvc.Spec.StorageClassName = &name
		}
	}
}

// defaultStorageClass returns the name of the default class among classes: with several
// defaults, the newest wins (ties: the smaller name), as upstream does since 1.28.
func defaultStorageClass(classes []storagev1.StorageClass) string {
	var best *storagev1.StorageClass
	for i := range classes {
		c := &classes[i]
		if c.Annotations[annIsDefaultStorageClass] != "true" && c.Annotations[annBetaIsDefaultStorageClass] != "true" {
			continue
		}
		if best == nil || c.CreationTimestamp.After(best.CreationTimestamp.Time) ||
			(c.CreationTimestamp.Equal(&best.CreationTimestamp) && c.Name < best.Name) {
			best = c
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}

const deprecatedRollbackTo = "deprecated.deployment.rollback.to"

func equalStringMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// setNamespaceNameLabel keeps the immutable kubernetes.io/metadata.name label.
func setNamespaceNameLabel(ns *corev1.Namespace) {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

// podDeleteStrategy makes pod deletion graceful: a pod bound to a node keeps running for its
// grace period and is removed when the node agent confirms with a zero grace period.
type podDeleteStrategy struct {
	*strategy
}

func (podDeleteStrategy) CheckGracefulDelete(ctx context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool {
	if options == nil {
		return false
	}
	pod := obj.(*corev1.Pod)
	period := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if options.GracePeriodSeconds != nil {
		period = *options.GracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	// Nothing runs a pod that is not bound or has finished: delete it at once.
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		period = 0
	}
	if period < 0 {
		period = 1
	}
	options.GracePeriodSeconds = &period
	return true
}

// attrFuncFor returns the labels and selectable fields of a resource's objects.
func attrFuncFor(r resource) storage.AttrFunc {
	return func(obj runtime.Object) (labels.Set, fields.Set, error) {
		m := objectMeta(obj)
		fs := fields.Set{"metadata.name": m.GetName()}
		if r.namespaced {
			fs["metadata.namespace"] = m.GetNamespace()
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			fs["spec.nodeName"] = o.Spec.NodeName
			fs["spec.restartPolicy"] = string(o.Spec.RestartPolicy)
			fs["spec.schedulerName"] = o.Spec.SchedulerName
			fs["spec.serviceAccountName"] = o.Spec.ServiceAccountName
			fs["spec.hostNetwork"] = boolString(o.Spec.HostNetwork)
			fs["status.phase"] = string(o.Status.Phase)
			fs["status.podIP"] = o.Status.PodIP
			fs["status.nominatedNodeName"] = o.Status.NominatedNodeName
			ips := ""
			for i, ip := range o.Status.PodIPs {
				if i > 0 {
					ips += ","
				}
				ips += ip.IP
			}
			fs["status.podIPs"] = ips
		case *corev1.Event:
			fs["involvedObject.kind"] = o.InvolvedObject.Kind
			fs["involvedObject.namespace"] = o.InvolvedObject.Namespace
			fs["involvedObject.name"] = o.InvolvedObject.Name
			fs["involvedObject.uid"] = string(o.InvolvedObject.UID)
			fs["involvedObject.apiVersion"] = o.InvolvedObject.APIVersion
			fs["involvedObject.resourceVersion"] = o.InvolvedObject.ResourceVersion
			fs["involvedObject.fieldPath"] = o.InvolvedObject.FieldPath
			fs["reason"] = o.Reason
			fs["reportingComponent"] = o.ReportingController
			fs["source"] = o.Source.Component
			fs["type"] = o.Type
		case *eventsv1.Event:
			fs["regarding.kind"] = o.Regarding.Kind
			fs["regarding.namespace"] = o.Regarding.Namespace
			fs["regarding.name"] = o.Regarding.Name
			fs["regarding.uid"] = string(o.Regarding.UID)
			fs["regarding.apiVersion"] = o.Regarding.APIVersion
			fs["regarding.resourceVersion"] = o.Regarding.ResourceVersion
			fs["regarding.fieldPath"] = o.Regarding.FieldPath
			fs["reason"] = o.Reason
			fs["reportingController"] = o.ReportingController
			fs["type"] = o.Type
		case *corev1.Secret:
			fs["type"] = string(o.Type)
		case *corev1.Namespace:
			fs["status.phase"] = string(o.Status.Phase)
		case *corev1.Node:
			fs["spec.unschedulable"] = boolString(o.Spec.Unschedulable)
		case *corev1.Service:
			fs["spec.clusterIP"] = o.Spec.ClusterIP
			fs["spec.type"] = string(o.Spec.Type)
		case *corev1.PersistentVolume:
			fs["name"] = o.Name
		case *appsv1.ReplicaSet:
			fs["status.replicas"] = itoa32(o.Status.Replicas)
		case *batchv1.Job:
			fs["status.successful"] = itoa32(o.Status.Succeeded)
		case *certificatesv1.CertificateSigningRequest:
			fs["spec.signerName"] = o.Spec.SignerName
		}
		return labels.Set(m.GetLabels()), fs, nil
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func itoa32(n int32) string { return strconv.Itoa(int(n)) }

// addDefaultTolerations gives a new pod the not-ready and unreachable NoExecute tolerations
// for the given seconds unless it tolerates those taints already (upstream's
// DefaultTolerationSeconds admission).
func addDefaultTolerations(pod *corev1.Pod, seconds int64) {
	if seconds < 0 {
		return
	}
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		covered := false
		for _, t := range pod.Spec.Tolerations {
			if (t.Key == key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)) &&
				(t.Effect == "" || t.Effect == corev1.TaintEffectNoExecute) {
				covered = true
			}
		}
		if !covered {
			sec := seconds
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
				Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &sec})
		}
	}
}
