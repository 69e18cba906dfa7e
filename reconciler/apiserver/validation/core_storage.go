package validation

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	pathvalidation "k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	coreAccessModes = []corev1.PersistentVolumeAccessMode{
		corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod,
	}
	coreVolumeModes    = []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem}
	coreReclaimPolices = []corev1.PersistentVolumeReclaimPolicy{
		corev1.PersistentVolumeReclaimRetain, corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRecycle,
	}
)

func coreValidateAccessModes(modes []corev1.PersistentVolumeAccessMode, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(modes) == 0 {
		return field.ErrorList{field.Required(p, "at least one access mode, such as ReadWriteOnce")}
	}
	for i, m := range modes {
		allErrs = append(allErrs, coreNotSupported(m, coreAccessModes, false, p.Index(i))...)
		if m == corev1.ReadWriteOncePod && len(modes) > 1 {
			allErrs = append(allErrs, field.Forbidden(p, "may not use ReadWriteOncePod with other access modes"))
		}
	}
	return allErrs
}

// PersistentVolume

func coreValidatePV(pv *corev1.PersistentVolume) field.ErrorList {
	allErrs := coreMeta(&pv.ObjectMeta, false, pathvalidation.ValidatePathSegmentName)
	return append(allErrs, coreValidatePVSpec(&pv.Spec)...)
}

func coreValidatePVSpec(spec *corev1.PersistentVolumeSpec) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, coreValidateAccessModes(spec.AccessModes, coreSpecPath.Child("accessModes"))...)

	capPath := coreSpecPath.Child("capacity")
	if len(spec.Capacity) == 0 {
		allErrs = append(allErrs, field.Required(capPath, "must specify the storage capacity, such as storage: 10Gi"))
	} else {
		for _, name := range coreSortedKeys(spec.Capacity) {
			if name != corev1.ResourceStorage {
				allErrs = append(allErrs, field.NotSupported(capPath.Key(string(name)), name, []corev1.ResourceName{corev1.ResourceStorage}))
				continue
			}
			allErrs = append(allErrs, corePositiveQuantity(spec.Capacity[name], capPath.Key(string(name)))...)
		}
		if _, ok := spec.Capacity[corev1.ResourceStorage]; !ok {
			allErrs = append(allErrs, field.Required(capPath.Key(string(corev1.ResourceStorage)), "such as 10Gi"))
		}
	}
	allErrs = append(allErrs, coreNotSupported(spec.PersistentVolumeReclaimPolicy, coreReclaimPolices, true, coreSpecPath.Child("persistentVolumeReclaimPolicy"))...)
	if spec.VolumeMode != nil {
		allErrs = append(allErrs, coreNotSupported(*spec.VolumeMode, coreVolumeModes, false, coreSpecPath.Child("volumeMode"))...)
	}
	if spec.StorageClassName != "" {
		allErrs = append(allErrs, coreDNSSubdomain(spec.StorageClassName, coreSpecPath.Child("storageClassName"))...)
	}
	if spec.NodeAffinity != nil {
		na := coreSpecPath.Child("nodeAffinity")
		if spec.NodeAffinity.Required == nil {
			allErrs = append(allErrs, field.Required(na.Child("required"), "must have at least one node selector term"))
		} else {
			allErrs = append(allErrs, coreNodeSelector(spec.NodeAffinity.Required, na.Child("required"))...)
		}
	}
	if ref := spec.ClaimRef; ref != nil {
		rp := coreSpecPath.Child("claimRef")
		if ref.Name == "" {
			allErrs = append(allErrs, field.Required(rp.Child("name"), "the name of the PersistentVolumeClaim this volume is reserved for"))
		}
		if ref.Namespace == "" {
			allErrs = append(allErrs, field.Required(rp.Child("namespace"), "the namespace of the PersistentVolumeClaim"))
		}
	}

	switch coreVolumeSourceCount(spec.PersistentVolumeSource) {
	case 0:
		return append(allErrs, field.Required(coreSpecPath, "must specify a volume type (such as hostPath, local, nfs, csi)"))
	case 1:
	default:
		return append(allErrs, field.Forbidden(coreSpecPath, "may not specify more than 1 volume type"))
	}
	src := &spec.PersistentVolumeSource
	switch {
	case src.HostPath != nil:
		hp := coreSpecPath.Child("hostPath")
		if src.HostPath.Path == "" {
			allErrs = append(allErrs, field.Required(hp.Child("path"), "an absolute path on the node"))
		} else if coreHasDotDot(src.HostPath.Path) {
			allErrs = append(allErrs, field.Invalid(hp.Child("path"), src.HostPath.Path, "must not contain '..'"))
		}
		if src.HostPath.Type != nil {
			allErrs = append(allErrs, coreNotSupported(*src.HostPath.Type, coreHostPathTypes, true, hp.Child("type"))...)
		}
	case src.Local != nil:
		lp := coreSpecPath.Child("local", "path")
		if src.Local.Path == "" {
			allErrs = append(allErrs, field.Required(lp, "an absolute path on the node"))
		} else if coreHasDotDot(src.Local.Path) {
			allErrs = append(allErrs, field.Invalid(lp, src.Local.Path, "must not contain '..'"))
		}
		if spec.NodeAffinity == nil {
			allErrs = append(allErrs, field.Required(coreSpecPath.Child("nodeAffinity"), "local volumes require node affinity (the node that has the disk)"))
		}
	case src.NFS != nil:
		np := coreSpecPath.Child("nfs")
		if src.NFS.Server == "" {
			allErrs = append(allErrs, field.Required(np.Child("server"), "the NFS server host name or IP"))
		}
		if src.NFS.Path == "" {
			allErrs = append(allErrs, field.Required(np.Child("path"), "the exported path"))
		} else if !path.IsAbs(src.NFS.Path) {
			allErrs = append(allErrs, field.Invalid(np.Child("path"), src.NFS.Path, "must be an absolute path"))
		}
	case src.CSI != nil:
		cp := coreSpecPath.Child("csi")
		if src.CSI.Driver == "" {
			allErrs = append(allErrs, field.Required(cp.Child("driver"), "the name of the CSI driver"))
		}
		if src.CSI.VolumeHandle == "" {
			allErrs = append(allErrs, field.Required(cp.Child("volumeHandle"), "the driver's ID of the volume"))
		}
	}
	if spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRecycle && src.HostPath == nil && src.NFS == nil {
		allErrs = append(allErrs, field.NotSupported(coreSpecPath.Child("persistentVolumeReclaimPolicy"), spec.PersistentVolumeReclaimPolicy,
			[]corev1.PersistentVolumeReclaimPolicy{corev1.PersistentVolumeReclaimRetain, corev1.PersistentVolumeReclaimDelete}))
	}
	return allErrs
}

