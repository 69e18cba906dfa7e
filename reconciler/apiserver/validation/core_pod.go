package validation

import (
	"fmt"
	"math"
	"path"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidatePodTemplateSpecWithClaimTemplates validates a StatefulSet's pod template: its
// containers may mount the volumeClaimTemplates by name as if they were volumes.
func ValidatePodTemplateSpecWithClaimTemplates(spec *corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim, fldPath *field.Path) field.ErrorList {
	extra := sets.New[string]()
	for _, c := range claims {
		extra.Insert(c.Name)
	}
	return coreValidatePodTemplateSpec(spec, extra, fldPath)
}

// coreValidatePodTemplateSpec is the implementation behind ValidatePodTemplateSpec; extra
// names volumes that exist outside spec.volumes (StatefulSet claim templates).
func coreValidatePodTemplateSpec(spec *corev1.PodTemplateSpec, extra sets.Set[string], fldPath *field.Path) field.ErrorList {
	if spec == nil {
		return field.ErrorList{field.Required(fldPath, "a pod template is required")}
	}
	allErrs := ValidateLabelsAndAnnotations(spec.Labels, spec.Annotations, fldPath.Child("metadata"))
	allErrs = append(allErrs, coreValidatePodSpec(&spec.Spec, extra, fldPath.Child("spec"))...)
	if len(spec.Spec.EphemeralContainers) > 0 {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("spec", "ephemeralContainers"), "ephemeral containers are not allowed in pod templates"))
	}
	return allErrs
}

// ValidatePodSpec validates a pod spec as found in a Pod or a pod template. meta may be nil.
func ValidatePodSpec(spec *corev1.PodSpec, meta *metav1.ObjectMeta, fldPath *field.Path) field.ErrorList {
	_ = meta // reserved for annotation-dependent rules
	return coreValidatePodSpec(spec, nil, fldPath)
}

func coreValidatePodSpec(spec *corev1.PodSpec, extraVolumes sets.Set[string], fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	volumes, errs := coreValidateVolumes(spec.Volumes, fldPath.Child("volumes"))
	allErrs = append(allErrs, errs...)
	for name := range extraVolumes {
		if _, ok := volumes[name]; !ok {
			volumes[name] = nil
		}
	}

	// Container names are unique across all kinds of containers of the pod.
	names := sets.New[string]()
	allErrs = append(allErrs, coreValidateInitContainers(spec.InitContainers, volumes, names, fldPath.Child("initContainers"))...)
	if len(spec.Containers) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("containers"), "a pod needs at least one container"))
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		p := fldPath.Child("containers").Index(i)
		allErrs = append(allErrs, coreValidateContainer(c, volumes, names, p)...)
		allErrs = append(allErrs, coreValidateProbes(c, false, p)...)
		allErrs = append(allErrs, coreValidateContainerRestartPolicy(c, false, p)...)
	}
	for i := range spec.EphemeralContainers {
		ec := &spec.EphemeralContainers[i]
		p := fldPath.Child("ephemeralContainers").Index(i)
		c := corev1.Container(ec.EphemeralContainerCommon)
		allErrs = append(allErrs, coreValidateContainer(&c, volumes, names, p)...)
	}
	allErrs = append(allErrs, coreValidateHostPorts(spec, fldPath)...)

	allErrs = append(allErrs, coreNotSupported(spec.RestartPolicy,
		[]corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}, true, fldPath.Child("restartPolicy"))...)
	allErrs = append(allErrs, coreValidateDNS(spec, fldPath)...)

	if spec.TerminationGracePeriodSeconds != nil && *spec.TerminationGracePeriodSeconds < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *spec.TerminationGracePeriodSeconds, "must be greater than or equal to 0"))
	}
	if spec.ActiveDeadlineSeconds != nil {
		if v := *spec.ActiveDeadlineSeconds; v < 1 || v > math.MaxInt32 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), v, fmt.Sprintf("must be between 1 and %d, inclusive", math.MaxInt32)))
		}
	}
	if spec.Hostname != "" {
		allErrs = append(allErrs, coreDNSLabel(spec.Hostname, fldPath.Child("hostname"))...)
	}
	if spec.Subdomain != "" {
		allErrs = append(allErrs, coreDNSLabel(spec.Subdomain, fldPath.Child("subdomain"))...)
	}
	if spec.NodeName != "" {
		allErrs = append(allErrs, coreDNSSubdomain(spec.NodeName, fldPath.Child("nodeName"))...)
	}
	for _, f := range []struct{ v, name string }{
		{spec.ServiceAccountName, "serviceAccountName"}, {spec.SchedulerName, "schedulerName"},
		{spec.PriorityClassName, "priorityClassName"},
	} {
		if f.v != "" {
			allErrs = append(allErrs, coreDNSSubdomain(f.v, fldPath.Child(f.name))...)
		}
	}
	if spec.RuntimeClassName != nil {
		allErrs = append(allErrs, coreDNSSubdomain(*spec.RuntimeClassName, fldPath.Child("runtimeClassName"))...)
	}
	if spec.PreemptionPolicy != nil {
		allErrs = append(allErrs, coreNotSupported(*spec.PreemptionPolicy,
			[]corev1.PreemptionPolicy{corev1.PreemptLowerPriority, corev1.PreemptNever}, false, fldPath.Child("preemptionPolicy"))...)
	}
	allErrs = append(allErrs, metav1validation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, coreValidateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)
	if spec.Affinity != nil {
		allErrs = append(allErrs, coreValidateAffinity(spec.Affinity, fldPath.Child("affinity"))...)
	}
	allErrs = append(allErrs, coreValidateTopologySpread(spec.TopologySpreadConstraints, fldPath.Child("topologySpreadConstraints"))...)
	allErrs = append(allErrs, coreValidateSchedulingGates(spec.SchedulingGates, fldPath.Child("schedulingGates"))...)
	if len(spec.SchedulingGates) > 0 && spec.NodeName != "" {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("nodeName"), "cannot be set until all schedulingGates have been cleared"))
	}
	if spec.SecurityContext != nil {
		allErrs = append(allErrs, coreValidatePodSecurityContext(spec.SecurityContext, fldPath.Child("securityContext"))...)
	}
	for i, g := range spec.ReadinessGates {
		allErrs = append(allErrs, coreQualifiedName(string(g.ConditionType), fldPath.Child("readinessGates").Index(i).Child("conditionType"))...)
	}
	for i, ha := range spec.HostAliases {
		p := fldPath.Child("hostAliases").Index(i)
		allErrs = append(allErrs, coreIP(ha.IP, p.Child("ip"))...)
		for j, h := range ha.Hostnames {
			allErrs = append(allErrs, coreDNSSubdomain(h, p.Child("hostnames").Index(j))...)
		}
	}
	if spec.OS != nil {
		allErrs = append(allErrs, coreNotSupported(spec.OS.Name, []corev1.OSName{corev1.Linux, corev1.Windows}, false, fldPath.Child("os", "name"))...)
	}
	for i, s := range spec.ImagePullSecrets {
		if s.Name == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("imagePullSecrets").Index(i).Child("name"), "the name of a Secret of type kubernetes.io/dockerconfigjson"))
		}
	}
	if spec.HostNetwork {
		allErrs = append(allErrs, coreValidateHostNetworkPorts(spec, fldPath)...)
	}
	if spec.HostUsers != nil && !*spec.HostUsers && (spec.HostNetwork || spec.HostPID || spec.HostIPC) {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("hostUsers"), "when `hostUsers` is false, `hostNetwork`, `hostPID` and `hostIPC` must be false"))
	}
	return allErrs
}

