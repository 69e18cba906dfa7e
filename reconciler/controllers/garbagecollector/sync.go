package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
)

// sync re-derives what to do about one object from the graph and the live API. It is
// idempotent: every write is conditional on the UID (and resourceVersion) it was based on.
func (c *Controller) sync(ctx context.Context, uid types.UID) error {
	n := c.graph.get(uid)
	if n == nil {
		return nil
	}
	if n.deleting {
		if n.hasFinalizer(finalizerOrphan) {
			return c.orphanDependents(ctx, n)
		}
		if n.hasFinalizer(finalizerForeground) {
			return c.deleteDependentsFirst(ctx, n)
		}
		return nil
	}
	if len(n.owners) > 0 {
		return c.checkOwners(ctx, n)
	}
	return nil
}

func (c *Controller) client(n *node) metadata.ResourceInterface {
	if n.namespaced {
		return c.meta.Resource(n.gvr).Namespace(n.namespace)
	}
	return c.meta.Resource(n.gvr)
}

// live returns the current metadata of n, or nil when that object (that UID) is gone.
func (c *Controller) live(ctx context.Context, n *node) (*metav1.PartialObjectMetadata, error) {
	obj, err := c.client(n).Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", n.gvr.Resource, key(n), err)
	}
	if obj.UID != n.uid {
		return nil, nil
	}
	return obj, nil
}

// checkOwners handles a dependent: deletes it when no owner is left (or an owner waits
// for it in the foreground), or drops the references to owners that are gone.
func (c *Controller) checkOwners(ctx context.Context, n *node) error {
	if c.ownersAlive(n) {
		return nil // the common case, answered without a request
	}
	obj, err := c.live(ctx, n)
	if obj == nil || err != nil {
		return err
	}
	if obj.DeletionTimestamp != nil {
		return nil // already on its way out
	}
	states := make(map[types.UID]ownerState, len(obj.OwnerReferences))
	for _, r := range obj.OwnerReferences {
		st, err := c.resolveOwner(ctx, n, r)
		if err != nil {
			return err
		}
		states[r.UID] = st
	}
	d := decide(obj.OwnerReferences, states, obj.Finalizers)
	log := c.log.WithFields(logrus.Fields{"resource": n.gvr.Resource, "object": key(n)})
	switch {
	case d.delete:
		policy := d.policy
		err := c.client(n).Delete(ctx, n.name, metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: &n.uid},
			PropagationPolicy: &policy,
		})
		if gone(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete %s %s: %w", n.gvr.Resource, key(n), err)
		}
		msg := "deleted: no owner left"
		if policy == metav1.DeletePropagationForeground {
			msg = "deleted: its owner is being deleted in the foreground"
		}
		log.WithField("propagation", policy).Info(msg)
	case len(d.remove) > 0:
		if err := c.patchOwners(ctx, n, obj, withoutOwners(obj.OwnerReferences, d.remove...)); err != nil {
			return err
		}
		log.WithField("removed", d.remove).Info("dropped references to deleted owners")
	}
	return nil
}

// ownersAlive reports whether the graph knows every owner of n as present and not waiting
// for its dependents; then there is nothing to do about n.
func (c *Controller) ownersAlive(n *node) bool {
	for _, r := range n.owners {
		o := c.graph.get(r.UID)
		if o == nil || !canOwn(o, n) || (o.deleting && o.hasFinalizer(finalizerForeground)) {
			return false
		}
	}
	return true
}

// resolveOwner finds out whether the owner a reference of dep points to exists. The graph
// answers when it has the owner; an owner it has not seen is looked up live, so that a lagging
// cache never gets a dependent deleted.
func (c *Controller) resolveOwner(ctx context.Context, dep *node, ref metav1.OwnerReference) (ownerState, error) {
	if o := c.graph.get(ref.UID); o != nil && canOwn(o, dep) {
		if o.deleting && o.hasFinalizer(finalizerForeground) {
			return ownerWaiting, nil
		}
		return ownerSolid, nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ownerDangling, nil // unparseable reference: points at nothing
	}
	mapping, err := c.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			c.mapper.Reset() // maybe served since the mapper last looked
		}
		return 0, fmt.Errorf("resolve owner kind %s %s: %w", ref.APIVersion, ref.Kind, err)
	}
	var rc metadata.ResourceInterface
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if !dep.namespaced {
			// A cluster-scoped object cannot have a namespaced owner.
			return ownerDangling, nil
		}
		rc = c.meta.Resource(mapping.Resource).Namespace(dep.namespace)
	} else {
		rc = c.meta.Resource(mapping.Resource)
	}
	obj, err := rc.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ownerDangling, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get owner %s %s: %w", ref.Kind, ref.Name, err)
	}
	if obj.UID != ref.UID {
		return ownerDangling, nil
	}
	if obj.DeletionTimestamp != nil && slices.Contains(obj.Finalizers, finalizerForeground) {
		return ownerWaiting, nil
	}
	return ownerSolid, nil
}

