package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/warning"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/defaults"
)

// GitSyncUser is the user Evaluate admits objects as: gitsync's identity, which applies the
// site's root GitSource (other GitSources apply as their spec.serviceAccountName). It is what `request.userInfo` holds in the policies' expressions.
const GitSyncUser = "system:controller:gitsync"

// readyTimeout bounds how long NewEngine waits for the plugin to have read and compiled the
// policies.
const readyTimeout = 30 * time.Second

// Engine evaluates objects against ValidatingAdmissionPolicies without a cluster, with the
// API server's own admission plugin (k8s.io/apiserver's validating policy plugin, the same CEL
// environment, matching, params, failure policies and messages). The plugin reads the
// policies, bindings and Namespaces from a fake clientset and its informers, and params of any
// kind from a fake dynamic client, loaded once by NewEngine.
type Engine struct {
	plugin  *validating.Plugin
	client  *fake.Clientset
	mapper  meta.RESTMapper
	scheme  *runtime.Scheme
	drained chan struct{}
	once    sync.Once

	// mu guards namespaces: the names the fake clientset has a Namespace of.
	mu         sync.Mutex
	namespaces map[string]bool
}

// Result is the API server's answer to one object.
type Result struct {
	// Denied is the admission error exactly as the API server answers it (nil: admitted), e.g.
	// `deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'flotilla-no-privileged'
	// with binding 'flotilla-no-privileged' denied request: ...`.
	Denied error
	// Warnings are the warning texts the API sends with its answer (bindings with the Warn
	// action), in order, without duplicates.
	Warnings []string
}

var (
	vapGVK       = admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy")
	bindingGVK   = admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding")
	namespaceGVK = corev1.SchemeGroupVersion.WithKind("Namespace")
	crdGK        = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// newScheme is the built-in kinds with flotilla's API server defaults: policies and bindings
// are defaulted as the server stores them (failurePolicy Fail, matchPolicy Equivalent, empty
// selectors), and evaluated objects as the server decodes them (e.g. a Deployment's replicas
// is 1 when unset, a container's requests are its limits when unset).
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registrations
	}
	defaults.Register(s)
	return s
}

