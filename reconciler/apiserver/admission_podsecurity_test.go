package apiserver

import (
	"context"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	psadmission "k8s.io/pod-security-admission/admission"
)

// newTestPodSecurityPlugin serves the namespaces from a lister and lists pods from a fake
// client holding pods.
func newTestPodSecurityPlugin(t *testing.T, level string, namespaces []*corev1.Namespace, pods ...runtime.Object) *podSecurityPlugin {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range namespaces {
		if err := idx.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(pods...)
	p, err := newPodSecurity(level, psadmission.NamespaceGetterFromListerAndClient(corelisters.NewNamespaceLister(idx), client), psadmission.PodListerFromClient(client))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func psaNamespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// psaNamespaces are default (no labels), privileged (enforce and warn privileged), warned
// (enforce privileged, warn restricted) and kube-system (exempt, no labels).
func psaNamespaces() []*corev1.Namespace {
	return []*corev1.Namespace{
		psaNamespace("default", nil),
		psaNamespace("privileged", map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/warn": "privileged"}),
		psaNamespace("warned", map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/warn": "restricted"}),
		psaNamespace("kube-system", nil),
	}
}

// hostPod uses the host's network and PID namespaces and mounts the host's root.
func hostPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: corev1.PodSpec{
		HostNetwork: true, HostPID: true,
		Containers: []corev1.Container{{Name: "c", Image: "i"}},
		Volumes:    []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
	}}
}

func privilegedPod(namespace, name string) *corev1.Pod {
	yes := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "i", SecurityContext: &corev1.SecurityContext{Privileged: &yes}}},
	}}
}

func plainPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "i"}},
	}}
}

func namespaceAttrs(ns, old *corev1.Namespace, op admission.Operation) admission.Attributes {
	var oldObj runtime.Object
	namespace := "" // a create names no namespace; an update's request is in the namespace itself
	if old != nil {
		oldObj, namespace = old, old.Name
	}
	return admission.NewAttributesRecord(ns, oldObj, corev1.SchemeGroupVersion.WithKind("Namespace"), namespace, ns.Name,
		corev1.SchemeGroupVersion.WithResource("namespaces"), "", op, nil, false, &user.DefaultInfo{Name: "u"})
}

// validatePodSecurity returns the plugin's warnings and decision.
func validatePodSecurity(t *testing.T, p *podSecurityPlugin, a admission.Attributes) ([]string, error) {
	t.Helper()
	ctx, w := warnCtx()
	if !p.Handles(a.GetOperation()) {
		return nil, nil
	}
	err := p.Validate(ctx, a, nil)
	return *w, err
}

func TestPodSecurityPods(t *testing.T) {
	p := newTestPodSecurityPlugin(t, "", psaNamespaces())
	cases := []struct {
		name     string
		pod      *corev1.Pod
		wantErr  string
		wantWarn string
	}{
		{name: "host namespaces and hostPath in an unlabelled namespace: refused by the default baseline",
			pod:     hostPod("default", "x"),
			wantErr: `pods "x" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "root")`},
		{name: "privileged container in an unlabelled namespace",
			pod:     privilegedPod("default", "p"),
			wantErr: `pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`},
		{name: "a baseline pod in an unlabelled namespace", pod: plainPod("default", "ok")},
		{name: "namespace labelled privileged", pod: hostPod("privileged", "x")},
		{name: "privileged pod in a namespace labelled privileged", pod: privilegedPod("privileged", "p")},
		{name: "warn=restricted: accepted with the restricted violations as a warning", pod: plainPod("warned", "w"),
			wantWarn: `would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)`},
		{name: "kube-system is exempt", pod: hostPod("kube-system", "x")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := validatePodSecurity(t, p, podAttrs(tc.pod, nil, admission.Create))
			if tc.wantErr != "" {
				if !apierrors.IsForbidden(err) || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want Forbidden %q", err, tc.wantErr)
				}
				if len(warnings) > 0 {
					t.Fatalf("a refused pod got warnings %q", warnings)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantWarn == "" && len(warnings) > 0:
				t.Fatalf("warnings %q, want none", warnings)
			case tc.wantWarn != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], tc.wantWarn)):
				t.Fatalf("warnings %q, want one starting with %q", warnings, tc.wantWarn)
			}
		})
	}
}

func TestPodSecurityPodUpdatesAndSubresources(t *testing.T) {
	p := newTestPodSecurityPlugin(t, "", psaNamespaces())
	old := hostPod("default", "x")
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	if _, err := validatePodSecurity(t, p, podAttrs(relabelled, old, admission.Update)); err != nil {
		t.Fatalf("an update that changes no image was checked: %v", err)
	}
	newImage := old.DeepCopy()
	newImage.Spec.Containers[0].Image = "j"
	if _, err := validatePodSecurity(t, p, podAttrs(newImage, old, admission.Update)); !apierrors.IsForbidden(err) {
		t.Fatalf("an image change of a violating pod: %v, want Forbidden", err)
	}
	status := admission.NewAttributesRecord(old, old, corev1.SchemeGroupVersion.WithKind("Pod"), "default", "x",
		corev1.SchemeGroupVersion.WithResource("pods"), "status", admission.Update, nil, false, &user.DefaultInfo{Name: "u"})
	if _, err := validatePodSecurity(t, p, status); err != nil {
		t.Fatalf("a status update was checked: %v", err)
	}
}

