package apiserver

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/kubernetes/fake"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/unenforced"
)

// warnings collects the warnings admission adds to a request.
type warnings []string

func (w *warnings) AddWarning(_, text string) { *w = append(*w, text) }

func warnCtx() (context.Context, *warnings) {
	w := &warnings{}
	return warning.WithWarningRecorder(context.Background(), w), w
}

func newTestRuntimeClassPlugin(t *testing.T, classes ...*nodev1.RuntimeClass) *runtimeClassPlugin {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, rc := range classes {
		if err := idx.Add(rc); err != nil {
			t.Fatal(err)
		}
	}
	return &runtimeClassPlugin{Handler: admission.NewHandler(admission.Create, admission.Update), lister: nodelisters.NewRuntimeClassLister(idx)}
}

func runtimeClassAttrs(rc *nodev1.RuntimeClass, op admission.Operation) admission.Attributes {
	return admission.NewAttributesRecord(rc, nil, nodev1.SchemeGroupVersion.WithKind("RuntimeClass"), "", rc.Name,
		nodev1.SchemeGroupVersion.WithResource("runtimeclasses"), "", op, nil, false, &user.DefaultInfo{Name: "u"})
}

func TestRuntimeClassAdmission(t *testing.T) {
	tolSeconds := int64(30)
	runc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Handler: "runc"}
	sandboxed := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("250m"), corev1.ResourceMemory: apiresource.MustParse("120Mi")}},
		Scheduling: &nodev1.Scheduling{
			NodeSelector: map[string]string{"sandbox": "kata"},
			Tolerations: []corev1.Toleration{
				{Key: "sandbox", Operator: corev1.TolerationOpEqual, Value: "kata", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolSeconds},
			},
		}}
	pod := func(class string, mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := testPod("", nil, nil)
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	cases := []struct {
		name     string
		pod      *corev1.Pod
		wantErr  string
		wantWarn string
		check    func(t *testing.T, p *corev1.Pod)
	}{
		{name: "no class: nothing to do", pod: pod("")},
		{name: "unknown class refused", pod: pod("gone"), wantErr: `pod rejected: RuntimeClass "gone" not found`},
		{name: "runc class: no warning", pod: pod("plain"), check: func(t *testing.T, p *corev1.Pod) {
			if p.Spec.Overhead != nil || p.Spec.NodeSelector != nil || p.Spec.Tolerations != nil {
				t.Errorf("pod changed: %+v", p.Spec)
			}
		}},
		{name: "overhead, node selector and tolerations merged; handler warned about", pod: pod("sandboxed", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
			// A wider toleration than the class's second one: the class's is redundant.
			p.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
		}), wantWarn: `RuntimeClass "sandboxed" has handler "kata", which flotilla hosts do not have`, check: func(t *testing.T, p *corev1.Pod) {
			if !reflect.DeepEqual(p.Spec.Overhead, sandboxed.Overhead.PodFixed) {
				t.Errorf("overhead = %v", p.Spec.Overhead)
			}
			if want := map[string]string{"disk": "ssd", "sandbox": "kata"}; !reflect.DeepEqual(p.Spec.NodeSelector, want) {
				t.Errorf("nodeSelector = %v, want %v", p.Spec.NodeSelector, want)
			}
			want := []corev1.Toleration{
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				sandboxed.Scheduling.Tolerations[0],
			}
			if !reflect.DeepEqual(p.Spec.Tolerations, want) {
				t.Errorf("tolerations = %+v, want %+v", p.Spec.Tolerations, want)
			}
		}},
		{name: "the class's own overhead may be given", pod: pod("sandboxed", func(p *corev1.Pod) { p.Spec.Overhead = sandboxed.Overhead.PodFixed.DeepCopy() }),
			wantWarn: "kata"},
		{name: "another overhead refused", pod: pod("sandboxed", func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1")}
		}), wantErr: "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"},
		{name: "node selector conflict refused", pod: pod("sandboxed", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"sandbox": "gvisor"} }),
			wantErr: "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = kata; pod.spec.nodeSelector[sandbox] = gvisor"},
		{name: "overhead without a class refused", pod: pod("", func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1")}
		}), wantErr: "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plugin := newTestRuntimeClassPlugin(t, runc, sandboxed)
			ctx, warned := warnCtx()
			p := tc.pod.DeepCopy()
			attrs := podAttrs(p, nil, admission.Create)
			err := plugin.Admit(ctx, attrs, nil)
			if err == nil {
				err = plugin.Validate(ctx, attrs, nil)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !apierrors.IsForbidden(err) {
					t.Fatalf("err = %v, want a Forbidden error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantWarn == "" && len(*warned) > 0:
				t.Errorf("unexpected warnings %q", *warned)
			case tc.wantWarn != "" && (len(*warned) != 1 || !strings.Contains((*warned)[0], tc.wantWarn)):
				t.Errorf("warnings %q, want one containing %q", *warned, tc.wantWarn)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
	if sandboxed.Scheduling.Tolerations[1].TolerationSeconds != &tolSeconds || len(sandboxed.Scheduling.NodeSelector) != 1 {
		t.Error("the informer's RuntimeClass was modified")
	}
}

func TestRuntimeClassAdmissionWarnsAboutHandlers(t *testing.T) {
	plugin := newTestRuntimeClassPlugin(t)
	for _, tc := range []struct {
		handler string
		warn    bool
	}{{"runc", false}, {"kata", true}, {"runsc", true}} {
		for _, op := range []admission.Operation{admission.Create, admission.Update} {
			ctx, warned := warnCtx()
			rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Handler: tc.handler}
			if err := plugin.Validate(ctx, runtimeClassAttrs(rc, op), nil); err != nil {
				t.Fatal(err)
			}
			if got := len(*warned) == 1 && strings.Contains((*warned)[0], `handler "`+tc.handler+`" is not available on flotilla hosts`); got != tc.warn {
				t.Errorf("%s of a class with handler %s: warnings %q", op, tc.handler, *warned)
			}
		}
	}

	// A class created just before the pod is found through the API.
	plugin.client = fake.NewClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Handler: "runc"})
	fresh := "fresh"
	p := testPod("", nil, nil)
	p.Spec.RuntimeClassName = &fresh
	if err := plugin.Admit(context.Background(), podAttrs(p, nil, admission.Create), nil); err != nil {
		t.Errorf("live lookup: %v", err)
	}
}

