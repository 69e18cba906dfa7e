package apiserver

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
)

const (
	// defaultServiceAccountName is the ServiceAccount of pods that name none; the
	// ServiceAccount controller creates it in every namespace.
	defaultServiceAccountName = "default"
	// serviceAccountVolumePrefix starts the name of the volume that holds a pod's API
	// credentials, followed by 5 random characters.
	serviceAccountVolumePrefix = "kube-api-access-"
	// serviceAccountMountPath is where containers find the token, CA and namespace.
	serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// rootCAConfigMap is the ConfigMap of every namespace that holds the site CA
	// (controllers/rootca).
	rootCAConfigMap = "kube-root-ca.crt"
	// serviceAccountTokenSeconds is the lifetime Kubernetes asks for the token of the volume
	// (the agent refreshes it well before it ends).
	serviceAccountTokenSeconds = 3607
)

// serviceAccountAdmission is the ServiceAccount admission plugin, as upstream
// (plugin/pkg/admission/serviceaccount), on pod creation:
//
//   - spec.serviceAccountName defaults to "default";
//   - the ServiceAccount must exist, except "default", which the ServiceAccount controller
//     creates a moment after its namespace: a pod created meanwhile is not refused;
//   - unless automountServiceAccountToken is false (the pod's setting wins over the
//     ServiceAccount's), the pod gets the projected volume kube-api-access-XXXXX (a bound
//     token, the CA of ConfigMap kube-root-ca.crt and the namespace), mounted read-only at
//     /var/run/secrets/kubernetes.io/serviceaccount in every container and init container
//     that mounts nothing there.
type serviceAccountAdmission struct {
	*admission.Handler
	lister corelisters.ServiceAccountLister
	// client looks a ServiceAccount up when the informer has not seen it yet (created just
	// before the pod); nil in tests.
	client kubernetes.Interface
	// volumeName returns the name of a new volume (random; fixed in tests).
	volumeName func() string
}

var (
	_ admission.MutationInterface   = (*serviceAccountAdmission)(nil)
	_ admission.ValidationInterface = (*serviceAccountAdmission)(nil)
)

// newServiceAccountAdmission reads ServiceAccounts from the API server's own informers.
func newServiceAccountAdmission(client kubernetes.Interface, f informers.SharedInformerFactory) admission.Interface {
	inf := f.Core().V1().ServiceAccounts()
	p := &serviceAccountAdmission{
		Handler:    admission.NewHandler(admission.Create),
		lister:     inf.Lister(),
		client:     client,
		volumeName: func() string { return names.SimpleNameGenerator.GenerateName(serviceAccountVolumePrefix) },
	}
	p.SetReadyFunc(inf.Informer().HasSynced)
	return p
}

// Admit sets the ServiceAccount of a new pod and mounts its API credentials.
func (p *serviceAccountAdmission) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !isPodCreate(a) {
		return nil
	}
	pod, ok := a.GetObject().(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest("resource was marked with kind Pod but was unable to be converted")
	}
	name := pod.Spec.ServiceAccountName
	if name == "" {
		// The deprecated field still names the ServiceAccount for old clients.
		name = pod.Spec.DeprecatedServiceAccount
	}
	if name == "" {
		name = defaultServiceAccountName
	}
	pod.Spec.ServiceAccountName, pod.Spec.DeprecatedServiceAccount = name, name
	sa, err := p.serviceAccount(ctx, a, name)
	if err != nil {
		return err
	}
	if automount(sa, pod) {
		p.mountAPIAccess(pod)
	}
	return nil
}

// Validate refuses a new pod whose ServiceAccount does not exist, as a mutating webhook may
// have changed it after Admit.
func (p *serviceAccountAdmission) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !isPodCreate(a) {
		return nil
	}
	pod, ok := a.GetObject().(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest("resource was marked with kind Pod but was unable to be converted")
	}
	if pod.Spec.ServiceAccountName == "" {
		return admission.NewForbidden(a, fmt.Errorf("no service account specified for pod %s/%s", a.GetNamespace(), pod.Name))
	}
	_, err := p.serviceAccount(ctx, a, pod.Spec.ServiceAccountName)
	return err
}

// serviceAccount returns the named ServiceAccount of the pod's namespace: nil for a missing
// "default", a Forbidden error for another missing one.
func (p *serviceAccountAdmission) serviceAccount(ctx context.Context, a admission.Attributes, name string) (*corev1.ServiceAccount, error) {
	ns := a.GetNamespace()
	sa, err := p.lister.ServiceAccounts(ns).Get(name)
	if apierrors.IsNotFound(err) && p.client != nil {
		sa, err = p.client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case err == nil:
		return sa, nil
	case apierrors.IsNotFound(err) && name == defaultServiceAccountName:
		return nil, nil
	case apierrors.IsNotFound(err):
		err = apierrors.NewNotFound(corev1.Resource("serviceaccount"), name)
	}
	return nil, admission.NewForbidden(a, fmt.Errorf("error looking up service account %s/%s: %w", ns, name, err))
}

// automount reports whether the pod gets the API credentials: the pod's
// automountServiceAccountToken wins, then the ServiceAccount's (sa may be nil); by default it
// does.
func automount(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	if sa != nil && sa.AutomountServiceAccountToken != nil {
		return *sa.AutomountServiceAccountToken
	}
	return true
}

// mountAPIAccess mounts the API credentials volume in every container and init container
// that mounts nothing at serviceAccountMountPath, adding the volume unless the pod already
// has one (a spec copied from a pod that went through this plugin).
func (p *serviceAccountAdmission) mountAPIAccess(pod *corev1.Pod) {
	volume := ""
	taken := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		taken[v.Name] = true
		if volume == "" && strings.HasPrefix(v.Name, serviceAccountVolumePrefix) {
			volume = v.Name
		}
	}
	hasVolume := volume != ""
	for !hasVolume && (volume == "" || taken[volume]) {
		volume = p.volumeName()
	}
	mount := corev1.VolumeMount{Name: volume, ReadOnly: true, MountPath: serviceAccountMountPath}
	mounted := false
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if !mountsAt(containers[i], serviceAccountMountPath) {
				containers[i].VolumeMounts = append(containers[i].VolumeMounts, mount)
				mounted = true
			}
		}
	}
	if mounted && !hasVolume {
		pod.Spec.Volumes = append(pod.Spec.Volumes, apiAccessVolume(volume))
	}
}

func mountsAt(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

// apiAccessVolume is Kubernetes' projected volume of a pod's API credentials: a bound token
// of its ServiceAccount, the site CA and the pod's namespace.
func apiAccessVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: new(int64(serviceAccountTokenSeconds)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: rootCAConfigMap},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path:     "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}}
}
