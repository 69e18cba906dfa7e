package garbagecollector

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func ref(uid string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "o-" + uid, UID: types.UID(uid), BlockOwnerDeletion: ptr.To(block)}
}

func TestDecide(t *testing.T) {
	a, b := ref("a", false), ref("b", true)
	tests := []struct {
		name       string
		refs       []metav1.OwnerReference
		states     map[types.UID]ownerState
		finalizers []string
		want       decision
	}{
		{"no owners: nothing", nil, nil, nil, decision{}},
		{"live owner: keep", []metav1.OwnerReference{a}, map[types.UID]ownerState{"a": ownerSolid}, nil, decision{}},
		{"owner gone: delete in background", []metav1.OwnerReference{a}, map[types.UID]ownerState{"a": ownerDangling}, nil,
			decision{delete: true, policy: metav1.DeletePropagationBackground}},
		{"all owners gone: delete", []metav1.OwnerReference{a, b}, map[types.UID]ownerState{"a": ownerDangling, "b": ownerDangling}, nil,
			decision{delete: true, policy: metav1.DeletePropagationBackground}},
		{"one owner left: drop the dead reference", []metav1.OwnerReference{a, b}, map[types.UID]ownerState{"a": ownerDangling, "b": ownerSolid}, nil,
			decision{remove: []types.UID{"a"}}},
		{"owner waits in foreground: delete in foreground", []metav1.OwnerReference{b}, map[types.UID]ownerState{"b": ownerWaiting}, nil,
			decision{delete: true, policy: metav1.DeletePropagationForeground}},
		{"waiting owner but another keeps it: drop the reference", []metav1.OwnerReference{a, b}, map[types.UID]ownerState{"a": ownerSolid, "b": ownerWaiting}, nil,
			decision{remove: []types.UID{"b"}}},
		{"dependent asks to orphan its own dependents", []metav1.OwnerReference{a}, map[types.UID]ownerState{"a": ownerDangling}, []string{finalizerOrphan},
			decision{delete: true, policy: metav1.DeletePropagationOrphan}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.refs, tt.states, tt.finalizers)
			if got.delete != tt.want.delete || got.policy != tt.want.policy || !slices.Equal(got.remove, tt.want.remove) {
				t.Errorf("decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestGraphIndex(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	g := newGraph()
	owner := &node{gvr: cm, namespaced: true, namespace: "a", name: "owner", uid: "o"}
	dep := &node{gvr: cm, namespaced: true, namespace: "a", name: "dep", uid: "d", owners: []metav1.OwnerReference{ref("o", true)}}
	other := &node{gvr: cm, namespaced: true, namespace: "b", name: "dep", uid: "x", owners: []metav1.OwnerReference{ref("o", true)}}
	cluster := &node{gvr: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, name: "n1", uid: "c"}
	g.upsert(owner)
	g.upsert(dep)
	g.upsert(other)
	g.upsert(cluster)

	// A namespaced owner owns only dependents in its own namespace.
	deps := g.dependentsOf(owner)
	if len(deps) != 1 || deps[0].uid != "d" {
		t.Fatalf("dependentsOf(owner) = %v, want only d", deps)
	}
	if n := blocking(owner, deps); n != 1 {
		t.Errorf("blocking = %d, want 1", n)
	}
	// A cluster-scoped owner can own namespaced dependents.
	if !canOwn(cluster, dep) || canOwn(owner, cluster) {
		t.Errorf("canOwn: cluster-scoped owner must own namespaced objects, namespaced owner must not own cluster-scoped ones")
	}
	// The index follows ownerReference changes.
	g.upsert(&node{gvr: cm, namespaced: true, namespace: "a", name: "dep", uid: "d"})
	if deps := g.dependentsOf(owner); len(deps) != 0 {
		t.Errorf("after dropping the reference, dependentsOf(owner) = %v", deps)
	}
	// Removing an object keeps the dependents index of objects that still point at it.
	g.remove("o")
	if uids := g.dependentUIDs("o"); len(uids) != 1 || uids[0] != "x" {
		t.Errorf("dependentUIDs(o) = %v, want [x]", uids)
	}
	g.remove("x")
	if len(g.dependents) != 0 {
		t.Errorf("index not empty: %v", g.dependents)
	}
}

func TestHelpers(t *testing.T) {
	refs := []metav1.OwnerReference{ref("a", false), ref("b", true), ref("c", false)}
	got := withoutOwners(refs, "b", "c")
	if len(got) != 1 || got[0].UID != "a" {
		t.Errorf("withoutOwners = %v", got)
	}
	if got := without([]string{"orphan", "x", "orphan"}, "orphan"); !slices.Equal(got, []string{"x"}) {
		t.Errorf("without = %v", got)
	}
	n := &node{owners: refs}
	m := &node{owners: []metav1.OwnerReference{ref("a", false), ref("b", false), ref("c", false)}}
	if !ownersChanged(n, m) {
		t.Errorf("blockOwnerDeletion change not seen")
	}
	if ownersChanged(n, &node{owners: refs}) {
		t.Errorf("identical nodes reported as changed")
	}
}
