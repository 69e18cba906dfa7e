package etcd

import (
	"context"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reconciler keeps the etcd membership of the site in shape from a member host: it promotes
// learners once they are in sync, and (on the etcd leader only) removes voters that gossip
// reports dead for longer than ReplaceAfter, so a healthy host can take their place. A voter
// is removed only when such a host exists: without one the removal would buy nothing and the
// dead host, once back, would find itself outside the cluster.
type Reconciler struct {
	Client *clientv3.Client
	// Endpoint is this host's own client URL (to ask whether it leads).
	Endpoint string
	// DeadSince reports, per host name, since when gossip considers it dead.
	DeadSince func() map[string]time.Time
	// Alive lists the hosts gossip sees alive (nil: every dead voter is replaceable).
	Alive        func() []string
	ReplaceAfter time.Duration
	Interval     time.Duration
	// Removed lists the hosts removed from the site (flotilla host remove): the leader
	// removes their etcd membership at once.
	Removed func() []string
}

// Run reconciles until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	interval := r.Interval
	if interval == 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		r.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Reconciler) once(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := r.Client.MemberList(ctx)
	if err != nil {
		return
	}
	for _, m := range list.Members {
		if m.IsLearner && m.Name != "" {
			if _, err := r.Client.MemberPromote(ctx, m.ID); err == nil {
				logrus.WithField("member", m.Name).Info("etcd learner promoted to voter")
			}
		}
	}
	if (r.DeadSince == nil || r.ReplaceAfter <= 0) && r.Removed == nil {
		return
	}
	status, err := r.Client.Status(ctx, r.Endpoint)
	if err != nil || status.Leader != status.Header.MemberId {
		return
	}
	if r.Removed != nil {
		for _, m := range RemovedMembers(list.Members, status.Header.MemberId, r.Removed()) {
			if _, err := r.Client.MemberRemove(ctx, m.ID); err == nil {
				logrus.WithField("member", m.Name).Warn("removed the etcd member of a host removed from the site")
			} else {
				logrus.WithField("member", m.Name).WithError(err).Warn("remove the etcd member of a host removed from the site")
			}
		}
	}
	if r.DeadSince == nil || r.ReplaceAfter <= 0 {
		return
	}
	var alive []string
	if r.Alive != nil {
		alive = r.Alive()
	}
	for _, m := range Replaceable(list.Members, status.Header.MemberId, r.DeadSince(), alive, r.Alive != nil, r.ReplaceAfter, time.Now()) {
		since := r.DeadSince()[m.Name]
		if r.answers(ctx, m.ClientURLs) {
			// Gossip can lag behind a healed partition; etcd itself is the proof of life.
			continue
		}
		if _, err := r.Client.MemberRemove(ctx, m.ID); err == nil {
			logrus.WithFields(logrus.Fields{"member": m.Name, "deadFor": time.Since(since).Round(time.Second)}).Warn("removed dead etcd voter")
		}
	}
}

// answers reports whether an etcd member answers a status request on one of its client URLs.
func (r *Reconciler) answers(ctx context.Context, urls []string) bool {
	for _, u := range urls {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.Client.Status(sctx, u)
		cancel()
		if err == nil {
			return true
		}
	}
	return false
}

// Replaceable returns the voters that may be removed so a standby takes their place: dead
// in gossip for at least after, not self (the leader asking), and only while an alive
// non-member exists (checkStandby false skips that check). The caller still asks each one
// whether its etcd answers, since gossip can lag behind a healed partition.
func Replaceable(members []*etcdserverpb.Member, self uint64, dead map[string]time.Time, alive []string, checkStandby bool, after time.Duration, now time.Time) []*etcdserverpb.Member {
	if checkStandby && !hasStandby(alive, members) {
		return nil
	}
	var out []*etcdserverpb.Member
	for _, m := range members {
		since, ok := dead[m.Name]
		if !ok || m.ID == self || now.Sub(since) < after {
			continue
		}
		out = append(out, m)
	}
	return out
}

// RemovedMembers returns the members named in removed, but never self.
func RemovedMembers(members []*etcdserverpb.Member, self uint64, removed []string) []*etcdserverpb.Member {
	var out []*etcdserverpb.Member
	for _, m := range members {
		if m.ID != self && m.Name != "" && slices.Contains(removed, m.Name) {
			out = append(out, m)
		}
	}
	return out
}

// hasStandby reports whether an alive host is not an etcd member, so it can replace a voter.
func hasStandby(alive []string, members []*etcdserverpb.Member) bool {
	in := map[string]bool{}
	for _, m := range members {
		in[m.Name] = true
	}
	for _, name := range alive {
		if !in[name] {
			return true
		}
	}
	return false
}