// orphanDependents removes owner from the ownerReferences of every dependent, then removes
// the orphan finalizer so the API server can finish deleting owner.
func (c *Controller) orphanDependents(ctx context.Context, owner *node) error {
	for _, d := range c.graph.dependentsOf(owner) {
		obj, err := c.live(ctx, d)
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		rest := withoutOwners(obj.OwnerReferences, owner.uid)
		if len(rest) == len(obj.OwnerReferences) {
			continue
		}
		if err := c.patchOwners(ctx, d, obj, rest); err != nil {
			return err
		}
	}
	removed, err := c.removeFinalizer(ctx, owner, finalizerOrphan)
	if removed {
		c.log.WithFields(logrus.Fields{"resource": owner.gvr.Resource, "object": key(owner)}).Info("orphaned dependents")
	}
	return err
}

// deleteDependentsFirst carries out a foreground deletion: it queues every dependent (whose
// check then deletes it, or drops the reference when another owner keeps it) and removes the
// foregroundDeletion finalizer once no dependent with blockOwnerDeletion is left.
func (c *Controller) deleteDependentsFirst(ctx context.Context, owner *node) error {
	deps := c.graph.dependentsOf(owner)
	for _, d := range deps {
		if !d.deleting {
			c.queue.Add(d.uid)
		}
	}
	if n := blocking(owner, deps); n > 0 {
		c.queue.AddAfter(owner.uid, foregroundRecheck)
		return nil
	}
	removed, err := c.removeFinalizer(ctx, owner, finalizerForeground)
	if removed {
		c.log.WithFields(logrus.Fields{"resource": owner.gvr.Resource, "object": key(owner)}).Info("dependents deleted; releasing owner")
	}
	return err
}

// metadataPatch is a JSON merge patch of metadata that fails unless the object is still the
// one (uid) and the version (resourceVersion) the change was computed from.
type metadataPatch struct {
	Metadata struct {
		UID             types.UID                `json:"uid"`
		ResourceVersion string                   `json:"resourceVersion"`
		OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences,omitempty"`
		Finalizers      *[]string                `json:"finalizers,omitempty"`
	} `json:"metadata"`
}

func (c *Controller) patch(ctx context.Context, n *node, p *metadataPatch) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = c.client(n).Patch(ctx, n.name, types.MergePatchType, data, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch %s %s: %w", n.gvr.Resource, key(n), err)
	}
	return nil
}

func (c *Controller) patchOwners(ctx context.Context, n *node, obj *metav1.PartialObjectMetadata, refs []metav1.OwnerReference) error {
	p := &metadataPatch{}
	p.Metadata.UID, p.Metadata.ResourceVersion = obj.UID, obj.ResourceVersion
	p.Metadata.OwnerReferences = &refs
	return c.patch(ctx, n, p)
}

// removeFinalizer removes finalizer from n and reports whether it did.
func (c *Controller) removeFinalizer(ctx context.Context, n *node, finalizer string) (bool, error) {
	obj, err := c.live(ctx, n)
	if obj == nil || err != nil {
		return false, err
	}
	if !slices.Contains(obj.Finalizers, finalizer) {
		return false, nil
	}
	rest := without(obj.Finalizers, finalizer)
	p := &metadataPatch{}
	p.Metadata.UID, p.Metadata.ResourceVersion = obj.UID, obj.ResourceVersion
	p.Metadata.Finalizers = &rest
	if err := c.patch(ctx, n, p); err != nil {
		return false, err
	}
	return true, nil
}

// gone reports whether a delete failed only because the object (that UID) no longer exists.
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

func key(n *node) string {
	if n.namespace == "" {
		return n.name
	}
	return n.namespace + "/" + n.name
}
