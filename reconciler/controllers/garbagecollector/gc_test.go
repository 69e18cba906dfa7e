package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// startCollector starts a real agent and runs the collector in-process against it.
func startCollector(t *testing.T) (*framework.Agent, kubernetes.Interface) {
	t.Helper()
	a, c, gc := controllertest.StartController(t, New)
	waitWatching(t, gc)
	return a, c
}

// waitWatching waits until gc watches ConfigMaps (it discovers resources once running), and
// checks it leaves Events alone.
func waitWatching(t *testing.T, gc *Controller) {
	t.Helper()
	eventually(t, 30*time.Second, "collector watches configmaps", func() (bool, string) {
		w := gc.watched()
		return w.Has(corev1.SchemeGroupVersion.WithResource("configmaps")), fmt.Sprintf("watched: %v", w.UnsortedList())
	})
	if w := gc.watched(); w.Has(corev1.SchemeGroupVersion.WithResource("events")) {
		t.Fatalf("watched resources = %v: want configmaps, not events", w.UnsortedList())
	}
}

// typedConfigMaps stands for a controller that watches ConfigMaps through the shared typed
// informers.
type typedConfigMaps struct{ informer cache.SharedIndexInformer }

func (r typedConfigMaps) Run(ctx context.Context, _ int) error {
	<-ctx.Done()
	return nil
}

// A resource another controller already watches through a typed informer is observed
// through that informer, not through a second watch of its metadata, and collected the same.
func TestGarbageCollectorSharesTypedInformers(t *testing.T) {
	var (
		gc    *Controller
		typed typedConfigMaps
		meta  func() string
	)
	_, c := controllertest.Start(t,
		func(cctx *controllers.Context) (controllers.Runner, error) {
			typed.informer = cctx.Informers.Core().V1().ConfigMaps().Informer()
			return typed, nil
		},
		func(cctx *controllers.Context) (controllers.Runner, error) {
			var err error
			gc, err = New(cctx)
			configmaps := corev1.SchemeGroupVersion.WithResource("configmaps")
			secrets := corev1.SchemeGroupVersion.WithResource("secrets")
			meta = func() string {
				gc.mu.Lock()
				defer gc.mu.Unlock()
				var wrong []string
				// The factories wrap an informer anew on each call: its store is its identity.
				if gc.monitors[configmaps].informer.GetStore() != typed.informer.GetStore() {
					wrong = append(wrong, "ConfigMaps not observed through the running typed informer")
				}
				if gc.monitors[secrets].informer.GetStore() != cctx.MetadataInformers.ForResource(secrets).Informer().GetStore() {
					wrong = append(wrong, "Secrets (no typed informer) not observed through a metadata informer")
				}
				return strings.Join(wrong, "; ")
			}
			return gc, err
		})
	waitWatching(t, gc)
	if wrong := meta(); wrong != "" {
		t.Fatal(wrong)
	}

	ns := "typed"
	controllertest.Namespace(t, c, ns)
	owner := createCM(t, c, ns, "owner")
	createCM(t, c, ns, "dep", ownerRef("ConfigMap", owner, false))
	stays(t, c, ns, "dep", time.Second)
	if err := c.CoreV1().ConfigMaps(ns).Delete(context.Background(), "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "dependent of the deleted owner deleted", cmGone(c, ns, "dep"))
}

func ownerRef(kind string, o metav1.Object, block bool) metav1.OwnerReference {
	apiVersion := "v1"
	if kind == "IngressClass" {
		apiVersion = "networking.k8s.io/v1"
	}
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.GetName(), UID: o.GetUID(), BlockOwnerDeletion: ptr.To(block)}
}

func createCM(t *testing.T, c kubernetes.Interface, ns, name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap %s/%s: %v", ns, name, err)
	}
	return cm
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %s", what, timeout, last)
}

func cmGone(c kubernetes.Interface, ns string, names ...string) func() (bool, string) {
	return func() (bool, string) {
		var left []string
		for _, n := range names {
			if _, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, n)
			}
		}
		return len(left) == 0, "still present: " + strings.Join(left, ", ")
	}
}

