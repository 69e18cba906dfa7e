package endpointslice

import (
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// trackerTTL bounds how long a write waits to be seen: a slice deleted by someone else right
// after our create would otherwise block its Service forever.
const trackerTTL = 30 * time.Second

// expectation is one of our slice writes the informer has not shown yet.
type expectation struct {
	name    string
	rv      uint64
	deleted bool
	at      time.Time
}

// tracker remembers the slice writes of each Service until the informer cache reflects them:
// a sync from a cache that misses a slice we just created would create it a second time.
type tracker struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]map[types.UID]expectation
}

func newTracker() *tracker {
	return &tracker{now: time.Now, m: map[string]map[types.UID]expectation{}}
}

func parseRV(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// wrote records a slice as returned by a create or update, or one we deleted.
func (t *tracker) wrote(svcKey string, es *discoveryv1.EndpointSlice, deleted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[svcKey] == nil {
		t.m[svcKey] = map[types.UID]expectation{}
	}
	t.m[svcKey][es.UID] = expectation{name: es.Name, rv: parseRV(es.ResourceVersion), deleted: deleted, at: t.now()}
}

// stale reports whether the cache (get by name) still misses one of the Service's writes;
// writes it shows are forgotten.
func (t *tracker) stale(svcKey string, get func(name string) *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	stale := false
	for uid, e := range t.m[svcKey] {
		if t.now().Sub(e.at) > trackerTTL {
			delete(t.m[svcKey], uid)
			continue
		}
		cur := get(e.name)
		seen := cur == nil || cur.UID != uid
		if !e.deleted {
			seen = cur != nil && cur.UID == uid && parseRV(cur.ResourceVersion) >= e.rv
		}
		if seen {
			delete(t.m[svcKey], uid)
		} else {
			stale = true
		}
	}
	if len(t.m[svcKey]) == 0 {
		delete(t.m, svcKey)
	}
	return stale
}

func (t *tracker) forget(svcKey string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, svcKey)
}
