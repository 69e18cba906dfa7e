package gitsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/fleet"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// A fleet: sites that deploy from one repository and share nothing else. With
// spec.statusPush the leader of each site publishes the source's status to the repository
// (fleet.Write), after every apply and change of health and as a heartbeat; with
// spec.rollout a site applies a new revision only once the sites it waits for report it
// healthy for the soak (fleet.Read). A site that cannot reach git keeps what it runs.

// Reasons of the Rollout and StatusPublished conditions.
const (
	// ReasonRolloutWaiting (Rollout False): the sites of spec.rollout.after have not run
	// the revision healthy for the soak yet.
	ReasonRolloutWaiting = "RolloutWaiting"
	// ReasonRolloutHeld (Rollout False, and a Warning event): one of them rolled the
	// revision back or reports it Degraded: this site keeps what it runs until a new commit.
	ReasonRolloutHeld = "RolloutHeld"
	// ReasonRolloutReleased (Rollout True): the revision fetched is the one applied.
	ReasonRolloutReleased = "Released"
	// ReasonPublished, ReasonNotConfigured, ReasonPublishFailed: StatusPublished.
	ReasonPublished     = "Published"
	ReasonNotConfigured = "NotConfigured"
	ReasonPublishFailed = "PublishFailed"
	// ReasonPublishConflict: another source of the site sets spec.statusPush.
	ReasonPublishConflict = "PublishConflict"
)

// publisherOtherThan returns the source ("namespace/name") that publishes the site's status
// instead of gs when several set spec.statusPush: kube-system/root, else the first by name.
func (c *Controller) publisherOtherThan(gs *v1alpha1.GitSource) string {
	self := gs.Namespace + "/" + gs.Name
	chosen := ""
	for _, obj := range c.informer.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if sp, found, _ := unstructured.NestedMap(u.Object, "spec", "statusPush"); !found || sp == nil {
			continue
		}
		key := u.GetNamespace() + "/" + u.GetName()
		root := RootNamespace + "/" + RootName
		if chosen == "" || key == root || (chosen != root && key < chosen) {
			chosen = key
		}
	}
	if chosen == "" || chosen == self {
		return ""
	}
	return chosen
}

// publishRetry is how soon a failed publication is tried again.
const publishRetry = 30 * time.Second

// gate is spec.rollout's verdict on a revision.
type gate struct {
	// open: apply it. Otherwise reason (ReasonRolloutWaiting or ReasonRolloutHeld) and
	// message say why not, and recheck when to look again (0: at the next interval).
	open    bool
	reason  string
	message string
	recheck time.Duration
}

// sameCommit compares two revisions by their commit: sites may name their ref differently.
func sameCommit(a, b string) bool {
	ca, errA := revisionCommit(a)
	cb, errB := revisionCommit(b)
	return errA == nil && errB == nil && ca == cb
}

