package kick

import (
	"errors"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// pending counts the wakes k delivers without blocking.
func pending(k Kick) int {
	n := 0
	for {
		select {
		case <-k.C():
			n++
		default:
			return n
		}
	}
}

func TestPokesCoalesce(t *testing.T) {
	k := New()
	if n := pending(k); n != 0 {
		t.Fatalf("new kick: %d wakes pending, want 0", n)
	}
	for range 100 {
		k.Poke() // must not block with a wake pending
	}
	if n := pending(k); n != 1 {
		t.Fatalf("after 100 pokes: %d wakes, want 1", n)
	}
	k.Poke()
	if n := pending(k); n != 1 {
		t.Fatalf("poke after the wake was taken: %d wakes, want 1", n)
	}
}

func TestHandlerPokesOnEveryEvent(t *testing.T) {
	k := New()
	h := k.Handler()
	for _, ev := range []struct {
		name string
		fire func()
	}{
		{"add", func() { h.OnAdd("obj", false) }},
		{"update", func() { h.OnUpdate("old", "new") }},
		{"delete", func() { h.OnDelete("obj") }},
		{"delete of a tombstone", func() { h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/obj", Obj: "obj"}) }},
	} {
		ev.fire()
		if n := pending(k); n != 1 {
			t.Errorf("%s: %d wakes, want 1", ev.name, n)
		}
	}
}

type reg struct {
	cache.ResourceEventHandlerRegistration
	id int
}

// informer records the handlers registered on it; with fail set, adding one fails.
type informer struct {
	fail     bool
	handlers map[int]cache.ResourceEventHandler
	next     int
}

func (i *informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	if i.fail {
		return nil, errors.New("informer stopped")
	}
	if i.handlers == nil {
		i.handlers = map[int]cache.ResourceEventHandler{}
	}
	i.next++
	i.handlers[i.next] = h
	return reg{id: i.next}, nil
}

func (i *informer) RemoveEventHandler(r cache.ResourceEventHandlerRegistration) error {
	delete(i.handlers, r.(reg).id)
	return nil
}

func TestAddHandlers(t *testing.T) {
	k := New()
	a, b := &informer{}, &informer{}
	remove, err := AddHandlers(On{a, k.Handler()}, On{b, k.Handler()}, On{a, k.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.handlers) != 2 || len(b.handlers) != 1 {
		t.Fatalf("registered %d and %d handlers, want 2 and 1", len(a.handlers), len(b.handlers))
	}
	b.handlers[1].OnAdd("obj", false)
	if n := pending(k); n != 1 {
		t.Fatalf("event through a registered handler: %d wakes, want 1", n)
	}
	remove()
	if len(a.handlers) != 0 || len(b.handlers) != 0 {
		t.Fatalf("after remove: %d and %d handlers left, want none", len(a.handlers), len(b.handlers))
	}
}

func TestAddHandlersUndoesOnFailure(t *testing.T) {
	k := New()
	a, bad := &informer{}, &informer{fail: true}
	remove, err := AddHandlers(On{a, k.Handler()}, On{bad, k.Handler()}, On{a, k.Handler()})
	if err == nil {
		t.Fatal("no error from an informer that refuses handlers")
	}
	if len(a.handlers) != 0 {
		t.Fatalf("%d handlers left on the first informer, want none", len(a.handlers))
	}
	if a.next != 1 {
		t.Fatalf("%d handlers were added, want 1 (none after the failure)", a.next)
	}
	remove() // harmless
}
