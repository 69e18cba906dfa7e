package internal

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// QueueNamespaces adds the name of every namespace that is added or changed to queue: the
// queue of a controller that keeps an object in every namespace.
func QueueNamespaces(informer coreinformers.NamespaceInformer, queue workqueue.TypedInterface[string]) error {
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { queue.Add(obj.(*corev1.Namespace).Name) },
		UpdateFunc: func(_, cur any) { queue.Add(cur.(*corev1.Namespace).Name) },
	}); err != nil {
		return fmt.Errorf("namespace handler: %w", err)
	}
	return nil
}

// ActiveNamespace reports whether namespace name exists and is active: not terminating, so
// it accepts new objects and will not lose them all.
func ActiveNamespace(lister corelisters.NamespaceLister, name string) (bool, error) {
	ns, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating, nil
}
