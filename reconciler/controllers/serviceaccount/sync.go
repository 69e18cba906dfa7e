package serviceaccount

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sync makes sure namespace ns has the default ServiceAccount.
func (c *Controller) sync(ctx context.Context, ns string) error {
	namespace, err := c.nsLister.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !wantsDefault(namespace) {
		return nil
	}
	if _, err := c.saLister.ServiceAccounts(ns).Get(DefaultName); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}
	_, err = c.client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.log.WithField("namespace", ns).Info("created default service account")
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil
	default:
		return fmt.Errorf("create %s/%s: %w", ns, DefaultName, err)
	}
}

// wantsDefault reports whether a namespace should get the default ServiceAccount: it is
// active (a terminating namespace refuses new objects and is about to lose them all).
func wantsDefault(ns *corev1.Namespace) bool {
	return ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating
}
