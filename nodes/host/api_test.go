package host

import (
	"encoding/base64"
	"testing"
)

// TestSecretsEncryptionKey pins the derivation of the Secrets key: a change would make every
// Secret stored in etcd unreadable. The expected key is what the openssl command of
// docs/architecture.md ("Encryption at rest") prints for the same PEM.
func TestSecretsEncryptionKey(t *testing.T) {
	key, err := secretsEncryptionKey([]byte("-----BEGIN PRIVATE KEY-----\ntest\n-----END PRIVATE KEY-----\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := base64.StdEncoding.EncodeToString(key), "74sFoZ94iEbmZyb0YiOLFtzSYKZU1LQyCr7JxbW5yMM="; got != want {
		t.Errorf("Secrets key = %s, want %s", got, want)
	}
}