// NewEngine starts an engine over objs, which may contain ValidatingAdmissionPolicies, their
// bindings, Namespaces, params of any kind (objects of a policy's paramKind), and
// CustomResourceDefinitions, whose kinds extend mapper. The policy inventory (ConfigMap
// kube-system/flotilla-policy-inventory) is computed from the Ingresses and
// PodDisruptionBudgets among objs, as the site's controller keeps it from the site's;
// anything else is ignored. mapper maps
// kinds to resources and scopes (callers pass reconciler/apiserver.OfflineRESTMapper()).
//
// A later object of the same kind and name (and namespace, for params) replaces an earlier
// one, as applying them in order would: a test context can override a library param.
// Namespaces get the kubernetes.io/metadata.name label, as the API server gives it to every
// Namespace. Close the engine when done.
func NewEngine(objs []*unstructured.Unstructured, mapper meta.RESTMapper) (*Engine, error) {
	scheme := newScheme()
	crdMapper := meta.NewDefaultRESTMapper(nil)
	mapper = meta.MultiRESTMapper{crdMapper, mapper}

	// typed holds the policies, bindings and Namespaces by kind and name: a later object of
	// the same kind and name replaces an earlier one, as applying them in order would.
	var typed []runtime.Object
	index := map[string]int{}
	put := func(kind, name string, o runtime.Object) {
		key := kind + "/" + name
		if i, ok := index[key]; ok {
			typed[i] = o
			return
		}
		index[key] = len(typed)
		typed = append(typed, o)
	}
	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	others := []*unstructured.Unstructured{}
	namespaces := map[string]bool{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		switch {
		case gvk == vapGVK:
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := fromUnstructured(scheme, o, p); err != nil {
				return nil, err
			}
			policies = append(policies, p)
			put(gvk.Kind, p.Name, p)
		case gvk == bindingGVK:
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := fromUnstructured(scheme, o, b); err != nil {
				return nil, err
			}
			put(gvk.Kind, b.Name, b)
		case gvk == namespaceGVK:
			n := &corev1.Namespace{}
			if err := fromUnstructured(scheme, o, n); err != nil {
				return nil, err
			}
			namespaces[n.Name] = true
			put(gvk.Kind, n.Name, n)
		case gvk.GroupKind() == crdGK:
			if err := addCRD(crdMapper, o); err != nil {
				return nil, err
			}
		default:
			others = append(others, o)
		}
	}

	// The inventory of objs comes first: a ConfigMap of the same name among objs replaces it.
	inv, err := inventoryConfigMap(objs)
	if err != nil {
		return nil, err
	}
	others = append([]*unstructured.Unstructured{inv}, others...)

	// Params: the objects of every policy's paramKind, in a fake dynamic client that knows
	// the list kind of each (its informers list them).
	listKinds := map[schema.GroupVersionResource]string{}
	paramGVRs := map[schema.GroupVersionKind]*meta.RESTMapping{}
	for _, p := range policies {
		pk := p.Spec.ParamKind
		if pk == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(pk.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("ValidatingAdmissionPolicy %s: spec.paramKind.apiVersion %q: %w", p.Name, pk.APIVersion, err)
		}
		gvk := gv.WithKind(pk.Kind)
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			// The plugin answers with the same error (per failurePolicy) when it evaluates the
			// policy; nothing to load.
			continue
		}
		listKinds[m.Resource] = gvk.Kind + "List"
		paramGVRs[gvk] = m
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
	for _, o := range others {
		m, ok := paramGVRs[o.GroupVersionKind()]
		if !ok {
			continue
		}
		ns := o.GetNamespace()
		if m.Scope.Name() == meta.RESTScopeNameRoot {
			ns = ""
		} else if ns == "" {
			ns = metav1.NamespaceDefault
		}
		p := o.DeepCopy()
		p.SetNamespace(ns)
		err := dyn.Tracker().Create(m.Resource, p, ns)
		if apierrors.IsAlreadyExists(err) {
			// A later param of the same name replaces the earlier one.
			err = dyn.Tracker().Update(m.Resource, p, ns)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", o.GetKind(), ns, o.GetName(), err)
		}
	}

	client := fake.NewClientset(typed...)
	factory := informers.NewSharedInformerFactory(client, 0)
	plugin, err := validating.NewPlugin(nil)
	if err != nil {
		return nil, err
	}
	e := &Engine{plugin: plugin, client: client, mapper: mapper, scheme: scheme, drained: make(chan struct{}), namespaces: namespaces}
	plugin.SetExternalKubeInformerFactory(factory)
	plugin.SetExternalKubeClientSet(client)
	plugin.SetDynamicClient(dyn)
	plugin.SetRESTMapper(mapper)
	plugin.SetUnconditionalAuthorizer(allowAll{})
	plugin.SetDrainedNotification(e.drained)
	if err := plugin.ValidateInitialization(); err != nil {
		e.Close()
		return nil, fmt.Errorf("ValidatingAdmissionPolicy admission: %w", err)
	}
	factory.Start(e.drained)
	factory.WaitForCacheSync(e.drained)

	deadline := time.Now().Add(readyTimeout)
	for !plugin.WaitForReady() {
		if time.Now().After(deadline) {
			e.Close()
			return nil, errors.New("the ValidatingAdmissionPolicy plugin did not become ready")
		}
	}
	return e, nil
}

// Close stops the engine's informers and the plugin's workers.
func (e *Engine) Close() {
	e.once.Do(func() { close(e.drained) })
}

