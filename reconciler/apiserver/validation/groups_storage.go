package validation

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// maxStorageClassParameters and maxStorageClassParameterBytes are upstream's limits on
	// StorageClass.parameters: entry count and total size of keys and values.
	maxStorageClassParameters     = 512
	maxStorageClassParameterBytes = 256 * 1024
)

var (
	storageClassReclaimPolicies = []corev1.PersistentVolumeReclaimPolicy{corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRetain}
	volumeBindingModes          = []storagev1.VolumeBindingMode{storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer}
)

// ValidateStorageClass validates a StorageClass on create. It expects defaulted input:
// reclaimPolicy and volumeBindingMode are set by the defaulter when absent.
func ValidateStorageClass(sc *storagev1.StorageClass) field.ErrorList {
	errs := validateMeta(&sc.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateStorageClassFields(sc)...)
}

// validateStorageClassFields checks everything but metadata.
func validateStorageClassFields(sc *storagev1.StorageClass) field.ErrorList {
	errs := validateProvisioner(sc.Provisioner, field.NewPath("provisioner"))
	errs = append(errs, validateStorageClassParameters(sc.Parameters, field.NewPath("parameters"))...)
	if sc.ReclaimPolicy != nil && !slices.Contains(storageClassReclaimPolicies, *sc.ReclaimPolicy) {
		errs = append(errs, field.NotSupported(field.NewPath("reclaimPolicy"), *sc.ReclaimPolicy, storageClassReclaimPolicies))
	}
	bp := field.NewPath("volumeBindingMode")
	switch {
	case sc.VolumeBindingMode == nil:
		errs = append(errs, field.Required(bp, "set Immediate or WaitForFirstConsumer"))
	case !slices.Contains(volumeBindingModes, *sc.VolumeBindingMode):
		errs = append(errs, field.NotSupported(bp, *sc.VolumeBindingMode, volumeBindingModes))
	}
	errs = append(errs, validateAllowedTopologies(sc.AllowedTopologies, field.NewPath("allowedTopologies"))...)
	for i, o := range sc.MountOptions {
		if strings.TrimSpace(o) == "" {
			errs = append(errs, field.Invalid(field.NewPath("mountOptions").Index(i), o, "must not be empty; remove the entry"))
		}
	}
	return errs
}

// ValidateStorageClassUpdate validates a StorageClass update: only metadata, mountOptions,
// allowVolumeExpansion and allowedTopologies may change.
func ValidateStorageClassUpdate(sc, old *storagev1.StorageClass) field.ErrorList {
	errs := validateMetaUpdate(&sc.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateStorageClassFields(sc)...)
	if !apiequality.Semantic.DeepEqual(sc.Parameters, old.Parameters) {
		errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden; create a new StorageClass instead"))
	}
	if sc.Provisioner != old.Provisioner {
		errs = append(errs, field.Forbidden(field.NewPath("provisioner"), "updates to provisioner are forbidden; create a new StorageClass instead"))
	}
	if !apiequality.Semantic.DeepEqual(sc.ReclaimPolicy, old.ReclaimPolicy) {
		errs = append(errs, field.Forbidden(field.NewPath("reclaimPolicy"), "updates to reclaimPolicy are forbidden; create a new StorageClass instead"))
	}
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(sc.VolumeBindingMode, old.VolumeBindingMode, field.NewPath("volumeBindingMode"))...)
	return errs
}

// validateProvisioner requires a provisioner name in qualified-name form ("example.com/name").
func validateProvisioner(provisioner string, p *field.Path) field.ErrorList {
	if provisioner == "" {
		return field.ErrorList{field.Required(p, "name the provisioner, e.g. flotilla.dev/local")}
	}
	return nameErrs(p, provisioner, utilvalidation.IsQualifiedName(strings.ToLower(provisioner)))
}

func validateStorageClassParameters(params map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(params) > maxStorageClassParameters {
		errs = append(errs, field.TooMany(p, len(params), maxStorageClassParameters))
	}
	size := 0
	for k, v := range params {
		if k == "" {
			errs = append(errs, field.Invalid(p, k, "parameter keys must not be empty"))
		}
		size += len(k) + len(v)
	}
	if size > maxStorageClassParameterBytes {
		errs = append(errs, field.TooLong(p, "", maxStorageClassParameterBytes))
	}
	return errs
}

func validateAllowedTopologies(terms []corev1.TopologySelectorTerm, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, term := range terms {
		tp := p.Index(i)
		if len(term.MatchLabelExpressions) == 0 {
			errs = append(errs, field.Required(tp.Child("matchLabelExpressions"), "must have at least one label match expression"))
		}
		for j, r := range term.MatchLabelExpressions {
			rp := tp.Child("matchLabelExpressions").Index(j)
			errs = append(errs, nameErrs(rp.Child("key"), r.Key, utilvalidation.IsQualifiedName(r.Key))...)
			if len(r.Values) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), "must specify as least one value"))
			}
			seen := sets.New[string]()
			for k, v := range r.Values {
				if seen.Has(v) {
					errs = append(errs, field.Duplicate(rp.Child("values").Index(k), v))
				}
				seen.Insert(v)
			}
		}
	}
	return errs
}
