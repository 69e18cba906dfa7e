package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// Objects is a checkpoint whose objects are kept one by one rather than by one informer:
// those a host reads by name, each with a watch of its own (nodes/refcache). It is written
// to <dir>/<name>.json, in the format of an informer's checkpoint (a typed list, with no
// resourceVersion), after changes (debounced), and starts with what that file held.
type Objects struct {
	d       *Dir
	name    string
	file    string
	newList func() runtime.Object

	mu    sync.Mutex
	objs  map[string]runtime.Object // by namespace/name (name for cluster-scoped kinds)
	dirty chan struct{}
}

// Objects opens the checkpoint of kind name (an empty list of its type from newList) and
// writes it after every change while ctx lasts. An unreadable file is logged and
// replaced.
func (d *Dir) Objects(ctx context.Context, name string, newList func() runtime.Object) *Objects {
	o := &Objects{d: d, name: name, file: filepath.Join(d.path, name+".json"), newList: newList,
		objs: map[string]runtime.Object{}, dirty: make(chan struct{}, 1)}
	lw := &listWatch{d: d, k: Kind{Name: name, NewList: newList}, file: o.file}
	if list, _, err := lw.load(); err == nil {
		items, _ := meta.ExtractList(list)
		for _, it := range items {
			if key, err := cache.MetaNamespaceKeyFunc(it); err == nil {
				o.objs[key] = it
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		d.log.WithError(err).WithField("file", o.file).Warn("checkpoint unreadable; starting empty")
	}
	d.writers.Add(1)
	go o.run(ctx)
	return o
}

// Get returns the object of key (namespace/name, or name), if the checkpoint holds it.
func (o *Objects) Get(key string) (runtime.Object, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	obj, ok := o.objs[key]
	return obj, ok
}

// Keys returns the keys of the objects held, sorted.
func (o *Objects) Keys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys := make([]string, 0, len(o.objs))
	for k := range o.objs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Set adds or replaces obj.
func (o *Objects) Set(obj runtime.Object) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	o.mu.Lock()
	if old, ok := o.objs[key]; ok && sameVersion(old, obj) {
		o.mu.Unlock()
		return
	}
	o.objs[key] = obj
	o.mu.Unlock()
	o.poke()
}

// Delete removes the object of key.
func (o *Objects) Delete(key string) {
	o.mu.Lock()
	_, ok := o.objs[key]
	delete(o.objs, key)
	o.mu.Unlock()
	if ok {
		o.poke()
	}
}

func sameVersion(a, b runtime.Object) bool {
	am, err1 := meta.Accessor(a)
	bm, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && am.GetUID() == bm.GetUID() && am.GetResourceVersion() != "" &&
		am.GetResourceVersion() == bm.GetResourceVersion()
}

func (o *Objects) poke() {
	select {
	case o.dirty <- struct{}{}:
	default:
	}
}

func (o *Objects) run(ctx context.Context) {
	defer o.d.writers.Done()
	flush := func() {
		if err := o.Flush(); err != nil {
			o.d.log.WithError(err).WithField("kind", o.name).Warn("write checkpoint")
		}
	}
	for {
		select {
		case <-ctx.Done():
			// A change poked but not picked up yet is written before the host exits.
			select {
			case <-o.dirty:
				flush()
			default:
			}
			return
		case <-o.dirty:
		}
		select {
		case <-ctx.Done():
			flush()
			return
		case <-time.After(o.d.Debounce):
		}
		flush()
	}
}

// Flush writes the checkpoint now.
func (o *Objects) Flush() error {
	o.mu.Lock()
	objs := make([]any, 0, len(o.objs))
	for _, obj := range o.objs {
		objs = append(objs, obj)
	}
	o.mu.Unlock()
	return writeList(o.file, o.newList, objs, "")
}
