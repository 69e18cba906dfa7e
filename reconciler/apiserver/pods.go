package apiserver

import (
	"context"
	"fmt"
	"time"

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
	storeerr "k8s.io/apiserver/pkg/storage/errors"
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
		// 404 for a missing pod, 409 for another object of the name (the UID precondition).
		return nil, storeerr.InterpretUpdateError(err, podsResource, name)
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
	now  func() time.Time
}

var (
	_ rest.NamedCreater             = &evictionREST{}
	_ rest.GroupVersionKindProvider = &evictionREST{}
)

// maxDisruptedPods bounds status.disruptedPods: more evictions not yet confirmed by the
// disruption controller are refused, as upstream.
const maxDisruptedPods = 2000

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
	dryRun := len(deleteOptions.DryRun) > 0
	// Pods that are not running, or already terminating, can always go.
	unchanged := false
	if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodPending {
		if unchanged, err = r.checkBudgets(ctx, pod, dryRun); err != nil {
			return nil, err
		}
	}
	// An unready pod evicted without consuming the budget goes only if it is still the pod
	// that was judged (it may have become ready since).
	rvSet := deleteOptions.Preconditions != nil && deleteOptions.Preconditions.ResourceVersion != nil
	if unchanged && !rvSet {
		deleteOptions = deleteOptions.DeepCopy()
		if deleteOptions.Preconditions == nil {
			deleteOptions.Preconditions = &metav1.Preconditions{}
		}
		rv := pod.ResourceVersion
		deleteOptions.Preconditions.ResourceVersion = &rv
	}
	if !dryRun {
		if deleteOptions, err = r.markDisruptionTarget(ctx, name, deleteOptions); err != nil {
			if apierrors.IsConflict(err) && unchanged && !rvSet {
				return nil, budgetBeingProcessed("")
			}
			return nil, err
		}
	}
	if _, _, err := r.pods.Delete(ctx, name, rest.ValidateAllObjectFunc, deleteOptions); err != nil {
		if apierrors.IsConflict(err) && unchanged && !rvSet {
			return nil, budgetBeingProcessed("")
		}
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess, Code: 201}, nil
}

// markDisruptionTarget sets the pod's DisruptionTarget condition (reason
// EvictionByEvictionAPI) before it is deleted, honouring the eviction's UID and
// resourceVersion preconditions; the returned options carry the pod's new resourceVersion
// where they named one.
func (r *evictionREST) markDisruptionTarget(ctx context.Context, name string, opts *metav1.DeleteOptions) (*metav1.DeleteOptions, error) {
	key, err := r.pods.KeyFunc(ctx, name)
	if err != nil {
		return nil, err
	}
	var precond *storage.Preconditions
	if p := opts.Preconditions; p != nil {
		precond = &storage.Preconditions{UID: p.UID, ResourceVersion: p.ResourceVersion}
	}
	out := &corev1.Pod{}
	err = r.pods.Storage.GuaranteedUpdate(ctx, key, out, false, precond,
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			pod := obj.(*corev1.Pod)
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI" {
					return pod, nil
				}
			}
			setPodCondition(pod, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: metav1.Now()})
			return pod, nil
		}), false, nil)
	if err != nil {
		return nil, err
	}
	if opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil {
		opts = opts.DeepCopy()
		rv := out.ResourceVersion
		opts.Preconditions.ResourceVersion = &rv
	}
	return opts, nil
}

