package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
)

func testLog() *logrus.Entry { return logrus.NewEntry(logrus.New()) }

func connRefused() error {
	return &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/configmaps", Err: syscall.ECONNREFUSED}
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeAPI is a fake clientset that can be "down" (every list and watch fails with err) and
// that behaves like an API server in the two ways a checkpointed informer depends on: it
// answers watch-list requests (SendInitialEvents) with the initial events and the
// "initial-events-end" bookmark, and it answers a watch from a resourceVersion it never
// handed out (the checkpoint's, from before the outage) with 410 Expired, as an API server
// does once that revision is compacted. (The fake's tracker cannot replay deletions from an
// old revision, so that is the only honest answer it can give.)
type fakeAPI struct {
	cs   *fake.Clientset
	err  error
	down atomic.Bool

	mu      sync.Mutex
	handed  map[string]bool // resourceVersions this API returned
	expired int             // watches answered 410
	watches int             // watches that reached the tracker
}

var kinds = map[string]string{"configmaps": "ConfigMap", "pods": "Pod"}

func newFakeAPI(t *testing.T, downErr error, objs ...runtime.Object) *fakeAPI {
	t.Helper()
	a := &fakeAPI{cs: fake.NewClientset(objs...), err: downErr, handed: map[string]bool{}}
	a.cs.PrependReactor("list", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if a.down.Load() {
			return true, nil, a.err
		}
		ok, obj, err := clienttesting.ObjectReaction(a.cs.Tracker())(action)
		if err == nil {
			if lm, lerr := meta.ListAccessor(obj); lerr == nil {
				a.mu.Lock()
				a.handed[lm.GetResourceVersion()] = true
				a.mu.Unlock()
			}
		}
		return ok, obj, err
	})
	a.cs.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		if a.down.Load() {
			return true, nil, a.err
		}
		wa, ok := action.(clienttesting.WatchActionImpl)
		if !ok {
			return false, nil, nil
		}
		opts := wa.ListOptions
		if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
			w, err := a.watchList(action.GetResource(), action.GetNamespace())
			return true, w, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if rv := opts.ResourceVersion; rv != "" && rv != "0" && !a.handed[rv] {
			a.expired++
			return true, nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s", rv))
		}
		a.watches++
		return false, nil, nil // the clientset's own watch reactor
	})
	return a
}

// watchList answers a watch-list request: every object as ADDED, then the bookmark that
// ends the initial events.
func (a *fakeAPI) watchList(gvr schema.GroupVersionResource, ns string) (watch.Interface, error) {
	kind, ok := kinds[gvr.Resource]
	if !ok {
		return nil, fmt.Errorf("fakeAPI: no kind for %v", gvr)
	}
	gvk := corev1.SchemeGroupVersion.WithKind(kind)
	list, err := a.cs.Tracker().List(gvr, gvk, ns)
	if err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	rv := lm.GetResourceVersion()
	// Without a resourceVersion the tracker's watch starts with every stored object.
	w, err := a.cs.Tracker().Watch(gvr, ns, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	bm, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	m, err := meta.Accessor(bm)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(rv)
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	w.(*watch.RaceFreeFakeWatcher).Action(watch.Bookmark, bm)
	a.mu.Lock()
	a.handed[rv] = true
	a.mu.Unlock()
	return w, nil
}

func cm(name string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": data}}
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: "h1"}}
}

// host is what nodes/host builds: a factory whose ConfigMap and Pod informers are
// checkpointed in dir.
type host struct {
	d      *Dir
	f      informers.SharedInformerFactory
	cancel context.CancelFunc
}

func startHost(t *testing.T, dir string, a *fakeAPI) *host {
	t.Helper()
	return startHostDebounce(t, dir, a, 10*time.Millisecond)
}

