package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	psaadmission "k8s.io/pod-security-admission/admission"
)

// podSettingsWarner answers a pod, or a workload's pod template, that asks for a setting the
// node agent does not carry out with a warning per setting (kubectl prints them); the agent
// also records a Warning event on the pod. Nothing the API accepts is ignored without a word.
type podSettingsWarner struct {
	*admission.Handler
	extractor psaadmission.DefaultPodSpecExtractor
}

func newPodSettingsWarner() *podSettingsWarner {
	return &podSettingsWarner{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

var _ admission.ValidationInterface = (*podSettingsWarner)(nil)

func (w *podSettingsWarner) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" || !w.extractor.HasPodSpec(a.GetResource().GroupResource()) || a.GetObject() == nil {
		return nil
	}
	_, spec, err := w.extractor.ExtractPodSpec(a.GetObject())
	if err != nil || spec == nil {
		return nil
	}
	for _, msg := range unappliedPodSettings(spec) {
		warning.AddWarning(ctx, "", msg)
	}
	return nil
}

// unappliedPodSettings lists, as warnings, what spec asks for that flotilla's node agent does
// not carry out.
func unappliedPodSettings(spec *corev1.PodSpec) []string {
	var out []string
	if spec.HostUsers != nil && !*spec.HostUsers {
		out = append(out, "spec.hostUsers: false is not carried out by flotilla: the pod runs in the host's user namespace")
	}
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		out = append(out, "spec.shareProcessNamespace is not carried out by flotilla: each container has its own PID namespace")
	}
	if sc := spec.SecurityContext; sc != nil && sc.SELinuxOptions != nil {
		out = append(out, "spec.securityContext.seLinuxOptions are not carried out by flotilla: containers run without SELinux labels")
	}
	check := func(path string, c *corev1.Container) {
		sc := c.SecurityContext
		if sc == nil {
			return
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			out = append(out, fmt.Sprintf("%s.securityContext.procMount: Unmasked is not carried out by flotilla: /proc stays masked (no user namespaces)", path))
		}
		if sc.SELinuxOptions != nil {
			out = append(out, fmt.Sprintf("%s.securityContext.seLinuxOptions are not carried out by flotilla: containers run without SELinux labels", path))
		}
	}
	for i := range spec.InitContainers {
		check(fmt.Sprintf("spec.initContainers[%d]", i), &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		check(fmt.Sprintf("spec.containers[%d]", i), &spec.Containers[i])
	}
	return out
}
