package scheduler

import (
	"container/heap"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
)

// queuedPod is a pending pod with its scheduling history.
type queuedPod struct {
	pod      *corev1.Pod
	key      string
	added    time.Time // first time the pod was queued: ties of priority go first-come
	attempts int
	// backoffUntil is when a pod that failed may be tried again.
	backoffUntil time.Time
	// unschedulableSince is when it was parked as unschedulable.
	unschedulableSince time.Time
	// missedMove is set when, while the pod was being scheduled, a cluster change that
	// may concern it happened (its failure may be stale).
	missedMove bool
	index      int
}

// where a queued pod is.
type place int

const (
	inActive place = iota + 1
	inBackoff
	inUnschedulable
	inFlight
)

// Queue holds pending pods: active (ready, highest priority first), backing off (failed
// recently: 1 s doubling to 10 s), unschedulable (waiting for a change in the cluster), and in
// flight (popped and being scheduled). A pod is in exactly one of them.
type Queue struct {
	mu   sync.Mutex
	cond *sync.Cond
	now  func() time.Time

	initialBackoff, maxBackoff, maxUnschedulable time.Duration

	active activeHeap
	pods   map[string]*queuedPod
	where  map[string]place
	// backoff and unschedulable index the pods in those places, so that moves and flushes
	// do not walk every pending pod.
	backoff, unschedulable map[string]*queuedPod
	closed                 bool
	// inFlight are the popped pods being scheduled.
	inFlight map[string]*queuedPod
}