func startHostDebounce(t *testing.T, dir string, a *fakeAPI, debounce time.Duration) *host {
	t.Helper()
	d, err := Open(dir, testLog())
	if err != nil {
		t.Fatal(err)
	}
	d.Debounce = debounce
	ctx, cancel := context.WithCancel(context.Background())
	f := informers.NewSharedInformerFactory(a.cs, 0)
	d.Register(ctx, f,
		Typed("configmaps", &corev1.ConfigMap{}, a.cs.CoreV1().ConfigMaps(""), nil),
		Typed("pods", &corev1.Pod{}, a.cs.CoreV1().Pods(""), nil),
	)
	f.Core().V1().ConfigMaps().Informer()
	f.Core().V1().Pods().Informer()
	f.Start(ctx.Done())
	h := &host{d: d, f: f, cancel: cancel}
	t.Cleanup(h.stop)
	return h
}

// hostDir is a temporary directory for hosts' checkpoints. Unlike t.TempDir it tolerates
// a checkpoint writer still finishing its write when the test ends (most tests do not call
// Dir.Wait after they stop a host).
func hostDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "checkpoint-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for i := 0; i < 50; i++ {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("remove %s: %v", dir, err)
	})
	return dir
}

func (h *host) stop() {
	h.cancel()
	h.f.Shutdown()
}

// synced waits (bounded) for both informers.
func (h *host) synced(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for typ, ok := range h.f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer of %v not synced within %v", typ, timeout)
		}
	}
}

func (h *host) configMaps() map[string]string {
	out := map[string]string{}
	objs, _ := h.f.Core().V1().ConfigMaps().Lister().List(labels.Everything())
	for _, o := range objs {
		out[o.Namespace+"/"+o.Name] = o.Data["k"]
	}
	return out
}

// readCheckpoint decodes <dir>/<name>.json into list and returns its resourceVersion.
func readCheckpoint(dir, name string, list runtime.Object) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, list); err != nil {
		return "", err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return lm.GetResourceVersion(), nil
}

func checkpointConfigMaps(dir string) (map[string]string, []string, string, error) {
	var l corev1.ConfigMapList
	rv, err := readCheckpoint(dir, "configmaps", &l)
	if err != nil {
		return nil, nil, "", err
	}
	out := map[string]string{}
	var order []string
	for _, o := range l.Items {
		out[o.Namespace+"/"+o.Name] = o.Data["k"]
		order = append(order, o.Namespace+"/"+o.Name)
	}
	return out, order, rv, nil
}

func checkpointPods(dir string) ([]string, error) {
	var l corev1.PodList
	if _, err := readCheckpoint(dir, "pods", &l); err != nil {
		return nil, err
	}
	var out []string
	for _, o := range l.Items {
		out = append(out, o.Namespace+"/"+o.Name)
	}
	return out, nil
}

// watchListModes runs f with client-go's WatchListClient feature off (informers list, then
// watch) and on (client-go's default since 1.35: informers first ask for a watch-list
// stream and fall back to List only when that fails).
func watchListModes(t *testing.T, f func(t *testing.T)) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("watchlist=%v", on), func(t *testing.T) {
			clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, on)
			f(t)
		})
	}
}

