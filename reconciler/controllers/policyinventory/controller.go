// Package policyinventory keeps the policy inventory, ConfigMap
// kube-system/flotilla-policy-inventory: what the admission policies that look across objects
// read as their param (the hosts of every Ingress, the selector of every
// PodDisruptionBudget; the format is policies.InventoryData's). A deleted or edited inventory
// is restored.
package policyinventory

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// DescriptionAnnotation says what the ConfigMap is, for who finds it in kube-system.
const DescriptionAnnotation = "kubernetes.io/description"

// Description is the text of DescriptionAnnotation.
const Description = "Kept by flotilla's policy-inventory controller from the site's Ingresses and PodDisruptionBudgets, " +
	"for the admission policies that look across objects (param of flotilla-ingress-hosts-unique and flotilla-critical-pdb). Edits are undone."

// key is the queue's only item: every change recomputes the whole inventory.
const key = "inventory"

// Controller keeps the inventory.
type Controller struct {
	client    kubernetes.Interface
	ingresses networkinglisters.IngressLister
	pdbs      policylisters.PodDisruptionBudgetLister
	cms       corelisters.ConfigMapLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *logrus.Entry
}

// New builds the controller and registers its informers (Ingresses, PodDisruptionBudgets and
// ConfigMaps, all shared) on the shared factory.
func New(c *controllers.Context) (controllers.Runner, error) {
	ing := c.Informers.Networking().V1().Ingresses()
	pdb := c.Informers.Policy().V1().PodDisruptionBudgets()
	cm := c.Informers.Core().V1().ConfigMaps()
	ctl := &Controller{
		client:    c.Client,
		ingresses: ing.Lister(),
		pdbs:      pdb.Lister(),
		cms:       cm.Lister(),
		synced:    []cache.InformerSynced{ing.Informer().HasSynced, pdb.Informer().HasSynced, cm.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "policyinventory"}),
		log: logrus.WithField("controller", "policyinventory"),
	}
	enqueue := func(any) { ctl.queue.Add(key) }
	all := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue}
	for name, inf := range map[string]cache.SharedIndexInformer{"ingress": ing.Informer(), "poddisruptionbudget": pdb.Informer()} {
		if _, err := inf.AddEventHandler(all); err != nil {
			return nil, fmt.Errorf("%s handler: %w", name, err)
		}
	}
	own := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(*corev1.ConfigMap); ok && m.Namespace == policies.InventoryNamespace && m.Name == policies.InventoryName {
			ctl.queue.Add(key)
		}
	}
	// Add too: the ConfigMap may be created by someone else (the host installing the policy
	// set's params) while this controller's Create races it.
	if _, err := cm.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: own, UpdateFunc: func(_, cur any) { own(cur) }, DeleteFunc: own}); err != nil {
		return nil, fmt.Errorf("configmap handler: %w", err)
	}
	return ctl, nil
}

// Run keeps the inventory until ctx ends; one worker is enough (workers is unused).
func (c *Controller) Run(ctx context.Context, _ int) error {
	c.queue.Add(key)
	return internal.RunWorkers(ctx, "policyinventory", c.queue, 1, c.synced, c.sync)
}

// sync writes the inventory when what the site holds differs from it. Writes happen only on a
// change of an Ingress's hosts or a budget's selector (or of the ConfigMap itself).
func (c *Controller) sync(ctx context.Context, _ string) error {
	ings, err := c.ingresses.List(labels.Everything())
	if err != nil {
		return err
	}
	pdbs, err := c.pdbs.List(labels.Everything())
	if err != nil {
		return err
	}
	data := policies.InventoryData(ings, pdbs)
	cur, err := c.cms.ConfigMaps(policies.InventoryNamespace).Get(policies.InventoryName)
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: policies.InventoryName, Namespace: policies.InventoryNamespace,
				Annotations: map[string]string{DescriptionAnnotation: Description}},
			Data: data,
		}
		_, err := c.client.CoreV1().ConfigMaps(policies.InventoryNamespace).Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Created meanwhile by another writer, with other data maybe: the informer's Add
			// queues it again, and the next sync updates it.
			return nil
		}
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", policies.InventoryNamespace, policies.InventoryName, err)
		}
		c.log.WithField("keys", len(data)).Info("created the policy inventory")
		return nil
	}
	if err != nil {
		return err
	}
	if maps.Equal(cur.Data, data) && cur.Annotations[DescriptionAnnotation] == Description {
		return nil
	}
	cm := cur.DeepCopy()
	cm.Data = data
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[DescriptionAnnotation] = Description
	start := time.Now()
	if _, err := c.client.CoreV1().ConfigMaps(policies.InventoryNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Deleted or changed meanwhile: the informer's event queues it again.
			return nil
		}
		return fmt.Errorf("update %s/%s: %w", policies.InventoryNamespace, policies.InventoryName, err)
	}
	c.log.WithFields(logrus.Fields{"keys": len(data), "took": time.Since(start).Round(time.Millisecond)}).Debug("updated the policy inventory")
	return nil
}
