package api

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestMetricsEndpoint reads /metrics of a running host: it needs a bearer token, and with
// the admin's it carries Flotilla's own families next to the API server's: the gossip table
// and health, the scheduler's attempt and queue for a pod no node can take, and a gitsync
// failure of a GitSource whose repository does not exist.
func TestMetricsEndpoint(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=scheduler,gitsync"}})

	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // only the status code is looked at
	resp, err := anon.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", a.APIPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %s, want 401", resp.Status)
	}

	a.MustKubectl(`apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata:
  name: metrics-probe
  namespace: default
spec:
  url: file:///nonexistent/flotilla-metrics-probe
---
apiVersion: v1
kind: Pod
metadata:
  name: metrics-probe
  namespace: default
spec:
  nodeSelector:
    flotilla.dev/metrics-probe: nowhere
  containers:
  - name: c
    image: busybox
`, "apply", "-f", "-")

	want := []string{
		`flotilla_scheduler_pending_pods{queue="unschedulable"} 1`,
		`flotilla_scheduler_schedule_attempts_total{result="unschedulable"} `,
		`flotilla_membership_members{state="alive"} 1`,
		`flotilla_membership_health_score `,
		`flotilla_gitsync_failures_total{source="default/metrics-probe",stage="fetch"} `,
		`flotilla_gitsync_fetch_duration_seconds_count{source="default/metrics-probe"} `,
		`apiserver_request_total`,
	}
	client := a.Client()
	ctx := context.Background()
	var text string
	var missing []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatalf("GET /metrics as admin: %v", err)
		}
		text, missing = string(body), nil
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var ours []string
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "flotilla_") {
					ours = append(ours, l)
				}
			}
			t.Fatalf("/metrics lacks %q; its flotilla_ lines:\n%s", missing, strings.Join(ours, "\n"))
		}
	}
}
