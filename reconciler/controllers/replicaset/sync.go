package replicaset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Event reasons and condition reasons, as upstream.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
)

// sync brings one ReplicaSet to its desired pods and writes its status. It re-derives
// everything from the informers' current state.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	rs, err := c.rsLister.ReplicaSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	needsSync := c.expectations.Satisfied(key)
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		return fmt.Errorf("selector of %s: %w", key, err)
	}
	all, err := c.podLister.Pods(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	pods, err := c.claimPods(ctx, rs, selector, internal.FilterActivePods(all))
	if err != nil {
		return err
	}

	var manageErr error
	if needsSync && rs.DeletionTimestamp == nil {
		manageErr = c.manageReplicas(ctx, pods, rs)
	}

	rs = rs.DeepCopy()
	status := calculateStatus(rs, pods, manageErr, c.now())
	updated, err := c.updateStatus(ctx, rs, status)
	if err != nil {
		return errors.Join(manageErr, err)
	}
	// Pods ready but not yet available: look again when minReadySeconds have passed.
	if manageErr == nil && updated.Spec.MinReadySeconds > 0 &&
		updated.Status.ReadyReplicas == replicas(updated) && updated.Status.AvailableReplicas != replicas(updated) {
		c.queue.AddAfter(key, time.Duration(updated.Spec.MinReadySeconds)*time.Second)
	}
	return manageErr
}

func replicas(rs *appsv1.ReplicaSet) int32 {
	if rs.Spec.Replicas == nil {
		return 1
	}
	return *rs.Spec.Replicas
}

// claimPods adopts matching orphans and releases pods that no longer match.
func (c *Controller) claimPods(ctx context.Context, rs *appsv1.ReplicaSet, selector labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	claimer := internal.Claimer[*corev1.Pod]{
		Owner:    rs,
		Selector: selector,
		CanAdopt: func(ctx context.Context) error {
			fresh, err := c.client.AppsV1().ReplicaSets(rs.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != rs.UID {
				return fmt.Errorf("original ReplicaSet %s/%s is gone: got uid %v, wanted %v", rs.Namespace, rs.Name, fresh.UID, rs.UID)
			}
			if fresh.DeletionTimestamp != nil {
				return fmt.Errorf("%s/%s has just been deleted at %v", rs.Namespace, rs.Name, fresh.DeletionTimestamp)
			}
			return nil
		},
		Adopt: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(rs, controllerKind, string(pod.UID)), metav1.PatchOptions{})
			if err == nil {
				c.log.WithField("replicaset", rs.Namespace+"/"+rs.Name).WithField("pod", pod.Name).Info("adopted pod")
			}
			return err
		},
		Release: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(rs, string(pod.UID)), metav1.PatchOptions{})
			if err == nil {
				c.log.WithField("replicaset", rs.Namespace+"/"+rs.Name).WithField("pod", pod.Name).Info("released pod")
			}
			return err
		},
	}
	return claimer.Claim(ctx, pods)
}