func coreValidatePVUpdate(pv, old *corev1.PersistentVolume) field.ErrorList {
	allErrs := coreMetaUpdate(&pv.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreValidatePVSpec(&pv.Spec)...)
	if !apiequality.Semantic.DeepEqual(pv.Spec.PersistentVolumeSource, old.Spec.PersistentVolumeSource) {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("persistentvolumesource"), "spec.persistentvolumesource is immutable after creation"))
	}
	if !apiequality.Semantic.DeepEqual(pv.Spec.VolumeMode, old.Spec.VolumeMode) {
		allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("volumeMode"), pv.Spec.VolumeMode, "field is immutable"))
	}
	if old.Spec.NodeAffinity != nil && !apiequality.Semantic.DeepEqual(pv.Spec.NodeAffinity, old.Spec.NodeAffinity) {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("nodeAffinity"), "field is immutable once set"))
	}
	return allErrs
}

func coreValidatePVStatusUpdate(pv, old *corev1.PersistentVolume) field.ErrorList {
	allErrs := coreMetaUpdate(&pv.ObjectMeta, &old.ObjectMeta)
	return append(allErrs, coreNotSupported(pv.Status.Phase, []corev1.PersistentVolumePhase{
		corev1.VolumePending, corev1.VolumeAvailable, corev1.VolumeBound, corev1.VolumeReleased, corev1.VolumeFailed,
	}, true, field.NewPath("status", "phase"))...)
}

// PersistentVolumeClaim

func coreValidatePVC(pvc *corev1.PersistentVolumeClaim) field.ErrorList {
	allErrs := coreMeta(&pvc.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidatePVCSpec(&pvc.Spec, coreSpecPath)...)
}

