package validation

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// coreMaxDataSize is the limit on the total payload of a ConfigMap or a Secret (1 MiB).
const coreMaxDataSize = 1 << 20

// Namespace

func coreValidateNamespace(ns *corev1.Namespace) field.ErrorList {
	allErrs := coreMeta(&ns.ObjectMeta, false, apimachineryvalidation.ValidateNamespaceName)
	allErrs = append(allErrs, coreNamespaceNameLabel(ns)...)
	for i, f := range ns.Spec.Finalizers {
		allErrs = append(allErrs, coreValidateNamespaceFinalizer(string(f), field.NewPath("spec", "finalizers").Index(i))...)
	}
	return allErrs
}

// coreNamespaceNameLabel: kubernetes.io/metadata.name always names the namespace itself.
func coreNamespaceNameLabel(ns *corev1.Namespace) field.ErrorList {
	if v, ok := ns.Labels[corev1.LabelMetadataName]; ok && v != ns.Name {
		return field.ErrorList{field.Invalid(coreMetadataPath.Child("labels").Key(corev1.LabelMetadataName), v, fmt.Sprintf("must be the namespace name (%q)", ns.Name))}
	}
	return nil
}

func coreValidateNamespaceFinalizer(f string, p *field.Path) field.ErrorList {
	if errs := coreQualifiedName(f, p); len(errs) > 0 {
		return errs
	}
	if !strings.Contains(f, "/") && f != string(corev1.FinalizerKubernetes) {
		return field.ErrorList{field.Invalid(p, f, "name is neither a standard finalizer name nor is it fully qualified")}
	}
	return nil
}

func coreValidateNamespaceUpdate(ns, old *corev1.Namespace) field.ErrorList {
	allErrs := coreMetaUpdate(&ns.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreNamespaceNameLabel(ns)...)
	if !apiequality.Semantic.DeepEqual(ns.Spec.Finalizers, old.Spec.Finalizers) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "finalizers"), "may only be changed through the namespaces/finalize subresource"))
	}
	return allErrs
}

func coreValidateNamespaceStatusUpdate(ns, old *corev1.Namespace) field.ErrorList {
	allErrs := coreMetaUpdate(&ns.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreNotSupported(ns.Status.Phase, []corev1.NamespacePhase{corev1.NamespaceActive, corev1.NamespaceTerminating}, true, field.NewPath("status", "phase"))...)
	if ns.DeletionTimestamp == nil && ns.Status.Phase == corev1.NamespaceTerminating {
		allErrs = append(allErrs, field.Invalid(field.NewPath("status", "phase"), ns.Status.Phase, "may only be Terminating if `metadata.deletionTimestamp` is set"))
	}
	return allErrs
}

// ConfigMap

func coreValidateConfigMap(cm *corev1.ConfigMap) field.ErrorList {
	allErrs := coreMeta(&cm.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidateConfigMapData(cm)...)
}

func coreValidateConfigMapData(cm *corev1.ConfigMap) field.ErrorList {
	var allErrs field.ErrorList
	size := 0
	dataPath, binPath := field.NewPath("data"), field.NewPath("binaryData")
	for _, k := range coreSortedKeys(cm.Data) {
		allErrs = append(allErrs, coreConfigKey(k, dataPath.Key(k))...)
		size += len(k) + len(cm.Data[k])
	}
	for _, k := range coreSortedKeys(cm.BinaryData) {
		allErrs = append(allErrs, coreConfigKey(k, binPath.Key(k))...)
		if _, dup := cm.Data[k]; dup {
			allErrs = append(allErrs, field.Invalid(binPath.Key(k), k, "duplicate of key present in data; a key may be in data or binaryData, not both"))
		}
		size += len(k) + len(cm.BinaryData[k])
	}
	if size > coreMaxDataSize {
		allErrs = append(allErrs, field.TooLong(dataPath, "", coreMaxDataSize).WithOrigin("size"))
	}
	return allErrs
}

func coreConfigKey(k string, p *field.Path) field.ErrorList {
	return coreInvalidEach(p, k, utilvalidation.IsConfigMapKey(k))
}

func coreValidateConfigMapUpdate(cm, old *corev1.ConfigMap) field.ErrorList {
	allErrs := coreMetaUpdate(&cm.ObjectMeta, &old.ObjectMeta)
	if old.Immutable != nil && *old.Immutable {
		if cm.Immutable == nil || !*cm.Immutable {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(cm.Data, old.Data) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set; delete and recreate the ConfigMap"))
		}
		if !apiequality.Semantic.DeepEqual(cm.BinaryData, old.BinaryData) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("binaryData"), "field is immutable when `immutable` is set; delete and recreate the ConfigMap"))
		}
	}
	return append(allErrs, coreValidateConfigMapData(cm)...)
}

// Secret

func coreValidateSecret(s *corev1.Secret) field.ErrorList {
	allErrs := coreMeta(&s.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidateSecretData(s)...)
}