func TestPodSecurityPodControllersWarnOnly(t *testing.T) {
	p := newTestPodSecurityPlugin(t, "", psaNamespaces())
	deployment := func(namespace string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: namespace},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: hostPod(namespace, "").Spec}}}
	}
	attrs := func(d *appsv1.Deployment) admission.Attributes {
		return admission.NewAttributesRecord(d, nil, appsv1.SchemeGroupVersion.WithKind("Deployment"), d.Namespace, d.Name,
			appsv1.SchemeGroupVersion.WithResource("deployments"), "", admission.Create, nil, false, &user.DefaultInfo{Name: "u"})
	}
	warnings, err := validatePodSecurity(t, p, attrs(deployment("default")))
	want := `would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "root")`
	if err != nil || !reflect.DeepEqual(warnings, []string{want}) {
		t.Fatalf("Deployment in default: error %v, warnings %q; want accepted with %q", err, warnings, want)
	}
	if warnings, err := validatePodSecurity(t, p, attrs(deployment("privileged"))); err != nil || len(warnings) > 0 {
		t.Fatalf("Deployment in a privileged namespace: error %v, warnings %q", err, warnings)
	}
}

func TestPodSecurityNamespaces(t *testing.T) {
	violating := hostPod("team", "a-host-pod")
	p := newTestPodSecurityPlugin(t, "privileged", psaNamespaces(), violating, plainPod("team", "b-fine"))

	bad := psaNamespace("team", map[string]string{"pod-security.kubernetes.io/enforce": "superuser"})
	_, err := validatePodSecurity(t, p, namespaceAttrs(bad, nil, admission.Create))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `pod-security.kubernetes.io/enforce`) {
		t.Fatalf("namespace with an unknown level: %v, want Invalid naming the label", err)
	}

	old := psaNamespace("team", nil)
	stricter := psaNamespace("team", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
	warnings, err := validatePodSecurity(t, p, namespaceAttrs(stricter, old, admission.Update))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`existing pods in namespace "team" violate the new PodSecurity enforce level "baseline:latest"`,
		`a-host-pod: host namespaces, hostPath volumes`,
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Fatalf("raising the enforce level: warnings %q, want %q", warnings, want)
	}

	relaxed := psaNamespace("team", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	if warnings, err := validatePodSecurity(t, p, namespaceAttrs(relaxed, stricter, admission.Update)); err != nil || len(warnings) > 0 {
		t.Fatalf("relaxing the enforce level: error %v, warnings %q", err, warnings)
	}
}

func TestPodSecuritySiteDefault(t *testing.T) {
	// With a privileged default an unlabelled namespace allows everything, silently.
	p := newTestPodSecurityPlugin(t, "privileged", psaNamespaces())
	if warnings, err := validatePodSecurity(t, p, podAttrs(hostPod("default", "x"), nil, admission.Create)); err != nil || len(warnings) > 0 {
		t.Fatalf("privileged default: error %v, warnings %q", err, warnings)
	}
	// With a restricted default a pod without a restricted security context is refused.
	p = newTestPodSecurityPlugin(t, "restricted", psaNamespaces())
	_, err := validatePodSecurity(t, p, podAttrs(plainPod("default", "x"), nil, admission.Create))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) {
		t.Fatalf("restricted default: %v, want Forbidden by restricted:latest", err)
	}
	// kube-system stays exempt whatever the default.
	if _, err := validatePodSecurity(t, p, podAttrs(hostPod("kube-system", "x"), nil, admission.Create)); err != nil {
		t.Fatalf("kube-system with a restricted default: %v", err)
	}

	for _, level := range []string{"Baseline", "root", "latest"} {
		if _, err := newPodSecurity(level, nil, nil); err == nil || !strings.Contains(err.Error(), "use privileged, baseline or restricted") {
			t.Errorf("level %q: %v, want an error listing the levels", level, err)
		}
	}
}

func TestPodSecurityNamespaceGetterFallsBackToTheClient(t *testing.T) {
	// A namespace the informer has not seen yet is read from the API.
	client := fake.NewClientset(psaNamespace("new", nil))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	p, err := newPodSecurity("", psadmission.NamespaceGetterFromListerAndClient(corelisters.NewNamespaceLister(idx), client), psadmission.PodListerFromClient(client))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(context.Background(), podAttrs(hostPod("new", "x"), nil, admission.Create), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("pod in a namespace only the API knows: %v, want Forbidden", err)
	}
}
