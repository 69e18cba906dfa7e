package apiserver

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Events expire EventTTL after their last write, in both API groups, and no watch cache
// holds them (as kube-apiserver's defaults): a site that runs for months keeps an hour of
// them.
func TestEventsExpireAndAreNotWatchCached(t *testing.T) {
	etcdURL, _ := startTestEtcd(t)
	client, _ := startTestServer(t, etcdURL, func(c *Config) { c.EventTTL = 3 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	now := metav1.NewTime(time.Now())
	core, err := client.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "core"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"},
		Reason:         "Test", Message: "expires", Type: corev1.EventTypeNormal,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "test"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "new"},
		EventTime:  metav1.NewMicroTime(time.Now()), ReportingController: "test/controller", ReportingInstance: "test-1",
		Action: "Testing", Reason: "Test", Note: "expires", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A ConfigMap written at the same time stays.
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stays"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Events("default").Get(ctx, core.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the event just written: %v", err)
	}
	for {
		_, errCore := client.CoreV1().Events("default").Get(ctx, "core", metav1.GetOptions{})
		_, errNew := client.EventsV1().Events("default").Get(ctx, "new", metav1.GetOptions{})
		if apierrors.IsNotFound(errCore) && apierrors.IsNotFound(errNew) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("events not expired after their 3 s TTL: core %v, events.k8s.io %v", errCore, errNew)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Get(ctx, "stays", metav1.GetOptions{}); err != nil {
		t.Fatalf("a ConfigMap is gone with the events: %v", err)
	}

	// The watch caches of the other kinds start; none is made for events.
	for {
		raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := string(raw)
		if strings.Contains(m, `apiserver_watch_cache_initializations_total{group="",resource="events"}`) ||
			strings.Contains(m, `apiserver_watch_cache_initializations_total{group="events.k8s.io",resource="events"}`) {
			t.Fatal("a watch cache of events was initialized")
		}
		if strings.Contains(m, `apiserver_watch_cache_initializations_total{group="",resource="configmaps"}`) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no watch cache of ConfigMaps initialized either: the metric is not where the test looks")
		}
		time.Sleep(500 * time.Millisecond)
	}
}
