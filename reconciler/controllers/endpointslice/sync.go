package endpointslice

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// sync brings the slices and the Endpoints of one Service in line with its pods. It writes
// nothing when they already are.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.svcLister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// Slices go with their owner (garbage collector); the Endpoints has no owner.
		c.tracker.forget(key)
		return c.deleteEndpoints(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	if c.tracker.stale(key, func(n string) *discoveryv1.EndpointSlice {
		es, err := c.sliceLister.EndpointSlices(ns).Get(n)
		if err != nil {
			return nil
		}
		return es
	}) {
		c.requeueStale(key)
		return nil
	}
	existing, err := c.managedSlices(svc)
	if err != nil {
		return err
	}
	if selectorless(svc) {
		// The user's own slices carry another managed-by value and are not in existing.
		return c.apply(ctx, key, svc, plan{delete: existing})
	}
	pods, err := c.podLister.Pods(ns).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	desired := desiredGroups(svc, pods, c.zoneOf)
	errSlices := c.apply(ctx, key, svc, planSlices(svc, existing, desired, c.MaxEndpoints))
	errEndpoints := c.syncEndpoints(ctx, svc, pods)
	return errors.Join(errSlices, errEndpoints)
}

func (c *Controller) zoneOf(node string) string {
	n, err := c.nodeLister.Get(node)
	if err != nil {
		return ""
	}
	return n.Labels[corev1.LabelTopologyZone]
}

// managedSlices lists the slices this controller manages under the Service's name.
func (c *Controller) managedSlices(svc *corev1.Service) ([]*discoveryv1.EndpointSlice, error) {
	sel := labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: svc.Name,
		discoveryv1.LabelManagedBy:   ControllerName,
	})
	return c.sliceLister.EndpointSlices(svc.Namespace).List(sel)
}

// apply performs a plan: creates, then updates, then deletes.
func (c *Controller) apply(ctx context.Context, key string, svc *corev1.Service, p plan) error {
	if p.empty() {
		return nil
	}
	api := c.client.DiscoveryV1().EndpointSlices(svc.Namespace)
	var errs []error
	for _, es := range p.create {
		got, err := api.Create(ctx, es, metav1.CreateOptions{})
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil
			}
			errs = append(errs, fmt.Errorf("create slice for service %s: %w", key, err))
			continue
		}
		c.tracker.wrote(key, got, false)
	}
	for _, es := range p.update {
		got, err := api.Update(ctx, es, metav1.UpdateOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("update slice %s/%s: %w", es.Namespace, es.Name, err))
			continue
		}
		c.tracker.wrote(key, got, false)
	}
	for _, es := range p.delete {
		err := api.Delete(ctx, es.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &es.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete slice %s/%s: %w", es.Namespace, es.Name, err))
			continue
		}
		c.tracker.wrote(key, es, true)
	}
	c.log.WithFields(logrus.Fields{"service": key, "created": len(p.create), "updated": len(p.update),
		"deleted": len(p.delete)}).Debug("endpoint slices written")
	return errors.Join(errs...)
}

// syncEndpoints maintains the legacy Endpoints object of a Service with a selector.
func (c *Controller) syncEndpoints(ctx context.Context, svc *corev1.Service, pods []*corev1.Pod) error {
	subsets, truncated := desiredSubsets(svc, pods, MaxEndpointsAddresses)
	lbls := endpointsLabels(svc)
	cur, err := c.epLister.Endpoints(svc.Namespace).Get(svc.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	api := c.client.CoreV1().Endpoints(svc.Namespace)
	if cur == nil {
		ep := &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: lbls},
			Subsets:    subsets,
		}
		if truncated {
			ep.Annotations = map[string]string{OverCapacityAnnotation: "truncated"}
		}
		if _, err := api.Create(ctx, ep, metav1.CreateOptions{}); err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil
			}
			return fmt.Errorf("create endpoints %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		return nil
	}
	_, marked := cur.Annotations[OverCapacityAnnotation]
	if marked == truncated && apiequality.Semantic.DeepEqual(cur.Labels, lbls) &&
		apiequality.Semantic.DeepEqual(cur.Subsets, subsets) {
		return nil
	}
	ep := cur.DeepCopy()
	ep.Labels, ep.Subsets = lbls, subsets
	if truncated {
		if ep.Annotations == nil {
			ep.Annotations = map[string]string{}
		}
		ep.Annotations[OverCapacityAnnotation] = "truncated"
	} else {
		delete(ep.Annotations, OverCapacityAnnotation)
	}
	if _, err := api.Update(ctx, ep, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update endpoints %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// deleteEndpoints removes the Endpoints of a deleted Service, if this controller wrote it.
func (c *Controller) deleteEndpoints(ctx context.Context, ns, name string) error {
	cur, err := c.epLister.Endpoints(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.Labels[SkipMirrorLabel] != "true" {
		return nil
	}
	err = c.client.CoreV1().Endpoints(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete endpoints %s/%s: %w", ns, name, err)
	}
	return nil
}
