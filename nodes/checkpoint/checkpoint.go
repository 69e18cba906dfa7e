// Package checkpoint keeps a host's informer caches on disk, so that a host that restarts
// while cut off from the site (its API server cannot serve without an etcd quorum) runs its
// pods, Service rules, cluster DNS and Ingress from what it last knew, and follows the API
// again as soon as it answers.
//
// A checkpointed informer is an ordinary client-go informer whose ListerWatcher is wrapped:
// every change of its store is written (debounced) to <dir>/<name>.json as a typed list with
// the store's resourceVersion; a List the API cannot answer (no connection, 5xx, 429) is
// answered from that file instead, and the Watch that follows waits for the API rather than
// failing, so the informer resumes from the checkpoint's resourceVersion (or relists when it
// is too old) the moment the API is back. Errors the API gives on purpose (403, 404, 400...)
// are never papered over.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/renameio/v2"
	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Dir holds the checkpoints of one host.
type Dir struct {
	path string
	log  *logrus.Entry
	// Debounce is how long a change waits before its informer is written, so a burst of
	// changes costs one write. Set before the first Informer call.
	Debounce time.Duration
	// ListTimeout bounds a List while no API call of this process has succeeded yet and a
	// checkpoint exists: an API server that accepts connections but cannot reach etcd
	// should not hold the host's start-up for a minute.
	ListTimeout time.Duration

	mu      sync.Mutex
	online  bool
	servedN int
	// writers counts the running writers: when their context ends they write a change
	// still waiting for its debounce, and Wait waits for that.
	writers sync.WaitGroup
}

// Wait waits up to timeout for the writers of a stopped Dir (its contexts ended) to write
// the changes they had not written yet: a host that stops a moment after a change restarts
// from that change, not from the one before. It reports whether they finished.
func (d *Dir) Wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { d.writers.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Open makes (or opens) the checkpoint directory at path, readable by root only: it holds
// the host's copy of the Secrets its pods and proxies use.
func Open(path string, log *logrus.Entry) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	return &Dir{path: path, log: log, Debounce: time.Second, ListTimeout: 5 * time.Second}, nil
}

// Exists reports whether dir holds any checkpoint: a host that has run before.
func Exists(path string) bool {
	m, _ := filepath.Glob(filepath.Join(path, "*.json"))
	return len(m) > 0
}

// Kind describes one checkpointed informer: its file name (unique in the Dir), an empty
// object and an empty list of its type, and the API calls of its ListerWatcher.
type Kind struct {
	Name    string
	Object  runtime.Object
	NewList func() runtime.Object
	List    func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	Watch   func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Informer returns a shared informer for k whose store is checkpointed while ctx lasts.
// Indexers are those the typed informers of client-go carry (namespace).
func (d *Dir) Informer(ctx context.Context, k Kind) cache.SharedIndexInformer {
	lw := &listWatch{d: d, k: k, file: filepath.Join(d.path, k.Name+".json")}
	inf := cache.NewSharedIndexInformer(lw, k.Object, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	w := &writer{d: d, k: k, file: lw.file, inf: inf, dirty: make(chan struct{}, 1)}
	// Fails only on a stopped informer.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { w.poke() }, UpdateFunc: func(any, any) { w.poke() }, DeleteFunc: func(any) { w.poke() },
	})
	w.poke() // write once synced, even a store without objects
	d.writers.Add(1)
	go w.run(ctx)
	return inf
}

// Online reports whether an API call of a checkpointed informer has succeeded in this process.
func (d *Dir) Online() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.online
}

func (d *Dir) setOnline(kind string) {
	d.mu.Lock()
	was, served := d.online, d.servedN
	d.online = true
	d.mu.Unlock()
	if !was && served > 0 {
		d.log.WithField("kind", kind).Info("the API answers again: the host's caches follow it from here")
	}
}

// listWatch answers a List the API cannot answer from the checkpoint.
type listWatch struct {
	d    *Dir
	k    Kind
	file string
	// served is set while the informer's store came from the checkpoint: its Watch then
	// waits for the API instead of failing into another relist.
	served atomic.Bool
}

var _ cache.ListerWatcherWithContext = (*listWatch)(nil)

