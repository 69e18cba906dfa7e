// Package refcache gives a host's components the objects they read by name (the
// Secrets, ConfigMaps, PersistentVolumeClaims and PersistentVolumes the node agent's pods
// use, the TLS Secrets of the Ingress proxy) one at a time, each with a watch of its own:
// a list and watch with fieldSelector metadata.name=<name> in its namespace, which is
// what the Node authorizer (reconciler/authz/node) lets a host make for the objects its
// pods reference. The host never lists these kinds cluster-wide.
//
// Get starts the watch of an object on first use and answers from its store once it has
// synced: the object, or a NotFound error when it does not exist. Until then, and when the
// API refuses (403: the API server does not know yet that a pod of this host uses it),
// Get returns an error its caller retries; it waits up to Config.WaitTimeout for the
// first answer. A watch nobody asked Get about for Config.IdleTimeout is stopped.
//
// With a checkpoint (nodes/checkpoint), the objects held are written to
// <checkpoint-dir>/<kind>.json, and when the API is unavailable (checkpoint.Unavailable)
// Get answers from that file, so that a host rebooted while cut off starts its pods with
// what they last used. An object the file does not hold cannot be read then, even one
// that did not exist (an optional reference): the caller waits for the API.
package refcache

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/internal/slim"
	"github.com/flotilla-dev/flotilla/nodes/checkpoint"
)

// Config configures a Cache.
type Config struct {
	// Checkpoint keeps the objects held on disk and answers Get when the API cannot; nil
	// keeps them in memory only.
	Checkpoint *checkpoint.Dir
	Log        *logrus.Entry
	// IdleTimeout is how long a watch nobody asked Get about lives on (5 minutes).
	IdleTimeout time.Duration
	// WaitTimeout is how long Get waits for the first answer of a watch it starts, or that
	// has not answered yet (one second).
	WaitTimeout time.Duration
	// ListTimeout bounds each List (30 s; the checkpoint's ListTimeout while no
	// checkpointed informer of this process has reached the API).
	ListTimeout time.Duration
	// OnChange, when set, is called after an object held is added, changed or deleted.
	OnChange func(namespace, name string)
}

// Client is what a typed client of one resource in one namespace offers (e.g.
// CoreV1().Secrets(ns)).
type Client[L runtime.Object] = checkpoint.Client[L]

// Cache holds objects of one kind, T (e.g. *corev1.Secret), by name.
type Cache[T runtime.Object] struct {
	name     string // kind, as in the API path: "secrets"
	resource schema.GroupResource
	client   func(namespace string) listWatcher
	example  runtime.Object
	newList  func() runtime.Object
	cfg      Config
	ctx      context.Context
	objects  *checkpoint.Objects // nil without a checkpoint
	started  time.Time

	mu       sync.Mutex
	entries  map[string]*entry
	served   bool // Get has answered from the checkpoint (logged once)
	handlers map[int]func(namespace, name string)
	nextID   int
}

type listWatcher struct {
	list  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// entry is the watch of one object.
type entry struct {
	key, namespace, name string
	inf                  cache.SharedIndexInformer
	cancel               context.CancelFunc
	used                 atomic.Int64 // unix nanoseconds of the last Get
	answered             chan struct{}
	answerOnce           sync.Once

	mu  sync.Mutex
	err error // of the last List; nil once one succeeded
}

// New makes the cache of kind name (the resource, e.g. "secrets"; also the checkpoint's
// file name) served by client, which gives the typed client of a namespace (cluster-scoped
// kinds ignore it). Its watches and checkpoint writer run while ctx lasts.
func New[T runtime.Object, L runtime.Object](ctx context.Context, name string, client func(namespace string) Client[L], cfg Config) *Cache[T] {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = time.Second
	}
	if cfg.ListTimeout <= 0 {
		cfg.ListTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	cfg.Log = cfg.Log.WithField("kind", name)
	var zeroT T
	var zeroL L
	c := &Cache[T]{
		name: name, resource: schema.GroupResource{Resource: name}, cfg: cfg, ctx: ctx, started: time.Now(),
		example: reflect.New(reflect.TypeOf(zeroT).Elem()).Interface().(runtime.Object),
		newList: func() runtime.Object {
			return reflect.New(reflect.TypeOf(zeroL).Elem()).Interface().(runtime.Object)
		},
		client: func(ns string) listWatcher {
			cl := client(ns)
			return listWatcher{
				list: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
					return cl.List(ctx, opts)
				},
				watch: cl.Watch,
			}
		},
		entries: map[string]*entry{},
	}
	if cfg.Checkpoint != nil {
		c.objects = cfg.Checkpoint.Objects(ctx, name, c.newList)
	}
	go c.sweep()
	return c
}

