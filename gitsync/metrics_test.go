package gitsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// metricsController is a Controller on a fake dynamic client that answers every
// server-side apply with the object applied, failing dry runs or real applies on demand.
func metricsController(t *testing.T, failDryRun, failApply *atomic.Bool) *Controller {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchActionImpl)
		dry := len(pa.PatchOptions.DryRun) > 0
		if (dry && failDryRun.Load()) || (!dry && failApply.Load()) {
			return true, nil, apierrors.NewBadRequest("refused by the test")
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(pa.Patch); err != nil {
			return true, nil, err
		}
		return true, u, nil
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	ap := &Applier{Dynamic: dyn, Mapper: mapper}
	return &Controller{
		cfg:     Config{CacheDir: t.TempDir()},
		dyn:     dyn,
		applier: ap,
		// The source's spec.serviceAccountName (a fake client impersonates no one).
		impersonating: map[string]*Applier{"metrics-test/deployer": ap},
		log:           logrus.NewEntry(logrus.StandardLogger()),
		state:         map[string]*sourceState{},
	}
}

// TestReconcileMetrics drives full reconciliation rounds and reads back what they record:
// stage durations, the applied revision (one series, replaced on a new revision), the last
// success time, and a failure per failing stage.
func TestReconcileMetrics(t *testing.T) {
	r := newRepo(t)
	cm := func(v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: demo\ndata: {v: \"" + v + "\"}\n"
	}
	head1 := r.commit(map[string]string{"cm.yaml": cm("1")})
	var failDryRun, failApply atomic.Bool
	c := metricsController(t, &failDryRun, &failApply)
	gs := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: "metrics-test", Name: "apps", Generation: 1},
		Spec: v1alpha1.GitSourceSpec{URL: "file://" + r.dir, ServiceAccountName: "deployer"}}
	const src = "metrics-test/apps"
	st := &v1alpha1.GitSourceStatus{}
	ss := &sourceState{}
	ctx := context.Background()
	round := func(t *testing.T) {
		t.Helper()
		if _, err := c.reconcile(ctx, gs, st, ss); err != nil {
			t.Logf("round: %v", err)
		}
	}
	count := func(t *testing.T, name string, got func() (uint64, error), want uint64) {
		t.Helper()
		n, err := got()
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d observations, want %d", name, n, want)
		}
	}
	failures := func(t *testing.T, stage string, want float64) {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(failuresTotal.WithLabelValues(src, stage))
		if err != nil {
			t.Fatal(err)
		}
		if v != want {
			t.Errorf("failures_total{stage=%q} = %v, want %v", stage, v, want)
		}
	}
	revisionIs := func(t *testing.T, rev string) {
		t.Helper()
		got := seriesOf(t, "flotilla_gitsync_applied_revision_info", src)
		if want := []string{fmt.Sprintf("revision=%s source=%s 1", rev, src)}; !slices.Equal(got, want) {
			t.Errorf("applied_revision_info series %q, want %q", got, want)
		}
	}

	t.Run("applied", func(t *testing.T) {
		round(t)
		if !strings.HasSuffix(st.LastAppliedRevision, head1) {
			t.Fatalf("status %+v: first revision not applied", st)
		}
		count(t, "fetch", func() (uint64, error) { return testutil.GetHistogramMetricCount(fetchDuration.WithLabelValues(src)) }, 1)
		count(t, "render", func() (uint64, error) { return testutil.GetHistogramMetricCount(renderDuration.WithLabelValues(src)) }, 1)
		count(t, "apply", func() (uint64, error) { return testutil.GetHistogramMetricCount(applyDuration.WithLabelValues(src)) }, 1)
		revisionIs(t, st.LastAppliedRevision)
		ts, err := testutil.GetGaugeMetricValue(lastSuccess.WithLabelValues(src))
		if err != nil || ts <= 0 {
			t.Errorf("last_success_timestamp_seconds = %v, %v", ts, err)
		}
	})

	t.Run("new revision replaces the series", func(t *testing.T) {
		head2 := r.commit(map[string]string{"cm.yaml": cm("2")})
		round(t)
		if !strings.HasSuffix(st.LastAppliedRevision, head2) {
			t.Fatalf("status %+v: second revision not applied", st)
		}
		revisionIs(t, st.LastAppliedRevision)
	})

	t.Run("failures by stage", func(t *testing.T) {
		failDryRun.Store(true)
		round(t)
		failDryRun.Store(false)
		failures(t, stageValidate, 1)

		failApply.Store(true)
		round(t)
		failApply.Store(false)
		failures(t, stageApply, 1)
		count(t, "apply", func() (uint64, error) { return testutil.GetHistogramMetricCount(applyDuration.WithLabelValues(src)) }, 3)

		gs.Spec.Path = "missing"
		round(t)
		gs.Spec.Path = ""
		failures(t, stageRender, 1)

		gs.Spec.Verify = &v1alpha1.GitVerification{Mode: v1alpha1.VerifyModeHead}
		round(t)
		gs.Spec.Verify = nil
		failures(t, stageVerify, 1)

		gs.Spec.URL = "file://" + t.TempDir() + "/nothing"
		round(t)
		failures(t, stageFetch, 1)
		count(t, "fetch", func() (uint64, error) { return testutil.GetHistogramMetricCount(fetchDuration.WithLabelValues(src)) }, 7)
		count(t, "render", func() (uint64, error) { return testutil.GetHistogramMetricCount(renderDuration.WithLabelValues(src)) }, 5)
	})

	t.Run("deleted source", func(t *testing.T) {
		forgetSource(src)
		for _, name := range []string{"flotilla_gitsync_applied_revision_info", "flotilla_gitsync_last_success_timestamp_seconds", "flotilla_gitsync_failures_total"} {
			if got := seriesOf(t, name, src); len(got) > 0 {
				t.Errorf("%s still has %q", name, got)
			}
		}
	})
}

// seriesOf gathers the registry and lists the gauge and counter series of family name whose
// source label is source, as "label=value ... value" (other tests' sources left out).
func seriesOf(t *testing.T, name, source string) []string {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			mine := false
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
				mine = mine || (l.GetName() == "source" && l.GetValue() == source)
			}
			if !mine {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out = append(out, fmt.Sprintf("%s %g", strings.Join(labels, " "), v))
		}
	}
	return out
}
