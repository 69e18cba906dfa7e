package scheduler

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// fakeBindingAPI answers BindingBatches with batch (nil: 404 as a server without them) and
// pods/binding with 201, counting both.
type fakeBindingAPI struct {
	batch          func(b *flotillav1alpha1.BindingBatch) (int, any)
	batches, binds atomic.Int32
}

func (f *fakeBindingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/bindingbatches"):
		f.batches.Add(1)
		var b flotillav1alpha1.BindingBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if f.batch == nil {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("404 page not found"))
			return
		}
		code, body := f.batch(&b)
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	case strings.HasSuffix(r.URL.Path, "/binding"):
		f.binds.Add(1)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: 201})
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func startBinder(t *testing.T, api *fakeBindingAPI) *binder {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newBinder(client, cfg, 500, singleBindingsInFlight, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b.run(ctx)
	return b
}

func bindAll(b *binder, pods ...string) map[string]error {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]error{}
	)
	for _, name := range pods {
		p := pod(name, 100, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.bind(context.Background(), p, "n1")
			mu.Lock()
			out[p.Name] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// TestBinderBatches: bindings go in BindingBatches and each pod gets its own result, a
// failure as the error pods/binding would have returned.
func TestBinderBatches(t *testing.T) {
	api := &fakeBindingAPI{batch: func(b *flotillav1alpha1.BindingBatch) (int, any) {
		for _, pb := range b.Spec.Bindings {
			res := flotillav1alpha1.PodBindingResult{Pod: pb.Pod, Code: http.StatusCreated}
			if pb.Pod == "taken" {
				res = flotillav1alpha1.PodBindingResult{Pod: pb.Pod, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict, Message: "already assigned"}
			}
			b.Status.Results = append(b.Status.Results, res)
		}
		return http.StatusCreated, b
	}}
	b := startBinder(t, api)
	got := bindAll(b, "a", "b", "c", "taken")
	for _, name := range []string{"a", "b", "c"} {
		if got[name] != nil {
			t.Errorf("%s: %v", name, got[name])
		}
	}
	if !apierrors.IsConflict(got["taken"]) || !strings.Contains(got["taken"].Error(), "already assigned") {
		t.Errorf("taken: %v, want the 409 of its result", got["taken"])
	}
	if api.binds.Load() != 0 || api.batches.Load() == 0 {
		t.Errorf("%d batches and %d pods/binding requests, want batches only", api.batches.Load(), api.binds.Load())
	}
}

// TestBinderFallsBack: against a server without BindingBatches every pod is bound with
// pods/binding, and the server is not asked for batches again; a batch refused for its
// namespace alone binds its pods one by one but keeps batching.
func TestBinderFallsBack(t *testing.T) {
	api := &fakeBindingAPI{}
	b := startBinder(t, api)
	for name, err := range bindAll(b, "a", "b") {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if api.binds.Load() != 2 || !b.noBatch.Load() {
		t.Fatalf("%d pods/binding requests, noBatch %v: want both pods bound one by one and batches off", api.binds.Load(), b.noBatch.Load())
	}
	asked := api.batches.Load()
	if err := bindAll(b, "c")["c"]; err != nil || api.batches.Load() != asked || api.binds.Load() != 3 {
		t.Errorf("after the fallback: %v, %d more batches, %d pods/binding requests", err, api.batches.Load()-asked, api.binds.Load())
	}

	api = &fakeBindingAPI{batch: func(*flotillav1alpha1.BindingBatch) (int, any) {
		st := apierrors.NewNotFound(corev1.Resource("namespaces"), "ns1").Status()
		st.Kind, st.APIVersion = "Status", "v1"
		return http.StatusNotFound, st
	}}
	b = startBinder(t, api)
	if err := bindAll(b, "d")["d"]; err != nil || api.binds.Load() != 1 || b.noBatch.Load() {
		t.Errorf("namespace not found: %v, %d pods/binding requests, noBatch %v: want the pod bound alone and batching kept", err, api.binds.Load(), b.noBatch.Load())
	}
}