// Online: the checkpoint follows the informer's store: creates, updates and deletes end up
// in <dir>/<name>.json, sorted by key, with the store's resourceVersion.
func TestCheckpointFollowsTheAPI(t *testing.T) {
	watchListModes(t, func(t *testing.T) {
		dir := filepath.Join(hostDir(t), "checkpoint")
		a := newFakeAPI(t, connRefused(), cm("a", "1"), pod("p1"))
		ctx := context.Background()
		h := startHost(t, dir, a)
		h.synced(t, 10*time.Second)

		if !h.d.Online() {
			t.Errorf("Online() = false after the informers synced from the API")
		}
		eventually(t, 5*time.Second, "initial checkpoint", func() error {
			got, _, _, err := checkpointConfigMaps(dir)
			if err != nil {
				return err
			}
			if want := map[string]string{"ns/a": "1"}; !reflect.DeepEqual(got, want) {
				return fmt.Errorf("checkpoint holds %v, want %v", got, want)
			}
			return nil
		})

		cms := a.cs.CoreV1().ConfigMaps("ns")
		b := cm("b", "1")
		b.ResourceVersion = "100"
		if _, err := cms.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c := cm("c", "1")
		c.ResourceVersion = "101"
		if _, err := cms.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		b2 := cm("b", "2")
		b2.ResourceVersion = "102"
		if _, err := cms.Update(ctx, b2, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := a.cs.CoreV1().Pods("ns").Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		eventually(t, 5*time.Second, "checkpoint after changes", func() error {
			got, order, rv, err := checkpointConfigMaps(dir)
			if err != nil {
				return err
			}
			if want := map[string]string{"ns/b": "2", "ns/c": "1"}; !reflect.DeepEqual(got, want) {
				return fmt.Errorf("checkpoint holds %v, want %v", got, want)
			}
			if !sort.StringsAreSorted(order) || len(order) != 2 {
				return fmt.Errorf("checkpoint items %v: want 2, sorted by key", order)
			}
			if rv != "102" {
				return fmt.Errorf("checkpoint resourceVersion %q, want the store's (102)", rv)
			}
			return nil
		})
		eventually(t, 5*time.Second, "pods checkpoint after the last pod is deleted", func() error {
			got, err := checkpointPods(dir)
			if err != nil {
				return err
			}
			if len(got) != 0 {
				return fmt.Errorf("pods checkpoint holds %v, want none", got)
			}
			return nil
		})

		// The directory and its files are root's only: they hold Secrets.
		if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("checkpoint directory: %v, %v; want mode 0700", st.Mode().Perm(), err)
		}
		if st, err := os.Stat(filepath.Join(dir, "configmaps.json")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("checkpoint file: %v, %v; want mode 0600", st.Mode().Perm(), err)
		}
		if !Exists(dir) {
			t.Errorf("Exists(%s) = false with checkpoints in it", dir)
		}
	})
}

// A kind of which the site has no objects (no Ingress, no PersistentVolume...) must be
// checkpointed too: otherwise a host restarted while cut off cannot sync that informer.
func TestEmptyKindIsCheckpointed(t *testing.T) {
	watchListModes(t, func(t *testing.T) {
		dir := hostDir(t)
		a := newFakeAPI(t, connRefused(), cm("a", "1")) // no pods
		h := startHost(t, dir, a)
		h.synced(t, 10*time.Second)
		eventually(t, 3*time.Second, "checkpoint of a kind without objects", func() error {
			got, err := checkpointPods(dir)
			if err != nil {
				return err
			}
			if len(got) != 0 {
				return fmt.Errorf("pods checkpoint holds %v, want none", got)
			}
			return nil
		})
		h.stop()

		down := newFakeAPI(t, apierrors.NewServiceUnavailable("etcd has no quorum"))
		down.down.Store(true)
		h2 := startHost(t, dir, down)
		h2.synced(t, 10*time.Second)
	})
}

