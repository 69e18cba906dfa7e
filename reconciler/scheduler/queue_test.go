package scheduler

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestQueuePriorityOrder checks the order of the active queue: spec.priority, highest first
// (no priority counts as 0, as for the scheduler everywhere), then the time the pod was first
// queued.
func TestQueuePriorityOrder(t *testing.T) {
	type queued struct {
		name     string
		priority *int32
	}
	p := func(v int32) *int32 { return &v }
	cases := []struct {
		name  string
		added []queued // in this order, one millisecond apart
		want  []string
	}{
		{"highest first", []queued{{"low", p(1)}, {"critical", p(2000001000)}, {"mid", p(1000)}}, []string{"critical", "mid", "low"}},
		{"same priority: first queued first", []queued{{"a", p(5)}, {"b", p(5)}, {"c", p(5)}}, []string{"a", "b", "c"}},
		{"no priority is 0", []queued{{"negative", p(-10)}, {"unset", nil}, {"zero", p(0)}, {"one", p(1)}}, []string{"one", "unset", "zero", "negative"}},
		{"a later high-priority pod passes earlier ones", []queued{{"w1", nil}, {"w2", nil}, {"urgent", p(100)}, {"w3", nil}}, []string{"urgent", "w1", "w2", "w3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			q := NewQueue(time.Second, 10*time.Second, time.Minute, func() time.Time { return now })
			for _, a := range tc.added {
				pd := pod(a.name, 0, 0)
				pd.Spec.Priority = a.priority
				q.Add(pd)
				now = now.Add(time.Millisecond)
			}
			var got []string
			for range tc.added {
				got = append(got, q.Pop().Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("popped %v, want %v", got, tc.want)
			}
		})
	}
}

// TestQueuePriorityAfterBackoff: a pod that comes back from backoff takes its place by
// priority again, ahead of lower-priority pods queued before it came back.
func TestQueuePriorityAfterBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	q := NewQueue(time.Second, 10*time.Second, time.Minute, func() time.Time { return now })
	prio := func(name string, v int32) *corev1.Pod {
		pd := pod(name, 0, 0)
		pd.Spec.Priority = &v
		return pd
	}
	q.Add(prio("high", 100))
	if got := q.Pop().Name; got != "high" {
		t.Fatalf("popped %s", got)
	}
	q.Failed(prio("high", 100), false) // an error: backs off 1 s
	now = now.Add(time.Millisecond)
	q.Add(prio("low", 1))
	q.Add(prio("mid", 50))
	now = now.Add(2 * time.Second)
	q.Flush()
	var got []string
	for range 3 {
		got = append(got, q.Pop().Name)
	}
	if want := []string{"high", "mid", "low"}; !reflect.DeepEqual(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}
