package defaults

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// setGitSource makes a GitSource's defaults explicit, so that what the controller does is
// what the object says: fetched every minute, at branch main, pruning, a rollback's health timeout 5m, a rollout's soak and the status heartbeat 10m. spec.timeout stays
// unset: it follows the interval at use, also when the interval changes later.
func setGitSource(gs *flotillav1alpha1.GitSource) {
	s := &gs.Spec
	if s.Interval.Duration == 0 {
		s.Interval = metav1.Duration{Duration: flotillav1alpha1.DefaultInterval}
	}
	if s.Ref == nil || *s.Ref == (flotillav1alpha1.GitRef{}) {
		s.Ref = &flotillav1alpha1.GitRef{Branch: flotillav1alpha1.DefaultBranch}
	}
	if s.Prune == nil {
		s.Prune = new(true)
	}
	if s.Rollback != nil && s.Rollback.HealthTimeout == nil {
		s.Rollback.HealthTimeout = &metav1.Duration{Duration: flotillav1alpha1.DefaultHealthTimeout}
	}
	if s.Rollout != nil && s.Rollout.Soak == nil {
		s.Rollout.Soak = &metav1.Duration{Duration: flotillav1alpha1.DefaultSoak}
	}
	if s.StatusPush != nil && s.StatusPush.Interval == nil {
		s.StatusPush.Interval = &metav1.Duration{Duration: flotillav1alpha1.DefaultStatusInterval}
	}
}
