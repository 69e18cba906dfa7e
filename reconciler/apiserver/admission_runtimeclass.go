package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	nodelisters "k8s.io/client-go/listers/node/v1"
)

// RuntimeClassPluginName is the admission plugin's upstream name.
const RuntimeClassPluginName = "RuntimeClass"

// FlotillaRuntimeHandler is the one container runtime handler of flotilla hosts: the node agent
// runs every container with containerd's runc shim (nodes/runtime), whatever the pod's
// spec.runtimeClassName says.
const FlotillaRuntimeHandler = "runc"

var runtimeClassesResource = nodev1.Resource("runtimeclasses")

// runtimeClassPlugin is the RuntimeClass admission plugin, as upstream
// (plugin/pkg/admission/runtimeclass): a new Pod naming spec.runtimeClassName must name an
// existing RuntimeClass; the class's overhead is set as spec.overhead (a pod with another
// overhead, or an overhead without a class that has one, is refused), and the class's
// scheduling nodeSelector and tolerations are merged into the pod's.
//
// Flotilla's node agent ignores spec.runtimeClassName and runs every container with runc. So
// that nobody is misled, a RuntimeClass whose handler is not runc is accepted with a warning,
// and so is a pod naming one.
type runtimeClassPlugin struct {
	*admission.Handler
	lister nodelisters.RuntimeClassLister
	// client looks a class up when the informer has not seen it yet; nil in tests.
	client kubernetes.Interface
}

var (
	_ admission.MutationInterface   = (*runtimeClassPlugin)(nil)
	_ admission.ValidationInterface = (*runtimeClassPlugin)(nil)
)

// newRuntimeClassPlugin reads RuntimeClasses from the API server's own informers.
func newRuntimeClassPlugin(f informers.SharedInformerFactory, client kubernetes.Interface) *runtimeClassPlugin {
	inf := f.Node().V1().RuntimeClasses()
	p := &runtimeClassPlugin{Handler: admission.NewHandler(admission.Create, admission.Update), lister: inf.Lister(), client: client}
	p.SetReadyFunc(inf.Informer().HasSynced)
	return p
}

func isPodCreate(a admission.Attributes) bool {
	return a.GetOperation() == admission.Create && a.GetSubresource() == "" && a.GetResource().GroupResource() == corev1.Resource("pods")
}

// Admit sets the overhead and the scheduling constraints of a new pod's RuntimeClass.
func (p *runtimeClassPlugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !isPodCreate(a) {
		return nil
	}
	pod, rc, err := p.podAndClass(ctx, a)
	if err != nil || rc == nil {
		return err
	}
	if rc.Overhead != nil {
		if len(pod.Spec.Overhead) > 0 && !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return admission.NewForbidden(a, fmt.Errorf("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"))
		}
		pod.Spec.Overhead = rc.Overhead.PodFixed.DeepCopy()
	}
	if s := rc.Scheduling; s != nil {
		selector := pod.Spec.NodeSelector
		if selector == nil {
			selector = map[string]string{}
		}
		for k, v := range s.NodeSelector {
			if pv, ok := selector[k]; ok && pv != v {
				return admission.NewForbidden(a, fmt.Errorf("conflict: runtimeClass.scheduling.nodeSelector[%s] = %s; pod.spec.nodeSelector[%s] = %s", k, v, k, pv))
			}
			selector[k] = v
		}
		if len(selector) > 0 {
			pod.Spec.NodeSelector = selector
		}
		pod.Spec.Tolerations = mergeTolerations(pod.Spec.Tolerations, s.Tolerations)
	}
	return nil
}

