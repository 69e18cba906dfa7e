package daemonset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// templatePatch is the data of a DaemonSet's ControllerRevision, as upstream: a strategic
// merge patch that replaces spec.template, which `kubectl rollout undo` applies as is.
func templatePatch(ds *appsv1.DaemonSet) ([]byte, error) {
	tmpl, err := json.Marshal(ds.Spec.Template)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := json.Unmarshal(tmpl, &raw); err != nil {
		return nil, err
	}
	raw["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": raw}})
}

// revisionName is "<ds>-<hash>", the prefix cut so that the name stays valid.
func revisionName(dsName, hash string) string {
	prefix := dsName
	if max := validation.DNS1123SubdomainMaxLength - len(hash) - 1; len(prefix) > max {
		prefix = prefix[:max]
	}
	return prefix + "-" + hash
}

// constructHistory returns the DaemonSet's revision of its current template (created when
// missing, renumbered to the newest when an old template came back) and its other revisions.
func (c *Controller) constructHistory(ctx context.Context, ds *appsv1.DaemonSet, selector labels.Selector) (*appsv1.ControllerRevision, []*appsv1.ControllerRevision, error) {
	histories, err := c.controlledHistories(ctx, ds, selector)
	if err != nil {
		return nil, nil, err
	}
	patch, err := templatePatch(ds)
	if err != nil {
		return nil, nil, err
	}
	var current, old []*appsv1.ControllerRevision
	client := c.client.AppsV1().ControllerRevisions(ds.Namespace)
	for _, h := range histories {
		// A revision without the hash label (adopted) is labelled with its name, so that no
		// hash has to be recomputed.
		if _, ok := h.Labels[RevisionHashLabel]; !ok {
			up := h.DeepCopy()
			if up.Labels == nil {
				up.Labels = map[string]string{}
			}
			up.Labels[RevisionHashLabel] = up.Name
			if h, err = client.Update(ctx, up, metav1.UpdateOptions{}); err != nil {
				return nil, nil, err
			}
		}
		if bytes.Equal(h.Data.Raw, patch) {
			current = append(current, h)
		} else {
			old = append(old, h)
		}
	}
	next := maxRevision(old) + 1
	var cur *appsv1.ControllerRevision
	if len(current) == 0 {
		cur, err = c.snapshot(ctx, ds, patch, next)
		return cur, old, err
	}
	// Duplicates (two revisions of one template) keep the newest.
	sort.Slice(current, func(i, j int) bool { return current[i].Revision > current[j].Revision })
	cur = current[0]
	for _, dup := range current[1:] {
		if err := client.Delete(ctx, dup.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
	}
	if cur.Revision < next {
		up := cur.DeepCopy()
		up.Revision = next
		if cur, err = client.Update(ctx, up, metav1.UpdateOptions{}); err != nil {
			return nil, nil, err
		}
	}
	return cur, old, nil
}

func maxRevision(hs []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, h := range hs {
		m = max(m, h.Revision)
	}
	return m
}

// controlledHistories claims the ControllerRevisions the DaemonSet's selector matches.
func (c *Controller) controlledHistories(ctx context.Context, ds *appsv1.DaemonSet, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	all, err := c.crLister.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	client := c.client.AppsV1().ControllerRevisions(ds.Namespace)
	claimer := internal.Claimer[*appsv1.ControllerRevision]{
		Owner:    ds,
		Selector: selector,
		CanAdopt: func(ctx context.Context) error { return c.canAdopt(ctx, ds) },
		Adopt: func(ctx context.Context, h *appsv1.ControllerRevision) error {
			_, err := client.Patch(ctx, h.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(ds, controllerKind, string(h.UID)), metav1.PatchOptions{})
			return err
		},
		Release: func(ctx context.Context, h *appsv1.ControllerRevision) error {
			_, err := client.Patch(ctx, h.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(ds, string(h.UID)), metav1.PatchOptions{})
			return err
		},
	}
	return claimer.Claim(ctx, all)
}

// snapshot creates the revision of the current template. A name taken by a revision of
// another template bumps status.collisionCount, which changes the hash on the next sync.
func (c *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, patch []byte, revision int64) (*appsv1.ControllerRevision, error) {
	hash := internal.ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
	lbls := map[string]string{}
	for k, v := range ds.Spec.Template.Labels {
		lbls[k] = v
	}
	lbls[RevisionHashLabel] = hash
	h := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            revisionName(ds.Name, hash),
			Namespace:       ds.Namespace,
			Labels:          lbls,
			Annotations:     ds.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: revision,
	}
	client := c.client.AppsV1().ControllerRevisions(ds.Namespace)
	created, err := client.Create(ctx, h, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return created, err
	}
	existing, gerr := client.Get(ctx, h.Name, metav1.GetOptions{})
	if gerr != nil {
		return nil, gerr
	}
	if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == ds.UID && bytes.Equal(existing.Data.Raw, patch) {
		return existing, nil
	}
	fresh, gerr := c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if gerr != nil {
		return nil, gerr
	}
	if !reflect.DeepEqual(fresh.Status.CollisionCount, ds.Status.CollisionCount) {
		return nil, fmt.Errorf("stale collisionCount of DaemonSet %s/%s; retrying", ds.Namespace, ds.Name)
	}
	n := int32(0)
	if fresh.Status.CollisionCount != nil {
		n = *fresh.Status.CollisionCount
	}
	n++
	fresh.Status.CollisionCount = &n
	if _, uerr := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); uerr != nil {
		return nil, uerr
	}
	return nil, fmt.Errorf("revision %s/%s belongs to another template: %w", ds.Namespace, h.Name, err)
}

// cleanupHistory deletes the oldest revisions beyond revisionHistoryLimit that no live pod
// still runs.
func (c *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, pods []*corev1.Pod, old []*appsv1.ControllerRevision) error {
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	excess := len(old) - limit
	if excess <= 0 {
		return nil
	}
	live := map[string]bool{}
	for _, p := range pods {
		if h := p.Labels[RevisionHashLabel]; h != "" {
			live[h] = true
		}
	}
	old = append([]*appsv1.ControllerRevision(nil), old...)
	sort.Slice(old, func(i, j int) bool { return old[i].Revision < old[j].Revision })
	for _, h := range old {
		if excess <= 0 {
			break
		}
		if live[h.Labels[RevisionHashLabel]] {
			continue
		}
		if err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		excess--
	}
	return nil
}
