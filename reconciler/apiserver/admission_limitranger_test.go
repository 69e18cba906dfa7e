package apiserver

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = apiresource.MustParse(pairs[i+1])
	}
	return out
}

func testLimitRanger(t *testing.T, lrs ...*corev1.LimitRange) *limitRanger {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, lr := range lrs {
		if err := idx.Add(lr); err != nil {
			t.Fatal(err)
		}
	}
	return &limitRanger{Handler: admission.NewHandler(admission.Create, admission.Update), lister: corelisters.NewLimitRangeLister(idx)}
}

func limitRangeAttrs(obj runtime.Object, name, resourceName, kind string, op admission.Operation) admission.Attributes {
	return admission.NewAttributesRecord(obj, nil, corev1.SchemeGroupVersion.WithKind(kind), "shop", name,
		corev1.SchemeGroupVersion.WithResource(resourceName), "", op, nil, false, &user.DefaultInfo{Name: "alice"})
}

func limitRange(name string, items ...corev1.LimitRangeItem) *corev1.LimitRange {
	return &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Spec: corev1.LimitRangeSpec{Limits: items}}
}

// TestLimitRangerDefaults: containers get the Container items' default requests and limits for
// the resources they do not name, and the annotation says which.
func TestLimitRangerDefaults(t *testing.T) {
	l := testLimitRanger(t,
		// As the API stores it: defaultRequest filled from default.
		limitRange("a-defaults", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Default: rl("cpu", "500m", "memory", "256Mi"), DefaultRequest: rl("cpu", "100m", "memory", "256Mi")}),
		limitRange("b-later", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Default: rl("cpu", "2", "ephemeral-storage", "1Gi"), DefaultRequest: rl("cpu", "2", "ephemeral-storage", "1Gi")}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers: []corev1.Container{{Name: "a"},
			// (the API's defaults have set the requests its limits give)
			{Name: "b", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "1Gi"), Limits: rl("cpu", "300m", "memory", "1Gi")}}},
	}}
	if err := l.Admit(context.Background(), limitRangeAttrs(pod, "web", "pods", "Pod", admission.Create), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got       corev1.ResourceRequirements
		req, lims corev1.ResourceList
	}{
		{pod.Spec.Containers[0].Resources, rl("cpu", "100m", "memory", "256Mi", "ephemeral-storage", "1Gi"), rl("cpu", "500m", "memory", "256Mi", "ephemeral-storage", "1Gi")},
		{pod.Spec.Containers[1].Resources, rl("cpu", "200m", "memory", "1Gi", "ephemeral-storage", "1Gi"), rl("cpu", "300m", "memory", "1Gi", "ephemeral-storage", "1Gi")},
		{pod.Spec.InitContainers[0].Resources, rl("cpu", "100m", "memory", "256Mi", "ephemeral-storage", "1Gi"), rl("cpu", "500m", "memory", "256Mi", "ephemeral-storage", "1Gi")},
	} {
		for name, want := range c.req {
			if got := c.got.Requests[name]; got.Cmp(want) != 0 {
				t.Errorf("request %s: %s, want %s (%+v)", name, got.String(), want.String(), c.got)
			}
		}
		for name, want := range c.lims {
			if got := c.got.Limits[name]; got.Cmp(want) != 0 {
				t.Errorf("limit %s: %s, want %s (%+v)", name, got.String(), want.String(), c.got)
			}
		}
	}
	want := "LimitRanger plugin set: cpu, ephemeral-storage, memory request for container a; cpu, ephemeral-storage, memory limit for container a; " +
		"ephemeral-storage request for container b; ephemeral-storage limit for container b; " +
		"cpu, ephemeral-storage, memory request for init container init; cpu, ephemeral-storage, memory limit for init container init"
	if got := pod.Annotations[limitRangerAnnotation]; got != want {
		t.Errorf("annotation %q,\nwant %q", got, want)
	}
	// Another namespace's pod and a pod update are left alone.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "other"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}
	attrs := admission.NewAttributesRecord(other, nil, corev1.SchemeGroupVersion.WithKind("Pod"), "other", "web",
		corev1.SchemeGroupVersion.WithResource("pods"), "", admission.Create, nil, false, &user.DefaultInfo{Name: "alice"})
	if err := l.Admit(context.Background(), attrs, nil); err != nil || other.Spec.Containers[0].Resources.Requests != nil {
		t.Errorf("pod of another namespace: %v %+v", err, other.Spec.Containers[0].Resources)
	}
	updated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}
	if err := l.Admit(context.Background(), limitRangeAttrs(updated, "web", "pods", "Pod", admission.Update), nil); err != nil || updated.Spec.Containers[0].Resources.Requests != nil {
		t.Errorf("pod update: %v %+v", err, updated.Spec.Containers[0].Resources)
	}
}