// checkBudgets consumes one allowed disruption of the budget selecting the pod, or refuses.
// unchanged reports an unready pod let go without consuming the budget, which must be
// deleted only as it was judged.
func (r *evictionREST) checkBudgets(ctx context.Context, pod *corev1.Pod, dryRun bool) (unchanged bool, err error) {
	listObj, err := r.pdbs.List(genericapirequest.WithNamespace(ctx, pod.Namespace), nil)
	if err != nil {
		return false, err
	}
	var matching []policyv1.PodDisruptionBudget
	for _, pdb := range listObj.(*policyv1.PodDisruptionBudgetList).Items {
		// In policy/v1 an empty selector matches every pod and a missing one none.
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		matching = append(matching, pdb)
	}
	if len(matching) == 0 {
		return false, nil
	}
	if len(matching) > 1 {
		return false, apierrors.NewInternalError(fmt.Errorf("this pod has more than one PodDisruptionBudget, which the eviction subresource does not support"))
	}
	pdb := matching[0]
	if !podReady(pod) {
		// An unready pod does not count as healthy: it may go when the budget says so
		// (AlwaysAllow), or by default while the budget is met without it.
		if pdb.Spec.UnhealthyPodEvictionPolicy != nil && *pdb.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow {
			return true, nil
		}
		if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
			return true, nil
		}
	}
	if dryRun {
		_, err := consumeDisruption(&pdb, pod.Name, time.Time{})
		return false, err
	}
	key, err := r.pdbs.KeyFunc(genericapirequest.WithNamespace(ctx, pdb.Namespace), pdb.Name)
	if err != nil {
		return false, err
	}
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	// The check and the decrement happen on the stored budget in one compare-and-swap on
	// its resourceVersion: two evictions can never both take the last disruption, and a
	// status written by the controller in between is seen (the update is retried on it).
	uid := pdb.UID
	return false, r.pdbs.Storage.GuaranteedUpdate(ctx, key, &policyv1.PodDisruptionBudget{}, false, &storage.Preconditions{UID: &uid},
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			return consumeDisruption(obj.(*policyv1.PodDisruptionBudget), pod.Name, now())
		}), false, nil)
}

// consumeDisruption takes one allowed disruption of pdb for the pod, recording it in
// status.disruptedPods at now (unless now is zero, for a dry run), or says why not.
func consumeDisruption(pdb *policyv1.PodDisruptionBudget, podName string, now time.Time) (*policyv1.PodDisruptionBudget, error) {
	switch {
	case pdb.Status.ObservedGeneration < pdb.Generation:
		return nil, budgetBeingProcessed(pdb.Name)
	case pdb.Status.DisruptionsAllowed < 0:
		return nil, apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, fmt.Errorf("pdb disruptions allowed is negative"))
	case len(pdb.Status.DisruptedPods) > maxDisruptedPods:
		return nil, apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name,
			fmt.Errorf("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
	case pdb.Status.DisruptionsAllowed == 0:
		err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently",
				pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy),
		})
		return nil, err
	}
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptionsAllowed == 0 {
		setCondition(&pdb.Status.Conditions, metav1.Condition{
			Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
			Reason: policyv1.InsufficientPodsReason, ObservedGeneration: pdb.Status.ObservedGeneration,
		}, now)
	}
	if now.IsZero() {
		return pdb, nil
	}
	if pdb.Status.DisruptedPods == nil {
		pdb.Status.DisruptedPods = map[string]metav1.Time{}
	}
	pdb.Status.DisruptedPods[podName] = metav1.NewTime(now)
	return pdb, nil
}

// setCondition sets c in conds, keeping the transition time when the status is unchanged.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	if now.IsZero() {
		now = time.Now()
	}
	for i := range *conds {
		if (*conds)[i].Type == c.Type {
			c.LastTransitionTime = (*conds)[i].LastTransitionTime
			if (*conds)[i].Status != c.Status {
				c.LastTransitionTime = metav1.NewTime(now)
			}
			(*conds)[i] = c
			return
		}
	}
	c.LastTransitionTime = metav1.NewTime(now)
	*conds = append(*conds, c)
}

// budgetBeingProcessed is the 429 of a budget whose status does not describe its spec yet
// (or of an unready pod that changed while it was judged).
func budgetBeingProcessed(name string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	msg := "The pod changed while its eviction was being decided; try again."
	if name != "" {
		msg = fmt.Sprintf("The disruption budget %s is still being processed by the server.", name)
	}
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
	return err
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
