package gitsync

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/fleet"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func TestRolloutGate(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const (
		r1 = "main@sha1:1111111111111111111111111111111111111111"
		r2 = "main@sha1:2222222222222222222222222222222222222222"
	)
	site := func(name, tier, rev, health string, healthyFor time.Duration) fleet.Status {
		st := fleet.Status{Site: name, Labels: map[string]string{"tier": tier}, Revision: rev, Health: health,
			Time: now.Add(-10 * time.Second), StatusInterval: 60}
		if health == v1alpha1.HealthHealthy {
			st.HealthySince = now.Add(-healthyFor)
		}
		return st
	}
	canaryOnly := &v1alpha1.GitRollout{After: v1alpha1.RolloutAfter{Selector: "tier=canary"}, Soak: &metav1.Duration{Duration: 10 * time.Minute}}
	for _, c := range []struct {
		name     string
		rollout  *v1alpha1.GitRollout
		statuses []fleet.Status
		readErr  error
		self     string
		open     bool
		reason   string
		says     string
		recheck  bool
	}{
		{name: "canary healthy for longer than the soak", rollout: canaryOnly,
			statuses: []fleet.Status{site("canary", "canary", r2, v1alpha1.HealthHealthy, 11*time.Minute), site("late", "late", r1, v1alpha1.HealthHealthy, time.Hour)},
			self:     "early", open: true, says: "released: canary ran it healthy for 10m0s"},
		{name: "canary still soaking", rollout: canaryOnly,
			statuses: []fleet.Status{site("canary", "canary", r2, v1alpha1.HealthHealthy, 4*time.Minute)},
			self:     "early", reason: ReasonRolloutWaiting, says: "soaking 6m0s more", recheck: true},
		{name: "canary still on the old revision", rollout: canaryOnly,
			statuses: []fleet.Status{site("canary", "canary", r1, v1alpha1.HealthHealthy, time.Hour)},
			self:     "early", reason: ReasonRolloutWaiting, says: "site canary runs main@sha1:1111111, not this revision yet"},
		{name: "canary progressing", rollout: canaryOnly,
			statuses: []fleet.Status{site("canary", "canary", r2, v1alpha1.HealthProgressing, 0)},
			self:     "early", reason: ReasonRolloutWaiting, says: "site canary runs it, Progressing"},
		{name: "canary rolled the revision back", rollout: canaryOnly,
			statuses: []fleet.Status{func() fleet.Status {
				st := site("canary", "canary", r1, v1alpha1.HealthHealthy, time.Minute)
				st.RolledBack = &fleet.RolledBack{Revision: r2, To: r1, Reason: "Deployment hello/hello: pod hello-x: CrashLoopBackOff"}
				return st
			}()},
			self: "early", reason: ReasonRolloutHeld, says: "site canary rolled it back (Deployment hello/hello: pod hello-x: CrashLoopBackOff)"},
		{name: "canary degraded on the revision", rollout: canaryOnly,
			statuses: []fleet.Status{func() fleet.Status {
				st := site("canary", "canary", r2, v1alpha1.HealthDegraded, 0)
				st.Message = "Deployment web/api: ProgressDeadlineExceeded"
				return st
			}()},
			self: "early", reason: ReasonRolloutHeld, says: "site canary reports it Degraded (Deployment web/api: ProgressDeadlineExceeded)"},
		{name: "a stale report does not release", rollout: canaryOnly,
			statuses: []fleet.Status{func() fleet.Status {
				st := site("canary", "canary", r2, v1alpha1.HealthHealthy, time.Hour)
				st.Time = now.Add(-4 * time.Minute)
				return st
			}()},
			self: "early", reason: ReasonRolloutWaiting, says: "stale"},
		{name: "no site matches yet", rollout: canaryOnly,
			statuses: []fleet.Status{site("late", "late", r2, v1alpha1.HealthHealthy, time.Hour)},
			self:     "early", reason: ReasonRolloutWaiting, says: `no other site whose labels match "tier=canary"`},
		{name: "a site never waits for itself", rollout: canaryOnly,
			statuses: []fleet.Status{site("canary", "canary", r1, v1alpha1.HealthHealthy, time.Hour)},
			self:     "canary", reason: ReasonRolloutWaiting, says: "no other site"},
		{name: "named site not reported", rollout: &v1alpha1.GitRollout{After: v1alpha1.RolloutAfter{Sites: []string{"paris"}}},
			statuses: []fleet.Status{site("canary", "canary", r2, v1alpha1.HealthHealthy, time.Hour)},
			self:     "early", reason: ReasonRolloutWaiting, says: "site paris (spec.rollout.after.sites) has not published"},
		{name: "named site on another ref name with the same commit, default soak", rollout: &v1alpha1.GitRollout{After: v1alpha1.RolloutAfter{Sites: []string{"paris"}}},
			statuses: []fleet.Status{site("paris", "x", "refs/heads/prod@sha1:2222222222222222222222222222222222222222", v1alpha1.HealthHealthy, 10*time.Minute)},
			self:     "early", open: true},
		{name: "the repository cannot be read", rollout: canaryOnly, readErr: errors.New("connection refused"),
			self: "early", reason: ReasonRolloutWaiting, says: "cannot be read from the repository (connection refused)"},
		{name: "every matched site counts: one waiting holds", rollout: &v1alpha1.GitRollout{After: v1alpha1.RolloutAfter{Selector: "tier in (canary,early)"}, Soak: &metav1.Duration{}},
			statuses: []fleet.Status{site("canary", "canary", r2, v1alpha1.HealthHealthy, time.Minute), site("early", "early", r1, v1alpha1.HealthHealthy, time.Minute)},
			self:     "late", reason: ReasonRolloutWaiting, says: "site early runs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := rolloutGate(c.rollout, c.self, c.statuses, c.readErr, r2, now)
			if g.open != c.open || (!c.open && g.reason != c.reason) {
				t.Fatalf("got open=%v reason %s (%s), want open=%v reason %s", g.open, g.reason, g.message, c.open, c.reason)
			}
			if !strings.Contains(g.message, c.says) {
				t.Errorf("message %q does not say %q", g.message, c.says)
			}
			if (g.recheck > 0) != c.recheck {
				t.Errorf("recheck %s, want one: %v", g.recheck, c.recheck)
			}
		})
	}
}

