package internal

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
)

// ExpectationsTimeout is how long a controller waits for the watch to report its own creates
// and deletes before it stops trusting its bookkeeping and syncs anyway (a lost event must not
// wedge a controller forever).
const ExpectationsTimeout = 5 * time.Minute

// Expectations counts, per controller key, the creations and deletions a controller has asked
// for and not yet seen through its informers. A sync that runs while some are pending would
// count stale pods and create or delete twice, so it skips the scaling step.
// Deletions are tracked by pod key so that a pod seen twice (update with deletionTimestamp,
// then delete) is counted once.
type Expectations struct {
	mu    sync.Mutex
	items map[string]*expectation
	now   func() time.Time
}

type expectation struct {
	add       int
	deleting  sets.Set[string]
	timestamp time.Time
}

// NewExpectations returns empty expectations.
func NewExpectations() *Expectations {
	return &Expectations{items: map[string]*expectation{}, now: time.Now}
}

// Satisfied reports whether the controller key may scale: nothing is pending, the pending
// operations are older than ExpectationsTimeout, or nothing was ever recorded.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.items[key]
	if !ok {
		return true
	}
	if x.add <= 0 && x.deleting.Len() == 0 {
		return true
	}
	return e.now().Sub(x.timestamp) > ExpectationsTimeout
}

// ExpectCreations records that n creations were just requested (replacing earlier records).
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.items[key] = &expectation{add: n, deleting: sets.New[string](), timestamp: e.now()}
}

// ExpectDeletions records that the pods with these keys were just asked to be deleted.
func (e *Expectations) ExpectDeletions(key string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.items[key] = &expectation{deleting: sets.New(podKeys...), timestamp: e.now()}
}

// CreationObserved lowers the pending creations of key by one.
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.items[key]; ok && x.add > 0 {
		x.add--
	}
}

// DeletionObserved marks the deletion of podKey as seen.
func (e *Expectations) DeletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.items[key]; ok {
		x.deleting.Delete(podKey)
	}
}

// Delete forgets key (its owner is gone).
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.items, key)
}
