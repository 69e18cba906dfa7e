package apiserver

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

func priorityClass(name string, value int32, globalDefault bool, policy corev1.PreemptionPolicy) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, GlobalDefault: globalDefault, PreemptionPolicy: &policy}
}

func newTestPriorityPlugin(t *testing.T, classes ...*schedulingv1.PriorityClass) *priorityPlugin {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, pc := range append(validation.SystemPriorityClasses(), classes...) {
		if err := idx.Add(pc); err != nil {
			t.Fatal(err)
		}
	}
	return &priorityPlugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), lister: schedulinglisters.NewPriorityClassLister(idx)}
}

func podAttrs(pod, old *corev1.Pod, op admission.Operation) admission.Attributes {
	var oldObj runtime.Object
	if old != nil {
		oldObj = old
	}
	return admission.NewAttributesRecord(pod, oldObj, corev1.SchemeGroupVersion.WithKind("Pod"), pod.Namespace, pod.Name,
		corev1.SchemeGroupVersion.WithResource("pods"), "", op, nil, false, &user.DefaultInfo{Name: "u"})
}

func priorityClassAttrs(pc, old *schedulingv1.PriorityClass, name string, op admission.Operation) admission.Attributes {
	var obj, oldObj runtime.Object
	if pc != nil {
		obj = pc
	}
	if old != nil {
		oldObj = old
	}
	return admission.NewAttributesRecord(obj, oldObj, schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"), "", name,
		schedulingv1.SchemeGroupVersion.WithResource("priorityclasses"), "", op, nil, false, &user.DefaultInfo{Name: "u"})
}

func testPod(class string, priority *int32, policy *corev1.PreemptionPolicy) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{PriorityClassName: class, Priority: priority, PreemptionPolicy: policy, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
}