// A host restarted while the API does not answer runs from its checkpoint, and follows the
// API (its deletions and additions included) once it answers.
func TestRestartWhileAPIDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"connection-refused", connRefused()},
		{"503", apierrors.NewServiceUnavailable("etcd has no quorum")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watchListModes(t, func(t *testing.T) {
				dir := hostDir(t)
				ctx := context.Background()

				// The host's previous life.
				before := newFakeAPI(t, tc.err, cm("a", "1"), cm("b", "1"), pod("p1"))
				h := startHost(t, dir, before)
				h.synced(t, 10*time.Second)
				eventually(t, 5*time.Second, "checkpoint before the restart", func() error {
					got, _, _, err := checkpointConfigMaps(dir)
					if err != nil {
						return err
					}
					pods, err := checkpointPods(dir)
					if err != nil {
						return err
					}
					if want := map[string]string{"ns/a": "1", "ns/b": "1"}; !reflect.DeepEqual(got, want) || len(pods) != 1 {
						return fmt.Errorf("checkpoint holds %v and pods %v", got, pods)
					}
					return nil
				})
				h.stop()

				// Meanwhile the site changed: b deleted, a updated, c added.
				api := newFakeAPI(t, tc.err, cm("a", "2"), cm("c", "1"), pod("p1"))
				// The fake's resourceVersions count from 1 per clientset: move this API's past
				// the previous one's, as a real API's revisions have moved on since.
				for i := 0; i < 5; i++ {
					if err := api.cs.Tracker().Add(cm("tmp", "")); err != nil {
						t.Fatal(err)
					}
					if err := api.cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("configmaps"), "ns", "tmp"); err != nil {
						t.Fatal(err)
					}
				}
				api.down.Store(true)
				h = startHost(t, dir, api)
				h.synced(t, 10*time.Second)
				if got, want := h.configMaps(), map[string]string{"ns/a": "1", "ns/b": "1"}; !reflect.DeepEqual(got, want) {
					t.Fatalf("while the API is down the cache holds %v, want the checkpoint's %v", got, want)
				}
				if _, err := h.f.Core().V1().Pods().Lister().Pods("ns").Get("p1"); err != nil {
					t.Fatalf("pod from the checkpoint: %v", err)
				}
				if h.d.Online() {
					t.Errorf("Online() = true although no API call succeeded")
				}
				// The checkpoint is not rewritten with less than it had while offline.
				time.Sleep(100 * time.Millisecond)
				if got, _, _, err := checkpointConfigMaps(dir); err != nil || len(got) != 2 {
					t.Errorf("checkpoint while offline: %v, %v", got, err)
				}

				// The API comes back.
				api.down.Store(false)
				want := map[string]string{"ns/a": "2", "ns/c": "1"}
				eventually(t, 15*time.Second, "cache converges to the API", func() error {
					if got := h.configMaps(); !reflect.DeepEqual(got, want) {
						return fmt.Errorf("cache holds %v, want %v", got, want)
					}
					return nil
				})
				eventually(t, 5*time.Second, "Online", func() error {
					if !h.d.Online() {
						return errors.New("Online() = false after the API answered")
					}
					return nil
				})
				eventually(t, 5*time.Second, "checkpoint converges to the API", func() error {
					got, _, _, err := checkpointConfigMaps(dir)
					if err != nil {
						return err
					}
					if !reflect.DeepEqual(got, want) {
						return fmt.Errorf("checkpoint holds %v, want %v", got, want)
					}
					return nil
				})

				// And is followed from here on.
				if err := api.cs.CoreV1().ConfigMaps("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				eventually(t, 5*time.Second, "live change after the API came back", func() error {
					if got, want := h.configMaps(), map[string]string{"ns/c": "1"}; !reflect.DeepEqual(got, want) {
						return fmt.Errorf("cache holds %v, want %v", got, want)
					}
					got, _, _, err := checkpointConfigMaps(dir)
					if err != nil {
						return err
					}
					if want := map[string]string{"ns/c": "1"}; !reflect.DeepEqual(got, want) {
						return fmt.Errorf("checkpoint holds %v, want %v", got, want)
					}
					return nil
				})
			})
		})
	}
}

// --- listWatch, called as the reflector does ---

// writeCheckpoint stores items as the configmaps checkpoint of d with rv.
func writeCheckpoint(t *testing.T, dir string, rv string, items ...corev1.ConfigMap) string {
	t.Helper()
	l := corev1.ConfigMapList{Items: items}
	l.ResourceVersion = rv
	b, err := json.Marshal(&l)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "configmaps.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// stubKind is a ConfigMap Kind whose List and Watch return listErr / watchErr while set.
type stubKind struct {
	listErr, watchErr atomic.Pointer[error]
	lists, watches    atomic.Int32
}

func (s *stubKind) kind() Kind {
	return Kind{
		Name: "configmaps", Object: &corev1.ConfigMap{},
		NewList: func() runtime.Object { return &corev1.ConfigMapList{} },
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			s.lists.Add(1)
			if p := s.listErr.Load(); p != nil {
				return nil, *p
			}
			l := &corev1.ConfigMapList{Items: []corev1.ConfigMap{*cm("live", "1")}}
			l.ResourceVersion = "500"
			return l, nil
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			s.watches.Add(1)
			if p := s.watchErr.Load(); p != nil {
				return nil, *p
			}
			return watch.NewFake(), nil
		},
	}
}