// manageReplicas creates or deletes pods so that len(pods) moves to spec.replicas, at most
// BurstReplicas per sync, recording expectations first so that the next sync waits for the
// informer to show the result.
func (c *Controller) manageReplicas(ctx context.Context, pods []*corev1.Pod, rs *appsv1.ReplicaSet) error {
	key, _ := cache.MetaNamespaceKeyFunc(rs)
	diff := len(pods) - int(replicas(rs))
	switch {
	case diff < 0:
		n := min(-diff, c.burst)
		c.expectations.ExpectCreations(key, n)
		ok, err := internal.SlowStartBatch(n, internal.SlowStartInitialBatchSize, func() error {
			return c.createPod(ctx, rs)
		})
		// The creations that never happened will never be observed.
		for i := 0; i < n-ok; i++ {
			c.expectations.CreationObserved(key)
		}
		return err
	case diff > 0:
		n := min(diff, c.burst)
		victims := internal.PodsToDelete(pods, n)
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = internal.PodKey(p)
		}
		c.expectations.ExpectDeletions(key, keys)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		for _, p := range victims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.deletePodOf(ctx, rs, p); err != nil {
					c.expectations.DeletionObserved(key, internal.PodKey(p))
					if !apierrors.IsNotFound(err) {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return nil
}

func (c *Controller) createPod(ctx context.Context, rs *appsv1.ReplicaSet) error {
	pod := internal.PodFromTemplate(&rs.Spec.Template, rs, controllerKind)
	if len(pod.Labels) == 0 {
		return fmt.Errorf("unable to create pods, no labels")
	}
	created, err := c.client.CoreV1().Pods(rs.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		// A namespace being deleted refuses pods; that is not this ReplicaSet's failure.
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		c.recorder.Eventf(rs, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		return err
	}
	c.recorder.Eventf(rs, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.Name)
	return nil
}

func (c *Controller) deletePodOf(ctx context.Context, rs *appsv1.ReplicaSet, pod *corev1.Pod) error {
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.recorder.Eventf(rs, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		}
		return err
	}
	c.recorder.Eventf(rs, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", pod.Name)
	return nil
}

// calculateStatus derives the status from the pods the ReplicaSet controls.
func calculateStatus(rs *appsv1.ReplicaSet, pods []*corev1.Pod, manageErr error, now time.Time) appsv1.ReplicaSetStatus {
	status := *rs.Status.DeepCopy()
	templateLabels := labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated()
	var fully, ready, available int32
	for _, p := range pods {
		if templateLabels.Matches(labels.Set(p.Labels)) {
			fully++
		}
		if internal.IsPodReady(p) {
			ready++
			if internal.IsPodAvailable(p, rs.Spec.MinReadySeconds, now) {
				available++
			}
		}
	}
	status.Replicas = int32(len(pods))
	status.FullyLabeledReplicas = fully
	status.ReadyReplicas = ready
	status.AvailableReplicas = available
	status.ObservedGeneration = rs.Generation

	failure := -1
	for i, cond := range status.Conditions {
		if cond.Type == appsv1.ReplicaSetReplicaFailure {
			failure = i
		}
	}
	if manageErr != nil && failure < 0 {
		reason := ReasonFailedCreate
		if int(replicas(rs)) < len(pods) {
			reason = ReasonFailedDelete
		}
		status.Conditions = append(status.Conditions, appsv1.ReplicaSetCondition{
			Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: manageErr.Error(),
		})
	} else if manageErr == nil && failure >= 0 {
		status.Conditions = append(status.Conditions[:failure], status.Conditions[failure+1:]...)
	}
	return status
}

func statusEqual(a, b appsv1.ReplicaSetStatus) bool {
	return a.Replicas == b.Replicas && a.FullyLabeledReplicas == b.FullyLabeledReplicas &&
		a.ReadyReplicas == b.ReadyReplicas && a.AvailableReplicas == b.AvailableReplicas &&
		a.ObservedGeneration == b.ObservedGeneration && len(a.Conditions) == len(b.Conditions)
}

// updateStatus writes status through the status subresource when it changed, retrying once
// on a conflict with a fresh read.
func (c *Controller) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, status appsv1.ReplicaSetStatus) (*appsv1.ReplicaSet, error) {
	if statusEqual(rs.Status, status) && rs.Generation == rs.Status.ObservedGeneration {
		return rs, nil
	}
	client := c.client.AppsV1().ReplicaSets(rs.Namespace)
	var err error
	for i := 0; i < 2; i++ {
		rs.Status = status
		var updated *appsv1.ReplicaSet
		updated, err = client.UpdateStatus(ctx, rs, metav1.UpdateOptions{})
		if err == nil {
			return updated, nil
		}
		if !apierrors.IsConflict(err) {
			break
		}
		fresh, gerr := client.Get(ctx, rs.Name, metav1.GetOptions{})
		if gerr != nil {
			return nil, gerr
		}
		rs = fresh
	}
	return nil, fmt.Errorf("update status of %s/%s: %w", rs.Namespace, rs.Name, err)
}
