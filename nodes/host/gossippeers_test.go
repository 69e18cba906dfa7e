package host

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRememberedGossipPeersJoinTheSeeds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gossip-peers.json")
	if got := loadGossipPeers(path); got != nil {
		t.Errorf("no file: %v", got)
	}
	if err := os.WriteFile(path, []byte(`["10.0.0.2:7946","10.0.0.1:7946"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	got := mergeSeeds([]string{"10.0.0.1:7946"}, loadGossipPeers(path))
	if want := []string{"10.0.0.1:7946", "10.0.0.2:7946"}; !slices.Equal(got, want) {
		t.Errorf("seeds %v, want %v (--join first, then the remembered ones it lacks)", got, want)
	}
	if err := os.WriteFile(path, []byte(`not json`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := mergeSeeds([]string{"10.0.0.1:7946"}, loadGossipPeers(path)); !slices.Equal(got, []string{"10.0.0.1:7946"}) {
		t.Errorf("with an unreadable file: %v", got)
	}
}
