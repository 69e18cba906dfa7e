package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
)

var podsResource = corev1.Resource("pods")

// bindingREST serves pods/binding: the scheduler's decision commits only while the pod is
// still unbound, in one etcd transaction (two schedulers can never both win).
type bindingREST struct {
	pods *genericregistry.Store
}

var _ rest.NamedCreater = &bindingREST{}

func (r *bindingREST) New() runtime.Object { return &corev1.Binding{} }
func (r *bindingREST) Destroy()            {}

func (r *bindingREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	binding, ok := obj.(*corev1.Binding)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Binding object: %T", obj))
	}
	if name != binding.Name {
		return nil, apierrors.NewBadRequest("name in URL does not match name in Binding object")
	}
	var errs field.ErrorList
	if binding.Target.Name == "" {
		errs = append(errs, field.Required(field.NewPath("target", "name"), "the node to bind to"))
	}
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		errs = append(errs, field.NotSupported(field.NewPath("target", "kind"), binding.Target.Kind, []string{"Node", "<empty>"}))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Binding").GroupKind(), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, binding.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	if options != nil && len(options.DryRun) > 0 {
		return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}, nil
	}
	key, err := r.pods.KeyFunc(ctx, name)
	if err != nil {
		return nil, err
	}
	var precond *storage.Preconditions
	if binding.UID != "" {
		precond = &storage.Preconditions{UID: &binding.UID}
	}
	err = r.pods.Storage.GuaranteedUpdate(ctx, key, &corev1.Pod{}, false, precond,
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			pod := obj.(*corev1.Pod)
			if pod.DeletionTimestamp != nil {
				return nil, apierrors.NewConflict(podsResource, name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", name))
			}
			if pod.Spec.NodeName != "" {
				return nil, apierrors.NewConflict(podsResource, name, fmt.Errorf("pod %s is already assigned to node %q", name, pod.Spec.NodeName))
			}
			pod.Spec.NodeName = binding.Target.Name
			for k, v := range binding.Annotations {
				if pod.Annotations == nil {
					pod.Annotations = map[string]string{}
				}
				pod.Annotations[k] = v
			}
			setPodCondition(pod, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
			return pod, nil
		}), false, nil)
	if err != nil {
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}, nil
}

func setPodCondition(pod *corev1.Pod, c corev1.PodCondition) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == c.Type {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}

// evictionREST serves pods/eviction: the pod is deleted unless a PodDisruptionBudget that
// selects it allows no disruption now (429, as upstream).
type evictionREST struct {
	pods *genericregistry.Store
	pdbs *genericregistry.Store
}

var (
	_ rest.NamedCreater             = &evictionREST{}
	_ rest.GroupVersionKindProvider = &evictionREST{}
)

func (r *evictionREST) New() runtime.Object { return &policyv1.Eviction{} }
func (r *evictionREST) Destroy()            {}

func (r *evictionREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return policyv1.SchemeGroupVersion.WithKind("Eviction")
}

func (r *evictionREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	eviction, ok := obj.(*policyv1.Eviction)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not an Eviction object: %T", obj))
	}
	if name != eviction.Name {
		return nil, apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	if createValidation != nil {
		if err := createValidation(ctx, eviction.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	podObj, err := r.pods.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod := podObj.(*corev1.Pod)
	deleteOptions := eviction.DeleteOptions
	if deleteOptions == nil {
		deleteOptions = &metav1.DeleteOptions{}
	}
	if options != nil && len(options.DryRun) > 0 {
		deleteOptions = deleteOptions.DeepCopy()
		deleteOptions.DryRun = options.DryRun
	}
	// Pods that are not running, or already terminating, can always go.
	if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodPending {
		if err := r.checkBudgets(ctx, pod, len(deleteOptions.DryRun) > 0); err != nil {
			return nil, err
		}
	}
	if _, _, err := r.pods.Delete(ctx, name, rest.ValidateAllObjectFunc, deleteOptions); err != nil {
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}, nil
}

// checkBudgets consumes one allowed disruption of the budget selecting the pod, or refuses.
func (r *evictionREST) checkBudgets(ctx context.Context, pod *corev1.Pod, dryRun bool) error {
	listObj, err := r.pdbs.List(genericapirequest.WithNamespace(ctx, pod.Namespace), nil)
	if err != nil {
		return err
	}
	var matching []policyv1.PodDisruptionBudget
	for _, pdb := range listObj.(*policyv1.PodDisruptionBudgetList).Items {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		matching = append(matching, pdb)
	}
	if len(matching) == 0 {
		return nil
	}
	if len(matching) > 1 {
		return apierrors.NewInternalError(fmt.Errorf("this pod has more than one PodDisruptionBudget, which the eviction subresource does not support"))
	}
	pdb := matching[0]
	// An unhealthy pod may go when the budget says so.
	if pdb.Spec.UnhealthyPodEvictionPolicy != nil && *pdb.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow && !podReady(pod) {
		return nil
	}
	if pdb.Status.ObservedGeneration < pdb.Generation || pdb.Status.DisruptionsAllowed <= 0 {
		err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s needs %s healthy pods and has %d currently", pdb.Name, budgetNeed(pdb), pdb.Status.CurrentHealthy),
		})
		return err
	}
	if dryRun {
		return nil
	}
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptedPods == nil {
		pdb.Status.DisruptedPods = map[string]metav1.Time{}
	}
	pdb.Status.DisruptedPods[pod.Name] = metav1.Now()
	key, err := r.pdbs.KeyFunc(genericapirequest.WithNamespace(ctx, pdb.Namespace), pdb.Name)
	if err != nil {
		return err
	}
	rv := pdb.ResourceVersion
	return r.pdbs.Storage.GuaranteedUpdate(ctx, key, &policyv1.PodDisruptionBudget{}, false, &storage.Preconditions{ResourceVersion: &rv},
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			cur := obj.(*policyv1.PodDisruptionBudget)
			cur.Status = pdb.Status
			return cur, nil
		}), false, nil)
}

func budgetNeed(pdb policyv1.PodDisruptionBudget) string {
	if pdb.Spec.MinAvailable != nil {
		m := *pdb.Spec.MinAvailable
		return m.String()
	}
	return fmt.Sprintf("%d", pdb.Status.DesiredHealthy)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