func newListWatch(t *testing.T, s *stubKind) (*listWatch, string) {
	t.Helper()
	dir := t.TempDir()
	d, err := Open(dir, testLog())
	if err != nil {
		t.Fatal(err)
	}
	return &listWatch{d: d, k: s.kind(), file: filepath.Join(dir, "configmaps.json")}, dir
}

func setErr(p *atomic.Pointer[error], err error) { p.Store(&err) }

func names(t *testing.T, obj runtime.Object) []string {
	t.Helper()
	items, err := meta.ExtractList(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range items {
		m, _ := meta.Accessor(o)
		out = append(out, m.GetName())
	}
	return out
}

func TestListServesCheckpointOnlyWhenAPIUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		served bool
	}{
		{"connection refused", connRefused(), true},
		{"503", apierrors.NewServiceUnavailable("no quorum"), true},
		{"500", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"504 timeout", apierrors.NewTimeoutError("etcd", 1), true},
		{"403", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("node h1 may not list")), false},
		{"404", apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, ""), false},
		{"400", apierrors.NewBadRequest("bad field selector"), false},
		{"401", apierrors.NewUnauthorized("certificate expired"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stubKind{}
			setErr(&s.listErr, tc.err)
			lw, dir := newListWatch(t, s)
			writeCheckpoint(t, dir, "42", *cm("a", "1"), *cm("b", "1"))

			obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0", Limit: 500})
			if !tc.served {
				if err == nil {
					t.Fatalf("List = %v, nil; want the API's answer %v although a checkpoint exists", names(t, obj), tc.err)
				}
				if !reflect.DeepEqual(err, tc.err) && !errors.Is(err, tc.err) {
					t.Fatalf("List error %v, want the API's %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("List with the API unavailable (%v) and a checkpoint: %v", tc.err, err)
			}
			if got := names(t, obj); !reflect.DeepEqual(got, []string{"a", "b"}) {
				t.Fatalf("List served %v, want the checkpoint's [a b]", got)
			}
			if rv, _ := meta.NewAccessor().ResourceVersion(obj); rv != "42" {
				t.Fatalf("served list resourceVersion %q, want the checkpoint's 42", rv)
			}
			if lw.d.Online() {
				t.Fatalf("Online() after a list served from the checkpoint")
			}

			// The API answers again: its list, not the checkpoint.
			s.listErr.Store(nil)
			obj, err = lw.ListWithContext(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(t, obj); !reflect.DeepEqual(got, []string{"live"}) {
				t.Fatalf("List with the API back = %v, want the API's [live]", got)
			}
			if !lw.d.Online() {
				t.Fatalf("Online() = false after a List succeeded")
			}
		})
	}
}

func TestListWithoutUsableCheckpointReturnsAPIError(t *testing.T) {
	t.Run("no checkpoint", func(t *testing.T) {
		s := &stubKind{}
		setErr(&s.listErr, connRefused())
		lw, _ := newListWatch(t, s)
		obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("List = %v, %v; want the API's connection refused", obj, err)
		}
	})
	t.Run("corrupt checkpoint", func(t *testing.T) {
		s := &stubKind{}
		setErr(&s.listErr, apierrors.NewServiceUnavailable("no quorum"))
		lw, dir := newListWatch(t, s)
		if err := os.WriteFile(filepath.Join(dir, "configmaps.json"), []byte(`{"items": [`), 0o600); err != nil {
			t.Fatal(err)
		}
		obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
		if err == nil || !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("List = %v, %v; want the API's 503", obj, err)
		}
	})
	t.Run("caller cancelled", func(t *testing.T) {
		s := &stubKind{}
		setErr(&s.listErr, context.Canceled)
		lw, dir := newListWatch(t, s)
		writeCheckpoint(t, dir, "42", *cm("a", "1"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		obj, err := lw.ListWithContext(ctx, metav1.ListOptions{})
		if err == nil {
			t.Fatalf("List with a cancelled context = %v, nil; want its error", names(t, obj))
		}
	})
}

// An API server that accepts the connection but cannot answer (no etcd quorum) must not
// hold a host with a checkpoint for long: ListTimeout bounds the List.
func TestListTimeoutServesCheckpoint(t *testing.T) {
	s := &stubKind{}
	lw, dir := newListWatch(t, s)
	lw.d.ListTimeout = 200 * time.Millisecond
	writeCheckpoint(t, dir, "42", *cm("a", "1"))
	lw.k.List = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return nil, errors.New("List was not bounded by ListTimeout")
		}
	}
	start := time.Now()
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("List of a hanging API with a checkpoint: %v", err)
	}
	if got := names(t, obj); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("List served %v, want the checkpoint's [a]", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("List took %v with ListTimeout 200ms", d)
	}
}