// coreVolumeSourceCount counts the non-nil source pointers of a VolumeSource-like struct.
func coreVolumeSourceCount(v any) int {
	rv := reflect.ValueOf(v)
	n := 0
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

func coreValidateVolumes(volumes []corev1.Volume, fldPath *field.Path) (map[string]*corev1.Volume, field.ErrorList) {
	var allErrs field.ErrorList
	byName := map[string]*corev1.Volume{}
	for i := range volumes {
		v := &volumes[i]
		p := fldPath.Index(i)
		if v.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), "volume name is required"))
		} else {
			allErrs = append(allErrs, coreDNSLabel(v.Name, p.Child("name"))...)
			if _, dup := byName[v.Name]; dup {
				allErrs = append(allErrs, field.Duplicate(p.Child("name"), v.Name))
			} else {
				byName[v.Name] = v
			}
		}
		switch coreVolumeSourceCount(v.VolumeSource) {
		case 0:
			allErrs = append(allErrs, field.Required(p, "must specify a volume type (such as emptyDir, configMap, secret, persistentVolumeClaim, hostPath)"))
			continue
		case 1:
		default:
			allErrs = append(allErrs, field.Forbidden(p, "may not specify more than 1 volume type"))
			continue
		}
		allErrs = append(allErrs, coreValidateVolumeSource(&v.VolumeSource, p)...)
	}
	return byName, allErrs
}

var coreHostPathTypes = []corev1.HostPathType{
	corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
	corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev,
}

func coreValidateVolumeSource(src *corev1.VolumeSource, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case src.HostPath != nil:
		hp := p.Child("hostPath")
		if src.HostPath.Path == "" {
			allErrs = append(allErrs, field.Required(hp.Child("path"), "an absolute path on the node"))
		} else if coreHasDotDot(src.HostPath.Path) {
			allErrs = append(allErrs, field.Invalid(hp.Child("path"), src.HostPath.Path, "must not contain '..'"))
		}
		if src.HostPath.Type != nil {
			allErrs = append(allErrs, coreNotSupported(*src.HostPath.Type, coreHostPathTypes, true, hp.Child("type"))...)
		}
	case src.EmptyDir != nil:
		ep := p.Child("emptyDir")
		allErrs = append(allErrs, coreNotSupported(src.EmptyDir.Medium,
			[]corev1.StorageMedium{corev1.StorageMediumDefault, corev1.StorageMediumMemory, corev1.StorageMediumHugePages}, true, ep.Child("medium"))...)
		if src.EmptyDir.SizeLimit != nil {
			allErrs = append(allErrs, coreNonnegQuantity(*src.EmptyDir.SizeLimit, ep.Child("sizeLimit"))...)
		}
	case src.ConfigMap != nil:
		cp := p.Child("configMap")
		if src.ConfigMap.Name == "" {
			allErrs = append(allErrs, field.Required(cp.Child("name"), "the name of the ConfigMap to mount"))
		}
		allErrs = append(allErrs, coreValidateKeyToPaths(src.ConfigMap.Items, cp.Child("items"))...)
		allErrs = append(allErrs, coreValidateMode(src.ConfigMap.DefaultMode, cp.Child("defaultMode"))...)
	case src.Secret != nil:
		sp := p.Child("secret")
		if src.Secret.SecretName == "" {
			allErrs = append(allErrs, field.Required(sp.Child("secretName"), "the name of the Secret to mount"))
		}
		allErrs = append(allErrs, coreValidateKeyToPaths(src.Secret.Items, sp.Child("items"))...)
		allErrs = append(allErrs, coreValidateMode(src.Secret.DefaultMode, sp.Child("defaultMode"))...)
	case src.PersistentVolumeClaim != nil:
		if src.PersistentVolumeClaim.ClaimName == "" {
			allErrs = append(allErrs, field.Required(p.Child("persistentVolumeClaim", "claimName"), "the name of a PersistentVolumeClaim in the pod's namespace"))
		}
	case src.NFS != nil:
		np := p.Child("nfs")
		if src.NFS.Server == "" {
			allErrs = append(allErrs, field.Required(np.Child("server"), "the NFS server host name or IP"))
		}
		if src.NFS.Path == "" {
			allErrs = append(allErrs, field.Required(np.Child("path"), "the exported path"))
		} else if !path.IsAbs(src.NFS.Path) {
			allErrs = append(allErrs, field.Invalid(np.Child("path"), src.NFS.Path, "must be an absolute path"))
		}
	case src.DownwardAPI != nil:
		dp := p.Child("downwardAPI")
		for i, item := range src.DownwardAPI.Items {
			allErrs = append(allErrs, coreValidateDownwardAPIFile(item, dp.Child("items").Index(i))...)
		}
		allErrs = append(allErrs, coreValidateMode(src.DownwardAPI.DefaultMode, dp.Child("defaultMode"))...)
	case src.Projected != nil:
		pp := p.Child("projected")
		for i := range src.Projected.Sources {
			s := &src.Projected.Sources[i]
			sp := pp.Child("sources").Index(i)
			switch coreVolumeSourceCount(*s) {
			case 0:
				allErrs = append(allErrs, field.Required(sp, "must specify one source (configMap, secret, downwardAPI, serviceAccountToken, clusterTrustBundle, podCertificate)"))
			case 1:
			default:
				allErrs = append(allErrs, field.Forbidden(sp, "may not specify more than 1 source per entry"))
			}
			if s.ConfigMap != nil {
				allErrs = append(allErrs, coreValidateKeyToPaths(s.ConfigMap.Items, sp.Child("configMap", "items"))...)
			}
			if s.Secret != nil {
				allErrs = append(allErrs, coreValidateKeyToPaths(s.Secret.Items, sp.Child("secret", "items"))...)
			}
			if s.ServiceAccountToken != nil {
				tp := sp.Child("serviceAccountToken")
				if s.ServiceAccountToken.Path == "" {
					allErrs = append(allErrs, field.Required(tp.Child("path"), "the file name of the token"))
				} else {
					allErrs = append(allErrs, coreValidateRelativePath(s.ServiceAccountToken.Path, tp.Child("path"))...)
				}
				if e := s.ServiceAccountToken.ExpirationSeconds; e != nil && (*e < 600 || *e > 1<<32) {
					allErrs = append(allErrs, field.Invalid(tp.Child("expirationSeconds"), *e, "must be at least 600 seconds (10 minutes) and at most 2^32 seconds"))
				}
			}
			if s.DownwardAPI != nil {
				for j, item := range s.DownwardAPI.Items {
					allErrs = append(allErrs, coreValidateDownwardAPIFile(item, sp.Child("downwardAPI", "items").Index(j))...)
				}
			}
		}
		allErrs = append(allErrs, coreValidateMode(src.Projected.DefaultMode, pp.Child("defaultMode"))...)
	case src.CSI != nil:
		if src.CSI.Driver == "" {
			allErrs = append(allErrs, field.Required(p.Child("csi", "driver"), "the name of the CSI driver"))
		}
	case src.Ephemeral != nil:
		if src.Ephemeral.VolumeClaimTemplate == nil {
			allErrs = append(allErrs, field.Required(p.Child("ephemeral", "volumeClaimTemplate"), "a PersistentVolumeClaim template"))
		} else {
			allErrs = append(allErrs, coreValidatePVCSpec(&src.Ephemeral.VolumeClaimTemplate.Spec, p.Child("ephemeral", "volumeClaimTemplate", "spec"))...)
		}
	case src.Image != nil:
		if strings.TrimSpace(src.Image.Reference) == "" {
			allErrs = append(allErrs, field.Required(p.Child("image", "reference"), "an OCI image reference"))
		}
	}
	return allErrs
}

func coreHasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

func coreValidateRelativePath(p string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if path.IsAbs(p) {
		allErrs = append(allErrs, field.Invalid(fldPath, p, "must be a relative path"))
	}
	if coreHasDotDot(p) {
		allErrs = append(allErrs, field.Invalid(fldPath, p, "must not contain '..'"))
	}
	return allErrs
}

func coreValidateMode(mode *int32, fldPath *field.Path) field.ErrorList {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		return field.ErrorList{field.Invalid(fldPath, *mode, "must be a number between 0 and 0777 (octal), both inclusive")}
	}
	return nil
}

func coreValidateKeyToPaths(items []corev1.KeyToPath, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, item := range items {
		p := fldPath.Index(i)
		if item.Key == "" {
			allErrs = append(allErrs, field.Required(p.Child("key"), "the key to project"))
		}
		if item.Path == "" {
			allErrs = append(allErrs, field.Required(p.Child("path"), "the relative file path to project the key to"))
		} else {
			allErrs = append(allErrs, coreValidateRelativePath(item.Path, p.Child("path"))...)
		}
		allErrs = append(allErrs, coreValidateMode(item.Mode, p.Child("mode"))...)
	}
	return allErrs
}

var coreDownwardVolumeFieldPaths = []string{"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"}

func coreValidateDownwardAPIFile(item corev1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if item.Path == "" {
		allErrs = append(allErrs, field.Required(p.Child("path"), "the relative file path"))
	} else {
		allErrs = append(allErrs, coreValidateRelativePath(item.Path, p.Child("path"))...)
	}
	switch {
	case item.FieldRef != nil && item.ResourceFieldRef != nil:
		allErrs = append(allErrs, field.Invalid(p, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
	case item.FieldRef != nil:
		allErrs = append(allErrs, coreValidateFieldRef(item.FieldRef, coreDownwardVolumeFieldPaths, p.Child("fieldRef"))...)
	case item.ResourceFieldRef != nil:
		allErrs = append(allErrs, coreValidateResourceFieldRef(item.ResourceFieldRef, p.Child("resourceFieldRef"))...)
	default:
		allErrs = append(allErrs, field.Required(p, "one of fieldRef and resourceFieldRef is required"))
	}
	allErrs = append(allErrs, coreValidateMode(item.Mode, p.Child("mode"))...)
	return allErrs
}

func coreValidateFieldRef(ref *corev1.ObjectFieldSelector, allowed []string, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		allErrs = append(allErrs, field.NotSupported(p.Child("apiVersion"), ref.APIVersion, []string{"v1"}))
	}
	fp := ref.FieldPath
	if fp == "" {
		return append(allErrs, field.Required(p.Child("fieldPath"), "such as metadata.name"))
	}
	// metadata.labels['key'] and metadata.annotations['key'] select one entry.
	for _, prefix := range []string{"metadata.labels[", "metadata.annotations["} {
		if strings.HasPrefix(fp, prefix) && strings.HasSuffix(fp, "']") && len(fp) > len(prefix)+3 && fp[len(prefix)] == '\'' {
			key := fp[len(prefix)+1 : len(fp)-2]
			if prefix == "metadata.labels[" {
				return append(allErrs, coreQualifiedName(key, p.Child("fieldPath"))...)
			}
			return append(allErrs, coreAnnotationKey(key, p.Child("fieldPath"))...)
		}
	}
	for _, a := range allowed {
		if fp == a {
			return allErrs
		}
	}
	return append(allErrs, field.NotSupported(p.Child("fieldPath"), fp, allowed))
}

func coreAnnotationKey(key string, p *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateAnnotations(map[string]string{key: ""}, p)
}

var coreResourceFieldRefs = []string{
	"limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage",
}

func coreValidateResourceFieldRef(ref *corev1.ResourceFieldSelector, p *field.Path) field.ErrorList {
	if ref.Resource == "" {
		return field.ErrorList{field.Required(p.Child("resource"), "such as limits.memory")}
	}
	for _, r := range coreResourceFieldRefs {
		if ref.Resource == r {
			return nil
		}
	}
	if strings.HasPrefix(ref.Resource, "limits.hugepages-") || strings.HasPrefix(ref.Resource, "requests.hugepages-") {
		return nil
	}
	return field.ErrorList{field.NotSupported(p.Child("resource"), ref.Resource, coreResourceFieldRefs)}
}

func coreValidateInitContainers(cs []corev1.Container, volumes map[string]*corev1.Volume, names sets.Set[string], fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i := range cs {
		c := &cs[i]
		p := fldPath.Index(i)
		allErrs = append(allErrs, coreValidateContainer(c, volumes, names, p)...)
		allErrs = append(allErrs, coreValidateContainerRestartPolicy(c, true, p)...)
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if sidecar {
			allErrs = append(allErrs, coreValidateProbes(c, false, p)...)
			continue
		}
		// A plain init container runs to completion: probes and hooks have no meaning.
		if c.Lifecycle != nil {
			allErrs = append(allErrs, field.Forbidden(p.Child("lifecycle"), "may not be set for init containers without restartPolicy=Always"))
		}
		if c.LivenessProbe != nil {
			allErrs = append(allErrs, field.Forbidden(p.Child("livenessProbe"), "may not be set for init containers without restartPolicy=Always"))
		}
		if c.ReadinessProbe != nil {
			allErrs = append(allErrs, field.Forbidden(p.Child("readinessProbe"), "may not be set for init containers without restartPolicy=Always"))
		}
		if c.StartupProbe != nil {
			allErrs = append(allErrs, field.Forbidden(p.Child("startupProbe"), "may not be set for init containers without restartPolicy=Always"))
		}
	}
	return allErrs
}

var coreContainerRestartPolicies = []corev1.ContainerRestartPolicy{
	corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyOnFailure, corev1.ContainerRestartPolicyNever,
}

// coreValidateContainerRestartPolicy: init containers may only say Always (a sidecar); regular
// containers may override the pod's policy, which restartPolicyRules require.
func coreValidateContainerRestartPolicy(c *corev1.Container, initContainer bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	rp := p.Child("restartPolicy")
	if c.RestartPolicy != nil {
		if initContainer {
			if *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				allErrs = append(allErrs, field.NotSupported(rp, *c.RestartPolicy, []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways}))
			}
		} else {
			allErrs = append(allErrs, coreNotSupported(*c.RestartPolicy, coreContainerRestartPolicies, false, rp)...)
		}
	}
	if len(c.RestartPolicyRules) == 0 {
		return allErrs
	}
	rulesPath := p.Child("restartPolicyRules")
	if c.RestartPolicy == nil {
		allErrs = append(allErrs, field.Required(rp, "must be set when restartPolicyRules are used"))
	}
	if initContainer && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
		allErrs = append(allErrs, field.Forbidden(rulesPath, "may not be set for sidecar containers (restartPolicy=Always)"))
	}
	if len(c.RestartPolicyRules) > 20 {
		allErrs = append(allErrs, field.TooMany(rulesPath, len(c.RestartPolicyRules), 20))
	}
	for i, r := range c.RestartPolicyRules {
		ip := rulesPath.Index(i)
		allErrs = append(allErrs, coreNotSupported(r.Action, []corev1.ContainerRestartRuleAction{
			corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleActionRestartAllContainers}, false, ip.Child("action"))...)
		if r.ExitCodes == nil {
			allErrs = append(allErrs, field.Required(ip.Child("exitCodes"), "must specify the exit codes the rule matches"))
			continue
		}
		allErrs = append(allErrs, coreNotSupported(r.ExitCodes.Operator, []corev1.ContainerRestartRuleOnExitCodesOperator{
			corev1.ContainerRestartRuleOnExitCodesOpIn, corev1.ContainerRestartRuleOnExitCodesOpNotIn}, false, ip.Child("exitCodes", "operator"))...)
		vp := ip.Child("exitCodes", "values")
		if len(r.ExitCodes.Values) > 255 {
			allErrs = append(allErrs, field.TooMany(vp, len(r.ExitCodes.Values), 255))
		}
		seen := sets.New[int32]()
		for j, v := range r.ExitCodes.Values {
			if seen.Has(v) {
				allErrs = append(allErrs, field.Duplicate(vp.Index(j), v))
			}
			seen.Insert(v)
		}
	}
	return allErrs
}

