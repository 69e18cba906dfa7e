package gitsync

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func TestPodFailure(t *testing.T) {
	pod := func(restart corev1.RestartPolicy, cs corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: corev1.PodSpec{RestartPolicy: restart},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}}}
	}
	waiting := func(reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	}
	exited := func(code int32, reason string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"running", pod("", corev1.ContainerStatus{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), ""},
		{"starting", pod("", corev1.ContainerStatus{Name: "c", State: waiting("ContainerCreating", "")}), ""},
		{"crash loop", pod("", corev1.ContainerStatus{Name: "c", State: waiting("CrashLoopBackOff", "back-off 10s"), LastTerminationState: exited(2, "Error")}),
			"pod web-1: container c CrashLoopBackOff, last exit code 2 (Error)"},
		{"image pull", pod("", corev1.ContainerStatus{Name: "c", State: waiting("ImagePullBackOff", `Back-off pulling image "x"`)}),
			`pod web-1: container c ImagePullBackOff: Back-off pulling image "x"`},
		{"between restarts", pod("", corev1.ContainerStatus{Name: "c", State: exited(1, "Error"), RestartCount: 3}),
			"pod web-1: container c restarted 3 time(s), last exit code 1 (Error)"},
		{"first exit of a Job's pod", pod(corev1.RestartPolicyNever, corev1.ContainerStatus{Name: "c", State: exited(1, "Error"), RestartCount: 1}), ""},
		{"completed", pod("", corev1.ContainerStatus{Name: "c", State: exited(0, "Completed"), RestartCount: 1}), ""},
	}
	for _, c := range cases {
		if got := podFailure(c.pod); got != c.want {
			t.Errorf("%s: podFailure = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFirstUnhealthy(t *testing.T) {
	got := firstUnhealthy(map[string]HealthResult{
		"ConfigMap a/x":    {Status: v1alpha1.HealthHealthy},
		"Deployment a/api": {Status: v1alpha1.HealthProgressing, Message: "1 of 2 replicas available"},
		"Deployment a/web": {Status: v1alpha1.HealthDegraded, Message: "pod web-1: container c CrashLoopBackOff"},
		"Job a/migrate":    {Status: v1alpha1.HealthProgressing, Message: "running"},
	})
	if want := "Deployment a/web: pod web-1: container c CrashLoopBackOff"; got != want {
		t.Errorf("a degraded object first: %q, want %q", got, want)
	}
	got = firstUnhealthy(map[string]HealthResult{
		"Job a/migrate":    {Status: v1alpha1.HealthProgressing, Message: "running"},
		"Deployment a/api": {Status: v1alpha1.HealthProgressing, Message: "1 of 2 replicas available"},
	})
	if want := "Deployment a/api: 1 of 2 replicas available"; got != want {
		t.Errorf("else the first progressing one by name: %q, want %q", got, want)
	}
	if got := firstUnhealthy(map[string]HealthResult{"ConfigMap a/x": {Status: v1alpha1.HealthHealthy}}); got != "" {
		t.Errorf("all healthy: %q", got)
	}
}

func TestRollbackDue(t *testing.T) {
	now := time.Now()
	source := func(wait bool, rollback *v1alpha1.GitRollback) *v1alpha1.GitSource {
		return &v1alpha1.GitSource{Spec: v1alpha1.GitSourceSpec{Wait: wait, Rollback: rollback}}
	}
	enabled := &v1alpha1.GitRollback{Enabled: true, HealthTimeout: &metav1.Duration{Duration: time.Minute}}
	status := func(appliedAgo time.Duration, applied, healthy string) *v1alpha1.GitSourceStatus {
		return &v1alpha1.GitSourceStatus{LastAppliedRevision: applied, LastHealthyRevision: healthy,
			LastAppliedTime: &metav1.Time{Time: now.Add(-appliedAgo)}}
	}
	sick := &sourceState{healthy: map[string]HealthResult{"Deployment a/web": {Status: v1alpha1.HealthDegraded}}}
	well := &sourceState{healthy: map[string]HealthResult{"Deployment a/web": {Status: v1alpha1.HealthHealthy}}}
	cases := []struct {
		name string
		gs   *v1alpha1.GitSource
		st   *v1alpha1.GitSourceStatus
		ss   *sourceState
		want bool
	}{
		{"past the timeout, unhealthy", source(false, enabled), status(2*time.Minute, "main@sha1:b", "main@sha1:a"), sick, true},
		{"within the timeout", source(false, enabled), status(30*time.Second, "main@sha1:b", "main@sha1:a"), sick, false},
		{"healthy", source(false, enabled), status(2*time.Minute, "main@sha1:b", "main@sha1:a"), well, false},
		{"health not known yet", source(false, enabled), status(2*time.Minute, "main@sha1:b", "main@sha1:a"), &sourceState{}, false},
		{"no healthy revision to go back to", source(false, enabled), status(2*time.Minute, "main@sha1:b", ""), sick, false},
		{"the healthy revision is the applied one", source(false, enabled), status(2*time.Minute, "main@sha1:b", "main@sha1:b"), sick, false},
		{"wait only", source(true, nil), status(10*time.Minute, "main@sha1:b", "main@sha1:a"), sick, false},
		{"default timeout 5m", source(false, &v1alpha1.GitRollback{Enabled: true}), status(4*time.Minute, "main@sha1:b", "main@sha1:a"), sick, false},
		{"past the default timeout", source(false, &v1alpha1.GitRollback{Enabled: true}), status(6*time.Minute, "main@sha1:b", "main@sha1:a"), sick, true},
	}
	for _, c := range cases {
		if got := rollbackDue(c.gs, c.st, c.ss, now); got != c.want {
			t.Errorf("%s: rollbackDue = %v, want %v", c.name, got, c.want)
		}
	}
	st := status(2*time.Minute, "main@sha1:a", "main@sha1:a")
	st.RolledBack = &v1alpha1.GitSourceRollback{Revision: "main@sha1:b", To: "main@sha1:a"}
	if rollbackDue(source(false, enabled), st, sick, now) {
		t.Error("a rolled-back source is rolled back again")
	}
}

func TestRevisionCommit(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	for _, rev := range []string{"main@sha1:" + sha, "v1.2.0@sha1:" + sha, "sha1:" + sha} {
		if got, err := revisionCommit(rev); err != nil || got != sha {
			t.Errorf("revisionCommit(%q) = %q, %v", rev, got, err)
		}
	}
	for _, rev := range []string{"", "main", "main@sha1:0123"} {
		if _, err := revisionCommit(rev); err == nil {
			t.Errorf("revisionCommit(%q): no error", rev)
		}
	}
}

func TestRollbackKeep(t *testing.T) {
	obj := func(apiVersion, kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		return u
	}
	for _, u := range []*unstructured.Unstructured{obj("v1", "PersistentVolumeClaim"), obj("v1", "PersistentVolume"), obj("v1", "Namespace"),
		obj("apiextensions.k8s.io/v1", "CustomResourceDefinition")} {
		if rollbackKeep(u) == "" {
			t.Errorf("a rollback deletes %s", u.GetKind())
		}
	}
	for _, u := range []*unstructured.Unstructured{obj("v1", "ConfigMap"), obj("apps/v1", "Deployment"), obj("v1", "Secret")} {
		if r := rollbackKeep(u); r != "" {
			t.Errorf("a rollback keeps %s: %s", u.GetKind(), r)
		}
	}
}

func TestPlanShowsRollback(t *testing.T) {
	p := &Plan{Source: "kube-system/site", Path: ".", Items: []PlanItem{},
		RolledBack: rolledBackMessage(&v1alpha1.GitSourceRollback{Revision: "main@sha1:b", To: "main@sha1:a", Reason: "Deployment a/web: pod web-1: container c CrashLoopBackOff"})}
	want := "Revision main@sha1:b rolled back to main@sha1:a: Deployment a/web: pod web-1: container c CrashLoopBackOff. A new commit is applied normally."
	if text := p.Text(); !strings.Contains(text, "rolled back: "+want) {
		t.Errorf("text plan does not say the source is rolled back:\n%s", text)
	}
	if md := p.Markdown(); !strings.Contains(md, "The source is rolled back: "+want) {
		t.Errorf("markdown plan does not say the source is rolled back:\n%s", md)
	}
}
