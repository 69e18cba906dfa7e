package api

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestOneJSONLogStream starts an agent with --log-format json from a --config file and checks
// that everything it prints, from etcd, the API server and client-go too, is one JSON object
// per line with a level and a component; and that the config file's settings took effect.
func TestOneJSONLogStream(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "flotilla.yaml")
	if err := os.WriteFile(cfg, []byte("node-label:\n  site: from-config-file\nnode-monitor-grace-period: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--log-format", "json", "--config", cfg}})
	ctx := context.Background()
	// Wait for the Node (its labels come from the config file) and the controllers' leader:
	// by then client-go's informers have logged too.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := a.Client().CoreV1().Nodes().Get(ctx, a.Name, metav1.GetOptions{})
		return err == nil && n.Labels["site"] == "from-config-file" && strings.Contains(a.Logs(), "became leader"), nil
	})
	if err != nil {
		t.Fatalf("Node with the label of the config file and a leader: %v\n%s", err, a.Logs())
	}
	if _, err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(a.Logs()), "\n")
	sources := map[string]bool{}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not a JSON object: %q", i+1, line)
		}
		for _, key := range []string{"level", "msg", "time"} {
			if _, ok := rec[key]; !ok {
				t.Fatalf("line %d has no %q: %s", i+1, key, line)
			}
		}
		msg, _ := rec["msg"].(string)
		comp, _ := rec["component"].(string)
		switch {
		case comp == "etcd":
			sources["etcd"] = true
		case comp == "klog" && strings.HasPrefix(msg, "Serving securely on"):
			sources["apiserver"] = true
		case comp == "klog" && (strings.Contains(msg, "Waiting for caches to sync") || strings.Contains(msg, "Caches are synced")):
			sources["client-go"] = true
		}
	}
	for _, s := range []string{"etcd", "apiserver", "client-go"} {
		if !sources[s] {
			t.Errorf("no JSON line from %s among %d lines", s, len(lines))
		}
	}
}
