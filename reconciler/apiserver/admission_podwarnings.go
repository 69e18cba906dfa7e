package apiserver

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	psaadmission "k8s.io/pod-security-admission/admission"

	"github.com/flotilla-dev/flotilla/internal/podvolumes"
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
	if a.GetSubresource() != "" || a.GetObject() == nil {
		return nil
	}
	if pv, ok := a.GetObject().(*corev1.PersistentVolume); ok {
		if msg := unmountableVolume(pv); msg != "" {
			warning.AddWarning(ctx, "", msg)
		}
		return nil
	}
	if !w.extractor.HasPodSpec(a.GetResource().GroupResource()) {
		return nil
	}
	_, spec, err := w.extractor.ExtractPodSpec(a.GetObject())
	if err != nil || spec == nil {
		return nil
	}
	for _, msg := range unappliedPodSettings(podSpecPath(a.GetResource().GroupResource()), spec) {
		warning.AddWarning(ctx, "", msg)
	}
	return nil
}

// unmountableVolume is the warning about a PersistentVolume the node agent cannot mount ("" if
// it can): a pod using it would never start.
func unmountableVolume(pv *corev1.PersistentVolume) string {
	src := pv.Spec.PersistentVolumeSource
	if src.Local != nil || src.HostPath != nil {
		return ""
	}
	return fmt.Sprintf("spec.%s is not carried out by flotilla: a pod using this volume cannot start; the node agent mounts local and hostPath volumes",
		podvolumes.TypeOf(&src))
}

// podSpecPath is where the pod spec is in an object of resource: a pod's own spec, a CronJob's
// job template, or the pod template of the other workloads.
func podSpecPath(resource schema.GroupResource) string {
	switch resource {
	case corev1.Resource("pods"):
		return "spec"
	case batchv1.Resource("cronjobs"):
		return "spec.jobTemplate.spec.template.spec"
	}
	return "spec.template.spec"
}

// unappliedPodSettings lists, as warnings, what spec (at path in its object) asks for that
// flotilla's node agent does not carry out.
func unappliedPodSettings(path string, spec *corev1.PodSpec) []string {
	var out []string
	if spec.HostUsers != nil && !*spec.HostUsers {
		out = append(out, path+".hostUsers: false is not carried out by flotilla: the pod runs in the host's user namespace")
	}
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		out = append(out, path+".shareProcessNamespace is not carried out by flotilla: each container has its own PID namespace")
	}
	if sc := spec.SecurityContext; sc != nil && sc.SELinuxOptions != nil {
		out = append(out, path+".securityContext.seLinuxOptions are not carried out by flotilla: containers run without SELinux labels")
	}
	out = append(out, podvolumes.Unsupported(path, spec)...)
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
		check(fmt.Sprintf("%s.initContainers[%d]", path, i), &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		check(fmt.Sprintf("%s.containers[%d]", path, i), &spec.Containers[i])
	}
	return out
}