// Evaluate admits obj as a CREATE by GitSyncUser, as the API server's validating admission
// would, and returns its answer; the error is for what prevents evaluating (a kind mapper
// does not know, an object that does not decode).
//
// obj is defaulted first as the API server defaults what it decodes. Its namespace is
// "default" when a namespaced object has none (as kubectl and gitsync send it); a namespace
// not among NewEngine's objects exists with only the kubernetes.io/metadata.name label.
// ValidatingAdmissionPolicies and their bindings are never evaluated against policies (the
// plugin excludes them). Evaluate is safe for concurrent use.
func (e *Engine) Evaluate(ctx context.Context, obj *unstructured.Unstructured) (Result, error) {
	gvk := obj.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Result{}, fmt.Errorf("%s %q: kind not known to the API: %w", gvk.Kind, obj.GetName(), err)
	}
	u, err := e.defaulted(obj)
	if err != nil {
		return Result{}, fmt.Errorf("%s %q: %w", gvk.Kind, obj.GetName(), err)
	}
	ns := u.GetNamespace()
	switch {
	case m.Scope.Name() == meta.RESTScopeNameRoot:
		ns = ""
	case ns == "":
		ns = metav1.NamespaceDefault
	}
	u.SetNamespace(ns)
	if gvk == namespaceGVK {
		setNameLabel(u)
	}
	if err := e.ensureNamespace(ctx, ns); err != nil {
		return Result{}, err
	}

	attrs := admission.NewAttributesRecord(u, nil, gvk, ns, u.GetName(), m.Resource, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{
			Name:   GitSyncUser,
			Groups: []string{user.AllAuthenticated},
		})
	rec := &warnings{}
	err = e.plugin.Validate(warning.WithWarningRecorder(ctx, rec), attrs, admission.NewObjectInterfacesFromScheme(e.scheme))
	return Result{Denied: err, Warnings: rec.texts}, nil
}

// defaulted is obj with the defaults the API server gives its kind (a copy of obj for kinds
// without any, e.g. custom resources).
func (e *Engine) defaulted(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	if !e.scheme.Recognizes(gvk) {
		return obj.DeepCopy(), nil
	}
	typed, err := e.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
		return nil, err
	}
	e.scheme.Default(typed)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// ensureNamespace creates namespace ns in the fake clientset when it is not there: the plugin
// reads a namespace's labels (namespaceSelector, namespaceObject) from its informer, and then
// from the clientset.
func (e *Engine) ensureNamespace(ctx context.Context, ns string) error {
	if ns == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.namespaces[ns] {
		return nil
	}
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{corev1.LabelMetadataName: ns}}}
	e.scheme.Default(n)
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	e.namespaces[ns] = true
	return nil
}

// fromUnstructured decodes o into typed and defaults it as the API server does.
func fromUnstructured(scheme *runtime.Scheme, o *unstructured.Unstructured, typed runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true); err != nil {
		return fmt.Errorf("%s %q: %w", o.GetKind(), o.GetName(), err)
	}
	scheme.Default(typed)
	return nil
}

// setNameLabel gives a Namespace the kubernetes.io/metadata.name label the API server adds.
func setNameLabel(u *unstructured.Unstructured) {
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[corev1.LabelMetadataName] = u.GetName()
	u.SetLabels(labels)
}

// addCRD maps the kind of a CustomResourceDefinition in every version it serves.
func addCRD(m *meta.DefaultRESTMapper, o *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
	plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
	singular, _, _ := unstructured.NestedString(o.Object, "spec", "names", "singular")
	scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
	versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
	if group == "" || kind == "" || plural == "" {
		return fmt.Errorf("CustomResourceDefinition %q: spec.group, spec.names.kind and spec.names.plural are required", o.GetName())
	}
	if singular == "" {
		singular = strings.ToLower(kind)
	}
	s := meta.RESTScopeNamespace
	if scope == "Cluster" {
		s = meta.RESTScopeRoot
	}
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		if served, ok := vm["served"].(bool); name == "" || (ok && !served) {
			continue
		}
		gv := schema.GroupVersion{Group: group, Version: name}
		m.AddSpecific(gv.WithKind(kind), gv.WithResource(plural), gv.WithResource(singular), s)
	}
	return nil
}

// allowAll is the engine's authorizer: it allows everything. Policies see it as `authorizer`
// in their expressions; offline there are no RBAC rules to consult, so an expression such as
// `authorizer.requestResource.check('create').allowed()` is true.
type allowAll struct{}

func (allowAll) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "offline policy evaluation allows everything", nil
}

// warnings records the warnings of one request, as the API server's recorder does: in order,
// without duplicates.
type warnings struct {
	mu    sync.Mutex
	texts []string
}

func (w *warnings) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.texts {
		if t == text {
			return
		}
	}
	w.texts = append(w.texts, text)
}
