package openapi

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	openapiutil "k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

const gvkExtension = "x-kubernetes-group-version-kind"

// servedKinds is every kind the API server stores or returns from a subresource.
var servedKinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("Pod"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("Namespace"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	corev1.SchemeGroupVersion.WithKind("Node"),
	corev1.SchemeGroupVersion.WithKind("Event"),
	corev1.SchemeGroupVersion.WithKind("PersistentVolume"),
	corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	corev1.SchemeGroupVersion.WithKind("ResourceQuota"),
	corev1.SchemeGroupVersion.WithKind("LimitRange"),
	corev1.SchemeGroupVersion.WithKind("Endpoints"),
	corev1.SchemeGroupVersion.WithKind("Binding"),
	appsv1.SchemeGroupVersion.WithKind("Deployment"),
	appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
	appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
	appsv1.SchemeGroupVersion.WithKind("ControllerRevision"),
	batchv1.SchemeGroupVersion.WithKind("Job"),
	batchv1.SchemeGroupVersion.WithKind("CronJob"),
	autoscalingv1.SchemeGroupVersion.WithKind("Scale"),
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
	networkingv1.SchemeGroupVersion.WithKind("Ingress"),
	networkingv1.SchemeGroupVersion.WithKind("IngressClass"),
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"),
	coordinationv1.SchemeGroupVersion.WithKind("Lease"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	policyv1.SchemeGroupVersion.WithKind("Eviction"),
	eventsv1.SchemeGroupVersion.WithKind("Event"),
	admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"),
	admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"),
	storagev1.SchemeGroupVersion.WithKind("StorageClass"),
	schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"),
	nodev1.SchemeGroupVersion.WithKind("RuntimeClass"),
	// v2 first: its Go type is the internal one (the server converts v1 through it).
	autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"),
	autoscalingv1.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"),
	rbacv1.SchemeGroupVersion.WithKind("Role"),
	rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
	admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"),
	admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"),
	certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"),
	flotillav1alpha1.SchemeGroupVersion.WithKind("GitSource"),
	// Create-only review kinds kubectl uses (auth can-i, auth whoami).
	authenticationv1.SchemeGroupVersion.WithKind("TokenReview"),
	authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview"),
	authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"),
	authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview"),
	authorizationv1.SchemeGroupVersion.WithKind("LocalSubjectAccessReview"),
	authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectRulesReview"),
}

// newScheme builds a scheme shaped like the server's: every served group, and the
// versioned Go types registered a second time under __internal.
func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		appsv1.AddToScheme,
		batchv1.AddToScheme,
		autoscalingv1.AddToScheme,
		discoveryv1.AddToScheme,
		networkingv1.AddToScheme,
		coordinationv1.AddToScheme,
		policyv1.AddToScheme,
		eventsv1.AddToScheme,
		admissionregistrationv1.AddToScheme,
		authenticationv1.AddToScheme,
		authorizationv1.AddToScheme,
		storagev1.AddToScheme,
		schedulingv1.AddToScheme,
		nodev1.AddToScheme,
		autoscalingv2.AddToScheme,
		rbacv1.AddToScheme,
		certificatesv1.AddToScheme,
		flotillav1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatalf("add to scheme: %v", err)
		}
	}
	for _, gvk := range servedKinds {
		obj, err := scheme.New(gvk)
		if err != nil {
			t.Fatalf("new %v: %v", gvk, err)
		}
		if internal := gvk.GroupKind().WithVersion(runtime.APIVersionInternal); !scheme.Recognizes(internal) {
			scheme.AddKnownTypeWithName(internal, obj)
		}
	}
	return scheme
}

// gvksOf returns the GVKs in the x-kubernetes-group-version-kind extension.
func gvksOf(t *testing.T, ext spec.Extensions) []schema.GroupVersionKind {
	t.Helper()
	raw, ok := ext[gvkExtension]
	if !ok {
		return nil
	}
	var out []schema.GroupVersionKind
	switch list := raw.(type) {
	case []interface{}:
		for _, item := range list {
			m, ok := item.(map[string]interface{})
			if !ok {
				t.Fatalf("%s entry has type %T", gvkExtension, item)
			}
			out = append(out, schema.GroupVersionKind{Group: m["group"].(string), Version: m["version"].(string), Kind: m["kind"].(string)})
		}
	default:
		t.Fatalf("%s has type %T", gvkExtension, raw)
	}
	return out
}

