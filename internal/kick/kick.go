// Package kick wakes a sync loop when informers report changes. Changes that arrive before
// the loop gets round to waiting again coalesce into one wake: the loop reads the whole
// state from the listers anyway.
package kick

import "k8s.io/client-go/tools/cache"

// Kick is a wake-up signal with room for one pending wake.
type Kick chan struct{}

// New returns a Kick with no wake pending.
func New() Kick { return make(Kick, 1) }

// Poke asks for a wake. It never blocks: when a wake is pending already, it adds nothing.
func (k Kick) Poke() {
	select {
	case k <- struct{}{}:
	default:
	}
}

// C is what the loop waits on: it delivers one value per pending wake.
func (k Kick) C() <-chan struct{} { return k }

// Handler pokes k on every add, update and delete.
func (k Kick) Handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.Poke() },
		UpdateFunc: func(any, any) { k.Poke() },
		DeleteFunc: func(any) { k.Poke() },
	}
}

// Informer is the part of cache.SharedInformer that handlers are added to and removed from.
type Informer interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	RemoveEventHandler(cache.ResourceEventHandlerRegistration) error
}

// On pairs an informer with a handler to add to it.
type On struct {
	Informer Informer
	Handler  cache.ResourceEventHandler
}

// AddHandlers adds each handler to its informer and returns a func that removes them all
// again, the last added first. A shared informer outlives the loop that registered on it:
// defer remove, so that nothing is left behind that pokes a loop that is gone. When one
// cannot be added, those added before it are removed and its error is returned (with a
// remove that does nothing).
func AddHandlers(ons ...On) (remove func(), err error) {
	type added struct {
		inf Informer
		reg cache.ResourceEventHandlerRegistration
	}
	var done []added
	remove = func() {
		for i := len(done) - 1; i >= 0; i-- {
			_ = done[i].inf.RemoveEventHandler(done[i].reg)
		}
	}
	for _, on := range ons {
		reg, err := on.Informer.AddEventHandler(on.Handler)
		if err != nil {
			remove()
			return func() {}, err
		}
		done = append(done, added{on.Informer, reg})
	}
	return remove, nil
}
