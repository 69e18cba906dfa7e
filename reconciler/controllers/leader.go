package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ElectionPrefix is the etcd key prefix of the leader elections: one campaign key per host
// under ElectionPrefix + <lease> + "/", bound to the host's etcd lease.
const ElectionPrefix = "/flotilla/leader/"

// LeaderConfig tunes leader election. The zero value gives an etcd lease of 20 s, which the
// client keeps alive every TTL/3; the leader steps down when no keepalive has been answered
// for 15 s (StepDown), before etcd can expire its lease and another host take over.
//
// The election runs on an etcd lease rather than on a Kubernetes Lease object: an etcd
// lease keepalive is answered by the etcd leader from memory and never reaches the raft log,
// while every renewal of a Lease object is a raft entry fsynced on every member. Two leader
// Leases renewed every 2 s (client-go's default) were most of an idle site's disk writes
// (docs/endurance.md).
type LeaderConfig struct {
	// TTL is the etcd lease's time to live: a leader that dies is replaced within it.
	TTL time.Duration
	// StepDown is how long the leader goes on without an answered keepalive (< TTL).
	StepDown time.Duration
}

func (c LeaderConfig) withDefaults() LeaderConfig {
	if c.TTL == 0 {
		c.TTL = 20 * time.Second
	}
	if c.StepDown == 0 || c.StepDown >= c.TTL {
		c.StepDown = c.TTL * 3 / 4
	}
	return c
}

// RunWhileLeader runs fn while this host leads the election named lease, until ctx ends.
// When leadership is lost fn's context is cancelled and the host campaigns again; when ctx
// ends the host resigns, so that another takes over at once.
//
// Each time this host wins, it records itself as the holder of the Lease kube-system/<lease>
// through kube (holderIdentity, acquireTime, leaseTransitions), for `kubectl get lease` and
// whoever else asks who leads. The record is written once per change of leader and not
// renewed: the etcd lease is what keeps the leader.
func RunWhileLeader(ctx context.Context, etcd *clientv3.Client, kube kubernetes.Interface, lease, identity string, lc LeaderConfig, fn func(ctx context.Context)) error {
	lc = lc.withDefaults()
	log := logrus.WithFields(logrus.Fields{"lease": lease, "host": identity})
	prefix := ElectionPrefix + lease + "/"
	revokeOwn(ctx, etcd, prefix, identity, log)
	for ctx.Err() == nil {
		if err := leadOnce(ctx, etcd, kube, prefix, lease, identity, lc, log, fn); err != nil && ctx.Err() == nil {
			log.WithError(err).Warn("leader election")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// revokeOwn revokes the etcd leases of this host's earlier campaigns (a restart after a
// crash or a power loss): etcd keeps a lease alive for its whole TTL after a restart, and
// the others would wait for it.
func revokeOwn(ctx context.Context, etcd *clientv3.Client, prefix, identity string, log *logrus.Entry) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := etcd.Get(cctx, prefix, clientv3.WithPrefix())
	if err != nil {
		log.WithError(err).Debug("list earlier campaigns")
		return
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != identity || kv.Lease == 0 {
			continue
		}
		if _, err := etcd.Revoke(cctx, clientv3.LeaseID(kv.Lease)); err != nil {
			log.WithError(err).Debug("revoke an earlier campaign")
		} else {
			log.WithField("key", string(kv.Key)).Info("revoked this host's earlier campaign")
		}
	}
}

func leadOnce(ctx context.Context, etcd *clientv3.Client, kube kubernetes.Interface, prefix, lease, identity string, lc LeaderConfig, log *logrus.Entry, fn func(ctx context.Context)) error {
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	grant, err := etcd.Grant(gctx, int64(lc.TTL/time.Second))
	gcancel()
	if err != nil {
		return fmt.Errorf("grant an etcd lease: %w", err)
	}
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	alive, err := etcd.KeepAlive(sctx, grant.ID)
	if err != nil {
		return fmt.Errorf("keep the etcd lease alive: %w", err)
	}
	session, err := concurrency.NewSession(etcd, concurrency.WithLease(grant.ID), concurrency.WithContext(sctx))
	if err != nil {
		return err
	}
	defer func() {
		// Revoke the lease: another host wins at once instead of after the TTL.
		if etcd.Ctx().Err() != nil {
			return // the client is closed
		}
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = etcd.Revoke(rctx, grant.ID)
	}()

	// held is cancelled when the lease may be gone: keepalives unanswered for StepDown, or
	// the keepalive channel closed (the lease expired or was revoked).
	held, lost := context.WithCancel(sctx)
	defer lost()
	go watchKeepAlive(held, lost, alive, lc.StepDown, log)

	election := concurrency.NewElection(session, prefix)
	if err := election.Campaign(held, identity); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	// Campaign returns once every earlier key is gone; ours must still be there.
	key := election.Key()
	if resp, err := etcd.Get(held, key); err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(grant.ID) {
		return errors.New("campaign key gone before its turn came (the etcd lease expired)")
	}
	log.Info("became leader")
	go recordHolder(held, kube, lease, identity, lc.TTL, log)
	fn(held)
	log.Info("stopped leading")
	return nil
}

// watchKeepAlive cancels the leadership when keepalives stop being answered.
func watchKeepAlive(ctx context.Context, lost context.CancelFunc, alive <-chan *clientv3.LeaseKeepAliveResponse, stepDown time.Duration, log *logrus.Entry) {
	last := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-alive:
			if !ok || resp == nil {
				if ctx.Err() == nil {
					log.Warn("etcd lease of the election lost")
				}
				lost()
				return
			}
			last = time.Now()
		case now := <-tick.C:
			if now.Sub(last) > stepDown {
				log.WithField("unanswered", now.Sub(last).Round(time.Second)).Warn("etcd lease keepalives unanswered: stepping down")
				lost()
				return
			}
		}
	}
}

// recordHolder writes this host as the holder of kube-system/<name>, retrying until it
// succeeds or leadership ends.
func recordHolder(ctx context.Context, kube kubernetes.Interface, name, identity string, ttl time.Duration, log *logrus.Entry) {
	leases := kube.CoordinationV1().Leases(metav1.NamespaceSystem)
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseDurationSeconds: ptr.To(int32(ttl / time.Second)),
					AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(int32(0))}}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			return err == nil, nil
		}
		if err != nil {
			return false, nil
		}
		if ptr.Deref(l.Spec.HolderIdentity, "") != identity {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(identity), ptr.To(int32(ttl/time.Second))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil && ctx.Err() == nil {
		log.WithError(err).Warn("record the leader in its Lease")
	}
}