func TestServedKindsHaveDefinitions(t *testing.T) {
	scheme := newScheme(t)
	namer := Namer(scheme)
	defs := Definitions()(func(name string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + common.EscapeJsonPointer(name))
	})

	for _, gvk := range servedKinds {
		obj, err := scheme.New(gvk)
		if err != nil {
			t.Fatalf("new %v: %v", gvk, err)
		}
		// The apiserver looks a resource's model up by its canonical type name
		// (getResourceNamesForGroup), and names definitions through the namer.
		canonical := openapiutil.GetCanonicalTypeName(obj)
		fromScheme, err := scheme.ToOpenAPIDefinitionName(gvk)
		if err != nil {
			t.Fatalf("%v: definition name: %v", gvk, err)
		}
		if canonical != fromScheme {
			t.Errorf("%v: canonical type name %q differs from the scheme's definition name %q", gvk, canonical, fromScheme)
		}
		if _, ok := defs[canonical]; !ok {
			t.Errorf("%v: no OpenAPI definition %q", gvk, canonical)
			continue
		}
		name, ext := namer.GetDefinitionName(canonical)
		if name != canonical {
			t.Errorf("%v: namer renamed %q to %q", gvk, canonical, name)
		}
		found := false
		for _, got := range gvksOf(t, ext) {
			if got.Version == runtime.APIVersionInternal {
				t.Errorf("%v: definition %q advertises internal kind %v", gvk, name, got)
			}
			if got == gvk {
				found = true
			}
		}
		if !found {
			t.Errorf("%v: definition %q lacks %s for it (extensions %v)", gvk, name, gvkExtension, ext)
		}
	}
}

func TestDefinitionNames(t *testing.T) {
	for obj, want := range map[runtime.Object]string{
		&appsv1.Deployment{}:              "io.k8s.api.apps.v1.Deployment",
		&corev1.Pod{}:                     "io.k8s.api.core.v1.Pod",
		&metav1.Status{}:                  "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
		&flotillav1alpha1.GitSource{}:     "dev.flotilla.v1alpha1.GitSource",
		&flotillav1alpha1.GitSourceList{}: "dev.flotilla.v1alpha1.GitSourceList",
	} {
		if got := openapiutil.GetCanonicalTypeName(obj); got != want {
			t.Errorf("%T: definition name %q, want %q", obj, got, want)
		}
	}
}

// canonicalNames returns the model names of the served kinds, as the apiserver
// computes them when it installs the groups.
func canonicalNames(t *testing.T, scheme *runtime.Scheme) []string {
	t.Helper()
	var names []string
	for _, gvk := range servedKinds {
		obj, err := scheme.New(gvk)
		if err != nil {
			t.Fatalf("new %v: %v", gvk, err)
		}
		names = append(names, openapiutil.GetCanonicalTypeName(obj))
	}
	return names
}

// TestOpenAPIV2Builds builds the /openapi/v2 models the way the server does; it
// fails when a definition refers to a type no generated package provides.
func TestOpenAPIV2Builds(t *testing.T) {
	scheme := newScheme(t)
	cfg := &genericapiserver.Config{}
	Configure(cfg, scheme)
	swagger, err := builder.BuildOpenAPIDefinitionsForResources(cfg.OpenAPIConfig, canonicalNames(t, scheme)...)
	if err != nil {
		t.Fatalf("build OpenAPI v2 definitions: %v", err)
	}
	def, ok := swagger.Definitions["dev.flotilla.v1alpha1.GitSource"]
	if !ok {
		t.Fatalf("no GitSource definition in the v2 models")
	}
	if got := gvksOf(t, def.Extensions); len(got) != 1 || got[0] != flotillav1alpha1.SchemeGroupVersion.WithKind("GitSource") {
		t.Errorf("GitSource %s = %v", gvkExtension, got)
	}
}