func TestWatch(t *testing.T) {
	servedListWatch := func(t *testing.T, watchErr error) (*listWatch, *stubKind) {
		s := &stubKind{}
		setErr(&s.listErr, connRefused())
		setErr(&s.watchErr, watchErr)
		lw, dir := newListWatch(t, s)
		writeCheckpoint(t, dir, "42", *cm("a", "1"))
		if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatalf("List from the checkpoint: %v", err)
		}
		return lw, s
	}
	returnsAtOnce := func(t *testing.T, lw *listWatch, opts metav1.ListOptions, want error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		w, err := lw.WatchWithContext(ctx, opts)
		if err == nil {
			w.Stop()
			t.Fatalf("Watch = a watch, nil; want the API's error")
		}
		if !errors.Is(err, want) && !reflect.DeepEqual(err, want) {
			t.Fatalf("Watch error %v, want %v", err, want)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("Watch returned after %v; want at once", d)
		}
	}

	// The reflector's first request is a watch-list; only when it fails does it List, which
	// the checkpoint answers. It must fail at once, and not as an error the reflector retries
	// in place (connection refused, 429: reflector.go isWatchErrorRetriable), or the
	// informer never reaches the checkpoint.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"connection refused", connRefused()},
		{"429", apierrors.NewTooManyRequests("slow down", 1)},
		{"503", apierrors.NewServiceUnavailable("no quorum")},
	} {
		t.Run("watch-list while offline fails at once/"+tc.name, func(t *testing.T) {
			for _, served := range []bool{false, true} {
				s := &stubKind{}
				setErr(&s.listErr, tc.err)
				setErr(&s.watchErr, tc.err)
				lw, dir := newListWatch(t, s)
				writeCheckpoint(t, dir, "42", *cm("a", "1"))
				if served {
					if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
						t.Fatalf("List from the checkpoint: %v", err)
					}
				}
				send := true
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				w, err := lw.WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: &send, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
				cancel()
				if err == nil {
					w.Stop()
					t.Fatalf("watch-list while offline (served %v) = a watch, nil", served)
				}
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Fatalf("watch-list returned after %v; want at once", d)
				}
				if utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err) {
					t.Fatalf("watch-list error %q (served %v) is one the reflector retries as a watch-list forever instead of falling back to List", err, served)
				}
				if !strings.Contains(err.Error(), tc.err.Error()) {
					t.Fatalf("watch-list error %q does not tell the API's %q", err, tc.err)
				}
			}
		})
	}

	t.Run("watch without a checkpoint-served list fails at once", func(t *testing.T) {
		s := &stubKind{}
		setErr(&s.watchErr, connRefused())
		lw, _ := newListWatch(t, s)
		returnsAtOnce(t, lw, metav1.ListOptions{ResourceVersion: "42"}, syscall.ECONNREFUSED)
	})

	t.Run("forbidden watch after a checkpoint-served list fails at once", func(t *testing.T) {
		forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no"))
		lw, _ := servedListWatch(t, forbidden)
		returnsAtOnce(t, lw, metav1.ListOptions{ResourceVersion: "42"}, forbidden)
	})

	t.Run("watch after a checkpoint-served list waits for the API", func(t *testing.T) {
		lw, s := servedListWatch(t, apierrors.NewServiceUnavailable("no quorum"))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		type result struct {
			w   watch.Interface
			err error
		}
		done := make(chan result, 1)
		go func() {
			w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "42"})
			done <- result{w, err}
		}()
		// It keeps asking the API, without returning, while the API does not answer.
		eventually(t, 10*time.Second, "watch retries", func() error {
			if n := s.watches.Load(); n < 2 {
				return fmt.Errorf("%d watch calls", n)
			}
			return nil
		})
		select {
		case r := <-done:
			t.Fatalf("Watch returned %v, %v while the API does not answer", r.w, r.err)
		default:
		}
		if lw.d.Online() {
			t.Fatalf("Online() while the API does not answer")
		}

		s.watchErr.Store(nil) // the API answers
		select {
		case r := <-done:
			if r.err != nil || r.w == nil {
				t.Fatalf("Watch once the API answers = %v, %v", r.w, r.err)
			}
			r.w.Stop()
		case <-time.After(5 * time.Second):
			t.Fatalf("Watch did not return within 5s of the API answering")
		}
		if !lw.d.Online() {
			t.Errorf("Online() = false after the watch succeeded")
		}
		// The store now follows the API: a later watch failure is the reflector's to handle.
		setErr(&s.watchErr, apierrors.NewServiceUnavailable("no quorum"))
		returnsAtOnce(t, lw, metav1.ListOptions{ResourceVersion: "43"}, s.errOf())
	})

	t.Run("waiting watch ends with its context", func(t *testing.T) {
		lw, _ := servedListWatch(t, connRefused())
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "42"})
		if err == nil {
			w.Stop()
			t.Fatal("Watch = a watch, nil with the API down")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("Watch returned %v after its context ended", d)
		}
	})
}

