package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// binder sends the scheduler's bindings. Bindings that wait at the same time go together in
// flotilla.dev BindingBatches (one request per namespace for up to maxBatch of them), which
// the API server authorizes, admits and commits binding by binding as pods/binding: the same
// outcome for each pod, without one HTTP request, audit event and handler chain per pod.
// Against a server without BindingBatches (or a sender not allowed them) each binding goes
// to pods/binding on its own, as before.
type binder struct {
	client   kubernetes.Interface
	batches  rest.Interface // nil: one pods/binding request per pod
	maxBatch int
	queue    chan *bindRequest
	single   chan struct{} // bounds the pods/binding requests in flight
	noBatch  atomic.Bool   // the server refused BindingBatches: bind one by one from now on
	log      *logrus.Entry
}

type bindRequest struct {
	pod  *corev1.Pod
	node string
	done chan error
}

const (
	// batchSenders is the number of batches in flight: one is sent while the next fills.
	batchSenders = 2
	// singleBindingsInFlight bounds the pods/binding requests in flight.
	singleBindingsInFlight = 64
)

func newBinder(client kubernetes.Interface, cfg *rest.Config, maxBatch, singleInFlight int, log *logrus.Entry) (*binder, error) {
	b := &binder{client: client, maxBatch: maxBatch, queue: make(chan *bindRequest, maxBatch*batchSenders),
		single: make(chan struct{}, singleInFlight), log: log}
	if cfg == nil || maxBatch <= 1 {
		return b, nil
	}
	scheme := runtime.NewScheme()
	if err := flotillav1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &flotillav1alpha1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON // the group speaks JSON only
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent() // as the typed clients of the same config
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("BindingBatch client: %w", err)
	}
	b.batches = rc
	return b, nil
}

// run sends batches until ctx ends.
func (b *binder) run(ctx context.Context) {
	if b.batches == nil {
		return
	}
	for range batchSenders {
		go func() {
			for {
				var first *bindRequest
				select {
				case <-ctx.Done():
					return
				case first = <-b.queue:
				}
				batch := []*bindRequest{first}
			fill:
				for len(batch) < b.maxBatch {
					select {
					case r := <-b.queue:
						batch = append(batch, r)
					default:
						break fill
					}
				}
				b.sendAll(ctx, batch)
			}
		}()
	}
}

// bind commits pod's binding to node and returns what pods/binding would have returned.
func (b *binder) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	if b.batches == nil || b.noBatch.Load() {
		return b.bindOne(ctx, pod, node)
	}
	r := &bindRequest{pod: pod, node: node, done: make(chan error, 1)}
	select {
	case b.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *binder) bindOne(ctx context.Context, pod *corev1.Pod, node string) error {
	select {
	case b.single <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.single }()
	return b.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
}

// sendAll sends one batch per namespace of reqs and answers each request.
func (b *binder) sendAll(ctx context.Context, reqs []*bindRequest) {
	byNS := map[string][]*bindRequest{}
	var order []string
	for _, r := range reqs {
		if _, ok := byNS[r.pod.Namespace]; !ok {
			order = append(order, r.pod.Namespace)
		}
		byNS[r.pod.Namespace] = append(byNS[r.pod.Namespace], r)
	}
	for _, ns := range order {
		b.send(ctx, ns, byNS[ns])
	}
}

func (b *binder) send(ctx context.Context, ns string, reqs []*bindRequest) {
	batch := &flotillav1alpha1.BindingBatch{Spec: flotillav1alpha1.BindingBatchSpec{Bindings: make([]flotillav1alpha1.PodBinding, 0, len(reqs))}}
	// A pod named twice (a retry while its first binding waits) goes on its own.
	seen := make(map[string]bool, len(reqs))
	var inBatch []*bindRequest
	for _, r := range reqs {
		if seen[r.pod.Name] {
			go func(r *bindRequest) { r.done <- b.bindOne(ctx, r.pod, r.node) }(r)
			continue
		}
		seen[r.pod.Name] = true
		inBatch = append(inBatch, r)
		batch.Spec.Bindings = append(batch.Spec.Bindings, flotillav1alpha1.PodBinding{Pod: r.pod.Name, UID: r.pod.UID, Node: r.node})
	}
	out := &flotillav1alpha1.BindingBatch{}
	err := b.batches.Post().Namespace(ns).Resource("bindingbatches").Body(batch).Do(ctx).Into(out)
	if err == nil && len(out.Status.Results) != len(inBatch) {
		err = fmt.Errorf("the server answered %d results for %d bindings", len(out.Status.Results), len(inBatch))
	}
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) {
			// Refused as a whole: each pod gets pods/binding's own answer. A server that
			// does not serve BindingBatches is not asked again.
			if notServed(err) && !b.noBatch.Swap(true) {
				b.log.WithError(err).Info("the API server does not serve BindingBatches: binding each pod with pods/binding")
			}
			for _, r := range inBatch {
				go func(r *bindRequest) { r.done <- b.bindOne(ctx, r.pod, r.node) }(r)
			}
			return
		}
		for _, r := range inBatch {
			r.done <- err
		}
		return
	}
	for i, r := range inBatch {
		res := out.Status.Results[i]
		if res.Code == http.StatusCreated {
			r.done <- nil
			continue
		}
		r.done <- &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: res.Code,
			Reason: res.Reason, Message: res.Message}}
	}
}

// notServed tells whether err says the server has no bindingbatches resource (rather than,
// say, no namespace of that name).
func notServed(err error) bool {
	if apierrors.IsMethodNotSupported(err) {
		return true
	}
	if !apierrors.IsNotFound(err) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	d := st.Status().Details
	return d == nil || d.Kind != "namespaces"
}
