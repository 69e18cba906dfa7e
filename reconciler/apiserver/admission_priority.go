package apiserver

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// PriorityPluginName is the admission plugin's upstream name.
const PriorityPluginName = "Priority"

var priorityClassesResource = schedulingv1.Resource("priorityclasses")

// priorityPlugin is the Priority admission plugin, as upstream (plugin/pkg/admission/priority):
//
//   - a new Pod gets spec.priority and spec.preemptionPolicy from the PriorityClass it names, or
//     from the global default class (priority 0 when there is none, and the pod then also gets
//     that class's name); a pod naming an unknown class, or setting a priority or preemption
//     policy other than its class's, is refused. A pod update keeps what creation set.
//   - at most one PriorityClass is the global default;
//   - the built-in classes (system-node-critical, system-cluster-critical) cannot be deleted.
//
// The scheduler orders its queue by spec.priority.
type priorityPlugin struct {
	*admission.Handler
	lister schedulinglisters.PriorityClassLister
	// client looks a class up when the informer has not seen it yet (created just before the
	// pod); nil in tests.
	client kubernetes.Interface
}

var (
	_ admission.MutationInterface   = (*priorityPlugin)(nil)
	_ admission.ValidationInterface = (*priorityPlugin)(nil)
)

// newPriorityPlugin reads PriorityClasses from the API server's own informers.
func newPriorityPlugin(f informers.SharedInformerFactory, client kubernetes.Interface) *priorityPlugin {
	inf := f.Scheduling().V1().PriorityClasses()
	p := &priorityPlugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), lister: inf.Lister(), client: client}
	p.SetReadyFunc(inf.Informer().HasSynced)
	return p
}

// Admit resolves the priority of new pods and keeps it on pod updates.
func (p *priorityPlugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	// Deleting a pod carries no object to admit (the plugin handles Delete for classes).
	if a.GetOperation() == admission.Delete || a.GetSubresource() != "" || a.GetResource().GroupResource() != corev1.Resource("pods") {
		return nil
	}
	pod, ok := a.GetObject().(*corev1.Pod)
	if !ok {
		return apierrors.NewBadRequest("resource was marked with kind Pod but was unable to be converted")
	}
	switch a.GetOperation() {
	case admission.Create:
		return p.admitNewPod(ctx, a, pod)
	case admission.Update:
		// Creation set these; update validation refuses changing them, so a client that
		// leaves them out (kubectl replace of the original manifest) keeps them.
		if old, ok := a.GetOldObject().(*corev1.Pod); ok {
			if pod.Spec.Priority == nil && old.Spec.Priority != nil {
				pod.Spec.Priority = new(*old.Spec.Priority)
			}
			if pod.Spec.PreemptionPolicy == nil && old.Spec.PreemptionPolicy != nil {
				pod.Spec.PreemptionPolicy = new(*old.Spec.PreemptionPolicy)
			}
		}
	}
	return nil
}

func (p *priorityPlugin) admitNewPod(ctx context.Context, a admission.Attributes, pod *corev1.Pod) error {
	var priority int32
	var policy *corev1.PreemptionPolicy
	if name := pod.Spec.PriorityClassName; name == "" {
		dpc, err := p.defaultClass()
		if err != nil {
			return fmt.Errorf("failed to get default priority class: %w", err)
		}
		if dpc != nil {
			pod.Spec.PriorityClassName = dpc.Name
			priority, policy = dpc.Value, dpc.PreemptionPolicy
		} else {
			policy = new(corev1.PreemptLowerPriority)
		}
	} else {
		pc, err := p.get(ctx, name)
		if apierrors.IsNotFound(err) {
			return admission.NewForbidden(a, fmt.Errorf("no PriorityClass with name %v was found", name))
		}
		if err != nil {
			return fmt.Errorf("failed to get PriorityClass with name %s: %w", name, err)
		}
		priority, policy = pc.Value, pc.PreemptionPolicy
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority != priority {
		return admission.NewForbidden(a, fmt.Errorf("the integer value of priority (%d) must not be provided in pod spec; "+
			"priority admission controller computed %d from the given PriorityClass name", *pod.Spec.Priority, priority))
	}
	pod.Spec.Priority = &priority
	if policy != nil {
		if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy != *policy {
			return admission.NewForbidden(a, fmt.Errorf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; "+
				"priority admission controller computed %s from the given PriorityClass name", *pod.Spec.PreemptionPolicy, *policy))
		}
		pod.Spec.PreemptionPolicy = new(*policy)
	}
	return nil
}

// Validate keeps a single global default class and the built-in classes.
func (p *priorityPlugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" || a.GetResource().GroupResource() != priorityClassesResource {
		return nil
	}
	switch a.GetOperation() {
	case admission.Delete:
		name := a.GetName()
		if name == "" { // deletecollection: one call per object
			if old, err := metaName(a.GetOldObject()); err == nil {
				name = old
			}
		}
		if validation.IsSystemPriorityClass(name) {
			return apierrors.NewForbidden(priorityClassesResource, name, errors.New("this is a system priority class and cannot be deleted"))
		}
		return nil
	case admission.Create, admission.Update:
		pc, ok := a.GetObject().(*schedulingv1.PriorityClass)
		if !ok {
			return apierrors.NewBadRequest("resource was marked with kind PriorityClass but was unable to be converted")
		}
		if !pc.GlobalDefault {
			return nil
		}
		dpc, err := p.defaultClass()
		if err != nil {
			return fmt.Errorf("failed to get default priority class: %w", err)
		}
		if dpc != nil && (a.GetOperation() == admission.Create || dpc.Name != pc.Name) {
			return admission.NewForbidden(a, fmt.Errorf("PriorityClass %v is already marked as default. Only one default can exist", dpc.Name))
		}
	}
	return nil
}

// defaultClass returns the global default class: if a race let several exist, the one with the
// lowest value, as upstream.
func (p *priorityPlugin) defaultClass() (*schedulingv1.PriorityClass, error) {
	list, err := p.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var dpc *schedulingv1.PriorityClass
	for _, pc := range list {
		if pc.GlobalDefault && (dpc == nil || pc.Value < dpc.Value) {
			dpc = pc
		}
	}
	return dpc, nil
}

func (p *priorityPlugin) get(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	pc, err := p.lister.Get(name)
	if apierrors.IsNotFound(err) && p.client != nil {
		return p.client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	}
	return pc, err
}

func metaName(obj any) (string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("%T has no object metadata", obj)
	}
	return m.GetName(), nil
}
