package defaults

import (
	"net/netip"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func setPod(p *corev1.Pod) {
	setPodSpec(&p.Spec, true)
	// Requests default to limits on Pods only, never on templates: a template's pods get it when
	// they are created, and defaulting the template would change its hash.
	for i := range p.Spec.Containers {
		requestsFromLimits(&p.Spec.Containers[i].Resources)
	}
	for i := range p.Spec.InitContainers {
		requestsFromLimits(&p.Spec.InitContainers[i].Resources)
	}
	if p.Spec.EnableServiceLinks == nil {
		p.Spec.EnableServiceLinks = new(corev1.DefaultEnableServiceLinks)
	}
	if p.Spec.HostNetwork {
		hostNetworkPorts(p.Spec.Containers)
		hostNetworkPorts(p.Spec.InitContainers)
	}
	// spec.priority and spec.preemptionPolicy are not defaulted: the Priority admission plugin
	// (admission_priority.go) resolves them from the PriorityClass, or the global default class,
	// and refuses a pod whose own value differs.
}

func setPodTemplate(t *corev1.PodTemplate) {
	setPodTemplateSpec(&t.Template, true)
}

// setPodTemplateSpec defaults a template embedded in a workload. restartPolicy is left alone for
// Job templates (defaultRestart false): a Job requires OnFailure or Never to be given.
func setPodTemplateSpec(t *corev1.PodTemplateSpec, defaultRestart bool) {
	setPodSpec(&t.Spec, defaultRestart)
}

func setPodSpec(s *corev1.PodSpec, defaultRestart bool) {
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if defaultRestart && s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = new(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range s.InitContainers {
		setContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		setContainer(&s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		setContainer((*corev1.Container)(&s.EphemeralContainers[i].EphemeralContainerCommon))
	}
	for i := range s.Volumes {
		setVolume(&s.Volumes[i])
	}
}

func setContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = pullPolicyFor(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		setProbe(p)
	}
	if c.Lifecycle != nil {
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				setHTTPGet(h.HTTPGet)
			}
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil {
			setFieldRef(vf.FieldRef)
		}
	}
}

// pullPolicyFor is Always for ":latest" or an image without tag and digest, IfNotPresent
// otherwise (a digest pins the image just as a tag does).
func pullPolicyFor(image string) corev1.PullPolicy {
	if imageTag(image) == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// imageTag returns the tag of an image reference: "latest" when it has neither tag nor digest,
// "" when it has only a digest.
func imageTag(image string) string {
	name, _, hasDigest := strings.Cut(image, "@")
	// A colon after the last slash separates the tag; one before it belongs to a registry port.
	last := name[strings.LastIndex(name, "/")+1:]
	if _, tag, ok := strings.Cut(last, ":"); ok {
		return tag
	}
	if hasDigest {
		return ""
	}
	return "latest"
}

func setProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	setHTTPGet(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = new("")
	}
}

func setHTTPGet(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
}

func setFieldRef(f *corev1.ObjectFieldSelector) {
	if f != nil && f.APIVersion == "" {
		f.APIVersion = "v1"
	}
}

func requestsFromLimits(r *corev1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	for name, q := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = q.DeepCopy()
		}
	}
}

func hostNetworkPorts(cs []corev1.Container) {
	for i := range cs {
		for j := range cs[i].Ports {
			if cs[i].Ports[j].HostPort == 0 {
				cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
			}
		}
	}
}