// TestOnePublisherPerSite: a site has one status document; when several sources set
// spec.statusPush, kube-system/root publishes (else the first by name) and the others say so.
func TestOnePublisherPerSite(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	c := &Controller{informer: inf}
	add := func(ns, name string, push bool) *v1alpha1.GitSource {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
			"metadata": map[string]any{"namespace": ns, "name": name}, "spec": map[string]any{"url": "file:///srv/f.git"}}}
		if push {
			_ = unstructured.SetNestedMap(u.Object, map[string]any{"interval": "10m0s"}, "spec", "statusPush")
		}
		if err := inf.GetIndexer().Add(u); err != nil {
			t.Fatal(err)
		}
		return &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	apps := add("team-a", "apps", true)
	if got := c.publisherOtherThan(apps); got != "" {
		t.Fatalf("the only publisher: %q", got)
	}
	web := add("team-b", "web", true)
	add("team-c", "quiet", false)
	if got := c.publisherOtherThan(web); got != "team-a/apps" {
		t.Errorf("team-b/web: publisher %q, want team-a/apps (first by name)", got)
	}
	root := add("kube-system", "root", true)
	if got := c.publisherOtherThan(apps); got != "kube-system/root" {
		t.Errorf("team-a/apps: publisher %q, want kube-system/root", got)
	}
	if got := c.publisherOtherThan(root); got != "" {
		t.Errorf("kube-system/root publishes: %q", got)
	}
}
