package apiserver

import (
	"reflect"
	"testing"
)

func TestReconcileOffsets(t *testing.T) {
	set := func(v ...int) map[int]bool {
		m := map[int]bool{}
		for _, o := range v {
			m[o] = true
		}
		return m
	}
	// 1 and 2 are held by Services; 5 is unheld for the first time (an allocation whose
	// Service is being written, or a leak); 7 was unheld in the previous pass too: leaked;
	// 9 is held by a Service but missing from the allocation; 99 is outside the range.
	keep, next, released, marked := reconcileOffsets([]uint32{1, 2, 5, 7}, set(1, 2, 9, 99), set(7), 50)
	if want := []uint32{1, 2, 5, 9}; !reflect.DeepEqual(keep, want) {
		t.Errorf("keep = %v, want %v", keep, want)
	}
	if !reflect.DeepEqual(next, set(5)) {
		t.Errorf("next suspects = %v, want {5}: a first-time unheld value is only suspected", next)
	}
	if !reflect.DeepEqual(released, []int{7}) || !reflect.DeepEqual(marked, []int{9}) {
		t.Errorf("released %v marked %v, want [7] and [9]", released, marked)
	}
	// The next pass: 5 is now held (its Service was written): kept, nothing released.
	keep, next, released, _ = reconcileOffsets(keep, set(1, 2, 5, 9), next, 50)
	if len(released) != 0 || len(next) != 0 || len(keep) != 4 {
		t.Errorf("second pass: keep %v next %v released %v", keep, next, released)
	}
}
