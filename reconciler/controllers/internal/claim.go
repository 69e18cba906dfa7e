package internal

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Claimer decides, for one owner, which candidate dependents are its own: it adopts matching
// orphans and releases owned objects whose labels stopped matching, as upstream's
// ControllerRefManager does.
type Claimer[T metav1.Object] struct {
	Owner    metav1.Object
	Selector labels.Selector
	// CanAdopt rechecks the owner with an uncached read (it still exists with the same UID
	// and is not being deleted) before the first adoption: the informer's copy may be stale.
	CanAdopt func(ctx context.Context) error
	Adopt    func(ctx context.Context, obj T) error
	Release  func(ctx context.Context, obj T) error
}

// Claim returns the objects the owner controls after adoptions and releases.
func (c *Claimer[T]) Claim(ctx context.Context, objs []T) ([]T, error) {
	var (
		claimed  []T
		errs     []error
		checked  bool
		adoptErr error
	)
	deleting := c.Owner.GetDeletionTimestamp() != nil
	for _, obj := range objs {
		matches := c.Selector.Matches(labels.Set(obj.GetLabels()))
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
			if ref.UID != c.Owner.GetUID() {
				continue // someone else's
			}
			if matches {
				claimed = append(claimed, obj)
				continue
			}
			if deleting {
				continue // an owner being deleted keeps what it has for the garbage collector
			}
			if err := c.Release(ctx, obj); err != nil && !ignorable(err) {
				errs = append(errs, err)
			}
			continue
		}
		if deleting || !matches || obj.GetDeletionTimestamp() != nil {
			continue
		}
		if !checked {
			checked = true
			adoptErr = c.CanAdopt(ctx)
		}
		if adoptErr != nil {
			errs = append(errs, adoptErr)
			break
		}
		if err := c.Adopt(ctx, obj); err != nil {
			if !ignorable(err) {
				errs = append(errs, err)
			}
			continue
		}
		claimed = append(claimed, obj)
	}
	return claimed, errors.Join(errs...)
}

// ignorable are the errors of a dependent that vanished or was replaced meanwhile.
func ignorable(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err)
}