// coreValidatePVCSpec checks a claim spec, also as embedded in ephemeral volumes and
// StatefulSet volumeClaimTemplates.
func coreValidatePVCSpec(spec *corev1.PersistentVolumeClaimSpec, fldPath *field.Path) field.ErrorList {
	allErrs := coreValidateAccessModes(spec.AccessModes, fldPath.Child("accessModes"))
	reqPath := fldPath.Child("resources", "requests")
	storage, ok := spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		allErrs = append(allErrs, field.Required(reqPath.Key(string(corev1.ResourceStorage)), "the size of the claim, such as 1Gi"))
	} else {
		allErrs = append(allErrs, corePositiveQuantity(storage, reqPath.Key(string(corev1.ResourceStorage)))...)
	}
	allErrs = append(allErrs, coreResourceList(spec.Resources.Requests, coreIsContainerResource, "storage", reqPath)...)
	allErrs = append(allErrs, coreResourceList(spec.Resources.Limits, coreIsContainerResource, "storage", fldPath.Child("resources", "limits"))...)
	if spec.VolumeMode != nil {
		allErrs = append(allErrs, coreNotSupported(*spec.VolumeMode, coreVolumeModes, false, fldPath.Child("volumeMode"))...)
	}
	if spec.StorageClassName != nil && *spec.StorageClassName != "" {
		allErrs = append(allErrs, coreDNSSubdomain(*spec.StorageClassName, fldPath.Child("storageClassName"))...)
	}
	allErrs = append(allErrs, coreLabelSelector(spec.Selector, fldPath.Child("selector"))...)
	if ds := spec.DataSource; ds != nil {
		dp := fldPath.Child("dataSource")
		if ds.Name == "" {
			allErrs = append(allErrs, field.Required(dp.Child("name"), "the name of the source object"))
		}
		if ds.Kind == "" {
			allErrs = append(allErrs, field.Required(dp.Child("kind"), "such as PersistentVolumeClaim or VolumeSnapshot"))
		}
	}
	return allErrs
}

func coreValidatePVCUpdate(pvc, old *corev1.PersistentVolumeClaim) field.ErrorList {
	allErrs := coreMetaUpdate(&pvc.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreValidatePVCSpec(&pvc.Spec, coreSpecPath)...)

	newSize, oldSize := pvc.Spec.Resources.Requests[corev1.ResourceStorage], old.Spec.Resources.Requests[corev1.ResourceStorage]
	if newSize.Cmp(oldSize) < 0 {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("resources", "requests", "storage"), fmt.Sprintf("field can not be less than previous value (%s); volumes can only grow", oldSize.String())))
	}
	munged := pvc.Spec.DeepCopy()
	munged.Resources.Requests = old.Spec.Resources.Requests
	munged.VolumeAttributesClassName = old.Spec.VolumeAttributesClassName
	if old.Spec.VolumeName == "" {
		munged.VolumeName = old.Spec.VolumeName // binding
	}
	if !apiequality.Semantic.DeepEqual(munged, &old.Spec) {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath, "spec is immutable after creation except resources.requests (to grow the claim), volumeAttributesClassName and an empty volumeName"))
	}
	return allErrs
}

func coreValidatePVCStatusUpdate(pvc, old *corev1.PersistentVolumeClaim) field.ErrorList {
	allErrs := coreMetaUpdate(&pvc.ObjectMeta, &old.ObjectMeta)
	sp := field.NewPath("status")
	allErrs = append(allErrs, coreNotSupported(pvc.Status.Phase, []corev1.PersistentVolumeClaimPhase{corev1.ClaimPending, corev1.ClaimBound, corev1.ClaimLost}, true, sp.Child("phase"))...)
	allErrs = append(allErrs, coreResourceList(pvc.Status.Capacity, coreAnyResource, "storage", sp.Child("capacity"))...)
	return allErrs
}

// ResourceQuota

var coreQuotaResources = sets.New(
	"pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps", "persistentvolumeclaims",
	"services.nodeports", "services.loadbalancers", "cpu", "memory", "ephemeral-storage", "storage",
	"requests.cpu", "requests.memory", "requests.storage", "requests.ephemeral-storage",
	"limits.cpu", "limits.memory", "limits.ephemeral-storage",
)

// coreQuotaIntegerResources are object counts: a fraction of a pod makes no sense.
var coreQuotaIntegerResources = sets.New(
	"pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps", "persistentvolumeclaims",
	"services.nodeports", "services.loadbalancers",
)

