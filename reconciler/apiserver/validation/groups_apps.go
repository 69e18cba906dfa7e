package validation

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateDeployment validates a Deployment on create: selector, a template whose labels match
// it, strategy and the counts.
func ValidateDeployment(d *appsv1.Deployment) field.ErrorList {
	errs := validateMeta(&d.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateDeploymentSpec(&d.Spec, specPath)...)
}

// ValidateDeploymentUpdate validates a Deployment update; the selector is immutable in apps/v1.
func ValidateDeploymentUpdate(d, old *appsv1.Deployment) field.ErrorList {
	errs := validateMetaUpdate(&d.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateDeploymentSpec(&d.Spec, specPath)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(d.Spec.Selector, old.Spec.Selector, specPath.Child("selector"))...)
}

// ValidateDeploymentStatusUpdate validates a write to deployments/status.
func ValidateDeploymentStatusUpdate(d, old *appsv1.Deployment) field.ErrorList {
	errs := validateMetaUpdate(&d.ObjectMeta, &old.ObjectMeta)
	s := &d.Status
	errs = append(errs, nonNegative(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	errs = append(errs, nonNegative(int64(s.Replicas), statusPath.Child("replicas"))...)
	errs = append(errs, nonNegative(int64(s.UpdatedReplicas), statusPath.Child("updatedReplicas"))...)
	errs = append(errs, nonNegative(int64(s.ReadyReplicas), statusPath.Child("readyReplicas"))...)
	errs = append(errs, nonNegative(int64(s.AvailableReplicas), statusPath.Child("availableReplicas"))...)
	errs = append(errs, nonNegative(int64(s.UnavailableReplicas), statusPath.Child("unavailableReplicas"))...)
	errs = append(errs, nonNegative32(s.TerminatingReplicas, statusPath.Child("terminatingReplicas"))...)
	errs = append(errs, nonNegative32(s.CollisionCount, statusPath.Child("collisionCount"))...)
	errs = append(errs, notAbove(s.UpdatedReplicas, s.Replicas, "updatedReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.ReadyReplicas, s.Replicas, "readyReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.AvailableReplicas, s.Replicas, "availableReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.AvailableReplicas, s.ReadyReplicas, "availableReplicas", "readyReplicas")...)
	return append(errs, collisionCountNotDecremented(s.CollisionCount, old.Status.CollisionCount)...)
}

func notAbove(v, limit int32, name, limitName string) field.ErrorList {
	if v > limit {
		return field.ErrorList{field.Invalid(statusPath.Child(name), v, "cannot be greater than "+limitName)}
	}
	return nil
}

func collisionCountNotDecremented(n, old *int32) field.ErrorList {
	if n != nil && old != nil && *n < *old {
		return field.ErrorList{field.Invalid(statusPath.Child("collisionCount"), *n, "cannot be decremented")}
	}
	return nil
}

func validateDeploymentSpec(s *appsv1.DeploymentSpec, p *field.Path) field.ErrorList {
	errs := nonNegative32(s.Replicas, p.Child("replicas"))
	errs = append(errs, validateWorkloadSelector(s.Selector, p.Child("selector"), "deployment")...)
	errs = append(errs, validateLongRunningTemplate(s.Selector, &s.Template, p.Child("template"), "Deployment", nil)...)
	errs = append(errs, validateDeploymentStrategy(&s.Strategy, p.Child("strategy"))...)
	errs = append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
	errs = append(errs, nonNegative32(s.RevisionHistoryLimit, p.Child("revisionHistoryLimit"))...)
	if s.ProgressDeadlineSeconds != nil {
		errs = append(errs, nonNegative(int64(*s.ProgressDeadlineSeconds), p.Child("progressDeadlineSeconds"))...)
		if *s.ProgressDeadlineSeconds <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(p.Child("progressDeadlineSeconds"), *s.ProgressDeadlineSeconds,
				fmt.Sprintf("must be greater than minReadySeconds (%d)", s.MinReadySeconds)))
		}
	}
	return errs
}

func validateDeploymentStrategy(s *appsv1.DeploymentStrategy, p *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.RollingUpdate != nil {
			return field.ErrorList{field.Forbidden(p.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'")}
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		if s.RollingUpdate == nil {
			// Defaulting fills it; only callers that skip defaulting get here.
			return field.ErrorList{field.Required(p.Child("rollingUpdate"), "set maxSurge and maxUnavailable for strategy `type` 'RollingUpdate'")}
		}
		return validateRollingUpdateDeployment(s.RollingUpdate, p.Child("rollingUpdate"))
	case "":
		return field.ErrorList{field.Required(p.Child("type"), `set "RollingUpdate" or "Recreate"`)}
	default:
		return field.ErrorList{field.NotSupported(p.Child("type"), s.Type,
			[]appsv1.DeploymentStrategyType{appsv1.RecreateDeploymentStrategyType, appsv1.RollingUpdateDeploymentStrategyType})}
	}
	return nil
}

func validateRollingUpdateDeployment(r *appsv1.RollingUpdateDeployment, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.MaxUnavailable != nil {
		errs = append(errs, validateIntOrPercent(*r.MaxUnavailable, p.Child("maxUnavailable"))...)
		errs = append(errs, notMoreThan100Percent(*r.MaxUnavailable, p.Child("maxUnavailable"))...)
	}
	if r.MaxSurge != nil {
		errs = append(errs, validateIntOrPercent(*r.MaxSurge, p.Child("maxSurge"))...)
	}
	if isZero(r.MaxUnavailable) && isZero(r.MaxSurge) {
		var v any
		if r.MaxUnavailable != nil {
			v = r.MaxUnavailable.String()
		}
		errs = append(errs, field.Invalid(p.Child("maxUnavailable"), v, "may not be 0 when `maxSurge` is 0"))
	}
	return errs
}

// ValidateReplicaSet validates a ReplicaSet on create: a selector, a template whose labels match
// it and restartPolicy Always.
func ValidateReplicaSet(rs *appsv1.ReplicaSet) field.ErrorList {
	errs := validateMeta(&rs.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateReplicaSetSpec(&rs.Spec, specPath)...)
}

// ValidateReplicaSetUpdate validates a ReplicaSet update; the selector is immutable in apps/v1.
func ValidateReplicaSetUpdate(rs, old *appsv1.ReplicaSet) field.ErrorList {
	errs := validateMetaUpdate(&rs.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateReplicaSetSpec(&rs.Spec, specPath)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(rs.Spec.Selector, old.Spec.Selector, specPath.Child("selector"))...)
}

// ValidateReplicaSetStatusUpdate validates a write to replicasets/status.
func ValidateReplicaSetStatusUpdate(rs, old *appsv1.ReplicaSet) field.ErrorList {
	errs := validateMetaUpdate(&rs.ObjectMeta, &old.ObjectMeta)
	s := &rs.Status
	errs = append(errs, nonNegative(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	errs = append(errs, nonNegative(int64(s.Replicas), statusPath.Child("replicas"))...)
	errs = append(errs, nonNegative(int64(s.FullyLabeledReplicas), statusPath.Child("fullyLabeledReplicas"))...)
	errs = append(errs, nonNegative(int64(s.ReadyReplicas), statusPath.Child("readyReplicas"))...)
	errs = append(errs, nonNegative(int64(s.AvailableReplicas), statusPath.Child("availableReplicas"))...)
	errs = append(errs, nonNegative32(s.TerminatingReplicas, statusPath.Child("terminatingReplicas"))...)
	errs = append(errs, notAbove(s.FullyLabeledReplicas, s.Replicas, "fullyLabeledReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.ReadyReplicas, s.Replicas, "readyReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.AvailableReplicas, s.Replicas, "availableReplicas", "status.replicas")...)
	return append(errs, notAbove(s.AvailableReplicas, s.ReadyReplicas, "availableReplicas", "readyReplicas")...)
}

func validateReplicaSetSpec(s *appsv1.ReplicaSetSpec, p *field.Path) field.ErrorList {
	errs := nonNegative32(s.Replicas, p.Child("replicas"))
	errs = append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
	errs = append(errs, validateWorkloadSelector(s.Selector, p.Child("selector"), "replicaset")...)
	return append(errs, validateLongRunningTemplate(s.Selector, &s.Template, p.Child("template"), "ReplicaSet", nil)...)
}

// ValidateStatefulSet validates a StatefulSet on create.
// Its name is a DNS label because pod names and hostnames are "<name>-<ordinal>".
func ValidateStatefulSet(ss *appsv1.StatefulSet) field.ErrorList {
	errs := validateMeta(&ss.ObjectMeta, true, apimachineryvalidation.NameIsDNSLabel)
	return append(errs, validateStatefulSetSpec(&ss.Spec, specPath)...)
}

// ValidateStatefulSetUpdate validates a StatefulSet update: only replicas, ordinals, template,
// updateStrategy, revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds
// may change, as upstream.
func ValidateStatefulSetUpdate(ss, old *appsv1.StatefulSet) field.ErrorList {
	errs := validateMetaUpdate(&ss.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateStatefulSetSpec(&ss.Spec, specPath)...)

	rest := ss.Spec.DeepCopy()
	rest.Replicas = old.Spec.Replicas
	rest.Ordinals = old.Spec.Ordinals
	rest.Template = old.Spec.Template
	rest.UpdateStrategy = old.Spec.UpdateStrategy
	rest.RevisionHistoryLimit = old.Spec.RevisionHistoryLimit
	rest.PersistentVolumeClaimRetentionPolicy = old.Spec.PersistentVolumeClaimRetentionPolicy
	rest.MinReadySeconds = old.Spec.MinReadySeconds
	if !apiequality.Semantic.DeepEqual(rest, &old.Spec) {
		errs = append(errs, field.Forbidden(specPath, "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
	}
	return errs
}

// ValidateStatefulSetStatusUpdate validates a write to statefulsets/status.
func ValidateStatefulSetStatusUpdate(ss, old *appsv1.StatefulSet) field.ErrorList {
	errs := validateMetaUpdate(&ss.ObjectMeta, &old.ObjectMeta)
	s := &ss.Status
	errs = append(errs, nonNegative(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	errs = append(errs, nonNegative(int64(s.Replicas), statusPath.Child("replicas"))...)
	errs = append(errs, nonNegative(int64(s.ReadyReplicas), statusPath.Child("readyReplicas"))...)
	errs = append(errs, nonNegative(int64(s.CurrentReplicas), statusPath.Child("currentReplicas"))...)
	errs = append(errs, nonNegative(int64(s.UpdatedReplicas), statusPath.Child("updatedReplicas"))...)
	errs = append(errs, nonNegative(int64(s.AvailableReplicas), statusPath.Child("availableReplicas"))...)
	errs = append(errs, nonNegative32(s.CollisionCount, statusPath.Child("collisionCount"))...)
	errs = append(errs, notAbove(s.ReadyReplicas, s.Replicas, "readyReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.CurrentReplicas, s.Replicas, "currentReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.UpdatedReplicas, s.Replicas, "updatedReplicas", "status.replicas")...)
	errs = append(errs, notAbove(s.AvailableReplicas, s.ReadyReplicas, "availableReplicas", "readyReplicas")...)
	return append(errs, collisionCountNotDecremented(s.CollisionCount, old.Status.CollisionCount)...)
}

func validateStatefulSetSpec(s *appsv1.StatefulSetSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.PodManagementPolicy {
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement, "":
		// "" is defaulted to OrderedReady.
	default:
		errs = append(errs, field.NotSupported(p.Child("podManagementPolicy"), s.PodManagementPolicy,
			[]appsv1.PodManagementPolicyType{appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement}))
	}

	up := p.Child("updateStrategy")
	switch s.UpdateStrategy.Type {
	case appsv1.OnDeleteStatefulSetStrategyType:
		if s.UpdateStrategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(up.Child("rollingUpdate"), "only allowed for updateStrategy 'RollingUpdate'; remove it or set `type` to 'RollingUpdate'"))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType, "":
		if r := s.UpdateStrategy.RollingUpdate; r != nil {
			rp := up.Child("rollingUpdate")
			errs = append(errs, nonNegative32(r.Partition, rp.Child("partition"))...)
			if r.MaxUnavailable != nil {
				errs = append(errs, validateIntOrPercent(*r.MaxUnavailable, rp.Child("maxUnavailable"))...)
				if isZero(r.MaxUnavailable) {
					errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), r.MaxUnavailable.String(), "must be at least 1 (or a percentage above 0%)"))
				}
				errs = append(errs, notMoreThan100Percent(*r.MaxUnavailable, rp.Child("maxUnavailable"))...)
			}
		}
	default:
		errs = append(errs, field.NotSupported(up.Child("type"), s.UpdateStrategy.Type,
			[]appsv1.StatefulSetUpdateStrategyType{appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType}))
	}

	if r := s.PersistentVolumeClaimRetentionPolicy; r != nil {
		rp := p.Child("persistentVolumeClaimRetentionPolicy")
		errs = append(errs, validateRetentionPolicyType(r.WhenDeleted, rp.Child("whenDeleted"))...)
		errs = append(errs, validateRetentionPolicyType(r.WhenScaled, rp.Child("whenScaled"))...)
	}

	errs = append(errs, nonNegative32(s.Replicas, p.Child("replicas"))...)
	errs = append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
	errs = append(errs, nonNegative32(s.RevisionHistoryLimit, p.Child("revisionHistoryLimit"))...)
	if s.Ordinals != nil {
		errs = append(errs, nonNegative(int64(s.Ordinals.Start), p.Child("ordinals", "start"))...)
	}
	if s.ServiceName != "" {
		errs = append(errs, isDNSLabel(p.Child("serviceName"), s.ServiceName)...)
	}
	errs = append(errs, validateWorkloadSelector(s.Selector, p.Child("selector"), "statefulset")...)
	errs = append(errs, validateLongRunningTemplate(s.Selector, &s.Template, p.Child("template"), "StatefulSet", s.VolumeClaimTemplates)...)
	return append(errs, validateVolumeClaimTemplates(s.VolumeClaimTemplates, p.Child("volumeClaimTemplates"))...)
}

func validateRetentionPolicyType(t appsv1.PersistentVolumeClaimRetentionPolicyType, p *field.Path) field.ErrorList {
	switch t {
	case appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType, "":
		// "" is defaulted to Retain.
		return nil
	}
	return field.ErrorList{field.NotSupported(p, t, []appsv1.PersistentVolumeClaimRetentionPolicyType{
		appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType})}
}

var supportedAccessModes = []corev1.PersistentVolumeAccessMode{
	corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod,
}

// validateVolumeClaimTemplates checks what the StatefulSet controller needs to create a claim
// per pod: a name to mount by, access modes and a storage request (SS-PVC-*).
func validateVolumeClaimTemplates(ts []corev1.PersistentVolumeClaim, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i := range ts {
		t, ip := &ts[i], p.Index(i)
		np := ip.Child("metadata", "name")
		switch {
		case t.Name == "":
			errs = append(errs, field.Required(np, "name the claim template; pods mount it as a volume of that name"))
		case seen[t.Name]:
			errs = append(errs, field.Duplicate(np, t.Name))
		default:
			errs = append(errs, isDNSSubdomain(np, t.Name)...)
		}
		seen[t.Name] = true
		errs = append(errs, validateTemplateMeta(&t.ObjectMeta, ip.Child("metadata"))...)

		sp := ip.Child("spec")
		if len(t.Spec.AccessModes) == 0 {
			errs = append(errs, field.Required(sp.Child("accessModes"), "at least 1 access mode is required, e.g. ReadWriteOnce"))
		}
		modes := map[corev1.PersistentVolumeAccessMode]bool{}
		for j, m := range t.Spec.AccessModes {
			mp := sp.Child("accessModes").Index(j)
			switch {
			case !accessModeSupported(m):
				errs = append(errs, field.NotSupported(mp, m, supportedAccessModes))
			case modes[m]:
				errs = append(errs, field.Duplicate(mp, m))
			}
			modes[m] = true
		}
		if modes[corev1.ReadWriteOncePod] && len(modes) > 1 {
			errs = append(errs, field.Forbidden(sp.Child("accessModes"), "may not use ReadWriteOncePod with other access modes"))
		}
		rp := sp.Child("resources", "requests").Key(string(corev1.ResourceStorage))
		if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			errs = append(errs, field.Required(rp, "set the storage size each claim requests, e.g. 1Gi"))
		} else if q.Sign() <= 0 {
			errs = append(errs, field.Invalid(rp, q.String(), "must be greater than zero"))
		}
		if vm := t.Spec.VolumeMode; vm != nil && *vm != corev1.PersistentVolumeBlock && *vm != corev1.PersistentVolumeFilesystem {
			errs = append(errs, field.NotSupported(sp.Child("volumeMode"), *vm,
				[]corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem}))
		}
		if sc := t.Spec.StorageClassName; sc != nil && *sc != "" {
			errs = append(errs, isDNSSubdomain(sp.Child("storageClassName"), *sc)...)
		}
		if t.Spec.Selector != nil {
			errs = append(errs, validateSelector(t.Spec.Selector, sp.Child("selector"))...)
		}
	}
	return errs
}

func accessModeSupported(m corev1.PersistentVolumeAccessMode) bool {
	for _, s := range supportedAccessModes {
		if m == s {
			return true
		}
	}
	return false
}

// ValidateDaemonSet validates a DaemonSet on create: selector, template and update strategy.
func ValidateDaemonSet(ds *appsv1.DaemonSet) field.ErrorList {
	errs := validateMeta(&ds.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateDaemonSetSpec(&ds.Spec, specPath)...)
}

// ValidateDaemonSetUpdate validates a DaemonSet update; the selector is immutable in apps/v1.
func ValidateDaemonSetUpdate(ds, old *appsv1.DaemonSet) field.ErrorList {
	errs := validateMetaUpdate(&ds.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateDaemonSetSpec(&ds.Spec, specPath)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(ds.Spec.Selector, old.Spec.Selector, specPath.Child("selector"))...)
}

// ValidateDaemonSetStatusUpdate validates a write to daemonsets/status.
func ValidateDaemonSetStatusUpdate(ds, old *appsv1.DaemonSet) field.ErrorList {
	errs := validateMetaUpdate(&ds.ObjectMeta, &old.ObjectMeta)
	s := &ds.Status
	errs = append(errs, nonNegative(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	errs = append(errs, nonNegative(int64(s.CurrentNumberScheduled), statusPath.Child("currentNumberScheduled"))...)
	errs = append(errs, nonNegative(int64(s.NumberMisscheduled), statusPath.Child("numberMisscheduled"))...)
	errs = append(errs, nonNegative(int64(s.DesiredNumberScheduled), statusPath.Child("desiredNumberScheduled"))...)
	errs = append(errs, nonNegative(int64(s.NumberReady), statusPath.Child("numberReady"))...)
	errs = append(errs, nonNegative(int64(s.UpdatedNumberScheduled), statusPath.Child("updatedNumberScheduled"))...)
	errs = append(errs, nonNegative(int64(s.NumberAvailable), statusPath.Child("numberAvailable"))...)
	errs = append(errs, nonNegative(int64(s.NumberUnavailable), statusPath.Child("numberUnavailable"))...)
	errs = append(errs, nonNegative32(s.CollisionCount, statusPath.Child("collisionCount"))...)
	return append(errs, collisionCountNotDecremented(s.CollisionCount, old.Status.CollisionCount)...)
}

func validateDaemonSetSpec(s *appsv1.DaemonSetSpec, p *field.Path) field.ErrorList {
	errs := validateWorkloadSelector(s.Selector, p.Child("selector"), "daemonset")
	errs = append(errs, validateLongRunningTemplate(s.Selector, &s.Template, p.Child("template"), "DaemonSet", nil)...)
	errs = append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
	errs = append(errs, nonNegative32(s.RevisionHistoryLimit, p.Child("revisionHistoryLimit"))...)

	up := p.Child("updateStrategy")
	switch s.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		if s.UpdateStrategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(up.Child("rollingUpdate"), "only allowed for updateStrategy 'RollingUpdate'; remove it or set `type` to 'RollingUpdate'"))
		}
	case appsv1.RollingUpdateDaemonSetStrategyType:
		if s.UpdateStrategy.RollingUpdate != nil {
			errs = append(errs, validateRollingUpdateDaemonSet(s.UpdateStrategy.RollingUpdate, up.Child("rollingUpdate"))...)
		}
	case "":
		errs = append(errs, field.Required(up.Child("type"), `set "RollingUpdate" or "OnDelete"`))
	default:
		errs = append(errs, field.NotSupported(up.Child("type"), s.UpdateStrategy.Type,
			[]appsv1.DaemonSetUpdateStrategyType{appsv1.RollingUpdateDaemonSetStrategyType, appsv1.OnDeleteDaemonSetStrategyType}))
	}
	return errs
}

// validateRollingUpdateDaemonSet enforces upstream's rule: exactly one of maxUnavailable and
// maxSurge is non-zero.
func validateRollingUpdateDaemonSet(r *appsv1.RollingUpdateDaemonSet, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	hasUnavailable, hasSurge := !isZero(r.MaxUnavailable), !isZero(r.MaxSurge)
	if r.MaxUnavailable != nil {
		errs = append(errs, validateIntOrPercent(*r.MaxUnavailable, p.Child("maxUnavailable"))...)
		errs = append(errs, notMoreThan100Percent(*r.MaxUnavailable, p.Child("maxUnavailable"))...)
	}
	if r.MaxSurge != nil {
		errs = append(errs, validateIntOrPercent(*r.MaxSurge, p.Child("maxSurge"))...)
		errs = append(errs, notMoreThan100Percent(*r.MaxSurge, p.Child("maxSurge"))...)
	}
	switch {
	case hasUnavailable && hasSurge:
		errs = append(errs, field.Invalid(p.Child("maxSurge"), r.MaxSurge.String(), "may not be set when maxUnavailable is non-zero"))
	case !hasUnavailable && !hasSurge:
		errs = append(errs, field.Required(p.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
	}
	return errs
}

// ValidateControllerRevision validates a ControllerRevision on create.
func ValidateControllerRevision(cr *appsv1.ControllerRevision) field.ErrorList {
	errs := validateMeta(&cr.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	if cr.Data.Raw == nil && cr.Data.Object == nil {
		errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory: the serialized state of this revision"))
	}
	return append(errs, nonNegative(cr.Revision, field.NewPath("revision"))...)
}

// ValidateControllerRevisionUpdate validates a ControllerRevision update: data is immutable, the
// revision number may change (a rollback renumbers the revision it returns to).
func ValidateControllerRevisionUpdate(cr, old *appsv1.ControllerRevision) field.ErrorList {
	errs := validateMetaUpdate(&cr.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, nonNegative(cr.Revision, field.NewPath("revision"))...)
	if !apiequality.Semantic.DeepEqual(cr.Data, old.Data) {
		errs = append(errs, field.Invalid(field.NewPath("data"), "", "field is immutable; create a new ControllerRevision instead"))
	}
	return errs
}