func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Get returns the object namespace/name ("" for a cluster-scoped kind), starting its watch
// on first use; a NotFound error when it does not exist, another error (the API's refusal,
// or that it has not answered yet) when the caller should retry later.
func (c *Cache[T]) Get(namespace, name string) (T, error) {
	var zero T
	k := key(namespace, name)
	e, created, err := c.entry(namespace, name)
	if err != nil {
		return zero, err
	}
	e.used.Store(time.Now().UnixNano())
	if created {
		// Only a new watch is waited for: one that has not answered since (the API hangs)
		// must not hold every later Get.
		c.wait(e)
	}
	if e.inf.HasSynced() {
		obj, ok, err := e.inf.GetStore().GetByKey(k)
		if err != nil {
			return zero, err
		}
		if !ok {
			return zero, apierrors.NewNotFound(c.resource, name)
		}
		return obj.(T), nil
	}
	lerr := e.lastErr()
	if lerr != nil && checkpoint.Unavailable(lerr) && c.objects != nil {
		if obj, ok := c.objects.Get(k); ok {
			if t, ok := obj.(T); ok {
				c.mu.Lock()
				first := !c.served
				c.served = true
				c.mu.Unlock()
				if first {
					c.cfg.Log.WithError(lerr).Warn("the API does not answer: serving objects from the last checkpoint")
				}
				return t, nil
			}
		}
	}
	if lerr == nil {
		lerr = fmt.Errorf("%s %s: not read from the API yet", c.name, k)
	} else {
		lerr = fmt.Errorf("%s %s: %w", c.name, k, lerr)
	}
	return zero, lerr
}

// wait waits for e's first answer: synced, or a List error.
func (c *Cache[T]) wait(e *entry) {
	t := time.NewTimer(c.cfg.WaitTimeout)
	defer t.Stop()
	select {
	case <-e.answered:
	case <-t.C:
		return
	case <-c.ctx.Done():
		return
	}
	// The store fills right after the List returns.
	for i := 0; i < 50 && !e.inf.HasSynced() && e.lastErr() == nil; i++ {
		select {
		case <-t.C:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (e *entry) lastErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *entry) setErr(err error) {
	e.mu.Lock()
	e.err = err
	e.mu.Unlock()
	e.answerOnce.Do(func() { close(e.answered) })
}

// entry returns the watch of namespace/name, started now (created) if there was none.
func (c *Cache[T]) entry(namespace, name string) (e *entry, created bool, err error) {
	if err := c.ctx.Err(); err != nil {
		return nil, false, err
	}
	k := key(namespace, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok {
		return e, false, nil
	}
	e = &entry{key: k, namespace: namespace, name: name, answered: make(chan struct{})}
	e.used.Store(time.Now().UnixNano()) // before a sweep can see it
	lw := &objectListWatch{c: c.client(namespace), e: e, timeout: c.listTimeout, sel: fields.OneTermEqualSelector("metadata.name", name).String()}
	e.inf = cache.NewSharedIndexInformerWithOptions(lw, c.example, cache.SharedIndexInformerOptions{ObjectDescription: c.name + " " + k})
	_ = e.inf.SetTransform(slim.DropManagedFields)
	_ = e.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		c.cfg.Log.WithError(err).WithField("object", k).Debug("watch failed; retrying")
	})
	_, _ = e.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.changed(e, obj, false) },
		UpdateFunc: func(_, obj any) { c.changed(e, obj, false) },
		DeleteFunc: func(obj any) { c.changed(e, obj, true) },
	})
	ctx, cancel := context.WithCancel(c.ctx)
	e.cancel = cancel
	c.entries[k] = e
	go e.inf.RunWithContext(ctx)
	return e, true, nil
}

