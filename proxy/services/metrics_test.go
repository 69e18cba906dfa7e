package services

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/testutil"
)

// failingBackend fails its first full sync and programs nothing.
type failingBackend struct {
	mu      sync.Mutex
	resyncs int
}

func (b *failingBackend) proxyMode() string        { return "test" }
func (b *failingBackend) Apply(DesiredState) error { return nil }
func (b *failingBackend) Cleanup() error           { return nil }
func (b *failingBackend) Resync(DesiredState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resyncs++
	if b.resyncs == 1 {
		return errors.New("kernel said no")
	}
	return nil
}

// TestSyncMetrics runs the sync loop on a fake API with one Service of two ready endpoints
// and a backend whose first sync fails: the failure is counted, both syncs are timed, and
// the programmed Service ports and endpoints are those of the successful retry.
func TestSyncMetrics(t *testing.T) {
	client := fake.NewClientset(mkNode("n1", "10.213.0.2"), mkSvc("web", "10.96.0.50", 80),
		mkSlice("web-1", "web", 8080, readyEP("10.244.0.5", "n1"), readyEP("10.244.1.5", "n2")))
	// The metrics are the process's: a test run again in it (-count) counts from where the
	// last run left them.
	failures, err := testutil.GetCounterMetricValue(syncFailures.WithLabelValues("test"))
	if err != nil {
		t.Fatal(err)
	}
	resyncs, err := testutil.GetHistogramMetricCount(syncDuration.WithLabelValues("test", "resync"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, client, Config{NodeName: "n1", ResyncPeriod: time.Hour}, &failingBackend{}, logrus.NewEntry(logrus.StandardLogger()))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	// The failed full sync is retried (after the back-off, or at once on an informer event).
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := testutil.GetHistogramMetricCount(syncDuration.WithLabelValues("test", "resync"))
		if err != nil {
			t.Fatal(err)
		}
		if n-resyncs >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d full syncs timed, want 2 (the failed one and its retry)", n-resyncs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v, _ := testutil.GetCounterMetricValue(syncFailures.WithLabelValues("test")); v-failures != 1 {
		t.Errorf("sync_failures_total{mode=test} grew by %v, want 1", v-failures)
	}
	if v, _ := testutil.GetGaugeMetricValue(programmedServicePorts.WithLabelValues("test")); v != 1 {
		t.Errorf("programmed_service_ports = %v, want 1", v)
	}
	if v, _ := testutil.GetGaugeMetricValue(programmedEndpoints.WithLabelValues("test")); v != 2 {
		t.Errorf("programmed_endpoints = %v, want 2", v)
	}
	if modeOf(&Nftables{}) != ModeNftables || modeOf(&IPVS{}) != ModeIPVS {
		t.Errorf("mode labels %q, %q", modeOf(&Nftables{}), modeOf(&IPVS{}))
	}
}
