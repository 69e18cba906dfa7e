package gitsync

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// warnHostDaemonSet runs on the host's network with the host's root mounted: the API's
// default Pod Security level (baseline) refuses its pods and only warns about the DaemonSet.
const warnHostDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: hostagent
  namespace: default
spec:
  selector:
    matchLabels: {app: hostagent}
  template:
    metadata:
      labels: {app: hostagent}
    spec:
      hostNetwork: true
      containers:
      - name: c
        image: busybox
      volumes:
      - name: root
        hostPath: {path: /}
`

// TestAPIWarningsAgainstAgent: a DaemonSet whose pods Pod Security Admission would refuse is
// accepted with a warning; plan (Go API and the built binary) lists the warning naming the
// DaemonSet, and the controller records it as one APIWarning event on the GitSource, not
// repeated by the re-applies of the same revision.
func TestAPIWarningsAgainstAgent(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ds.yaml": warnHostDaemonSet})
	e := start(t)
	const prefix = `DaemonSet default/hostagent: would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`
	ctx := context.Background()

	t.Log("plan through the Go API, with a client set up by CollectWarnings")
	cfg := rest.CopyConfig(e.a.RESTConfig())
	CollectWarnings(cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ap := &Applier{Dynamic: dyn, Mapper: e.cctx.RESTMapper}
	p, err := ap.Plan(ctx, PlanOptions{RepoDir: r.dir, Source: "default/apps"})
	if err != nil {
		t.Fatal(err)
	}
	hasWarning := func(ws []string) bool {
		n := 0
		for _, w := range ws {
			if strings.HasPrefix(w, prefix) {
				n++
			}
		}
		return n == 1
	}
	if !hasWarning(p.Warnings) {
		t.Errorf("plan warnings %q: want one starting with %q", p.Warnings, prefix)
	}
	if c := p.Counts(); c.Create != 1 || c.Invalid != 0 {
		t.Errorf("plan %+v: want the DaemonSet as a create", c)
	}

	t.Log("plan through the built binary")
	out, err := exec.Command(framework.FlotillaBin(t), "plan", "--kubeconfig", e.a.Kubeconfig, "--source", "default/apps",
		"--output", "json", r.dir).Output()
	if err != nil {
		t.Fatalf("flotilla plan: %v\n%s", err, out)
	}
	var bp Plan
	if err := json.Unmarshal(out, &bp); err != nil {
		t.Fatalf("flotilla plan json: %v\n%s", err, out)
	}
	if !hasWarning(bp.Warnings) {
		t.Errorf("flotilla plan warnings %q: want one starting with %q", bp.Warnings, prefix)
	}

	t.Log("the controller applies the revision and records the warning on the GitSource")
	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "1s"})
	e.waitFor("revision applied", e.readyAt(head))
	warningEvents := func() []corev1.Event {
		list, err := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []corev1.Event
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "GitSource" && ev.InvolvedObject.Name == "apps" && ev.Reason == EventAPIWarning {
				out = append(out, ev)
			}
		}
		return out
	}
	e.waitFor("APIWarning event", func() bool {
		return slices.ContainsFunc(warningEvents(), func(ev corev1.Event) bool { return strings.HasPrefix(ev.Message, prefix) })
	})
	// Three more rounds, each re-applying the revision (and answered the same warning); a
	// repeated event from the first of them would have been recorded by the end of the third.
	applies := func() uint64 {
		n, err := testutil.GetHistogramMetricCount(applyDuration.WithLabelValues(metricsSource("default", "apps")))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	seen := applies()
	e.waitFor("three more applies of the revision", func() bool { return applies() >= seen+3 })
	if st := e.source().Status; st.LastAppliedRevision != "main@sha1:"+head {
		t.Fatalf("lastAppliedRevision %s, want the same revision re-applied", st.LastAppliedRevision)
	}
	n := 0
	for _, ev := range warningEvents() {
		if ev.Type != corev1.EventTypeWarning {
			t.Errorf("event %s: type %s, want Warning", ev.Message, ev.Type)
		}
		if ev.Count > 1 {
			t.Errorf("event %q recorded %d times for one revision", ev.Message, ev.Count)
		}
		if strings.HasPrefix(ev.Message, prefix) {
			n++
			t.Logf("event: %s", ev.Message)
		}
	}
	if n != 1 {
		t.Errorf("%d APIWarning events for the DaemonSet's Pod Security warning, want 1", n)
	}
	w := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionWarning)
	if w == nil || w.Status != metav1.ConditionTrue || w.Reason != ReasonAPIWarnings || !strings.Contains(w.Message, prefix) {
		t.Errorf("Warning condition %+v: want True, reason %s, listing %q", w, ReasonAPIWarnings, prefix)
	}
}

// refusedHostPod is a bare Pod that the site's default Pod Security level (baseline) refuses.
const refusedHostPod = `apiVersion: v1
kind: Pod
metadata:
  name: rootfs
  namespace: default
spec:
  containers:
  - name: c
    image: example/app:1
  volumes:
  - name: root
    hostPath: {path: /}
`

// TestPodSecurityRefusalAgainstAgent: a Pod that Pod Security Admission refuses makes the plan
// invalid and the GitSource not Ready, both naming the Pod with PSA's message, and nothing of
// the revision is applied.
func TestPodSecurityRefusalAgainstAgent(t *testing.T) {
	r := newRepo(t)
	r.commit(map[string]string{"pod.yaml": refusedHostPod, "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: beside, namespace: default}\n"})
	e := start(t)
	const psa = `violates PodSecurity "baseline:latest": hostPath volumes (volume "root")`
	ctx := context.Background()

	p, err := (&Applier{Dynamic: e.cctx.Dynamic, Mapper: e.cctx.RESTMapper}).Plan(ctx, PlanOptions{RepoDir: r.dir, Source: "default/apps"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range p.Items {
		if it.Kind == "Pod" && it.Name == "rootfs" && it.Action == PlanInvalid && strings.Contains(it.Reason, psa) {
			found = true
		}
	}
	if !found {
		t.Errorf("plan does not show Pod rootfs invalid with %q: %+v", psa, p.Items)
	}

	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "1s"})
	e.waitFor("GitSource not Ready, naming the Pod and PSA's message", func() bool {
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "rootfs") && strings.Contains(c.Message, psa)
	})
	if _, err := e.client.CoreV1().ConfigMaps("default").Get(ctx, "beside", metav1.GetOptions{}); err == nil {
		t.Error("the refused revision was applied in part: ConfigMap beside exists")
	}
}
