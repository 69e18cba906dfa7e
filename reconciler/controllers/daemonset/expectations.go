package daemonset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// expectations counts, per DaemonSet, the creations and deletions asked for and not yet seen
// through the informers. Unlike internal.Expectations it records both at once: one sync of a
// DaemonSet can create pods on some nodes and delete them on others.
type expectations struct {
	mu    sync.Mutex
	items map[string]*expectation
	now   func() time.Time
}

type expectation struct {
	add       int
	deleting  sets.Set[string]
	timestamp time.Time
}

func newExpectations() *expectations {
	return &expectations{items: map[string]*expectation{}, now: time.Now}
}

// Satisfied reports whether nothing is pending for key, or what is pending is older than
// internal.ExpectationsTimeout (a lost event must not wedge the DaemonSet).
func (e *expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.items[key]
	if !ok || (x.add <= 0 && x.deleting.Len() == 0) {
		return true
	}
	return e.now().Sub(x.timestamp) > internal.ExpectationsTimeout
}

// Expect records adds creations and the deletions of podKeys (replacing earlier records).
func (e *expectations) Expect(key string, adds int, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.items[key] = &expectation{add: adds, deleting: sets.New(podKeys...), timestamp: e.now()}
}

// CreationObserved lowers the pending creations of key by one.
func (e *expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.items[key]; ok && x.add > 0 {
		x.add--
	}
}

// DeletionObserved marks the deletion of podKey as seen.
func (e *expectations) DeletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.items[key]; ok {
		x.deleting.Delete(podKey)
	}
}

// Delete forgets key (its DaemonSet is gone).
func (e *expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.items, key)
}