// coreValidateSecretData checks keys, size and the keys each well-known type requires.
// stringData counts as data: it is merged into data when the object is stored.
func coreValidateSecretData(s *corev1.Secret) field.ErrorList {
	var allErrs field.ErrorList
	dataPath := field.NewPath("data")
	size := 0
	for _, k := range coreSortedKeys(s.Data) {
		allErrs = append(allErrs, coreConfigKey(k, dataPath.Key(k))...)
		size += len(s.Data[k])
	}
	for _, k := range coreSortedKeys(s.StringData) {
		allErrs = append(allErrs, coreConfigKey(k, field.NewPath("stringData").Key(k))...)
		size += len(s.StringData[k])
	}
	if size > coreMaxDataSize {
		allErrs = append(allErrs, field.TooLong(dataPath, "", coreMaxDataSize).WithOrigin("size"))
	}
	value := func(k string) ([]byte, bool) {
		if v, ok := s.StringData[k]; ok {
			return []byte(v), true
		}
		v, ok := s.Data[k]
		return v, ok
	}
	required := func(k string) {
		if v, ok := value(k); !ok || len(v) == 0 {
			allErrs = append(allErrs, field.Required(dataPath.Key(k), fmt.Sprintf("a Secret of type %s must have the key %q", s.Type, k)))
		}
	}
	validJSON := func(k string) {
		if v, ok := value(k); ok && len(v) > 0 && !json.Valid(v) {
			allErrs = append(allErrs, field.Invalid(dataPath.Key(k), "<secret contents redacted>", "must be valid JSON (a docker config file)"))
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			allErrs = append(allErrs, field.Required(coreMetadataPath.Child("annotations").Key(corev1.ServiceAccountNameKey), "the name of the ServiceAccount the token belongs to"))
		}
	case corev1.SecretTypeDockercfg:
		required(corev1.DockerConfigKey)
		validJSON(corev1.DockerConfigKey)
	case corev1.SecretTypeDockerConfigJson:
		required(corev1.DockerConfigJsonKey)
		validJSON(corev1.DockerConfigJsonKey)
	case corev1.SecretTypeBasicAuth:
		u, uok := value(corev1.BasicAuthUsernameKey)
		pw, pok := value(corev1.BasicAuthPasswordKey)
		if (!uok || len(u) == 0) && (!pok || len(pw) == 0) {
			allErrs = append(allErrs, field.Required(dataPath.Key(corev1.BasicAuthUsernameKey), "a Secret of type kubernetes.io/basic-auth must have the key \"username\" or \"password\""))
		}
	case corev1.SecretTypeSSHAuth:
		required(corev1.SSHAuthPrivateKey)
	case corev1.SecretTypeTLS:
		required(corev1.TLSCertKey)
		required(corev1.TLSPrivateKeyKey)
	case "", corev1.SecretTypeOpaque, corev1.SecretTypeBootstrapToken:
	default:
		if len(s.Type) > 253 {
			allErrs = append(allErrs, field.TooLong(field.NewPath("type"), "", 253))
		}
	}
	return allErrs
}

func coreValidateSecretUpdate(s, old *corev1.Secret) field.ErrorList {
	allErrs := coreMetaUpdate(&s.ObjectMeta, &old.ObjectMeta)
	newType, oldType := s.Type, old.Type
	if newType == "" {
		newType = corev1.SecretTypeOpaque
	}
	if oldType == "" {
		oldType = corev1.SecretTypeOpaque
	}
	if newType != oldType {
		allErrs = append(allErrs, field.Invalid(field.NewPath("type"), s.Type, fmt.Sprintf("field is immutable (was %q); delete and recreate the Secret to change its type", oldType)))
	}
	if old.Immutable != nil && *old.Immutable {
		if s.Immutable == nil || !*s.Immutable {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(s.Data, old.Data) || len(s.StringData) > 0 {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set; delete and recreate the Secret"))
		}
	}
	return append(allErrs, coreValidateSecretData(s)...)
}

// ServiceAccount

func coreValidateServiceAccount(sa *corev1.ServiceAccount) field.ErrorList {
	allErrs := coreMeta(&sa.ObjectMeta, true, apimachineryvalidation.ValidateServiceAccountName)
	return append(allErrs, coreValidateServiceAccountRefs(sa)...)
}

func coreValidateServiceAccountRefs(sa *corev1.ServiceAccount) field.ErrorList {
	var allErrs field.ErrorList
	for i, s := range sa.Secrets {
		if s.Name == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("secrets").Index(i).Child("name"), "the name of a Secret in the same namespace"))
		}
	}
	for i, s := range sa.ImagePullSecrets {
		if s.Name == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("imagePullSecrets").Index(i).Child("name"), "the name of a Secret in the same namespace"))
		}
	}
	return allErrs
}
