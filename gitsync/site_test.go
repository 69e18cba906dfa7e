package gitsync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func TestEnsureSite(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()

	// The first host records the site: its own name's first label when --site is unset.
	got, err := EnsureSite(ctx, kube, "", map[string]string{"tier": "canary"}, true, "Host-1.example.org")
	if err != nil || got.Name != "host-1" || got.Labels["tier"] != "canary" {
		t.Fatalf("first host: %+v, %v; want site host-1 with tier=canary", got, err)
	}
	if read, err := ReadSite(ctx, kube); err != nil || read.Name != "host-1" || FormatSiteLabels(read.Labels) != "tier=canary" {
		t.Fatalf("ReadSite: %+v, %v", read, err)
	}
	// Another host without flags takes the record; with the same flags it is accepted.
	if got, err := EnsureSite(ctx, kube, "", nil, false, "host-2"); err != nil || got.Name != "host-1" || got.Labels["tier"] != "canary" {
		t.Fatalf("host without --site: %+v, %v", got, err)
	}
	if _, err := EnsureSite(ctx, kube, "host-1", map[string]string{"tier": "canary"}, true, "host-3"); err != nil {
		t.Fatalf("host with the same flags: %v", err)
	}
	// Another name or other labels: refused, saying what to start the host with.
	_, err = EnsureSite(ctx, kube, "paris", nil, false, "host-4")
	if !errors.Is(err, ErrSiteMismatch) || !strings.Contains(err.Error(), "--site host-1") {
		t.Errorf("other --site: %v, want a mismatch naming --site host-1", err)
	}
	_, err = EnsureSite(ctx, kube, "", map[string]string{"tier": "late"}, true, "host-4")
	if !errors.Is(err, ErrSiteMismatch) || !strings.Contains(err.Error(), `--site-labels "tier=canary"`) {
		t.Errorf("other --site-labels: %v, want a mismatch naming tier=canary", err)
	}
	// A host name that is not a DNS label cannot name a site: --site is asked for.
	if _, err := EnsureSite(ctx, fake.NewClientset(), "", nil, false, "host_1"); err == nil || !strings.Contains(err.Error(), "--site NAME") {
		t.Errorf("host_1 as a site name: %v", err)
	}
}

func TestParseSiteLabels(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "",
		"tier=canary, region=eu":        "region=eu,tier=canary",
		"example.com/ring=1":            "example.com/ring=1",
		"tier":                          "write them as key=value",
		"tier=can ary":                  "write them as key=value",
		"tier=a,tier=b":                 "a key is given twice",
		"kubernetes.io/hostname=a":      "reserved",
		"node.kubernetes.io/x=a":        "reserved",
		"flotilla.dev/site=a":           "reserved",
		"topology.kubernetes.io/zone=a": "reserved",
	} {
		got, err := ParseSiteLabels(in)
		switch {
		case err != nil && !strings.Contains(err.Error(), want):
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		case err == nil && FormatSiteLabels(got) != want:
			t.Errorf("%q: %q, want %q", in, FormatSiteLabels(got), want)
		}
	}
}

// TestEnsureRootSourceFleetOptions: the agent's flags set the root source's interval,
// insecure, rollback, rollout and statusPush; a field no flag sets (one set with kubectl)
// stays, and the same flags again change nothing.
func TestEnsureRootSourceFleetOptions(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GitSourceResource: "GitSourceList"})
	res := dyn.Resource(GitSourceResource).Namespace("kube-system")
	url := "http://git.example.com/fleet.git"
	get := func() v1alpha1.GitSource {
		t.Helper()
		u, err := res.Get(ctx, "root", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var gs v1alpha1.GitSource
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
			t.Fatal(err)
		}
		return gs
	}
	o := RootOptions{Interval: 5 * time.Second, Insecure: true, RollbackHealthTimeout: time.Minute,
		RolloutAfter: "tier=canary", StatusPush: true, StatusInterval: 30 * time.Second}
	if err := EnsureRootSourceWith(ctx, dyn, url, "main", "sites/berlin", o); err != nil {
		t.Fatal(err)
	}
	gs := get()
	s := gs.Spec
	if s.Interval.Duration != 5*time.Second || !s.Insecure || s.Rollback == nil || !s.Rollback.Enabled || s.Rollback.HealthTimeout.Duration != time.Minute ||
		s.Rollout == nil || s.Rollout.After.Selector != "tier=canary" || s.Rollout.Soak.Duration != v1alpha1.DefaultSoak ||
		s.StatusPush == nil || s.StatusPush.Interval.Duration != 30*time.Second {
		t.Fatalf("root spec %+v", s)
	}
	// Set by hand: push credentials; the flags do not touch them.
	if _, err := res.Patch(ctx, "root", types.MergePatchType, []byte(`{"spec":{"statusPush":{"secretRef":{"name":"push"}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rv := get().ResourceVersion
	if err := EnsureRootSourceWith(ctx, dyn, url, "main", "sites/berlin", o); err != nil {
		t.Fatal(err)
	}
	after := get()
	if after.ResourceVersion != rv {
		t.Errorf("the same flags again updated the root source")
	}
	if sp := after.Spec.StatusPush; sp == nil || sp.SecretRef == nil || sp.SecretRef.Name != "push" {
		t.Errorf("statusPush.secretRef set by hand lost: %+v", sp)
	}
	// Without the fleet flags the fields stay as they are.
	if err := EnsureRootSource(ctx, dyn, url, "main", "sites/berlin"); err != nil {
		t.Fatal(err)
	}
	if s := get().Spec; s.Rollout == nil || s.StatusPush == nil || !s.Insecure {
		t.Errorf("fields set earlier dropped: %+v", s)
	}
}
