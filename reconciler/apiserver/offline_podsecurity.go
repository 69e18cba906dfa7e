package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/warning"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/defaults"
)

// PodSecurityOffline is the API server's Pod Security admission without a site: the same
// plugin, levels, exemptions and messages, over the Namespaces of a revision. A namespace the
// revision does not declare has no pod-security.kubernetes.io labels (the site default level
// applies). There are no pods: raising a namespace's level warns about none.
type PodSecurityOffline struct {
	plugin     *podSecurityPlugin
	scheme     *runtime.Scheme
	namespaces map[string]*corev1.Namespace
}

// NewPodSecurityOffline builds the check for a site whose default level is level ("" for
// DefaultPodSecurityLevel), with the given Namespaces (objects of other kinds are ignored).
func NewPodSecurityOffline(level string, objs []*unstructured.Unstructured) (*PodSecurityOffline, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	defaults.Register(s)
	c := &PodSecurityOffline{scheme: s, namespaces: map[string]*corev1.Namespace{}}
	for _, o := range objs {
		if o.GroupVersionKind() != corev1.SchemeGroupVersion.WithKind("Namespace") {
			continue
		}
		ns := &corev1.Namespace{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ns); err != nil {
			return nil, fmt.Errorf("Namespace %q: %w", o.GetName(), err)
		}
		c.namespaces[ns.Name] = ns
	}
	p, err := newPodSecurity(level, c, noPods{})
	if err != nil {
		return nil, err
	}
	c.plugin = p
	return c, nil
}

// GetNamespace implements the plugin's NamespaceGetter: the revision's Namespace, or one with
// only the kubernetes.io/metadata.name label the API server gives every Namespace.
func (c *PodSecurityOffline) GetNamespace(_ context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := c.namespaces[name]; ok {
		return ns, nil
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}}}, nil
}

// Check admits obj as a create, as the API server's Pod Security admission would, and returns
// its warnings and the API's refusal (nil when admitted). Objects of kinds the check
// does not look at (anything but Pods, pod templates and Namespaces) are admitted without
// warnings. obj is defaulted first, as the API server defaults what it decodes; a namespaced
// object without a namespace is in "default".
func (c *PodSecurityOffline) Check(ctx context.Context, obj *unstructured.Unstructured) (warnings []string, refused error) {
	gvk := obj.GroupVersionKind()
	m, err := OfflineRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil || !c.scheme.Recognizes(gvk) {
		return nil, nil
	}
	gr := m.Resource.GroupResource()
	if gr != corev1.Resource("namespaces") && gr != corev1.Resource("pods") && !c.plugin.delegate.PodSpecExtractor.HasPodSpec(gr) {
		return nil, nil
	}
	typed, err := c.scheme.New(gvk)
	if err != nil {
		return nil, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
		// Decoding errors are the offline validation's to report.
		return nil, nil
	}
	c.scheme.Default(typed)
	ns := obj.GetNamespace()
	if gr == corev1.Resource("namespaces") {
		ns = ""
		n := typed.(*corev1.Namespace)
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[corev1.LabelMetadataName] = n.Name
	} else if ns == "" {
		ns = metav1.NamespaceDefault
	}
	attrs := admission.NewAttributesRecord(typed, nil, gvk, ns, obj.GetName(), m.Resource, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "system:offline", Groups: []string{user.AllAuthenticated}})
	rec := &warningList{}
	err = c.plugin.Validate(warning.WithWarningRecorder(ctx, rec), attrs, nil)
	return rec.texts, err
}

// noPods is the PodLister of an offline check: a revision has no running pods.
type noPods struct{}

func (noPods) ListPods(context.Context, string) ([]*corev1.Pod, error) { return nil, nil }

// warningList records the warnings of one request in order, without duplicates, as the API
// server's recorder does.
type warningList struct {
	mu    sync.Mutex
	texts []string
}

func (w *warningList) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.texts, text) {
		w.texts = append(w.texts, text)
	}
}
