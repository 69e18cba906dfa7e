// Package clusterroleaggregation is the ClusterRole aggregation controller: the rules of every
// ClusterRole with an aggregationRule are those of the ClusterRoles its selectors match, kept
// up to date as roles are created, relabelled, changed and deleted.
package clusterroleaggregation

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Name is the controller's name, in logs and in its queue's metrics.
const Name = "clusterroleaggregation"

// Controller keeps the rules of aggregated ClusterRoles. Its queue holds the names of
// ClusterRoles with an aggregationRule.
type Controller struct {
	client kubernetes.Interface
	lister rbaclisters.ClusterRoleLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	log    *logrus.Entry
}

// New builds the controller and registers its informer on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	informer := cctx.Informers.Rbac().V1().ClusterRoles()
	c := &Controller{
		client: cctx.Client,
		lister: informer.Lister(),
		synced: []cache.InformerSynced{informer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		log: logrus.WithField("controller", Name),
	}
	// Any role may be matched by a selector, or stop being matched: every change re-syncs
	// every aggregated role (there are few; a sync that finds nothing to change writes
	// nothing).
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueAggregated(obj) },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*rbacv1.ClusterRole)
			n, ok2 := cur.(*rbacv1.ClusterRole)
			if ok1 && ok2 && !aggregationInputChanged(o, n) {
				return
			}
			c.enqueueAggregated(cur)
		},
		DeleteFunc: func(obj any) { c.enqueueAggregated(nil) },
	}); err != nil {
		return nil, fmt.Errorf("clusterrole handler: %w", err)
	}
	return c, nil
}

// Run processes aggregated ClusterRoles with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, Name, c.queue, workers, c.synced, c.sync)
}

// aggregationInputChanged reports whether an update changed what aggregation reads: the
// labels, the rules or the aggregationRule.
func aggregationInputChanged(old, cur *rbacv1.ClusterRole) bool {
	return !equality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
		!equality.Semantic.DeepEqual(old.Rules, cur.Rules) ||
		!equality.Semantic.DeepEqual(old.AggregationRule, cur.AggregationRule)
}

// enqueueAggregated queues every ClusterRole with an aggregationRule, obj included (it may
// not be in the cache yet).
func (c *Controller) enqueueAggregated(obj any) {
	if cr, ok := obj.(*rbacv1.ClusterRole); ok && cr.AggregationRule != nil {
		c.queue.Add(cr.Name)
	}
	roles, err := c.lister.List(labels.Everything())
	if err != nil {
		c.log.WithError(err).Warn("list cluster roles")
		return
	}
	for _, r := range roles {
		if r.AggregationRule != nil {
			c.queue.Add(r.Name)
		}
	}
}

// sync sets the rules of the aggregated ClusterRole name to those of the roles it
// aggregates, in rbac.AggregatedRules' order, when they differ.
func (c *Controller) sync(ctx context.Context, name string) error {
	cr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cr.AggregationRule == nil {
		return nil
	}
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	want := rbac.AggregatedRules(cr, all)
	if want == nil {
		want = []rbacv1.PolicyRule{}
	}
	// Nil and empty lists are the same; the same rules in another order are not (the
	// order is kept stable, so an aggregate is written once per change).
	if equality.Semantic.DeepEqual(cr.Rules, want) {
		return nil
	}
	updated := cr.DeepCopy()
	updated.Rules = want
	if _, err := c.client.RbacV1().ClusterRoles().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("update ClusterRole %s: %w", name, err)
	}
	c.log.WithFields(logrus.Fields{"clusterrole": name, "rules": len(want)}).Info("aggregated rules updated")
	return nil
}