func TestMergeTolerations(t *testing.T) {
	s := func(n int64) *int64 { return &n }
	a := corev1.Toleration{Key: "a", Operator: corev1.TolerationOpEqual, Value: "1", Effect: corev1.TaintEffectNoSchedule}
	anyA := corev1.Toleration{Key: "a", Operator: corev1.TolerationOpExists}
	all := corev1.Toleration{Operator: corev1.TolerationOpExists}
	short := corev1.Toleration{Key: "n", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: s(10)}
	long := corev1.Toleration{Key: "n", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: s(300)}
	for _, tc := range []struct {
		name          string
		first, second []corev1.Toleration
		want          []corev1.Toleration
	}{
		{"disjoint", []corev1.Toleration{a}, []corev1.Toleration{short}, []corev1.Toleration{a, short}},
		{"duplicates kept once", []corev1.Toleration{a}, []corev1.Toleration{a}, []corev1.Toleration{a}},
		{"exists covers equal", []corev1.Toleration{a}, []corev1.Toleration{anyA}, []corev1.Toleration{anyA}},
		{"empty key exists covers all", []corev1.Toleration{a, short}, []corev1.Toleration{all}, []corev1.Toleration{all}},
		{"longer tolerationSeconds covers shorter", []corev1.Toleration{short}, []corev1.Toleration{long}, []corev1.Toleration{long}},
		{"none", nil, nil, nil},
	} {
		if got := mergeTolerations(tc.first, tc.second); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestUnenforcedKindsWarner(t *testing.T) {
	// No kind is unenforced any more: the test stands ResourceQuota in for one.
	saved := unenforced.Kinds
	unenforced.Kinds = []unenforced.Kind{{Resource: corev1.Resource("resourcequotas"), Version: "v1", Kind: "ResourceQuota", Effect: "test"}}
	t.Cleanup(func() { unenforced.Kinds = saved })
	w := newUnenforcedKindsWarner()
	for _, tc := range []struct {
		resource, subresource string
		obj                   runtime.Object
		want                  string
	}{
		{"resourcequotas", "", &corev1.ResourceQuota{}, "ResourceQuota is stored but not enforced by flotilla: "},
		{"limitranges", "", &corev1.LimitRange{}, ""},
		{"resourcequotas", "status", &corev1.ResourceQuota{}, ""},
		{"configmaps", "", &corev1.ConfigMap{}, ""},
	} {
		for _, op := range []admission.Operation{admission.Create, admission.Update} {
			ctx, warned := warnCtx()
			attrs := admission.NewAttributesRecord(tc.obj, nil, corev1.SchemeGroupVersion.WithKind("X"), "default", "x",
				corev1.SchemeGroupVersion.WithResource(tc.resource), tc.subresource, op, nil, false, &user.DefaultInfo{Name: "u"})
			if err := w.Validate(ctx, attrs, nil); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(*warned) != 0:
				t.Errorf("%s %s/%s: unexpected warnings %q", op, tc.resource, tc.subresource, *warned)
			case tc.want != "" && (len(*warned) != 1 || !strings.HasPrefix((*warned)[0], tc.want)):
				t.Errorf("%s %s: warnings %q, want one starting %q", op, tc.resource, *warned, tc.want)
			}
		}
	}
	if w.Handles(admission.Delete) || w.Handles(admission.Connect) {
		t.Error("the warner handles CREATE and UPDATE only")
	}
}
