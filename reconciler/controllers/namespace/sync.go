package namespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// sync takes one namespace a step further in its deletion. It reports requeue when content
// is still going away (nothing failed, it only takes time).
func (c *Controller) sync(ctx context.Context, name string) (requeue bool, err error) {
	ns, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if ns.DeletionTimestamp == nil {
		return false, nil
	}
	log := c.log.WithField("namespace", name)
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		// Emptied already (or finalized by hand). Once no other finalizer holds it, the
		// namespace needs one more DELETE to go.
		if len(ns.Spec.Finalizers) == 0 {
			return false, c.deleteNamespace(ctx, ns)
		}
		return false, nil
	}

	p := c.deleteContent(ctx, name)
	if ns, err = c.updateConditions(ctx, ns, p); err != nil {
		return false, err
	}
	if err := errors.Join(append([]error{p.discoveryErr}, p.deleteErrs...)...); err != nil {
		return false, err
	}
	if len(p.remaining) > 0 {
		return true, nil
	}

	fin := ns.DeepCopy()
	fin.Spec.Finalizers = slices.DeleteFunc(fin.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
	fin, err = c.client.CoreV1().Namespaces().Finalize(ctx, fin, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("finalize namespace %s: %w", name, err)
	}
	log.Info("namespace emptied")
	if len(fin.Spec.Finalizers) > 0 {
		return false, nil // another finalizer still holds it; its update event brings it back
	}
	return false, c.deleteNamespace(ctx, fin)
}

func (c *Controller) deleteNamespace(ctx context.Context, ns *corev1.Namespace) error {
	err := c.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ns.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or a new namespace of that name
	}
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns.Name, err)
	}
	c.log.WithField("namespace", ns.Name).Info("namespace deleted")
	return nil
}

// updateConditions writes the pass's outcome to the namespace status when it changed, and
// returns the namespace as stored.
func (c *Controller) updateConditions(ctx context.Context, ns *corev1.Namespace, p *progress) (*corev1.Namespace, error) {
	upd := ns.DeepCopy()
	if !applyConditions(&upd.Status, p.conditions(), metav1.Now()) {
		return ns, nil
	}
	out, err := c.client.CoreV1().Namespaces().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update status of namespace %s: %w", ns.Name, err)
	}
	return out, nil
}

// deleteContent deletes every object of every served namespaced resource in namespace ns,
// in the background (dependents are the garbage collector's), and counts what is left.
func (c *Controller) deleteContent(ctx context.Context, ns string) *progress {
	p := &progress{remaining: map[schema.GroupVersionResource]int{}, finalizers: map[string]int{}}
	lists, err := c.discovery.ServerPreferredNamespacedResources()
	if err != nil {
		p.discoveryErr = err
	}
	background := metav1.DeletePropagationBackground
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "delete") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			gvr := gv.WithResource(r.Name)
			// Deletes go through the dynamic client (JSON): the metadata client asks for
			// protobuf, which a DeleteCollection response of a JSON-only kind cannot be.
			dc := c.dynamic.Resource(gvr).Namespace(ns)
			rc := c.meta.Resource(gvr).Namespace(ns)
			collection := slices.Contains(r.Verbs, "deletecollection")
			if collection {
				err := dc.DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{})
				if apierrors.IsMethodNotSupported(err) {
					collection = false
				} else if err != nil && !apierrors.IsNotFound(err) {
					p.deleteErrs = append(p.deleteErrs, fmt.Errorf("delete collection of %s: %w", gvr.GroupResource(), err))
					continue
				}
			}
			if !collection {
				items, err := rc.List(ctx, metav1.ListOptions{})
				if err != nil {
					p.deleteErrs = append(p.deleteErrs, fmt.Errorf("list %s: %w", gvr.GroupResource(), err))
					continue
				}
				for _, it := range items.Items {
					if it.DeletionTimestamp != nil {
						continue
					}
					uid := it.UID
					err := dc.Delete(ctx, it.Name, metav1.DeleteOptions{PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &uid}})
					if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
						p.deleteErrs = append(p.deleteErrs, fmt.Errorf("delete %s %s: %w", gvr.GroupResource(), it.Name, err))
					}
				}
			}
			left, err := rc.List(ctx, metav1.ListOptions{})
			if err != nil {
				p.deleteErrs = append(p.deleteErrs, fmt.Errorf("list %s: %w", gvr.GroupResource(), err))
				continue
			}
			if n := len(left.Items); n > 0 {
				p.remaining[gvr] = n
				for _, it := range left.Items {
					for _, f := range it.Finalizers {
						p.finalizers[f]++
					}
				}
			}
		}
	}
	if n := len(p.remaining); n > 0 {
		c.log.WithFields(logrus.Fields{"namespace": ns, "resources": n}).Debug("content remaining")
	}
	return p
}