func coreIsQuotaResource(s string) bool {
	return coreQuotaResources.Has(s) || strings.HasPrefix(s, "count/") || strings.HasPrefix(s, corev1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(s, "requests."+corev1.ResourceHugePagesPrefix)
}

var coreQuotaScopes = []corev1.ResourceQuotaScope{
	corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeBestEffort,
	corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity,
	corev1.ResourceQuotaScopeVolumeAttributesClass,
}

func coreValidateResourceQuota(q *corev1.ResourceQuota) field.ErrorList {
	allErrs := coreMeta(&q.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidateQuotaSpec(&q.Spec)...)
}

func coreValidateQuotaList(list corev1.ResourceList, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, name := range coreSortedKeys(list) {
		kp := p.Key(string(name))
		q := list[name]
		s := string(name)
		if errs := coreQualifiedName(s, kp); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
		} else if !strings.Contains(s, "/") || strings.HasPrefix(s, "count/") {
			if !coreIsQuotaResource(s) {
				allErrs = append(allErrs, field.Invalid(kp, s, "must be a standard resource type (such as pods, requests.cpu, limits.memory, count/deployments.apps) or fully qualified"))
			}
		}
		allErrs = append(allErrs, coreNonnegQuantity(q, kp)...)
		if (coreQuotaIntegerResources.Has(s) || strings.HasPrefix(s, "count/")) && q.MilliValue()%1000 != 0 {
			allErrs = append(allErrs, field.Invalid(kp, q.String(), "must be an integer"))
		}
	}
	return allErrs
}

func coreValidateQuotaSpec(spec *corev1.ResourceQuotaSpec) field.ErrorList {
	allErrs := coreValidateQuotaList(spec.Hard, coreSpecPath.Child("hard"))
	scopes := sets.New[corev1.ResourceQuotaScope]()
	for i, s := range spec.Scopes {
		sp := coreSpecPath.Child("scopes").Index(i)
		allErrs = append(allErrs, coreNotSupported(s, coreQuotaScopes, false, sp)...)
		if scopes.Has(s) {
			allErrs = append(allErrs, field.Duplicate(sp, s))
		}
		scopes.Insert(s)
	}
	if sel := spec.ScopeSelector; sel != nil {
		for i, req := range sel.MatchExpressions {
			p := coreSpecPath.Child("scopeSelector", "matchExpressions").Index(i)
			allErrs = append(allErrs, coreNotSupported(req.ScopeName, coreQuotaScopes, false, p.Child("scopeName"))...)
			scopes.Insert(req.ScopeName)
			switch req.Operator {
			case corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn:
				if len(req.Values) == 0 {
					allErrs = append(allErrs, field.Required(p.Child("values"), "must be at least one value when `operator` is 'In' or 'NotIn'"))
				}
			case corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist:
				if len(req.Values) != 0 {
					allErrs = append(allErrs, field.Invalid(p.Child("values"), req.Values, "must be no value when `operator` is 'Exists' or 'DoesNotExist'"))
				}
			default:
				allErrs = append(allErrs, field.NotSupported(p.Child("operator"), req.Operator, []corev1.ScopeSelectorOperator{
					corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn, corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist}))
			}
		}
	}
	for _, pair := range [][2]corev1.ResourceQuotaScope{
		{corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating},
		{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort},
	} {
		if scopes.Has(pair[0]) && scopes.Has(pair[1]) {
			allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("scopes"), spec.Scopes, fmt.Sprintf("conflicting scopes: %s and %s", pair[0], pair[1])))
		}
	}
	return allErrs
}

func coreValidateResourceQuotaUpdate(q, old *corev1.ResourceQuota) field.ErrorList {
	allErrs := coreMetaUpdate(&q.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreValidateQuotaSpec(&q.Spec)...)
	if !apiequality.Semantic.DeepEqual(q.Spec.Scopes, old.Spec.Scopes) {
		allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("scopes"), q.Spec.Scopes, "field is immutable"))
	}
	return allErrs
}

func coreValidateResourceQuotaStatusUpdate(q, old *corev1.ResourceQuota) field.ErrorList {
	allErrs := coreMetaUpdate(&q.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreValidateQuotaList(q.Status.Hard, field.NewPath("status", "hard"))...)
	return append(allErrs, coreValidateQuotaList(q.Status.Used, field.NewPath("status", "used"))...)
}

// LimitRange

var coreLimitTypes = []corev1.LimitType{corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim}

func coreValidateLimitRange(lr *corev1.LimitRange) field.ErrorList {
	allErrs := coreMeta(&lr.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidateLimitRangeSpec(&lr.Spec)...)
}