var (
	corePullPolicies    = []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	coreTermMsgPolicies = []corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}
	coreEnvFieldPaths   = []string{
		"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
		"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
	}
)

// coreValidateContainer checks what every kind of container shares.
func coreValidateContainer(c *corev1.Container, volumes map[string]*corev1.Volume, names sets.Set[string], p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	np := p.Child("name")
	if c.Name == "" {
		allErrs = append(allErrs, field.Required(np, "container name is required"))
	} else {
		allErrs = append(allErrs, coreDNSLabel(c.Name, np)...)
		if names.Has(c.Name) {
			allErrs = append(allErrs, field.Duplicate(np, c.Name))
		}
		names.Insert(c.Name)
	}
	if c.Image == "" {
		allErrs = append(allErrs, field.Required(p.Child("image"), "the container image, such as nginx:1.27"))
	} else if strings.TrimSpace(c.Image) != c.Image {
		allErrs = append(allErrs, field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	allErrs = append(allErrs, coreNotSupported(c.ImagePullPolicy, corePullPolicies, true, p.Child("imagePullPolicy"))...)
	allErrs = append(allErrs, coreNotSupported(c.TerminationMessagePolicy, coreTermMsgPolicies, true, p.Child("terminationMessagePolicy"))...)
	if c.TerminationMessagePath != "" && !path.IsAbs(c.TerminationMessagePath) {
		allErrs = append(allErrs, field.Invalid(p.Child("terminationMessagePath"), c.TerminationMessagePath, "must be an absolute path"))
	}
	allErrs = append(allErrs, coreValidateContainerPorts(c.Ports, p.Child("ports"))...)
	allErrs = append(allErrs, coreValidateEnv(c.Env, p.Child("env"))...)
	allErrs = append(allErrs, coreValidateEnvFrom(c.EnvFrom, p.Child("envFrom"))...)
	allErrs = append(allErrs, coreValidateVolumeMounts(c.VolumeMounts, volumes, p.Child("volumeMounts"))...)
	for i, d := range c.VolumeDevices {
		dp := p.Child("volumeDevices").Index(i)
		if _, ok := volumes[d.Name]; !ok {
			allErrs = append(allErrs, field.NotFound(dp.Child("name"), d.Name))
		}
		if !path.IsAbs(d.DevicePath) {
			allErrs = append(allErrs, field.Invalid(dp.Child("devicePath"), d.DevicePath, "must be an absolute path"))
		}
	}
	allErrs = append(allErrs, coreValidateResources(&c.Resources, p.Child("resources"))...)
	if c.Lifecycle != nil {
		if c.Lifecycle.PostStart != nil {
			allErrs = append(allErrs, coreValidateHandler(c.Lifecycle.PostStart, p.Child("lifecycle", "postStart"))...)
		}
		if c.Lifecycle.PreStop != nil {
			allErrs = append(allErrs, coreValidateHandler(c.Lifecycle.PreStop, p.Child("lifecycle", "preStop"))...)
		}
	}
	if c.SecurityContext != nil {
		allErrs = append(allErrs, coreValidateContainerSecurityContext(c.SecurityContext, p.Child("securityContext"))...)
	}
	return allErrs
}

func coreValidateContainerPorts(ports []corev1.ContainerPort, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, port := range ports {
		p := fldPath.Index(i)
		if port.Name != "" {
			np := p.Child("name")
			if msgs := utilvalidation.IsValidPortName(port.Name); len(msgs) > 0 {
				allErrs = append(allErrs, coreInvalidEach(np, port.Name, msgs)...)
			} else if names.Has(port.Name) {
				allErrs = append(allErrs, field.Duplicate(np, port.Name))
			}
			names.Insert(port.Name)
		}
		allErrs = append(allErrs, corePortNumber(port.ContainerPort, p.Child("containerPort"))...)
		if port.HostPort != 0 {
			allErrs = append(allErrs, corePortNumber(port.HostPort, p.Child("hostPort"))...)
		}
		if port.HostIP != "" {
			allErrs = append(allErrs, coreIP(port.HostIP, p.Child("hostIP"))...)
		}
		allErrs = append(allErrs, coreProtocol(port.Protocol, p.Child("protocol"))...)
	}
	return allErrs
}

// coreValidateHostPorts rejects two containers claiming the same host port.
func coreValidateHostPorts(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	check := func(cs []corev1.Container, cp *field.Path) {
		for i := range cs {
			for j, port := range cs[i].Ports {
				if port.HostPort == 0 {
					continue
				}
				proto := port.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				key := fmt.Sprintf("%s/%s/%d", proto, port.HostIP, port.HostPort)
				if seen.Has(key) {
					allErrs = append(allErrs, field.Duplicate(cp.Index(i).Child("ports").Index(j).Child("hostPort"), fmt.Sprintf("%d/%s", port.HostPort, proto)))
				}
				seen.Insert(key)
			}
		}
	}
	check(spec.InitContainers, fldPath.Child("initContainers"))
	check(spec.Containers, fldPath.Child("containers"))
	return allErrs
}

// coreValidateHostNetworkPorts: with the host's network, a container port is the host port.
func coreValidateHostNetworkPorts(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, set := range []struct {
		cs []corev1.Container
		p  *field.Path
	}{{spec.InitContainers, fldPath.Child("initContainers")}, {spec.Containers, fldPath.Child("containers")}} {
		for i := range set.cs {
			for j, port := range set.cs[i].Ports {
				if port.HostPort != 0 && port.HostPort != port.ContainerPort {
					allErrs = append(allErrs, field.Invalid(set.p.Index(i).Child("ports").Index(j).Child("hostPort"), port.HostPort, "must match `containerPort` when `hostNetwork` is true"))
				}
			}
		}
	}
	return allErrs
}

func coreValidateEnv(env []corev1.EnvVar, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, ev := range env {
		p := fldPath.Index(i)
		if ev.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), "environment variable name is required"))
		} else {
			allErrs = append(allErrs, coreInvalidEach(p.Child("name"), ev.Name, utilvalidation.IsRelaxedEnvVarName(ev.Name))...)
		}
		if ev.ValueFrom == nil {
			continue
		}
		vf := p.Child("valueFrom")
		if ev.Value != "" {
			allErrs = append(allErrs, field.Invalid(vf, "", "may not be specified when `value` is not empty"))
		}
		n := 0
		if ev.ValueFrom.FieldRef != nil {
			n++
			allErrs = append(allErrs, coreValidateFieldRef(ev.ValueFrom.FieldRef, coreEnvFieldPaths, vf.Child("fieldRef"))...)
		}
		if ev.ValueFrom.ResourceFieldRef != nil {
			n++
			allErrs = append(allErrs, coreValidateResourceFieldRef(ev.ValueFrom.ResourceFieldRef, vf.Child("resourceFieldRef"))...)
		}
		if r := ev.ValueFrom.ConfigMapKeyRef; r != nil {
			n++
			allErrs = append(allErrs, coreValidateKeyRef(r.Name, r.Key, vf.Child("configMapKeyRef"))...)
		}
		if r := ev.ValueFrom.SecretKeyRef; r != nil {
			n++
			allErrs = append(allErrs, coreValidateKeyRef(r.Name, r.Key, vf.Child("secretKeyRef"))...)
		}
		if r := ev.ValueFrom.FileKeyRef; r != nil {
			n++
			fp := vf.Child("fileKeyRef")
			if r.VolumeName == "" {
				allErrs = append(allErrs, field.Required(fp.Child("volumeName"), "the name of an emptyDir volume"))
			}
			if r.Path == "" {
				allErrs = append(allErrs, field.Required(fp.Child("path"), "the relative path of the env file"))
			} else {
				allErrs = append(allErrs, coreValidateRelativePath(r.Path, fp.Child("path"))...)
			}
			if r.Key == "" {
				allErrs = append(allErrs, field.Required(fp.Child("key"), "the variable to read from the file"))
			}
		}
		switch {
		case n == 0:
			allErrs = append(allErrs, field.Invalid(vf, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`"))
		case n > 1:
			allErrs = append(allErrs, field.Invalid(vf, "", "may not have more than one field specified at a time"))
		}
	}
	return allErrs
}

func coreValidateKeyRef(name, key string, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if name == "" {
		allErrs = append(allErrs, field.Required(p.Child("name"), "the name of the object holding the key"))
	} else {
		allErrs = append(allErrs, coreDNSSubdomain(name, p.Child("name"))...)
	}
	if key == "" {
		allErrs = append(allErrs, field.Required(p.Child("key"), "the key to read"))
	} else {
		allErrs = append(allErrs, coreInvalidEach(p.Child("key"), key, utilvalidation.IsConfigMapKey(key))...)
	}
	return allErrs
}

func coreValidateEnvFrom(envFrom []corev1.EnvFromSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, ef := range envFrom {
		p := fldPath.Index(i)
		if ef.Prefix != "" {
			allErrs = append(allErrs, coreInvalidEach(p.Child("prefix"), ef.Prefix, utilvalidation.IsRelaxedEnvVarName(ef.Prefix))...)
		}
		switch {
		case ef.ConfigMapRef != nil && ef.SecretRef != nil:
			allErrs = append(allErrs, field.Invalid(p, "", "may not have more than one field specified at a time"))
		case ef.ConfigMapRef != nil:
			if ef.ConfigMapRef.Name == "" {
				allErrs = append(allErrs, field.Required(p.Child("configMapRef", "name"), "the name of the ConfigMap"))
			}
		case ef.SecretRef != nil:
			if ef.SecretRef.Name == "" {
				allErrs = append(allErrs, field.Required(p.Child("secretRef", "name"), "the name of the Secret"))
			}
		default:
			allErrs = append(allErrs, field.Invalid(p, "", "must specify one of: `configMapRef` or `secretRef`"))
		}
	}
	return allErrs
}

var coreMountPropagation = []corev1.MountPropagationMode{corev1.MountPropagationNone, corev1.MountPropagationHostToContainer, corev1.MountPropagationBidirectional}

func coreValidateVolumeMounts(mounts []corev1.VolumeMount, volumes map[string]*corev1.Volume, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	paths := sets.New[string]()
	for i, m := range mounts {
		p := fldPath.Index(i)
		if m.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), "the name of a volume in spec.volumes"))
		} else if _, ok := volumes[m.Name]; !ok {
			allErrs = append(allErrs, field.NotFound(p.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			allErrs = append(allErrs, field.Required(p.Child("mountPath"), "the path inside the container"))
		} else if paths.Has(m.MountPath) {
			allErrs = append(allErrs, field.Invalid(p.Child("mountPath"), m.MountPath, "must be unique"))
		}
		paths.Insert(m.MountPath)
		if m.SubPath != "" {
			allErrs = append(allErrs, coreValidateRelativePath(m.SubPath, p.Child("subPath"))...)
		}
		if m.SubPath != "" && m.SubPathExpr != "" {
			allErrs = append(allErrs, field.Invalid(p.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
		}
		if m.MountPropagation != nil {
			allErrs = append(allErrs, coreNotSupported(*m.MountPropagation, coreMountPropagation, false, p.Child("mountPropagation"))...)
		}
		if m.RecursiveReadOnly != nil {
			rro := *m.RecursiveReadOnly
			allErrs = append(allErrs, coreNotSupported(rro, []corev1.RecursiveReadOnlyMode{
				corev1.RecursiveReadOnlyDisabled, corev1.RecursiveReadOnlyIfPossible, corev1.RecursiveReadOnlyEnabled}, false, p.Child("recursiveReadOnly"))...)
			if rro != corev1.RecursiveReadOnlyDisabled && !m.ReadOnly {
				allErrs = append(allErrs, field.Forbidden(p.Child("recursiveReadOnly"), "may only be specified when readOnly is true"))
			}
		}
	}
	return allErrs
}

func coreValidateResources(r *corev1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	limPath, reqPath := fldPath.Child("limits"), fldPath.Child("requests")
	allErrs := coreResourceList(r.Limits, coreIsContainerResource, "container", limPath)
	allErrs = append(allErrs, coreResourceList(r.Requests, coreIsContainerResource, "container", reqPath)...)
	for _, name := range coreSortedKeys(r.Requests) {
		req := r.Requests[name]
		lim, ok := r.Limits[name]
		if ok && lim.Sign() >= 0 && req.Cmp(lim) > 0 {
			allErrs = append(allErrs, field.Invalid(reqPath.Key(string(name)), req.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
		// Extended resources cannot be overcommitted.
		if strings.Contains(string(name), "/") && !strings.HasPrefix(string(name), "kubernetes.io/") && (!ok || req.Cmp(lim) != 0) {
			allErrs = append(allErrs, field.Invalid(reqPath.Key(string(name)), req.String(), fmt.Sprintf("must be equal to %s limit (extended resources cannot be overcommitted)", name)))
		}
	}
	return allErrs
}

// coreValidateProbes checks the three probes of a regular container or a sidecar.
func coreValidateProbes(c *corev1.Container, _ bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if c.LivenessProbe != nil {
		allErrs = append(allErrs, coreValidateProbe(c.LivenessProbe, true, p.Child("livenessProbe"))...)
	}
	if c.StartupProbe != nil {
		allErrs = append(allErrs, coreValidateProbe(c.StartupProbe, true, p.Child("startupProbe"))...)
	}
	if c.ReadinessProbe != nil {
		rp := p.Child("readinessProbe")
		allErrs = append(allErrs, coreValidateProbe(c.ReadinessProbe, false, rp)...)
		if c.ReadinessProbe.TerminationGracePeriodSeconds != nil {
			allErrs = append(allErrs, field.Invalid(rp.Child("terminationGracePeriodSeconds"), *c.ReadinessProbe.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
		}
	}
	return allErrs
}

func coreValidateProbe(pr *corev1.Probe, successMustBeOne bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	n := 0
	if pr.Exec != nil {
		n++
		if len(pr.Exec.Command) == 0 {
			allErrs = append(allErrs, field.Required(p.Child("exec", "command"), "the command to run in the container"))
		}
	}
	if pr.HTTPGet != nil {
		n++
		allErrs = append(allErrs, coreValidateHTTPGet(pr.HTTPGet, p.Child("httpGet"))...)
	}
	if pr.TCPSocket != nil {
		n++
		allErrs = append(allErrs, coreValidateNamedPort(pr.TCPSocket.Port, p.Child("tcpSocket", "port"))...)
	}
	if pr.GRPC != nil {
		n++
		allErrs = append(allErrs, corePortNumber(pr.GRPC.Port, p.Child("grpc", "port"))...)
	}
	switch {
	case n == 0:
		allErrs = append(allErrs, field.Required(p, "must specify a handler type (exec, httpGet, tcpSocket or grpc)"))
	case n > 1:
		allErrs = append(allErrs, field.Forbidden(p, "may not specify more than 1 handler type"))
	}
	// Zero means "use the default" (the defaulting package fills it); negative is never valid.
	allErrs = append(allErrs, coreNonneg(int64(pr.InitialDelaySeconds), p.Child("initialDelaySeconds"))...)
	for _, f := range []struct {
		v    int32
		name string
	}{{pr.TimeoutSeconds, "timeoutSeconds"}, {pr.PeriodSeconds, "periodSeconds"}, {pr.SuccessThreshold, "successThreshold"}, {pr.FailureThreshold, "failureThreshold"}} {
		if f.v < 0 {
			allErrs = append(allErrs, field.Invalid(p.Child(f.name), f.v, "must be greater than or equal to 1"))
		}
	}
	if successMustBeOne && pr.SuccessThreshold > 1 {
		allErrs = append(allErrs, field.Invalid(p.Child("successThreshold"), pr.SuccessThreshold, "must be 1"))
	}
	if pr.TerminationGracePeriodSeconds != nil && *pr.TerminationGracePeriodSeconds <= 0 {
		allErrs = append(allErrs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *pr.TerminationGracePeriodSeconds, "must be greater than 0"))
	}
	return allErrs
}

// coreValidateNamedPort checks a port given as a number (1-65535) or an IANA port name.
func coreValidateNamedPort(port intstr.IntOrString, p *field.Path) field.ErrorList {
	if port.Type == intstr.String {
		if port.StrVal == "" {
			return field.ErrorList{field.Required(p, "a port number or the name of a container port")}
		}
		return coreInvalidEach(p, port.StrVal, utilvalidation.IsValidPortName(port.StrVal))
	}
	return corePortNumber(port.IntVal, p)
}

func coreValidateHTTPGet(h *corev1.HTTPGetAction, p *field.Path) field.ErrorList {
	allErrs := coreValidateNamedPort(h.Port, p.Child("port"))
	allErrs = append(allErrs, coreNotSupported(h.Scheme, []corev1.URIScheme{corev1.URISchemeHTTP, corev1.URISchemeHTTPS}, true, p.Child("scheme"))...)
	if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
		allErrs = append(allErrs, field.Invalid(p.Child("path"), h.Path, "must start with '/'"))
	}
	for i, hd := range h.HTTPHeaders {
		allErrs = append(allErrs, coreInvalidEach(p.Child("httpHeaders").Index(i).Child("name"), hd.Name, utilvalidation.IsHTTPHeaderName(hd.Name))...)
	}
	return allErrs
}

func coreValidateHandler(h *corev1.LifecycleHandler, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	n := 0
	if h.Exec != nil {
		n++
		if len(h.Exec.Command) == 0 {
			allErrs = append(allErrs, field.Required(p.Child("exec", "command"), "the command to run in the container"))
		}
	}
	if h.HTTPGet != nil {
		n++
		allErrs = append(allErrs, coreValidateHTTPGet(h.HTTPGet, p.Child("httpGet"))...)
	}
	if h.TCPSocket != nil {
		n++
		allErrs = append(allErrs, coreValidateNamedPort(h.TCPSocket.Port, p.Child("tcpSocket", "port"))...)
	}
	if h.Sleep != nil {
		n++
		if h.Sleep.Seconds < 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("sleep", "seconds"), h.Sleep.Seconds, "must be greater than or equal to 0"))
		}
	}
	switch {
	case n == 0:
		allErrs = append(allErrs, field.Required(p, "must specify a handler type (exec, httpGet, sleep)"))
	case n > 1:
		allErrs = append(allErrs, field.Forbidden(p, "may not specify more than 1 handler type"))
	}
	return allErrs
}

var coreDNSPolicies = []corev1.DNSPolicy{corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone}

func coreValidateDNS(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	allErrs := coreNotSupported(spec.DNSPolicy, coreDNSPolicies, true, fldPath.Child("dnsPolicy"))
	cp := fldPath.Child("dnsConfig")
	if spec.DNSPolicy == corev1.DNSNone && spec.DNSConfig == nil {
		return append(allErrs, field.Required(cp, "must provide `dnsConfig` when `dnsPolicy` is None"))
	}
	cfg := spec.DNSConfig
	if cfg == nil {
		return allErrs
	}
	nsp := cp.Child("nameservers")
	if spec.DNSPolicy == corev1.DNSNone && len(cfg.Nameservers) == 0 {
		allErrs = append(allErrs, field.Required(nsp, "must provide at least one DNS nameserver when `dnsPolicy` is None"))
	}
	if len(cfg.Nameservers) > 3 {
		allErrs = append(allErrs, field.Invalid(nsp, cfg.Nameservers, "must not have more than 3 nameservers"))
	}
	for i, ns := range cfg.Nameservers {
		allErrs = append(allErrs, coreIP(ns, nsp.Index(i))...)
	}
	sp := cp.Child("searches")
	if len(cfg.Searches) > 32 {
		allErrs = append(allErrs, field.Invalid(sp, cfg.Searches, "must not have more than 32 search paths"))
	}
	total := 0
	for i, s := range cfg.Searches {
		total += len(s)
		if s == "." {
			continue
		}
		allErrs = append(allErrs, coreDNSSubdomain(strings.TrimSuffix(s, "."), sp.Index(i))...)
	}
	if total+len(cfg.Searches)-1 > 2048 {
		allErrs = append(allErrs, field.Invalid(sp, cfg.Searches, "must not have more than 2048 characters (including spaces) in the search list"))
	}
	for i, o := range cfg.Options {
		if o.Name == "" {
			allErrs = append(allErrs, field.Required(cp.Child("options").Index(i).Child("name"), "such as ndots"))
		}
	}
	return allErrs
}

var (
	coreTolerationOps     = []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}
	coreTaintEffects      = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	coreTolerationEffects = append([]corev1.TaintEffect{""}, coreTaintEffects...)
)

func coreValidateTolerations(ts []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range ts {
		p := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, coreQualifiedName(t.Key, p.Child("key"))...)
		} else if t.Operator != corev1.TolerationOpExists {
			allErrs = append(allErrs, field.Invalid(p.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(p.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			allErrs = append(allErrs, coreLabelValue(t.Value, p.Child("value"))...)
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(p.Child("value"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(p.Child("operator"), t.Operator, coreTolerationOps))
		}
		if t.Effect != "" {
			allErrs = append(allErrs, coreNotSupported(t.Effect, coreTolerationEffects, true, p.Child("effect"))...)
		}
	}
	return allErrs
}

func coreValidateAffinity(a *corev1.Affinity, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if na := a.NodeAffinity; na != nil {
		np := fldPath.Child("nodeAffinity")
		if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			allErrs = append(allErrs, coreNodeSelector(na.RequiredDuringSchedulingIgnoredDuringExecution, np.Child("requiredDuringSchedulingIgnoredDuringExecution"))...)
		}
		for i, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			tp := np.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			allErrs = append(allErrs, coreWeight(t.Weight, tp.Child("weight"))...)
			allErrs = append(allErrs, coreNodeSelectorTerm(&t.Preference, tp.Child("preference"))...)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		allErrs = append(allErrs, corePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, fldPath.Child("podAffinity"))...)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		allErrs = append(allErrs, corePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, fldPath.Child("podAntiAffinity"))...)
	}
	return allErrs
}

func coreWeight(w int32, p *field.Path) field.ErrorList {
	if w < 1 || w > 100 {
		return field.ErrorList{field.Invalid(p, w, "must be in the range 1-100")}
	}
	return nil
}

func corePodAffinityTerms(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i := range required {
		allErrs = append(allErrs, corePodAffinityTerm(&required[i], fldPath.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i))...)
	}
	for i := range preferred {
		p := fldPath.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		allErrs = append(allErrs, coreWeight(preferred[i].Weight, p.Child("weight"))...)
		allErrs = append(allErrs, corePodAffinityTerm(&preferred[i].PodAffinityTerm, p.Child("podAffinityTerm"))...)
	}
	return allErrs
}

func corePodAffinityTerm(t *corev1.PodAffinityTerm, p *field.Path) field.ErrorList {
	allErrs := coreLabelSelector(t.LabelSelector, p.Child("labelSelector"))
	allErrs = append(allErrs, coreLabelSelector(t.NamespaceSelector, p.Child("namespaceSelector"))...)
	for i, ns := range t.Namespaces {
		allErrs = append(allErrs, coreDNSLabel(ns, p.Child("namespaces").Index(i))...)
	}
	if t.TopologyKey == "" {
		allErrs = append(allErrs, field.Required(p.Child("topologyKey"), "a node label key such as kubernetes.io/hostname"))
	} else {
		allErrs = append(allErrs, coreQualifiedName(t.TopologyKey, p.Child("topologyKey"))...)
	}
	for i, k := range t.MatchLabelKeys {
		allErrs = append(allErrs, coreQualifiedName(k, p.Child("matchLabelKeys").Index(i))...)
	}
	for i, k := range t.MismatchLabelKeys {
		allErrs = append(allErrs, coreQualifiedName(k, p.Child("mismatchLabelKeys").Index(i))...)
	}
	return allErrs
}

func coreValidateTopologySpread(cs []corev1.TopologySpreadConstraint, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for i, c := range cs {
		p := fldPath.Index(i)
		if c.MaxSkew <= 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			allErrs = append(allErrs, field.Required(p.Child("topologyKey"), "a node label key such as topology.kubernetes.io/zone"))
		} else {
			allErrs = append(allErrs, coreQualifiedName(c.TopologyKey, p.Child("topologyKey"))...)
		}
		allErrs = append(allErrs, coreNotSupported(c.WhenUnsatisfiable,
			[]corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway}, false, p.Child("whenUnsatisfiable"))...)
		if c.MinDomains != nil {
			if *c.MinDomains <= 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "must be greater than zero"))
			} else if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				allErrs = append(allErrs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "can only use minDomains if whenUnsatisfiable=DoNotSchedule"))
			}
		}
		allErrs = append(allErrs, coreLabelSelector(c.LabelSelector, p.Child("labelSelector"))...)
		key := c.TopologyKey + "/" + string(c.WhenUnsatisfiable)
		if seen.Has(key) {
			allErrs = append(allErrs, field.Duplicate(p, fmt.Sprintf("{%v, %v}", c.TopologyKey, c.WhenUnsatisfiable)))
		}
		seen.Insert(key)
	}
	return allErrs
}

func coreValidateSchedulingGates(gates []corev1.PodSchedulingGate, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for i, g := range gates {
		p := fldPath.Index(i).Child("name")
		allErrs = append(allErrs, coreQualifiedName(g.Name, p)...)
		if seen.Has(g.Name) {
			allErrs = append(allErrs, field.Duplicate(p, g.Name))
		}
		seen.Insert(g.Name)
	}
	return allErrs
}

var coreSeccompTypes = []corev1.SeccompProfileType{corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined, corev1.SeccompProfileTypeLocalhost}

func coreValidateSeccomp(s *corev1.SeccompProfile, p *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	allErrs := coreNotSupported(s.Type, coreSeccompTypes, false, p.Child("type"))
	lp := p.Child("localhostProfile")
	if s.Type == corev1.SeccompProfileTypeLocalhost {
		if s.LocalhostProfile == nil || *s.LocalhostProfile == "" {
			allErrs = append(allErrs, field.Required(lp, "must be set when seccomp type is Localhost"))
		} else {
			allErrs = append(allErrs, coreValidateRelativePath(*s.LocalhostProfile, lp)...)
		}
	} else if s.LocalhostProfile != nil {
		allErrs = append(allErrs, field.Invalid(lp, *s.LocalhostProfile, "can only be set when seccomp type is Localhost"))
	}
	return allErrs
}

func coreValidateID(id *int64, p *field.Path) field.ErrorList {
	if id == nil {
		return nil
	}
	return coreInvalidEach(p, *id, utilvalidation.IsValidUserID(*id))
}

func coreValidatePodSecurityContext(sc *corev1.PodSecurityContext, p *field.Path) field.ErrorList {
	allErrs := coreValidateID(sc.RunAsUser, p.Child("runAsUser"))
	allErrs = append(allErrs, coreValidateID(sc.RunAsGroup, p.Child("runAsGroup"))...)
	allErrs = append(allErrs, coreValidateID(sc.FSGroup, p.Child("fsGroup"))...)
	for i, g := range sc.SupplementalGroups {
		allErrs = append(allErrs, coreInvalidEach(p.Child("supplementalGroups").Index(i), g, utilvalidation.IsValidGroupID(g))...)
	}
	if sc.FSGroupChangePolicy != nil {
		allErrs = append(allErrs, coreNotSupported(*sc.FSGroupChangePolicy,
			[]corev1.PodFSGroupChangePolicy{corev1.FSGroupChangeOnRootMismatch, corev1.FSGroupChangeAlways}, false, p.Child("fsGroupChangePolicy"))...)
	}
	if sc.SupplementalGroupsPolicy != nil {
		allErrs = append(allErrs, coreNotSupported(*sc.SupplementalGroupsPolicy,
			[]corev1.SupplementalGroupsPolicy{corev1.SupplementalGroupsPolicyMerge, corev1.SupplementalGroupsPolicyStrict}, false, p.Child("supplementalGroupsPolicy"))...)
	}
	allErrs = append(allErrs, coreValidateSeccomp(sc.SeccompProfile, p.Child("seccompProfile"))...)
	names := sets.New[string]()
	for i, s := range sc.Sysctls {
		sp := p.Child("sysctls").Index(i).Child("name")
		if s.Name == "" {
			allErrs = append(allErrs, field.Required(sp, "such as net.ipv4.ip_local_port_range"))
		} else if names.Has(s.Name) {
			allErrs = append(allErrs, field.Duplicate(sp, s.Name))
		}
		names.Insert(s.Name)
	}
	return allErrs
}

func coreValidateContainerSecurityContext(sc *corev1.SecurityContext, p *field.Path) field.ErrorList {
	allErrs := coreValidateID(sc.RunAsUser, p.Child("runAsUser"))
	allErrs = append(allErrs, coreValidateID(sc.RunAsGroup, p.Child("runAsGroup"))...)
	allErrs = append(allErrs, coreValidateSeccomp(sc.SeccompProfile, p.Child("seccompProfile"))...)
	if sc.ProcMount != nil {
		allErrs = append(allErrs, coreNotSupported(*sc.ProcMount, []corev1.ProcMountType{corev1.DefaultProcMount, corev1.UnmaskedProcMount}, false, p.Child("procMount"))...)
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		if sc.Privileged != nil && *sc.Privileged {
			allErrs = append(allErrs, field.Invalid(p.Child("allowPrivilegeEscalation"), false, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				if c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN" {
					allErrs = append(allErrs, field.Invalid(p.Child("allowPrivilegeEscalation"), false, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"))
				}
			}
		}
	}
	return allErrs
}