func setVolume(v *corev1.Volume) {
	if allPointersNil(&v.VolumeSource) {
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if s := v.Secret; s != nil && s.DefaultMode == nil {
		s.DefaultMode = new(corev1.SecretVolumeSourceDefaultMode)
	}
	if c := v.ConfigMap; c != nil && c.DefaultMode == nil {
		c.DefaultMode = new(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if d := v.DownwardAPI; d != nil {
		if d.DefaultMode == nil {
			d.DefaultMode = new(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range d.Items {
			setFieldRef(d.Items[i].FieldRef)
		}
	}
	if p := v.Projected; p != nil {
		if p.DefaultMode == nil {
			p.DefaultMode = new(corev1.ProjectedVolumeSourceDefaultMode)
		}
		for i := range p.Sources {
			src := &p.Sources[i]
			if t := src.ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
				t.ExpirationSeconds = new(int64(3600))
			}
			if d := src.DownwardAPI; d != nil {
				for j := range d.Items {
					setFieldRef(d.Items[j].FieldRef)
				}
			}
		}
	}
	if h := v.HostPath; h != nil && h.Type == nil {
		h.Type = new(corev1.HostPathUnset)
	}
	if e := v.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
		setPersistentVolumeClaimSpec(&e.VolumeClaimTemplate.Spec)
	}
	if img := v.Image; img != nil && img.PullPolicy == "" {
		img.PullPolicy = pullPolicyFor(img.Reference)
	}
}

// allPointersNil reports whether every field of the struct s points to is a nil pointer: a
// volume with no source at all becomes an emptyDir.
func allPointersNil(s any) bool {
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			return false
		}
	}
	return true
}

func setService(s *corev1.Service) {
	spec := &s.Spec
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		spec.SessionAffinityConfig = nil
	case corev1.ServiceAffinityClientIP:
		c := spec.SessionAffinityConfig
		if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(corev1.DefaultClientIPServiceAffinitySeconds)},
			}
		}
	}
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	external := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer
	if external && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if spec.Type != corev1.ServiceTypeExternalName {
		if spec.InternalTrafficPolicy == nil {
			spec.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyCluster)
		}
		// clusterIP and clusterIPs describe the same thing; upstream keeps them in step.
		if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
			spec.ClusterIPs = []string{spec.ClusterIP}
		} else if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
			spec.ClusterIP = spec.ClusterIPs[0]
		}
		// The site is single-stack: one family, taken from the given clusterIP when there is one.
		if spec.IPFamilyPolicy == nil {
			spec.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
		}
		if len(spec.IPFamilies) == 0 {
			family := corev1.IPv4Protocol
			if a, err := netip.ParseAddr(spec.ClusterIP); err == nil && a.Is6() && !a.Is4In6() {
				family = corev1.IPv6Protocol
			}
			spec.IPFamilies = []corev1.IPFamily{family}
		}
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		if spec.AllocateLoadBalancerNodePorts == nil {
			spec.AllocateLoadBalancerNodePorts = new(true)
		}
		for i := range s.Status.LoadBalancer.Ingress {
			ing := &s.Status.LoadBalancer.Ingress[i]
			if ing.IP != "" && ing.IPMode == nil {
				ing.IPMode = new(corev1.LoadBalancerIPModeVIP)
			}
		}
	}
}

// setNamespace labels the namespace with its name and marks it Active.
//
// spec.finalizers is set to [kubernetes] only on objects that were never stored (no UID): the
// namespace controller empties the list through the finalize subresource while the namespace is
// Terminating, and defaulting on decode must not bring it back. PrepareNamespaceForCreate sets it
// unconditionally at create, as upstream does.
func setNamespace(n *corev1.Namespace) {
	if n.Name != "" {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[corev1.LabelMetadataName] = n.Name
	}
	if n.UID == "" && n.DeletionTimestamp == nil && len(n.Spec.Finalizers) == 0 {
		n.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	}
	if n.Status.Phase == "" {
		n.Status.Phase = corev1.NamespaceActive
	}
}

// PrepareNamespaceForCreate sets the finalizer the namespace controller removes once the
// namespace's contents are gone. The server calls it from the Namespace strategy's
// PrepareForCreate.
func PrepareNamespaceForCreate(n *corev1.Namespace) {
	n.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
}

func setSecret(s *corev1.Secret) {
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

func setNode(n *corev1.Node) {
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	}
}

func setPersistentVolume(pv *corev1.PersistentVolume) {
	if pv.Status.Phase == "" {
		pv.Status.Phase = corev1.VolumePending
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == "" {
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if pv.Spec.VolumeMode == nil {
		pv.Spec.VolumeMode = new(corev1.PersistentVolumeFilesystem)
	}
	if h := pv.Spec.HostPath; h != nil && h.Type == nil {
		h.Type = new(corev1.HostPathUnset)
	}
}

func setPersistentVolumeClaim(pvc *corev1.PersistentVolumeClaim) {
	setPersistentVolumeClaimSpec(&pvc.Spec)
	if pvc.Status.Phase == "" {
		pvc.Status.Phase = corev1.ClaimPending
	}
}

func setPersistentVolumeClaimSpec(s *corev1.PersistentVolumeClaimSpec) {
	if s.VolumeMode == nil {
		s.VolumeMode = new(corev1.PersistentVolumeFilesystem)
	}
}

// setLimitRange fills a Container item's default limit from max, and its default request from the
// default limit, then from min.
func setLimitRange(lr *corev1.LimitRange) {
	for i := range lr.Spec.Limits {
		item := &lr.Spec.Limits[i]
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		if item.Default == nil {
			item.Default = corev1.ResourceList{}
		}
		if item.DefaultRequest == nil {
			item.DefaultRequest = corev1.ResourceList{}
		}
		fillMissing(item.Default, item.Max)
		fillMissing(item.DefaultRequest, item.Default)
		fillMissing(item.DefaultRequest, item.Min)
	}
}

func fillMissing(dst, src corev1.ResourceList) {
	for name, q := range src {
		if _, ok := dst[name]; !ok {
			dst[name] = q.DeepCopy()
		}
	}
}

func setEndpoints(e *corev1.Endpoints) {
	for i := range e.Subsets {
		for j := range e.Subsets[i].Ports {
			if p := &e.Subsets[i].Ports[j]; p.Protocol == "" {
				p.Protocol = corev1.ProtocolTCP
			}
		}
	}
}
