package serviceaccount

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// sync makes sure namespace ns has the default ServiceAccount.
func (c *Controller) sync(ctx context.Context, ns string) error {
	if active, err := internal.ActiveNamespace(c.nsLister, ns); err != nil || !active {
		return err
	}
	if _, err := c.saLister.ServiceAccounts(ns).Get(DefaultName); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}
	_, err := c.client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
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