// Validate checks a new pod's overhead against its class, and warns about RuntimeClasses, and
// pods naming them, whose handler flotilla hosts do not have.
func (p *runtimeClassPlugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() == "" && a.GetResource().GroupResource() == runtimeClassesResource {
		if rc, ok := a.GetObject().(*nodev1.RuntimeClass); ok && rc.Handler != FlotillaRuntimeHandler {
			warning.AddWarning(ctx, "", fmt.Sprintf("handler %q is not available on flotilla hosts: their node agent runs every container "+
				"with %s and ignores spec.runtimeClassName, so pods naming RuntimeClass %q run with %s, not %s",
				rc.Handler, FlotillaRuntimeHandler, rc.Name, FlotillaRuntimeHandler, rc.Handler))
		}
		return nil
	}
	if !isPodCreate(a) {
		return nil
	}
	pod, rc, err := p.podAndClass(ctx, a)
	if err != nil {
		return err
	}
	switch {
	case rc != nil && rc.Overhead != nil:
		if !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return admission.NewForbidden(a, fmt.Errorf("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"))
		}
	case pod.Spec.Overhead != nil:
		return admission.NewForbidden(a, fmt.Errorf("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"))
	}
	if rc != nil && rc.Handler != FlotillaRuntimeHandler {
		warning.AddWarning(ctx, "", fmt.Sprintf("RuntimeClass %q has handler %q, which flotilla hosts do not have: "+
			"the node agent ignores spec.runtimeClassName and runs this pod with %s", rc.Name, rc.Handler, FlotillaRuntimeHandler))
	}
	return nil
}

// podAndClass returns the pod of a and the RuntimeClass it names (nil when it names none). A
// pod naming a class that does not exist is refused.
func (p *runtimeClassPlugin) podAndClass(ctx context.Context, a admission.Attributes) (*corev1.Pod, *nodev1.RuntimeClass, error) {
	pod, ok := a.GetObject().(*corev1.Pod)
	if !ok {
		return nil, nil, apierrors.NewBadRequest("Resource was marked with kind Pod but was unable to be converted")
	}
	if pod.Spec.RuntimeClassName == nil {
		return pod, nil, nil
	}
	name := *pod.Spec.RuntimeClassName
	rc, err := p.lister.Get(name)
	if apierrors.IsNotFound(err) && p.client != nil {
		// The informer may lag behind a class created just before the pod.
		rc, err = p.client.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return pod, nil, admission.NewForbidden(a, fmt.Errorf("pod rejected: RuntimeClass %q not found", name))
	}
	if err != nil {
		return pod, nil, fmt.Errorf("get RuntimeClass %q: %w", name, err)
	}
	// The pod gets parts of it: never share the informer's copy.
	return pod, rc.DeepCopy(), nil
}

// mergeTolerations merges two sets of tolerations, keeping only the superset where one
// tolerates everything another does (upstream pkg/util/tolerations.MergeTolerations).
func mergeTolerations(first, second []corev1.Toleration) []corev1.Toleration {
	all := append(append([]corev1.Toleration(nil), first...), second...)
	var merged []corev1.Toleration
next:
	for i, t := range all {
		for _, m := range merged {
			if isSupersetToleration(m, t) {
				continue next // t is redundant
			}
		}
		for _, later := range all[i+1:] {
			// Of two equal tolerations the first is kept.
			if !apiequality.Semantic.DeepEqual(&t, &later) && isSupersetToleration(later, t) {
				continue next
			}
		}
		merged = append(merged, t)
	}
	return merged
}

// isSupersetToleration reports whether ss tolerates every taint t tolerates.
func isSupersetToleration(ss, t corev1.Toleration) bool {
	if apiequality.Semantic.DeepEqual(&t, &ss) {
		return true
	}
	// An empty key with operator Exists matches every key.
	if t.Key != ss.Key && (ss.Key != "" || ss.Operator != corev1.TolerationOpExists) {
		return false
	}
	// An empty effect matches every effect.
	if t.Effect != ss.Effect && ss.Effect != "" {
		return false
	}
	if ss.Effect == corev1.TaintEffectNoExecute && ss.TolerationSeconds != nil {
		if t.TolerationSeconds == nil || *t.TolerationSeconds > *ss.TolerationSeconds {
			return false
		}
	}
	switch ss.Operator {
	case corev1.TolerationOpEqual, "": // empty means Equal
		return (t.Operator == corev1.TolerationOpEqual || t.Operator == "") && t.Value == ss.Value
	case corev1.TolerationOpExists:
		return true
	default:
		return false
	}
}