func coreValidateLimitRangeSpec(spec *corev1.LimitRangeSpec) field.ErrorList {
	var allErrs field.ErrorList
	types := sets.New[corev1.LimitType]()
	for i := range spec.Limits {
		item := &spec.Limits[i]
		p := coreSpecPath.Child("limits").Index(i)
		allErrs = append(allErrs, coreNotSupported(item.Type, coreLimitTypes, false, p.Child("type"))...)
		if types.Has(item.Type) {
			allErrs = append(allErrs, field.Duplicate(p.Child("type"), item.Type))
		}
		types.Insert(item.Type)
		for _, l := range []struct {
			list corev1.ResourceList
			name string
		}{{item.Max, "max"}, {item.Min, "min"}, {item.Default, "default"}, {item.DefaultRequest, "defaultRequest"}, {item.MaxLimitRequestRatio, "maxLimitRequestRatio"}} {
			allErrs = append(allErrs, coreResourceList(l.list, coreIsContainerResource, "container", p.Child(l.name))...)
		}
		if item.Type == corev1.LimitTypePod {
			if len(item.Default) > 0 {
				allErrs = append(allErrs, field.Forbidden(p.Child("default"), "may not be specified when `type` is 'Pod'"))
			}
			if len(item.DefaultRequest) > 0 {
				allErrs = append(allErrs, field.Forbidden(p.Child("defaultRequest"), "may not be specified when `type` is 'Pod'"))
			}
		}
		if item.Type == corev1.LimitTypePersistentVolumeClaim {
			_, minOK := item.Min[corev1.ResourceStorage]
			_, maxOK := item.Max[corev1.ResourceStorage]
			if !minOK && !maxOK {
				allErrs = append(allErrs, field.Required(p.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
		allErrs = append(allErrs, coreLimitRangeOrder(item, p)...)
	}
	return allErrs
}

// coreLimitRangeOrder enforces min <= defaultRequest <= default <= max and a ratio >= 1 that
// max/min allows.
func coreLimitRangeOrder(item *corev1.LimitRangeItem, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[corev1.ResourceName]()
	for _, l := range []corev1.ResourceList{item.Max, item.Min, item.Default, item.DefaultRequest, item.MaxLimitRequestRatio} {
		for k := range l {
			names.Insert(k)
		}
	}
	for _, name := range sets.List(names) {
		k := string(name)
		minQ, hasMin := item.Min[name]
		maxQ, hasMax := item.Max[name]
		defQ, hasDef := item.Default[name]
		reqQ, hasReq := item.DefaultRequest[name]
		ratio, hasRatio := item.MaxLimitRequestRatio[name]
		if hasMin && hasMax && minQ.Cmp(maxQ) > 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("min").Key(k), minQ.String(), fmt.Sprintf("min value %s is greater than max value %s", minQ.String(), maxQ.String())))
		}
		if hasReq {
			if hasMin && minQ.Cmp(reqQ) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("defaultRequest").Key(k), reqQ.String(), fmt.Sprintf("min value %s is greater than default request value %s", minQ.String(), reqQ.String())))
			}
			if hasMax && reqQ.Cmp(maxQ) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("defaultRequest").Key(k), reqQ.String(), fmt.Sprintf("default request value %s is greater than max value %s", reqQ.String(), maxQ.String())))
			}
			if hasDef && reqQ.Cmp(defQ) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("defaultRequest").Key(k), reqQ.String(), fmt.Sprintf("default request value %s is greater than default limit value %s", reqQ.String(), defQ.String())))
			}
		}
		if hasDef {
			if hasMin && minQ.Cmp(defQ) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("default").Key(k), defQ.String(), fmt.Sprintf("min value %s is greater than default value %s", minQ.String(), defQ.String())))
			}
			if hasMax && defQ.Cmp(maxQ) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("default").Key(k), defQ.String(), fmt.Sprintf("default value %s is greater than max value %s", defQ.String(), maxQ.String())))
			}
		}
		if hasRatio {
			rp := p.Child("maxLimitRequestRatio").Key(k)
			if ratio.Cmp(resource.MustParse("1")) < 0 {
				allErrs = append(allErrs, field.Invalid(rp, ratio.String(), fmt.Sprintf("ratio %s is less than 1", ratio.String())))
			}
			if hasMin && hasMax && minQ.Sign() > 0 {
				maxRatio := float64(maxQ.MilliValue()) / float64(minQ.MilliValue())
				if float64(ratio.MilliValue())/1000 > maxRatio {
					allErrs = append(allErrs, field.Invalid(rp, ratio.String(), fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), maxRatio)))
				}
			}
		}
	}
	return allErrs
}

func coreValidateLimitRangeUpdate(lr, old *corev1.LimitRange) field.ErrorList {
	allErrs := coreMetaUpdate(&lr.ObjectMeta, &old.ObjectMeta)
	return append(allErrs, coreValidateLimitRangeSpec(&lr.Spec)...)
}
