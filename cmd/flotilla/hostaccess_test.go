package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostAccessCommandsExplainBadInput: without a way to reach the site, or on a host that
// is not a server, the commands say what to pass, and touch nothing.
func TestHostAccessCommandsExplainBadInput(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	if err := runHostRemove(ctx, siteAdminOptions{}, "host-4", false, &out); err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("host remove without --data-dir or --kubeconfig: %v", err)
	}
	dir := t.TempDir()
	if err := runHostRemove(ctx, siteAdminOptions{dataDir: dir}, "host-4", false, &out); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "kubeconfig")) {
		t.Errorf("host remove with a data dir holding no kubeconfig: %v", err)
	}
	if err := runTokenRotate(ctx, siteAdminOptions{}, &out, &out); err == nil || !strings.Contains(err.Error(), "--data-dir is required") {
		t.Errorf("token rotate without --data-dir: %v", err)
	}
	if err := runTokenRotate(ctx, siteAdminOptions{dataDir: dir}, &out, &out); err == nil || !strings.Contains(err.Error(), "server host") {
		t.Errorf("token rotate where there is no token: %v", err)
	}
	// A worker's token file may be a bare secret: no pin, not a server's.
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runTokenRotate(ctx, siteAdminOptions{dataDir: dir}, &out, &out); err == nil || !strings.Contains(err.Error(), "not a server's data directory") {
		t.Errorf("token rotate with an unpinned token: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "token")); !strings.HasPrefix(string(b), "3f9c") {
		t.Errorf("the token file changed: %q", b)
	}
}