func (c *Cache[T]) listTimeout() time.Duration {
	if d := c.cfg.Checkpoint; d != nil && !d.Online() && d.ListTimeout > 0 && d.ListTimeout < c.cfg.ListTimeout {
		return d.ListTimeout
	}
	return c.cfg.ListTimeout
}

func (c *Cache[T]) changed(e *entry, obj any, deleted bool) {
	if c.objects != nil {
		if deleted {
			c.objects.Delete(e.key)
		} else if ro, ok := obj.(runtime.Object); ok {
			c.objects.Set(ro)
		}
	}
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(e.namespace, e.name)
	}
	c.mu.Lock()
	hs := make([]func(string, string), 0, len(c.handlers))
	for _, h := range c.handlers {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, h := range hs {
		h(e.namespace, e.name)
	}
}

// Notify calls fn, as Config.OnChange, after every change of an object held, until remove
// is called.
func (c *Cache[T]) Notify(fn func(namespace, name string)) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handlers == nil {
		c.handlers = map[int]func(string, string){}
	}
	id := c.nextID
	c.nextID++
	c.handlers[id] = fn
	return func() {
		c.mu.Lock()
		delete(c.handlers, id)
		c.mu.Unlock()
	}
}

// sweep stops the watches nobody used for IdleTimeout, and drops from the checkpoint the
// objects no watch holds (those of an earlier run nobody asked for again).
func (c *Cache[T]) sweep() {
	every := min(c.cfg.IdleTimeout/4, forbiddenIdle)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.Sweep(time.Now())
	}
}

// forbiddenIdle is how long a watch the API refuses lives on unused: the pod that used
// the object is gone, and each retry is a denial the API server logs.
const forbiddenIdle = 30 * time.Second

// Sweep stops the watches unused since now-IdleTimeout (now-forbiddenIdle for those the API
// refuses); the ticker of New calls it.
func (c *Cache[T]) Sweep(now time.Time) {
	idle := now.Add(-c.cfg.IdleTimeout).UnixNano()
	refusedIdle := now.Add(-min(forbiddenIdle, c.cfg.IdleTimeout)).UnixNano()
	c.mu.Lock()
	var stopped []string
	for k, e := range c.entries {
		used := e.used.Load()
		if used < idle || (used < refusedIdle && refused(e.lastErr())) {
			e.cancel()
			delete(c.entries, k)
			stopped = append(stopped, k)
		}
	}
	held := make(map[string]bool, len(c.entries))
	for k := range c.entries {
		held[k] = true
	}
	c.mu.Unlock()
	if c.objects == nil {
		return
	}
	for _, k := range stopped {
		c.objects.Delete(k)
	}
	if now.Sub(c.started) >= c.cfg.IdleTimeout {
		for _, k := range c.objects.Keys() {
			if !held[k] {
				c.objects.Delete(k)
			}
		}
	}
}

func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

// Len is how many objects are watched.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// objectListWatch lists and watches one object by name, and records the List's outcome.
type objectListWatch struct {
	c       listWatcher
	e       *entry
	sel     string
	timeout func() time.Duration
}

var _ cache.ListerWatcherWithContext = (*objectListWatch)(nil)

// IsWatchListSemanticsUnSupported keeps the informer on List and Watch, whose List tells
// Get the API's answer (as the checkpoint's informers do).
func (l *objectListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (l *objectListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *objectListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

func (l *objectListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.FieldSelector = l.sel
	lctx, cancel := context.WithTimeout(ctx, l.timeout())
	defer cancel()
	list, err := l.c.list(lctx, opts)
	if err != nil {
		if ctx.Err() == nil {
			l.e.setErr(err)
		}
		return nil, err
	}
	// A server (or a fake client) that ignores the field selector gives more.
	if items, err := meta.ExtractList(list); err == nil {
		keep := items[:0]
		for _, it := range items {
			if m, err := meta.Accessor(it); err == nil && m.GetName() == l.e.name {
				keep = append(keep, it)
			}
		}
		if len(keep) != len(items) {
			_ = meta.SetList(list, keep)
		}
	}
	l.e.setErr(nil)
	return list, nil
}

func (l *objectListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector = l.sel
	w, err := l.c.watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted {
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetName() != l.e.name {
				return ev, false
			}
		}
		return ev, true
	}), nil
}
