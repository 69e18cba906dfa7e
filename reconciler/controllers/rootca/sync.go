package rootca

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// sync makes sure namespace ns has ConfigMap kube-root-ca.crt with the CA as its only data
// and the description annotation; its other labels and annotations are left alone.
func (c *Controller) sync(ctx context.Context, ns string) error {
	if active, err := internal.ActiveNamespace(c.nsLister, ns); err != nil || !active {
		return err
	}
	data := map[string]string{DataKey: c.rootCA}
	cm, err := c.cmLister.ConfigMaps(ns).Get(ConfigMapName)
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Annotations: map[string]string{DescriptionAnnotation: Description}},
			Data:       data,
		}
		_, err := c.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		switch {
		case err == nil:
			c.log.WithField("namespace", ns).Info("created ConfigMap " + ConfigMapName)
			return nil
		case apierrors.IsAlreadyExists(err):
			// The informer will bring it, and its check.
			return nil
		case apierrors.IsNotFound(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return nil
		default:
			return fmt.Errorf("create %s/%s: %w", ns, ConfigMapName, err)
		}
	}
	if err != nil {
		return err
	}
	if maps.Equal(cm.Data, data) && cm.Annotations[DescriptionAnnotation] == Description {
		return nil
	}
	cm = cm.DeepCopy()
	cm.Data = data
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[DescriptionAnnotation] = Description
	if _, err := c.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Deleted or changed meanwhile: the informer event queues the namespace again.
			return nil
		}
		return fmt.Errorf("update %s/%s: %w", ns, ConfigMapName, err)
	}
	c.log.WithField("namespace", ns).Info("restored ConfigMap " + ConfigMapName)
	return nil
}
