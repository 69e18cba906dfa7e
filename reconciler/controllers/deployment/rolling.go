package deployment

import (
	"context"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
)

// rolloutRolling moves one step of a rolling update: grow the new ReplicaSet within
// maxSurge, or shrink old ones within maxUnavailable, then update status.
func (c *Controller) rolloutRolling(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, true)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS)

	scaledUp, err := c.reconcileNewReplicaSet(ctx, all, newRS, d)
	if err != nil {
		return err
	}
	if scaledUp {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	scaledDown, err := c.reconcileOldReplicaSets(ctx, all, filterActive(oldRSs), newRS, d)
	if err != nil {
		return err
	}
	if scaledDown {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	if deploymentComplete(d, &d.Status) {
		c.cleanup(ctx, d, oldRSs)
	}
	return c.syncRolloutStatus(ctx, all, newRS, d)
}

func (c *Controller) reconcileNewReplicaSet(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	if rsReplicas(newRS) == specReplicas(d) {
		return false, nil
	}
	if rsReplicas(newRS) > specReplicas(d) {
		scaled, _, err := c.scaleAndRecord(ctx, newRS, specReplicas(d), d)
		return scaled, err
	}
	scaled, _, err := c.scaleAndRecord(ctx, newRS, NewRSNewReplicas(d, all, newRS), d)
	return scaled, err
}

// MaxScaledDown is how many old pods may go now: all pods minus the minimum available minus
// the new ReplicaSet's pods that are not available yet (they would not replace anything).
func MaxScaledDown(allPods, replicas, maxUnavailable, newRSUnavailable int32) int32 {
	return allPods - (replicas - maxUnavailable) - newRSUnavailable
}

func (c *Controller) reconcileOldReplicaSets(ctx context.Context, all, oldRSs []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	if sumSpec(oldRSs) == 0 {
		return false, nil
	}
	newUnavailable := rsReplicas(newRS) - availableCount(newRS)
	maxDown := MaxScaledDown(sumSpec(all), specReplicas(d), MaxUnavailable(d), newUnavailable)
	if maxDown <= 0 {
		return false, nil
	}
	// Unhealthy old pods go first: removing them costs no availability and they would
	// otherwise block the rollout.
	oldRSs, cleaned, err := c.cleanupUnhealthyReplicas(ctx, oldRSs, d, maxDown)
	if err != nil {
		return false, nil
	}
	all = append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS)
	down, err := c.scaleDownOldForRollingUpdate(ctx, all, oldRSs, d)
	if err != nil {
		return false, nil
	}
	return cleaned+down > 0, nil
}

func (c *Controller) cleanupUnhealthyReplicas(ctx context.Context, oldRSs []*appsv1.ReplicaSet, d *appsv1.Deployment, maxCleanup int32) ([]*appsv1.ReplicaSet, int32, error) {
	byCreation(oldRSs)
	var total int32
	for i, rs := range oldRSs {
		if total >= maxCleanup {
			break
		}
		if rsReplicas(rs) == 0 || rsReplicas(rs) == availableCount(rs) {
			continue
		}
		down := min(maxCleanup-total, rsReplicas(rs)-availableCount(rs))
		_, updated, err := c.scaleAndRecord(ctx, rs, rsReplicas(rs)-down, d)
		if err != nil {
			return nil, total, err
		}
		total += down
		oldRSs[i] = updated
	}
	return oldRSs, total, nil
}

func (c *Controller) scaleDownOldForRollingUpdate(ctx context.Context, all, oldRSs []*appsv1.ReplicaSet, d *appsv1.Deployment) (int32, error) {
	minAvailable := specReplicas(d) - MaxUnavailable(d)
	available := sumAvailable(all)
	if available <= minAvailable {
		return 0, nil
	}
	sort.SliceStable(oldRSs, func(i, j int) bool {
		return oldRSs[i].CreationTimestamp.Before(&oldRSs[j].CreationTimestamp)
	})
	var total int32
	want := available - minAvailable
	for _, rs := range oldRSs {
		if total >= want {
			break
		}
		if rsReplicas(rs) == 0 {
			continue
		}
		down := min(rsReplicas(rs), want-total)
		if _, _, err := c.scaleAndRecord(ctx, rs, rsReplicas(rs)-down, d); err != nil {
			return total, err
		}
		total += down
	}
	return total, nil
}