// rolloutGate decides whether this site (self) may apply revision, from the reports of the
// other sites in the repository.
func rolloutGate(r *v1alpha1.GitRollout, self string, statuses []fleet.Status, readErr error, revision string, now time.Time) gate {
	soak := v1alpha1.DefaultSoak
	if r.Soak != nil {
		soak = r.Soak.Duration
	}
	wait := func(recheck time.Duration, format string, args ...any) gate {
		return gate{reason: ReasonRolloutWaiting, message: fmt.Sprintf(format, args...), recheck: recheck}
	}
	if readErr != nil {
		return wait(0, "Revision %s held: the sites' status cannot be read from the repository (%v); it is read again at the next interval", revision, readErr)
	}
	var sel labels.Selector = labels.Nothing()
	if s := strings.TrimSpace(r.After.Selector); s != "" {
		parsed, err := labels.Parse(s)
		if err != nil {
			return gate{reason: ReasonRolloutHeld, message: fmt.Sprintf("spec.rollout.after.selector %q: %v", s, err)}
		}
		sel = parsed
	}
	bySite := map[string]fleet.Status{}
	var matched []fleet.Status
	for _, st := range statuses {
		bySite[st.Site] = st
		if st.Site != self && (slices.Contains(r.After.Sites, st.Site) || sel.Matches(labels.Set(st.Labels))) {
			matched = append(matched, st)
		}
	}
	for _, name := range r.After.Sites {
		if _, ok := bySite[name]; !ok && name != self {
			return wait(0, "Revision %s held: site %s (spec.rollout.after.sites) has not published its status to the repository", revision, name)
		}
	}
	if len(matched) == 0 {
		return wait(0, "Revision %s held: no other site whose labels match %q has published its status to the repository yet", revision, r.After.Selector)
	}
	// First the sites that failed the revision, then the ones still on their way.
	for _, st := range matched {
		if rb := st.RolledBack; rb != nil && sameCommit(rb.Revision, revision) {
			return gate{reason: ReasonRolloutHeld, message: fmt.Sprintf("Revision %s held: site %s rolled it back (%s); a new commit is considered again", revision, st.Site, rb.Reason)}
		}
		if sameCommit(st.Revision, revision) && st.Health == v1alpha1.HealthDegraded {
			return gate{reason: ReasonRolloutHeld, message: fmt.Sprintf("Revision %s held: site %s reports it Degraded (%s)", revision, st.Site, st.Message)}
		}
	}
	var longest time.Duration
	for _, st := range matched {
		stale := now.Sub(st.Time) > fleet.StaleAfter*st.Interval()
		switch {
		case stale:
			return wait(0, "Revision %s held: the last report of site %s is %s old (stale: it publishes every %s)", revision, st.Site, fleet.Age(now, st.Time), st.Interval())
		case !sameCommit(st.Revision, revision):
			if st.Held != nil && sameCommit(st.Held.Revision, revision) {
				return wait(0, "Revision %s held: site %s holds it too (%s)", revision, st.Site, st.Held.Reason)
			}
			return wait(0, "Revision %s held: site %s runs %s, not this revision yet", revision, st.Site, fleet.ShortRevision(orNone(st.Revision)))
		case st.Health != v1alpha1.HealthHealthy || st.HealthySince.IsZero():
			return wait(0, "Revision %s held: site %s runs it, %s", revision, st.Site, st.Health)
		}
		if healthy := now.Sub(st.HealthySince); healthy < soak {
			longest = max(longest, soak-healthy)
		}
	}
	if longest > 0 {
		return wait(longest, "Revision %s held: the sites of spec.rollout.after run it healthy, soaking %s more (soak %s)", revision, longest.Round(time.Second), soak)
	}
	names := make([]string, len(matched))
	for i, st := range matched {
		names[i] = st.Site
	}
	return gate{open: true, message: fmt.Sprintf("Revision %s released: %s ran it healthy for %s", revision, strings.Join(names, ", "), soak)}
}

// rollout reads the other sites' reports and decides on revision.
func (c *Controller) rollout(ctx context.Context, gs *v1alpha1.GitSource, remote Remote, revision string) gate {
	site, err := ReadSite(ctx, c.client)
	if err != nil {
		return gate{reason: ReasonRolloutWaiting, message: fmt.Sprintf("Revision %s held: this site's name (ConfigMap %s/%s) cannot be read: %v", revision, SiteNamespace, SiteConfigMap, err)}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	statuses, errs := fleet.Read(rctx, remote.Repo())
	var readErr error
	if statuses == nil {
		for _, e := range errs {
			var refErr *fleet.RefError
			if !errors.As(e, &refErr) {
				readErr = e
			}
		}
	}
	return rolloutGate(gs.Spec.Rollout, site.Name, statuses, readErr, revision, time.Now())
}

// siteWorkloads are the kinds counted as a site's workloads in its status.
var siteWorkloads = map[schema.GroupKind]bool{
	{Group: "apps", Kind: "Deployment"}: true, {Group: "apps", Kind: "StatefulSet"}: true, {Group: "apps", Kind: "DaemonSet"}: true,
}

// siteStatus is the status document of gs for site.
func (c *Controller) siteStatus(ctx context.Context, gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState, site Site, interval time.Duration, now time.Time) fleet.Status {
	out := fleet.Status{Site: site.Name, Labels: site.Labels, Source: gs.Namespace + "/" + gs.Name,
		Revision: st.LastAppliedRevision, Health: st.Health, Time: now, StatusInterval: int64(interval / time.Second),
		Version: Version}
	if out.Health == "" {
		out.Health = v1alpha1.HealthUnknown
	}
	if st.LastAppliedTime != nil {
		out.RevisionTime = st.LastAppliedTime.Time
	}
	if st.HealthySince != nil {
		out.HealthySince = st.HealthySince.Time
	}
	if ready := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); ready != nil {
		out.Ready, out.Reason, out.Message = ready.Status == metav1.ConditionTrue, ready.Reason, ready.Message
	}
	if rb := st.RolledBack; rb != nil {
		out.RolledBack = &fleet.RolledBack{Revision: rb.Revision, To: rb.To, Reason: rb.Reason}
	}
	if st.HeldRevision != "" {
		out.Held = &fleet.Held{Revision: st.HeldRevision}
		if cond := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRollout); cond != nil {
			out.Held.Reason = strings.TrimPrefix(cond.Message, "Revision "+st.HeldRevision+" held: ")
		}
	}
	if nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err == nil {
		for _, n := range nodes.Items {
			out.Hosts.Total++
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					out.Hosts.Ready++
				}
			}
		}
	}
	if st.Inventory != nil {
		for _, e := range st.Inventory.Entries {
			ns, name, gvk, err := parseID(e)
			if err != nil || !siteWorkloads[gvk.GroupKind()] {
				continue
			}
			out.Workloads.Total++
			key := gvk.Kind + " " + ns + "/" + name
			if r, ok := ss.healthy[key]; ok && r.Status == v1alpha1.HealthHealthy {
				out.Workloads.Available++
			}
		}
	}
	return out
}