// newTypeConverter builds the SSA type converter exactly as
// GenericAPIServer.getOpenAPIModels does.
func newTypeConverter(t *testing.T) managedfields.TypeConverter {
	t.Helper()
	scheme := newScheme(t)
	cfg := &genericapiserver.Config{}
	Configure(cfg, scheme)
	models, err := builder3.BuildOpenAPIDefinitionsForResources(cfg.OpenAPIV3Config, canonicalNames(t, scheme)...)
	if err != nil {
		t.Fatalf("build OpenAPI v3 definitions: %v", err)
	}
	tc, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		t.Fatalf("new type converter: %v", err)
	}
	return tc
}

func TestTypeConverter(t *testing.T) {
	tc := newTypeConverter(t)

	deploy := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "web",
					Image: "web:1",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				}}},
			},
		},
	}
	typed, err := tc.ObjectToTyped(deploy)
	if err != nil {
		t.Fatalf("Deployment to typed: %v", err)
	}
	set, err := typed.ToFieldSet()
	if err != nil {
		t.Fatalf("Deployment field set: %v", err)
	}
	// containers is a map list keyed by name: the path must address the element by key.
	containerImage := fieldpath.MakePathOrDie("spec", "template", "spec", "containers",
		fieldpath.KeyByFields("name", "web"), "image")
	if !set.Has(containerImage) {
		t.Errorf("Deployment field set lacks %v:\n%s", containerImage, set.String())
	}

	gs := &flotillav1alpha1.GitSource{
		TypeMeta:   metav1.TypeMeta{APIVersion: "flotilla.dev/v1alpha1", Kind: "GitSource"},
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: "flotilla-system"},
		Spec: flotillav1alpha1.GitSourceSpec{
			URL:       "https://git.example/site.git",
			Ref:       &flotillav1alpha1.GitRef{Branch: "main"},
			Interval:  metav1.Duration{Duration: time.Minute},
			Prune:     ptr.To(true),
			DependsOn: []flotillav1alpha1.NamespacedObjectReference{{Name: "base"}},
		},
		Status: flotillav1alpha1.GitSourceStatus{
			Conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Applied", LastTransitionTime: metav1.Now()},
				{Type: "Reconciling", Status: metav1.ConditionFalse, Reason: "Applied", LastTransitionTime: metav1.Now()},
			},
			Inventory: &flotillav1alpha1.ResourceInventory{Entries: []flotillav1alpha1.ResourceRef{
				{ID: "default_web_apps_Deployment", Version: "v1"},
			}},
		},
	}
	typed, err = tc.ObjectToTyped(gs)
	if err != nil {
		t.Fatalf("GitSource to typed: %v", err)
	}
	set, err = typed.ToFieldSet()
	if err != nil {
		t.Fatalf("GitSource field set: %v", err)
	}
	for _, p := range []fieldpath.Path{
		fieldpath.MakePathOrDie("spec", "url"),
		fieldpath.MakePathOrDie("spec", "ref", "branch"),
		fieldpath.MakePathOrDie("status", "conditions", fieldpath.KeyByFields("type", "Ready"), "status"),
		fieldpath.MakePathOrDie("status", "inventory", "entries", fieldpath.KeyByFields("id", "default_web_apps_Deployment"), "v"),
	} {
		if !set.Has(p) {
			t.Errorf("GitSource field set lacks %v:\n%s", p, set.String())
		}
	}

	// Two managers applying different branches of the same ref conflict only on that
	// field: the struct is granular, as SSA on ref.branch expects.
	other := gs.DeepCopy()
	other.Spec.Ref.Branch = "release"
	otherTyped, err := tc.ObjectToTyped(other)
	if err != nil {
		t.Fatalf("GitSource to typed: %v", err)
	}
	cmp, err := typed.Compare(otherTyped)
	if err != nil {
		t.Fatalf("compare: %v", err)
	}
	if want := fieldpath.MakePathOrDie("spec", "ref", "branch"); !cmp.Modified.Has(want) || cmp.Modified.Size() != 1 {
		t.Errorf("changing ref.branch modified %v, want only %v", cmp.Modified, want)
	}
}