// stays asserts that the configmap exists for the whole duration d.
func stays(t *testing.T, c kubernetes.Interface, ns, name string, d time.Duration) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var err error
		if cm, err = c.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Fatalf("configmap %s/%s must stay: %v", ns, name, err)
		}
	}
	return cm
}

func TestGarbageCollector(t *testing.T) {
	a, c := startCollector(t)
	ctx := context.Background()

	t.Run("background deletion removes dependents; a dependent with another live owner keeps it", func(t *testing.T) {
		ns := "bg"
		controllertest.Namespace(t, c, ns)
		owner := createCM(t, c, ns, "owner")
		other := createCM(t, c, ns, "other")
		createCM(t, c, ns, "dep-1", ownerRef("ConfigMap", owner, false))
		createCM(t, c, ns, "dep-2", ownerRef("ConfigMap", owner, true))
		createCM(t, c, ns, "shared", ownerRef("ConfigMap", owner, false), ownerRef("ConfigMap", other, false))
		// Owners that exist keep their dependents.
		stays(t, c, ns, "dep-1", 2*time.Second)

		a.MustKubectl("", "-n", ns, "delete", "configmap", "owner")
		eventually(t, 15*time.Second, "dependents of the deleted owner deleted", cmGone(c, ns, "dep-1", "dep-2"))
		eventually(t, 15*time.Second, "dead reference dropped from shared", func() (bool, string) {
			cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "shared", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			refs := cm.OwnerReferences
			return len(refs) == 1 && refs[0].UID == other.UID, "ownerReferences: " + toJSON(refs)
		})
		stays(t, c, ns, "other", time.Second)
	})

	t.Run("background deletion cascades through three levels and kinds", func(t *testing.T) {
		ns := "chain"
		controllertest.Namespace(t, c, ns)
		top := createCM(t, c, ns, "top")
		mid, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mid",
			OwnerReferences: []metav1.OwnerReference{ownerRef("ConfigMap", top, true)}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		createCM(t, c, ns, "leaf", ownerRef("Secret", mid, true))

		a.MustKubectl("", "-n", ns, "delete", "configmap", "top")
		eventually(t, 20*time.Second, "chain deleted", func() (bool, string) {
			_, serr := c.CoreV1().Secrets(ns).Get(ctx, "mid", metav1.GetOptions{})
			ok, msg := cmGone(c, ns, "leaf")()
			return ok && apierrors.IsNotFound(serr), msg + " secret/mid: " + errString(serr)
		})
	})

	t.Run("owners are resolved by UID, live, and only in the dependent's namespace", func(t *testing.T) {
		ns := "resolve"
		controllertest.Namespace(t, c, ns)
		controllertest.Namespace(t, c, "resolve-other")
		// A cluster-scoped owner may own namespaced dependents.
		ic, err := c.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "gc-test"},
			Spec: networkingv1.IngressClassSpec{Controller: "flotilla.dev/test"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		createCM(t, c, ns, "of-cluster-owner", ownerRef("IngressClass", ic, false))
		// An owner that never existed (same name, other UID) is gone.
		real := createCM(t, c, ns, "real")
		ghost := ownerRef("ConfigMap", real, false)
		ghost.UID = types.UID("00000000-0000-0000-0000-000000000000")
		createCM(t, c, ns, "of-ghost", ghost)
		// A namespaced owner in another namespace cannot own it: the reference points at
		// nothing in the dependent's namespace.
		elsewhere := createCM(t, c, "resolve-other", "elsewhere")
		createCM(t, c, ns, "of-elsewhere", ownerRef("ConfigMap", elsewhere, false))
		createCM(t, c, ns, "of-real", ownerRef("ConfigMap", real, false))

		eventually(t, 15*time.Second, "dependents of missing owners deleted", cmGone(c, ns, "of-ghost", "of-elsewhere"))
		stays(t, c, ns, "of-real", 2*time.Second)
		stays(t, c, ns, "of-cluster-owner", time.Second)
		stays(t, c, "resolve-other", "elsewhere", time.Second)

		a.MustKubectl("", "delete", "ingressclass", "gc-test")
		eventually(t, 15*time.Second, "dependent of the cluster-scoped owner deleted", cmGone(c, ns, "of-cluster-owner"))
	})

	t.Run("orphan leaves dependents without the reference and removes the owner", func(t *testing.T) {
		ns := "orphan"
		controllertest.Namespace(t, c, ns)
		owner := createCM(t, c, ns, "owner")
		keep := createCM(t, c, ns, "keep")
		createCM(t, c, ns, "dep-1", ownerRef("ConfigMap", owner, true))
		createCM(t, c, ns, "dep-2", ownerRef("ConfigMap", owner, false), ownerRef("ConfigMap", keep, false))

		a.MustKubectl("", "-n", ns, "delete", "configmap", "owner", "--cascade=orphan", "--timeout=30s")
		eventually(t, 15*time.Second, "owner removed", cmGone(c, ns, "owner"))
		d1 := stays(t, c, ns, "dep-1", 2*time.Second)
		if len(d1.OwnerReferences) != 0 {
			t.Errorf("dep-1 ownerReferences = %s, want none", toJSON(d1.OwnerReferences))
		}
		d2 := stays(t, c, ns, "dep-2", time.Second)
		if len(d2.OwnerReferences) != 1 || d2.OwnerReferences[0].UID != keep.UID {
			t.Errorf("dep-2 ownerReferences = %s, want only keep", toJSON(d2.OwnerReferences))
		}
	})

	t.Run("foreground deletion deletes dependents first, then the owner", func(t *testing.T) {
		ns := "fg"
		controllertest.Namespace(t, c, ns)
		owner := createCM(t, c, ns, "owner")
		child := createCM(t, c, ns, "child", ownerRef("ConfigMap", owner, true))
		createCM(t, c, ns, "grandchild", ownerRef("ConfigMap", child, true))
		createCM(t, c, ns, "loose", ownerRef("ConfigMap", owner, false))

		w, err := c.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: owner.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		var (
			mu            sync.Mutex
			deleted       []string
			ownerFinished bool // owner seen with deletionTimestamp and the foregroundDeletion finalizer
		)
		go func() {
			for ev := range w.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				mu.Lock()
				switch {
				case ev.Type == watch.Deleted:
					deleted = append(deleted, cm.Name)
				case cm.Name == "owner" && cm.DeletionTimestamp != nil && slices.Contains(cm.Finalizers, metav1.FinalizerDeleteDependents):
					ownerFinished = true
				}
				mu.Unlock()
			}
		}()

		start := time.Now()
		a.MustKubectl("", "-n", ns, "delete", "configmap", "owner", "--cascade=foreground", "--timeout=30s")
		t.Logf("kubectl delete --cascade=foreground returned after %s", time.Since(start).Round(time.Millisecond))
		// kubectl waits for the owner to be gone; the blocking dependents went before it.
		eventually(t, 15*time.Second, "owner and dependents deleted", cmGone(c, ns, "owner", "child", "grandchild", "loose"))
		eventually(t, 5*time.Second, "watch saw every deletion", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(deleted) == 4, "deleted: " + strings.Join(deleted, ", ")
		})
		mu.Lock()
		defer mu.Unlock()
		if !ownerFinished {
			t.Errorf("the owner was never seen waiting with deletionTimestamp and the foregroundDeletion finalizer")
		}
		pos := func(name string) int { return slices.Index(deleted, name) }
		if !(pos("grandchild") < pos("child") && pos("child") < pos("owner")) {
			t.Errorf("deletion order %v: want grandchild, then child, then owner", deleted)
		}
		sorted := slices.Clone(deleted)
		sort.Strings(sorted)
		if !slices.Equal(sorted, []string{"child", "grandchild", "loose", "owner"}) {
			t.Errorf("deleted = %v", deleted)
		}
	})
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func errString(err error) string {
	if err == nil {
		return "present"
	}
	return err.Error()
}