// TestLimitRangerBounds: pods and claims out of the items' bounds are refused with upstream's
// messages; those within pass.
func TestLimitRangerBounds(t *testing.T) {
	l := testLimitRanger(t, limitRange("bounds",
		corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: rl("memory", "64Mi"), Max: rl("cpu", "1"), MaxLimitRequestRatio: rl("cpu", "4")},
		corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: rl("memory", "512Mi")},
		corev1.LimitRangeItem{Type: corev1.LimitTypePersistentVolumeClaim, Min: rl("storage", "1Gi"), Max: rl("storage", "10Gi")}))
	ctr := func(name string, req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	for _, c := range []struct {
		name string
		ctrs []corev1.Container
		want []string // all must appear; none: admitted
	}{
		{"within bounds", []corev1.Container{ctr("a", rl("cpu", "250m", "memory", "128Mi"), rl("cpu", "1", "memory", "256Mi"))}, nil},
		{"over the Container max", []corev1.Container{ctr("a", rl("cpu", "1", "memory", "128Mi"), rl("cpu", "2", "memory", "256Mi"))},
			[]string{"maximum cpu usage per Container is 1, but limit is 2"}},
		{"no limit under a max", []corev1.Container{ctr("a", rl("cpu", "500m", "memory", "128Mi"), rl("memory", "256Mi"))},
			[]string{"maximum cpu usage per Container is 1.  No limit is specified", "cpu max limit to request ratio per Container is 4, but no limit is specified or limit is 0"}},
		{"no request under a min", []corev1.Container{ctr("a", rl("cpu", "500m"), rl("cpu", "1", "memory", "256Mi"))},
			[]string{"minimum memory usage per Container is 64Mi.  No request is specified"}},
		{"under the min", []corev1.Container{ctr("a", rl("cpu", "500m", "memory", "32Mi"), rl("cpu", "1", "memory", "256Mi"))},
			[]string{"minimum memory usage per Container is 64Mi, but request is 32Mi"}},
		{"over the ratio", []corev1.Container{ctr("a", rl("cpu", "100m", "memory", "128Mi"), rl("cpu", "1", "memory", "256Mi"))},
			[]string{"cpu max limit to request ratio per Container is 4, but provided ratio is 10.000000"}},
		{"over the Pod max", []corev1.Container{
			ctr("a", rl("cpu", "500m", "memory", "128Mi"), rl("cpu", "1", "memory", "300Mi")),
			ctr("b", rl("cpu", "500m", "memory", "128Mi"), rl("cpu", "1", "memory", "300Mi"))},
			[]string{"maximum memory usage per Pod is 512Mi, but limit is 600Mi"}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.PodSpec{Containers: c.ctrs}}
		err := l.Validate(context.Background(), limitRangeAttrs(pod, "web", "pods", "Pod", admission.Create), nil)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want admitted", c.name, err)
			}
			continue
		}
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", c.name, err, w)
			}
		}
	}
	claim := func(size string) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "shop"}}
		if size != "" {
			pvc.Spec.Resources.Requests = rl("storage", size)
		}
		return pvc
	}
	for _, c := range []struct {
		size string
		op   admission.Operation
		want string
	}{
		{"5Gi", admission.Create, ""},
		{"20Gi", admission.Create, "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"},
		{"20Gi", admission.Update, "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"},
		{"500Mi", admission.Create, "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"},
		{"", admission.Create, "minimum storage usage per PersistentVolumeClaim is 1Gi.  No request is specified"},
	} {
		err := l.Validate(context.Background(), limitRangeAttrs(claim(c.size), "data", "persistentvolumeclaims", "PersistentVolumeClaim", c.op), nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("claim of %s: %v, want admitted", c.size, err)
		case c.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("claim of %q (%s): %v, want 403 saying %q", c.size, c.op, err, c.want)
		}
	}
	// Pod updates are not checked (their resources cannot change).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}
	if err := l.Validate(context.Background(), limitRangeAttrs(pod, "web", "pods", "Pod", admission.Update), nil); err != nil {
		t.Errorf("pod update: %v", err)
	}
}
