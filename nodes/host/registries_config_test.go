package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCompleteRegistries(t *testing.T) {
	complete := func(dataDir, flag string) (Config, error) {
		c := DefaultConfig()
		c.DataDir, c.Name, c.RegistryConfig = dataDir, "host-1", flag
		_, err := c.Complete()
		return c, err
	}
	// No file: no configuration.
	dir := t.TempDir()
	if c, err := complete(dir, ""); err != nil || c.Registries != nil {
		t.Fatalf("without a file: %+v, %v", c.Registries, err)
	}
	// <data-dir>/registries.yaml is read by default.
	def := filepath.Join(dir, "registries.yaml")
	if err := os.WriteFile(def, []byte("mirrors: {registry.local:5000: {endpoint: ['http://registry.local:5000']}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := complete(dir, ""); err != nil || c.Registries == nil || len(c.Registries.Mirrors) != 1 {
		t.Fatalf("default file: %+v, %v", c.Registries, err)
	}
	// A bad file is refused at start, naming the flag, the file and the field.
	if err := os.WriteFile(def, []byte("configs: {r.example.com: {tls: {ca_file: /nonexistent.pem}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := complete(dir, ""); err == nil || !strings.Contains(err.Error(), "--registry-config") ||
		!strings.Contains(err.Error(), def) || !strings.Contains(err.Error(), `configs."r.example.com".tls.ca_file`) {
		t.Fatalf("bad default file: %v", err)
	}
	// A named file must exist.
	if _, err := complete(t.TempDir(), filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Fatalf("missing --registry-config file: %v", err)
	}
}