// NewQueue returns an empty queue with the given backoffs (zero: 1 s, 10 s) and the longest
// a pod waits as unschedulable without any change (zero: 5 min).
func NewQueue(initialBackoff, maxBackoff, maxUnschedulable time.Duration, now func() time.Time) *Queue {
	if initialBackoff == 0 {
		initialBackoff = time.Second
	}
	if maxBackoff == 0 {
		maxBackoff = 10 * time.Second
	}
	if maxUnschedulable == 0 {
		maxUnschedulable = 5 * time.Minute
	}
	if now == nil {
		now = time.Now
	}
	q := &Queue{now: now, initialBackoff: initialBackoff, maxBackoff: maxBackoff, maxUnschedulable: maxUnschedulable,
		pods: map[string]*queuedPod{}, where: map[string]place{},
		backoff: map[string]*queuedPod{}, unschedulable: map[string]*queuedPod{}, inFlight: map[string]*queuedPod{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// Add queues a new pending pod or updates the pod object of a queued one. An update to a
// pod parked as unschedulable (a toleration added, a label changed) gives it another try.
func (q *Queue) Add(pod *corev1.Pod) { q.Update(pod, true) }

// Update is Add for a pod update; specChanged false (only status or bookkeeping changed, as
// our own Unschedulable condition) keeps an unschedulable pod waiting.
func (q *Queue) Update(pod *corev1.Pod, specChanged bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	if qp, ok := q.pods[key]; ok {
		qp.pod = pod
		if !specChanged {
			return
		}
		switch q.where[key] {
		case inUnschedulable:
			q.moveLocked(qp)
		case inFlight:
			qp.missedMove = true
		}
		return
	}
	qp := &queuedPod{pod: pod, key: key, added: q.now()}
	q.pods[key] = qp
	q.pushActiveLocked(qp)
}

// AddBackoff queues a pod that failed outside a scheduling cycle (its binding was refused):
// it is tried again after the initial backoff.
func (q *Queue) AddBackoff(pod *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	if _, ok := q.pods[key]; ok {
		return
	}
	qp := &queuedPod{pod: pod, key: key, added: q.now(), attempts: 1, backoffUntil: q.now().Add(q.initialBackoff)}
	q.pods[key] = qp
	q.setPlace(qp, inBackoff)
}

// Delete drops a pod (deleted, or bound by someone).
func (q *Queue) Delete(pod *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	qp, ok := q.pods[key]
	if !ok {
		return
	}
	if q.where[key] == inActive {
		heap.Remove(&q.active, qp.index)
	}
	q.setPlace(qp, 0)
	delete(q.pods, key)
}

// setPlace moves qp to p (0: out of the queue), keeping the indexes in step.
func (q *Queue) setPlace(qp *queuedPod, p place) {
	switch q.where[qp.key] {
	case inBackoff:
		delete(q.backoff, qp.key)
	case inUnschedulable:
		delete(q.unschedulable, qp.key)
	case inFlight:
		delete(q.inFlight, qp.key)
	}
	switch p {
	case 0:
		delete(q.where, qp.key)
		return
	case inBackoff:
		q.backoff[qp.key] = qp
	case inUnschedulable:
		q.unschedulable[qp.key] = qp
	case inFlight:
		q.inFlight[qp.key] = qp
	}
	q.where[qp.key] = p
}

func (q *Queue) pushActiveLocked(qp *queuedPod) {
	q.setPlace(qp, inActive)
	heap.Push(&q.active, qp)
	q.cond.Signal()
}

// moveLocked sends an unschedulable pod to active, or to backoff while its backoff runs.
func (q *Queue) moveLocked(qp *queuedPod) {
	if q.now().Before(qp.backoffUntil) {
		q.setPlace(qp, inBackoff)
		return
	}
	q.pushActiveLocked(qp)
}

// MoveAll gives every unschedulable pod (for which relevant says yes; nil: all) another try:
// something changed in the cluster that may make it fit.
func (q *Queue) MoveAll(relevant func(*corev1.Pod) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, qp := range q.inFlight {
		if relevant == nil || relevant(qp.pod) {
			qp.missedMove = true
		}
	}
	for _, qp := range q.unschedulable {
		if relevant == nil || relevant(qp.pod) {
			q.moveLocked(qp)
		}
	}
}

// Pop waits for an active pod; nil when the queue is closed.
func (q *Queue) Pop() *corev1.Pod {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.active.Len() == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil
	}
	qp := heap.Pop(&q.active).(*queuedPod)
	qp.attempts++
	qp.missedMove = false
	q.setPlace(qp, inFlight)
	return qp.pod
}

// Done marks a popped pod as placed: it leaves the queue.
func (q *Queue) Done(pod *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	if qp, ok := q.pods[key]; ok && q.where[key] == inFlight {
		q.setPlace(qp, 0)
		delete(q.pods, key)
	}
}

func (q *Queue) backoffFor(attempts int) time.Duration {
	d := q.initialBackoff
	for i := 1; i < attempts && d < q.maxBackoff; i++ {
		d *= 2
	}
	return min(d, q.maxBackoff)
}

// Failed puts back a popped pod that could not be placed. unschedulable: it waits for a
// cluster change (or maxUnschedulable); otherwise (an error) it backs off. A pod whose
// cycle saw a relevant change backs off instead of waiting for a change it already missed.
func (q *Queue) Failed(pod *corev1.Pod, unschedulable bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(pod)
	qp, ok := q.pods[key]
	if !ok || q.where[key] != inFlight {
		return
	}
	now := q.now()
	qp.backoffUntil = now.Add(q.backoffFor(qp.attempts))
	if unschedulable && !qp.missedMove {
		qp.unschedulableSince = now
		q.setPlace(qp, inUnschedulable)
		return
	}
	q.setPlace(qp, inBackoff)
}

// Flush moves pods whose backoff ended to active, and pods unschedulable for longer than
// maxUnschedulable to active or backoff. The scheduler calls it periodically.
func (q *Queue) Flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	for _, qp := range q.backoff {
		if !now.Before(qp.backoffUntil) {
			q.pushActiveLocked(qp)
		}
	}
	for _, qp := range q.unschedulable {
		if now.Sub(qp.unschedulableSince) > q.maxUnschedulable {
			q.moveLocked(qp)
		}
	}
}

// Close wakes Pop callers; they return nil.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// Stats returns how many pods are active, backing off and unschedulable.
func (q *Queue) Stats() (active, backoff, unschedulable int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.where {
		switch w {
		case inActive:
			active++
		case inBackoff:
			backoff++
		case inUnschedulable:
			unschedulable++
		}
	}
	return
}

// activeHeap orders by priority (high first), then by time queued.
type activeHeap []*queuedPod

func (h activeHeap) Len() int { return len(h) }
func (h activeHeap) Less(i, j int) bool {
	pi, pj := v1helper.PodPriority(h[i].pod), v1helper.PodPriority(h[j].pod)
	if pi != pj {
		return pi > pj
	}
	return h[i].added.Before(h[j].added)
}
func (h activeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *activeHeap) Push(x any) {
	qp := x.(*queuedPod)
	qp.index = len(*h)
	*h = append(*h, qp)
}
func (h *activeHeap) Pop() any {
	old := *h
	n := len(old)
	qp := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return qp
}
