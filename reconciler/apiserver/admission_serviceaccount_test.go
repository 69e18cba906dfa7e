package apiserver

import (
	"context"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// newTestServiceAccountAdmission returns the plugin with cached in its informer and live only
// in the API (created a moment ago); new volumes are named kube-api-access-test1.
func newTestServiceAccountAdmission(t *testing.T, cached, live []*corev1.ServiceAccount) *serviceAccountAdmission {
	t.Helper()
	client := fake.NewClientset()
	for _, sa := range live {
		if _, err := client.CoreV1().ServiceAccounts(sa.Namespace).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f := informers.NewSharedInformerFactory(client, 0)
	p := newServiceAccountAdmission(client, f).(*serviceAccountAdmission)
	for _, sa := range cached {
		if err := f.Core().V1().ServiceAccounts().Informer().GetIndexer().Add(sa); err != nil {
			t.Fatal(err)
		}
	}
	p.volumeName = func() string { return "kube-api-access-test1" }
	return p
}

func serviceAccount(ns, name string, automount *bool) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, AutomountServiceAccountToken: automount}
}

func saTestPod(sa string, automount *bool) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default"},
		Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: automount,
			InitContainers: []corev1.Container{{Name: "init", Image: "i"}},
			Containers: []corev1.Container{
				{Name: "app", Image: "i", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}},
				// A container with its own credentials at the path keeps them.
				{Name: "own", Image: "i", VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: serviceAccountMountPath}}},
			},
			Volumes: []corev1.Volume{{Name: "data"}, {Name: "creds"}}}}
}

// admitPod runs Admit then Validate, as the admission chain does.
func admitPod(p *serviceAccountAdmission, attrs admission.Attributes) error {
	if err := p.Admit(context.Background(), attrs, nil); err != nil {
		return err
	}
	return p.Validate(context.Background(), attrs, nil)
}

func TestServiceAccountAdmissionMountsAPIAccess(t *testing.T) {
	p := newTestServiceAccountAdmission(t, nil, nil)
	pod := saTestPod("", nil)
	// The default ServiceAccount does not exist yet: the pod is admitted all the same.
	if err := admitPod(p, podAttrs(pod, nil, admission.Create)); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.ServiceAccountName != "default" || pod.Spec.DeprecatedServiceAccount != "default" {
		t.Errorf("service account %q (deprecated %q), want default", pod.Spec.ServiceAccountName, pod.Spec.DeprecatedServiceAccount)
	}
	mode, seconds := int32(0o644), int64(3607)
	wantVolume := corev1.Volume{Name: "kube-api-access-test1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &seconds, Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
	if want := []corev1.Volume{{Name: "data"}, {Name: "creds"}, wantVolume}; !reflect.DeepEqual(pod.Spec.Volumes, want) {
		t.Errorf("volumes:\n%+v\nwant\n%+v", pod.Spec.Volumes, want)
	}
	mount := corev1.VolumeMount{Name: "kube-api-access-test1", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}
	want := map[string][]corev1.VolumeMount{
		"init": {mount},
		"app":  {{Name: "data", MountPath: "/data"}, mount},
		"own":  {{Name: "creds", MountPath: serviceAccountMountPath}},
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if !reflect.DeepEqual(c.VolumeMounts, want[c.Name]) {
			t.Errorf("container %s mounts %+v, want %+v", c.Name, c.VolumeMounts, want[c.Name])
		}
	}

	// The same spec again (a copy of an admitted pod) is left as it is.
	again := pod.DeepCopy()
	p.volumeName = func() string { return "kube-api-access-other" }
	if err := admitPod(p, podAttrs(again, nil, admission.Create)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, pod) {
		t.Errorf("admitting an admitted spec changed it:\n%+v\nwas\n%+v", again.Spec, pod.Spec)
	}
}

func TestServiceAccountAdmissionVolumeName(t *testing.T) {
	client := fake.NewClientset()
	p := newServiceAccountAdmission(client, informers.NewSharedInformerFactory(client, 0))
	pod := saTestPod("default", nil)
	if err := p.(admission.MutationInterface).Admit(context.Background(), podAttrs(pod, nil, admission.Create), nil); err != nil {
		t.Fatal(err)
	}
	name := pod.Spec.Volumes[len(pod.Spec.Volumes)-1].Name
	if !regexp.MustCompile(`^kube-api-access-[a-z0-9]{5}$`).MatchString(name) {
		t.Errorf("volume name %q", name)
	}
}

func TestServiceAccountAdmissionAutomount(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		name          string
		sa, pod       *bool
		wantMountedSA bool
	}{
		{"neither says", nil, nil, true},
		{"service account opts out", &no, nil, false},
		{"pod opts in over its service account", &no, &yes, true},
		{"pod opts out", &yes, &no, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newTestServiceAccountAdmission(t, []*corev1.ServiceAccount{serviceAccount("default", "web", c.sa)}, nil)
			pod := saTestPod("web", c.pod)
			if err := admitPod(p, podAttrs(pod, nil, admission.Create)); err != nil {
				t.Fatal(err)
			}
			mounted := len(pod.Spec.Volumes) == 3 && pod.Spec.Volumes[2].Name == "kube-api-access-test1"
			if mounted != c.wantMountedSA || len(pod.Spec.Containers[0].VolumeMounts) != map[bool]int{true: 2, false: 1}[c.wantMountedSA] {
				t.Errorf("volumes %+v, mounts %+v; want mounted %v", pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts, c.wantMountedSA)
			}
		})
	}
}