func TestPriorityAdmissionNewPods(t *testing.T) {
	high := priorityClass("high", 1000, false, corev1.PreemptLowerPriority)
	gentle := priorityClass("gentle", 500, false, corev1.PreemptNever)
	base := priorityClass("base", 100, true, corev1.PreemptLowerPriority)
	never := corev1.PreemptNever
	lower := corev1.PreemptLowerPriority
	cases := []struct {
		name         string
		classes      []*schedulingv1.PriorityClass
		pod          *corev1.Pod
		wantErr      string
		wantPriority int32
		wantClass    string
		wantPolicy   corev1.PreemptionPolicy
	}{
		{name: "no class and no default class: 0", pod: testPod("", nil, nil), wantPriority: 0, wantPolicy: lower},
		{name: "no class: the global default class", classes: []*schedulingv1.PriorityClass{high, base}, pod: testPod("", nil, nil),
			wantPriority: 100, wantClass: "base", wantPolicy: lower},
		{name: "two defaults after a race: the lowest value", classes: []*schedulingv1.PriorityClass{base, priorityClass("base2", 50, true, never)},
			pod: testPod("", nil, nil), wantPriority: 50, wantClass: "base2", wantPolicy: never},
		{name: "named class", classes: []*schedulingv1.PriorityClass{high, base}, pod: testPod("high", nil, nil), wantPriority: 1000, wantClass: "high", wantPolicy: lower},
		{name: "built-in class", pod: testPod(validation.SystemNodeCritical, nil, nil), wantPriority: 2000001000, wantClass: "system-node-critical", wantPolicy: lower},
		{name: "the class's preemption policy", classes: []*schedulingv1.PriorityClass{gentle}, pod: testPod("gentle", nil, nil), wantPriority: 500, wantClass: "gentle", wantPolicy: never},
		{name: "unknown class refused", pod: testPod("nope", nil, nil), wantErr: "no PriorityClass with name nope was found"},
		{name: "its class's priority may be given", classes: []*schedulingv1.PriorityClass{high}, pod: testPod("high", new(int32(1000)), nil),
			wantPriority: 1000, wantClass: "high", wantPolicy: lower},
		{name: "another priority refused", classes: []*schedulingv1.PriorityClass{high}, pod: testPod("high", new(int32(5)), nil),
			wantErr: "the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000"},
		{name: "priority without class must be the default's", classes: []*schedulingv1.PriorityClass{base}, pod: testPod("", new(int32(0)), nil),
			wantErr: "computed 100"},
		{name: "priority 0 without class and no default", pod: testPod("", new(int32(0)), &lower), wantPriority: 0, wantPolicy: lower},
		{name: "another preemption policy refused", classes: []*schedulingv1.PriorityClass{gentle}, pod: testPod("gentle", nil, &lower),
			wantErr: "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPriorityPlugin(t, tc.classes...)
			pod := tc.pod.DeepCopy()
			err := p.Admit(context.Background(), podAttrs(pod, nil, admission.Create), nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !apierrors.IsForbidden(err) {
					t.Fatalf("err = %v, want a Forbidden error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pod.Spec.Priority == nil || *pod.Spec.Priority != tc.wantPriority {
				t.Errorf("priority = %v, want %d", pod.Spec.Priority, tc.wantPriority)
			}
			if pod.Spec.PriorityClassName != tc.wantClass {
				t.Errorf("priorityClassName = %q, want %q", pod.Spec.PriorityClassName, tc.wantClass)
			}
			if pod.Spec.PreemptionPolicy == nil || *pod.Spec.PreemptionPolicy != tc.wantPolicy {
				t.Errorf("preemptionPolicy = %v, want %s", pod.Spec.PreemptionPolicy, tc.wantPolicy)
			}
		})
	}
}

func TestPriorityAdmissionLiveLookupAndUpdates(t *testing.T) {
	// A class the informer has not seen yet is read from the API.
	p := newTestPriorityPlugin(t)
	p.client = fake.NewClientset(priorityClass("fresh", 42, false, corev1.PreemptLowerPriority))
	pod := testPod("fresh", nil, nil)
	if err := p.Admit(context.Background(), podAttrs(pod, nil, admission.Create), nil); err != nil || *pod.Spec.Priority != 42 {
		t.Fatalf("live lookup: %v, priority %v", err, pod.Spec.Priority)
	}

	// An update without the fields keeps them; subresources and other resources are ignored.
	old := testPod("fresh", new(int32(42)), new(corev1.PreemptLowerPriority))
	upd := testPod("fresh", nil, nil)
	if err := p.Admit(context.Background(), podAttrs(upd, old, admission.Update), nil); err != nil {
		t.Fatal(err)
	}
	if upd.Spec.Priority == nil || *upd.Spec.Priority != 42 || upd.Spec.PreemptionPolicy == nil {
		t.Errorf("update lost priority: %v %v", upd.Spec.Priority, upd.Spec.PreemptionPolicy)
	}
	status := admission.NewAttributesRecord(testPod("nope", nil, nil), nil, corev1.SchemeGroupVersion.WithKind("Pod"), "default", "p",
		corev1.SchemeGroupVersion.WithResource("pods"), "status", admission.Create, nil, false, &user.DefaultInfo{Name: "u"})
	if err := p.Admit(context.Background(), status, nil); err != nil {
		t.Errorf("subresource checked: %v", err)
	}
}

func TestPriorityAdmissionClasses(t *testing.T) {
	base := priorityClass("base", 100, true, corev1.PreemptLowerPriority)
	cases := []struct {
		name    string
		classes []*schedulingv1.PriorityClass
		attrs   admission.Attributes
		wantErr string
	}{
		{name: "first global default", attrs: priorityClassAttrs(base, nil, "base", admission.Create)},
		{name: "second global default refused", classes: []*schedulingv1.PriorityClass{base},
			attrs:   priorityClassAttrs(priorityClass("other", 5, true, corev1.PreemptLowerPriority), nil, "other", admission.Create),
			wantErr: "PriorityClass base is already marked as default. Only one default can exist"},
		{name: "marking another class default refused", classes: []*schedulingv1.PriorityClass{base},
			attrs:   priorityClassAttrs(priorityClass("other", 5, true, corev1.PreemptLowerPriority), priorityClass("other", 5, false, corev1.PreemptLowerPriority), "other", admission.Update),
			wantErr: "already marked as default"},
		{name: "updating the default itself", classes: []*schedulingv1.PriorityClass{base},
			attrs: priorityClassAttrs(base, base, "base", admission.Update)},
		{name: "a non-default class", classes: []*schedulingv1.PriorityClass{base},
			attrs: priorityClassAttrs(priorityClass("other", 5, false, corev1.PreemptLowerPriority), nil, "other", admission.Create)},
		{name: "built-in class not deletable", attrs: priorityClassAttrs(nil, nil, "system-node-critical", admission.Delete),
			wantErr: "this is a system priority class and cannot be deleted"},
		{name: "built-in class not deletable by deletecollection", attrs: priorityClassAttrs(nil, validation.SystemPriorityClasses()[1], "", admission.Delete),
			wantErr: `"system-cluster-critical" is forbidden`},
		{name: "a user class is deletable", attrs: priorityClassAttrs(nil, base, "base", admission.Delete)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := newTestPriorityPlugin(t, tc.classes...).Validate(context.Background(), tc.attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !apierrors.IsForbidden(err)):
				t.Errorf("err = %v, want a Forbidden error containing %q", err, tc.wantErr)
			}
		})
	}
}

// Deleting a pod has no new object: the plugin must let it through (the ReplicaSet
// controller deletes pods when scaling down).
func TestPriorityAdmissionPodDelete(t *testing.T) {
	p := newTestPriorityPlugin(t)
	pod := testPod("", nil, nil)
	del := admission.NewAttributesRecord(nil, pod, corev1.SchemeGroupVersion.WithKind("Pod"), pod.Namespace, pod.Name,
		corev1.Resource("pods").WithVersion("v1"), "", admission.Delete, &metav1.DeleteOptions{}, false, nil)
	if err := p.Admit(context.Background(), del, nil); err != nil {
		t.Fatalf("Admit(delete pod) = %v, want nil", err)
	}
	if err := p.Validate(context.Background(), del, nil); err != nil {
		t.Fatalf("Validate(delete pod) = %v, want nil", err)
	}
}