// Version is the flotilla version written in the status documents (set by the binary).
var Version = "dev"

// publishKey is what, changed, makes a site publish at once (the time does not).
func publishKey(s fleet.Status) string {
	s.Time = time.Time{}
	doc, _ := fleet.Encode(s)
	return string(doc)
}

// publish writes the site's status to the repository when it changed since the last
// publication, or when the heartbeat interval passed, and records the outcome in the
// StatusPublished condition. It returns when to look again (0: not needed before the
// next round).
func (c *Controller) publish(ctx context.Context, gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState, now time.Time) time.Duration {
	set := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionStatusPublished, Status: status,
			Reason: reason, Message: truncate(msg), ObservedGeneration: gs.Generation})
	}
	sp := gs.Spec.StatusPush
	if sp == nil {
		if gs.Namespace == RootNamespace && gs.Name == RootName || gs.Spec.Rollout != nil {
			set(metav1.ConditionFalse, ReasonNotConfigured, "This site's status is not published to the repository: set spec.statusPush (flotilla agent --git-status-push) to report to refs/flotilla/status/<site> for flotilla fleet status and other sites' spec.rollout")
		} else {
			apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStatusPublished)
		}
		return 0
	}
	if other := c.publisherOtherThan(gs); other != "" {
		set(metav1.ConditionFalse, ReasonPublishConflict, fmt.Sprintf("GitSource %s publishes this site's status already (a site has one status document): remove spec.statusPush from one of them", other))
		return 0
	}
	site, err := ReadSite(ctx, c.client)
	if err != nil {
		set(metav1.ConditionFalse, ReasonPublishFailed, fmt.Sprintf("The site's identity (ConfigMap %s/%s) cannot be read: %v", SiteNamespace, SiteConfigMap, err))
		return publishRetry
	}
	st.Site = site.Name
	interval := v1alpha1.DefaultStatusInterval
	if sp.Interval != nil && sp.Interval.Duration > 0 {
		interval = sp.Interval.Duration
	}
	doc := c.siteStatus(ctx, gs, st, ss, site, interval, now)
	key := publishKey(doc)
	due := key != ss.publishedKey || now.Sub(ss.publishedAt) >= interval
	if !due {
		return ss.publishedAt.Add(interval).Sub(now)
	}
	if ss.publishFailed && now.Sub(ss.publishTried) < publishRetry {
		return ss.publishTried.Add(publishRetry).Sub(now)
	}
	ss.publishTried = now
	cred := gs.DeepCopy()
	if sp.SecretRef != nil {
		cred.Spec.SecretRef = sp.SecretRef
	}
	remote, err := remoteFor(ctx, c.client, cred)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		write := fleet.Write
		if sp.Branch {
			write = fleet.WriteBranch
		}
		err = write(pctx, remote.Repo(), doc)
		cancel()
	}
	ref := fleet.RefPrefix + site.Name
	if sp.Branch {
		ref = fleet.BranchPrefix + site.Name
	}
	if err != nil {
		msg := fmt.Sprintf("The status of site %s was not published to %s: %v", site.Name, ref, err)
		if sp.SecretRef == nil {
			msg += "; if the server needs push credentials, set spec.statusPush.secretRef to a Secret holding them"
		}
		if !ss.publishFailed {
			c.event(gs, corev1.EventTypeWarning, ReasonPublishFailed, "%s", truncate(msg))
			c.log.WithField("source", gs.Namespace+"."+gs.Name).WithError(err).Warn("status not published")
		}
		ss.publishFailed = true
		set(metav1.ConditionFalse, ReasonPublishFailed, msg)
		return publishRetry
	}
	ss.publishFailed, ss.publishedKey, ss.publishedAt = false, key, now
	st.LastPublishedTime = &metav1.Time{Time: now}
	set(metav1.ConditionTrue, ReasonPublished, fmt.Sprintf("Status of site %s published to %s (revision %s, %s)", site.Name, ref, orNone(doc.Revision), doc.Health))
	return interval
}