func TestServiceAccountAdmissionLookup(t *testing.T) {
	p := newTestServiceAccountAdmission(t, []*corev1.ServiceAccount{serviceAccount("default", "cached", nil)},
		[]*corev1.ServiceAccount{serviceAccount("default", "fresh", nil), serviceAccount("other", "web", nil)})
	for _, name := range []string{"cached", "fresh"} {
		if err := admitPod(p, podAttrs(saTestPod(name, nil), nil, admission.Create)); err != nil {
			t.Errorf("service account %s: %v", name, err)
		}
	}

	// web exists in another namespace only.
	pod := saTestPod("web", nil)
	err := p.Admit(context.Background(), podAttrs(pod, nil, admission.Create), nil)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `error looking up service account default/web: serviceaccount "web" not found`) {
		t.Errorf("Admit of a pod of a missing service account: %v", err)
	}
	if len(pod.Spec.Volumes) != 2 {
		t.Errorf("refused pod got volumes %+v", pod.Spec.Volumes)
	}

	// A mutating webhook changed the service account after Admit.
	pod = saTestPod("cached", nil)
	attrs := podAttrs(pod, nil, admission.Create)
	if err := p.Admit(context.Background(), attrs, nil); err != nil {
		t.Fatal(err)
	}
	pod.Spec.ServiceAccountName = "web"
	if err := p.Validate(context.Background(), attrs, nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `serviceaccount "web" not found`) {
		t.Errorf("Validate of a pod of a missing service account: %v", err)
	}
	pod.Spec.ServiceAccountName = ""
	if err := p.Validate(context.Background(), attrs, nil); !apierrors.IsForbidden(err) {
		t.Errorf("Validate of a pod without service account: %v", err)
	}
}

// Only pod creation is admitted: updates, subresources and other kinds pass untouched.
func TestServiceAccountAdmissionIgnores(t *testing.T) {
	p := newTestServiceAccountAdmission(t, nil, nil)
	pod := saTestPod("missing", nil)
	old := pod.DeepCopy()
	u := &user.DefaultInfo{Name: "u"}
	for name, attrs := range map[string]admission.Attributes{
		"update": podAttrs(pod, old, admission.Update),
		"status": admission.NewAttributesRecord(pod, nil, corev1.SchemeGroupVersion.WithKind("Pod"), "default", pod.Name,
			corev1.SchemeGroupVersion.WithResource("pods"), "status", admission.Create, nil, false, u),
		"other resource": admission.NewAttributesRecord(pod, nil, corev1.SchemeGroupVersion.WithKind("Pod"), "default", pod.Name,
			corev1.SchemeGroupVersion.WithResource("podtemplates"), "", admission.Create, nil, false, u),
	} {
		if err := admitPod(p, attrs); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(pod, old) {
			t.Errorf("%s changed the pod: %+v", name, pod.Spec)
		}
	}
	if p.Handles(admission.Update) || p.Handles(admission.Delete) || !p.Handles(admission.Create) {
		t.Error("the plugin handles operations other than create")
	}
}
