package garbagecollector

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Finalizers the API server's generic registry adds for the non-default propagation policies.
const (
	finalizerOrphan     = metav1.FinalizerOrphanDependents // "orphan"
	finalizerForeground = metav1.FinalizerDeleteDependents // "foregroundDeletion"
)

// node is what the collector knows about one object: enough metadata to find it again, its
// owners, and whether its deletion has started.
type node struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	namespace  string
	name       string
	uid        types.UID
	owners     []metav1.OwnerReference
	deleting   bool // metadata.deletionTimestamp is set
	finalizers []string
}

func (n *node) hasFinalizer(f string) bool { return slices.Contains(n.finalizers, f) }

// ownerRef returns n's reference to the owner uid, if any.
func (n *node) ownerRef(uid types.UID) (metav1.OwnerReference, bool) {
	for _, r := range n.owners {
		if r.UID == uid {
			return r, true
		}
	}
	return metav1.OwnerReference{}, false
}

// canOwn reports whether owner can be the object a reference from dep points to. An
// ownerReference has no namespace: a namespaced owner is looked up in the dependent's
// namespace, so it owns only dependents there; a cluster-scoped owner can own anything.
func canOwn(owner, dep *node) bool {
	if !owner.namespaced {
		return true
	}
	return dep.namespaced && owner.namespace == dep.namespace
}

// graph is the owner->dependents index, keyed by UID. Dependents are indexed by the owner
// UIDs they reference, whether or not that owner has been seen.
type graph struct {
	mu         sync.RWMutex
	nodes      map[types.UID]*node
	dependents map[types.UID]map[types.UID]struct{}
}

func newGraph() *graph {
	return &graph{nodes: map[types.UID]*node{}, dependents: map[types.UID]map[types.UID]struct{}{}}
}

// upsert records n and returns the previous version of the object, if any.
func (g *graph) upsert(n *node) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.nodes[n.uid]
	if old != nil {
		g.unindex(old)
	}
	g.nodes[n.uid] = n
	for _, r := range n.owners {
		deps := g.dependents[r.UID]
		if deps == nil {
			deps = map[types.UID]struct{}{}
			g.dependents[r.UID] = deps
		}
		deps[n.uid] = struct{}{}
	}
	return old
}

// remove forgets the object uid and returns what was known about it.
func (g *graph) remove(uid types.UID) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.nodes[uid]
	if old != nil {
		g.unindex(old)
		delete(g.nodes, uid)
	}
	return old
}

func (g *graph) unindex(n *node) {
	for _, r := range n.owners {
		if deps := g.dependents[r.UID]; deps != nil {
			delete(deps, n.uid)
			if len(deps) == 0 {
				delete(g.dependents, r.UID)
			}
		}
	}
}

// get returns the object uid, or nil. Nodes are never mutated after upsert, so the
// pointer may be read without the lock.
func (g *graph) get(uid types.UID) *node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.nodes[uid]
}

// dependentsOf returns the known objects whose ownerReferences point at owner.
func (g *graph) dependentsOf(owner *node) []*node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []*node
	for uid := range g.dependents[owner.uid] {
		if d := g.nodes[uid]; d != nil && canOwn(owner, d) {
			out = append(out, d)
		}
	}
	return out
}

// dependentUIDs returns the UIDs of every known object that references uid as an owner.
func (g *graph) dependentUIDs(uid types.UID) []types.UID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]types.UID, 0, len(g.dependents[uid]))
	for d := range g.dependents[uid] {
		out = append(out, d)
	}
	return out
}

// ownerState is how one ownerReference of a dependent resolves.
type ownerState int

const (
	// ownerSolid: the owner exists and is not waiting for its dependents to go.
	ownerSolid ownerState = iota
	// ownerDangling: no object with the referenced UID exists where the reference points.
	ownerDangling
	// ownerWaiting: the owner is being deleted in the foreground and waits for dependents.
	ownerWaiting
)

// decision is what to do with a dependent after its owners have been resolved.
type decision struct {
	// remove lists the ownerReferences (by UID) to drop from the dependent; set only when
	// a solid owner remains, so the dependent lives on.
	remove []types.UID
	// delete says to delete the dependent with policy.
	delete bool
	policy metav1.DeletionPropagation
}

// decide applies the collector's rules to one dependent. states holds the resolution of
// each of its ownerReferences, finalizers are the dependent's own.
//   - any solid owner keeps the dependent; references to dangling and waiting owners go;
//   - otherwise, if an owner waits for its dependents, the dependent is deleted in the
//     foreground (so its own dependents go before it, and before the waiting owner);
//   - otherwise every owner is gone and the dependent is deleted, in the background unless
//     it already asks for another policy through its finalizers.
func decide(refs []metav1.OwnerReference, states map[types.UID]ownerState, finalizers []string) decision {
	var solid, stale []types.UID
	waiting := false
	for _, r := range refs {
		switch states[r.UID] {
		case ownerSolid:
			solid = append(solid, r.UID)
		case ownerWaiting:
			waiting = true
			stale = append(stale, r.UID)
		case ownerDangling:
			stale = append(stale, r.UID)
		}
	}
	switch {
	case len(refs) == 0:
		return decision{}
	case len(solid) > 0:
		return decision{remove: stale}
	case waiting:
		return decision{delete: true, policy: metav1.DeletePropagationForeground}
	case slices.Contains(finalizers, finalizerOrphan):
		return decision{delete: true, policy: metav1.DeletePropagationOrphan}
	case slices.Contains(finalizers, finalizerForeground):
		return decision{delete: true, policy: metav1.DeletePropagationForeground}
	default:
		return decision{delete: true, policy: metav1.DeletePropagationBackground}
	}
}

// withoutOwners returns refs minus the references to the given UIDs.
func withoutOwners(refs []metav1.OwnerReference, uids ...types.UID) []metav1.OwnerReference {
	out := make([]metav1.OwnerReference, 0, len(refs))
	for _, r := range refs {
		if !slices.Contains(uids, r.UID) {
			out = append(out, r)
		}
	}
	return out
}

// without returns list minus every occurrence of s.
func without(list []string, s string) []string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}

// blocking reports how many of deps block owner's foreground deletion: those whose
// reference to it has blockOwnerDeletion=true.
func blocking(owner *node, deps []*node) int {
	n := 0
	for _, d := range deps {
		if r, ok := d.ownerRef(owner.uid); ok && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
			n++
		}
	}
	return n
}

// ownersChanged reports whether two versions of an object differ in what the collector acts on.
func ownersChanged(old, cur *node) bool {
	if old.deleting != cur.deleting || !slices.Equal(old.finalizers, cur.finalizers) || len(old.owners) != len(cur.owners) {
		return true
	}
	for i := range old.owners {
		a, b := old.owners[i], cur.owners[i]
		if a.UID != b.UID || a.Name != b.Name || a.Kind != b.Kind || a.APIVersion != b.APIVersion ||
			boolValue(a.BlockOwnerDeletion) != boolValue(b.BlockOwnerDeletion) {
			return true
		}
	}
	return false
}

func boolValue(b *bool) bool { return b != nil && *b }