func (s *stubKind) errOf() error {
	if p := s.watchErr.Load(); p != nil {
		return *p
	}
	return nil
}

func TestUnavailable(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", connRefused(), true},
		{"wrapped connection refused", fmt.Errorf("list: %w", connRefused()), true},
		{"deadline", context.DeadlineExceeded, true},
		{"503", apierrors.NewServiceUnavailable("no quorum"), true},
		{"500", apierrors.NewInternalError(errors.New("boom")), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"timeout", apierrors.NewTimeoutError("etcd", 1), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "list", 1), true},
		{"403", apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{"wrapped 403", fmt.Errorf("list: %w", apierrors.NewForbidden(gr, "x", errors.New("no"))), false},
		{"404", apierrors.NewNotFound(gr, "x"), false},
		{"409", apierrors.NewConflict(gr, "x", errors.New("conflict")), false},
		{"410", apierrors.NewResourceExpired("too old"), false},
		{"400", apierrors.NewBadRequest("bad"), false},
		{"401", apierrors.NewUnauthorized("who"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unavailable(tc.err); got != tc.want {
				t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestStopWritesPendingChange: a host that stops a moment after a change (within the
// debounce) still has that change in its checkpoint once Wait returns, so a restart serves
// it and not the state before (a pod that had just become ready, in a rolling restart).
func TestStopWritesPendingChange(t *testing.T) {
	dir := filepath.Join(hostDir(t), "checkpoint")
	a := newFakeAPI(t, connRefused(), cm("a", "1"))
	// A change waits an hour before it is written, unless the host stops.
	h := startHostDebounce(t, dir, a, time.Hour)
	h.synced(t, 10*time.Second)
	a2 := cm("a", "2")
	a2.ResourceVersion = "200"
	if _, err := a.cs.CoreV1().ConfigMaps("ns").Update(context.Background(), a2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the informer has the change", func() error {
		if got := h.configMaps()["ns/a"]; got != "2" {
			return fmt.Errorf("informer holds %q", got)
		}
		return nil
	})
	h.stop()
	if !h.d.Wait(5 * time.Second) {
		t.Fatal("the checkpoint writers did not finish within 5s of the stop")
	}
	got, _, rv, err := checkpointConfigMaps(dir)
	if err != nil {
		t.Fatalf("no checkpoint after the stop: %v", err)
	}
	if want := map[string]string{"ns/a": "2"}; !reflect.DeepEqual(got, want) || rv != "200" {
		t.Fatalf("after the stop the checkpoint holds %v at resourceVersion %q, want %v at 200", got, rv, want)
	}
}