// IsWatchListSemanticsUnSupported keeps the informer on List and Watch: a watch-list has no
// List to fall back to when the API does not answer, and the reflector retries a refused
// one forever.
func (l *listWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (l *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

func (l *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	lctx := ctx
	if !l.d.Online() && l.d.ListTimeout > 0 {
		if _, err := os.Stat(l.file); err == nil {
			var cancel context.CancelFunc
			lctx, cancel = context.WithTimeout(ctx, l.d.ListTimeout)
			defer cancel()
		}
	}
	obj, err := l.k.List(lctx, opts)
	if err == nil {
		l.served.Store(false)
		l.d.setOnline(l.k.Name)
		return obj, nil
	}
	if ctx.Err() != nil || !Unavailable(err) {
		return nil, err
	}
	list, rv, cerr := l.load()
	if cerr != nil {
		if errors.Is(cerr, os.ErrNotExist) {
			return nil, err
		}
		l.d.log.WithError(cerr).WithField("file", l.file).Warn("checkpoint unreadable; waiting for the API")
		return nil, err
	}
	if !l.served.Swap(true) {
		l.d.mu.Lock()
		l.d.servedN++
		l.d.mu.Unlock()
		n := meta.LenList(list)
		l.d.log.WithError(err).WithFields(logrus.Fields{"kind": l.k.Name, "objects": n, "resourceVersion": rv}).
			Warn("the API does not answer: serving the last checkpoint")
	}
	return list, nil
}

func (l *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	for {
		w, err := l.k.Watch(ctx, opts)
		if err == nil {
			l.served.Store(false)
			l.d.setOnline(l.k.Name)
			return w, nil
		}
		// A watch-list request (the informer's first choice) must fail so that the
		// informer falls back to List, which the checkpoint answers.
		streaming := opts.SendInitialEvents != nil && *opts.SendInitialEvents
		if streaming && Unavailable(err) {
			// Not as itself: the reflector retries a watch-list refused a connection (or
			// answered 429) forever instead of falling back to List.
			return nil, fmt.Errorf("watch-list: %s", err.Error())
		}
		if streaming || !l.served.Load() || !Unavailable(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// load reads the checkpoint.
func (l *listWatch) load() (runtime.Object, string, error) {
	b, err := os.ReadFile(l.file)
	if err != nil {
		return nil, "", err
	}
	list := l.k.NewList()
	if err := json.Unmarshal(b, list); err != nil {
		return nil, "", fmt.Errorf("decode %s: %w", l.file, err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, "", err
	}
	return list, lm.GetResourceVersion(), nil
}

// Unavailable reports whether err means the API could not answer (no connection, a timeout,
// a 5xx or 429), as opposed to an answer.
func Unavailable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == 0 || code == 429 || code >= 500 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	return err != nil
}

// writer writes an informer's store to its checkpoint after changes.
type writer struct {
	d     *Dir
	k     Kind
	file  string
	inf   cache.SharedIndexInformer
	dirty chan struct{}
}

func (w *writer) poke() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *writer) run(ctx context.Context) {
	defer w.d.writers.Done()
	var last string
	// flush writes the store if it changed since the last write.
	flush := func() {
		if !w.inf.HasSynced() {
			w.poke()
			return
		}
		rv := w.inf.LastSyncResourceVersion()
		if rv == last && rv != "" {
			// A relist from the checkpoint itself, or a resync: nothing new.
			return
		}
		if err := w.write(rv); err != nil {
			w.d.log.WithError(err).WithField("kind", w.k.Name).Warn("write checkpoint")
			return
		}
		last = rv
	}
	for {
		select {
		case <-ctx.Done():
			w.final(flush)
			return
		case <-w.dirty:
		}
		select {
		case <-ctx.Done():
			// A change waits for its debounce: write it before the host exits.
			flush()
			return
		case <-time.After(w.d.Debounce):
		}
		flush()
	}
}

// final writes a change poked but not yet picked up, once the informer's context ended.
func (w *writer) final(flush func()) {
	select {
	case <-w.dirty:
		if w.inf.HasSynced() {
			flush()
		}
	default:
	}
}

// write stores the informer's objects, sorted by key, with rv.
func (w *writer) write(rv string) error {
	return writeList(w.file, w.k.NewList, w.inf.GetStore().List(), rv)
}

// writeList writes objs, sorted by key, as a list of newList's type with resourceVersion
// rv to file.
func writeList(file string, newList func() runtime.Object, objs []any, rv string) error {
	sort.Slice(objs, func(i, j int) bool {
		ki, _ := cache.MetaNamespaceKeyFunc(objs[i])
		kj, _ := cache.MetaNamespaceKeyFunc(objs[j])
		return ki < kj
	})
	items := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		if ro, ok := o.(runtime.Object); ok {
			items = append(items, ro)
		}
	}
	list := newList()
	if err := meta.SetList(list, items); err != nil {
		return err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	lm.SetResourceVersion(rv)
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return renameio.WriteFile(file, b, 0o600)
}

// Register makes f's informers of kinds checkpointed: the factory's typed accessors (e.g.
// f.Core().V1().Pods()) return them, with the factory's transform. Call it before anything
// asks f for these kinds.
func (d *Dir) Register(ctx context.Context, f informers.SharedInformerFactory, kinds ...Kind) {
	for _, k := range kinds {
		f.InformerFor(k.Object, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer { return d.Informer(ctx, k) })
	}
}

// Client is what a typed client of one resource offers (e.g. CoreV1().Pods("")).
type Client[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Typed describes a kind served by a typed client; tweak (may be nil) narrows its list and
// watch as a factory's WithTweakListOptions would.
func Typed[L runtime.Object](name string, obj runtime.Object, c Client[L], tweak func(*metav1.ListOptions)) Kind {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	return Kind{
		Name: name, Object: obj,
		NewList: func() runtime.Object {
			var l L
			return reflect.New(reflect.TypeOf(l).Elem()).Interface().(runtime.Object)
		},
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			tweak(&opts)
			return c.List(ctx, opts)
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			tweak(&opts)
			return c.Watch(ctx, opts)
		},
	}
}
