package apiserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func rawSecret(t *testing.T, etcd *clientv3.Client, ns, name string) []byte {
	t.Helper()
	resp, err := etcd.Get(context.Background(), testEtcdPrefix+"/secrets/"+ns+"/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd holds no key %s/secrets/%s/%s", testEtcdPrefix, ns, name)
	}
	return resp.Kvs[0].Value
}

func createSecret(t *testing.T, client kubernetes.Interface, name, value string) {
	t.Helper()
	if _, err := client.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string][]byte{"v": []byte(value)}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret %s: %v", name, err)
	}
}

func wantSecretValue(t *testing.T, client kubernetes.Interface, name, value string) {
	t.Helper()
	s, err := client.CoreV1().Secrets("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Secret %s: %v", name, err)
	}
	if got := string(s.Data["v"]); got != value {
		t.Errorf("Secret %s holds %q, want %q", name, got, value)
	}
}

// wantEncrypted checks that etcd holds the Secret encrypted with the named secretbox key.
func wantEncrypted(t *testing.T, etcd *clientv3.Client, name, keyName, value string) {
	t.Helper()
	raw := rawSecret(t, etcd, "default", name)
	if prefix := "k8s:enc:secretbox:v1:" + keyName + ":"; !bytes.HasPrefix(raw, []byte(prefix)) {
		t.Errorf("etcd value of Secret %s starts %q, want %q", name, raw[:min(len(raw), 40)], prefix)
	}
	if bytes.Contains(raw, []byte(value)) || bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString([]byte(value)))) {
		t.Errorf("etcd value of Secret %s holds its value in clear", name)
	}
}

// TestSecretsEncryptedAtRest: with a key, new Secrets are stored encrypted (secretbox,
// site-v1) and Secrets stored before, in clear, still read; an EncryptionConfiguration file
// with a new key first and the site key second (the rotation) reads both and writes with the
// new key.
// protobufMagic starts what the API server stores of built-in kinds.
var protobufMagic = []byte("k8s\x00")

func TestSecretsEncryptedAtRest(t *testing.T) {
	etcdURL, etcd := startTestEtcd(t)
	key := bytes.Repeat([]byte{7}, 32)

	// Before encryption: in clear.
	client, stop := startTestServer(t, etcdURL, nil)
	createSecret(t, client, "old", "clear-value-1")
	if raw := rawSecret(t, etcd, "default", "old"); !bytes.HasPrefix(raw, protobufMagic) || !bytes.Contains(raw, []byte("clear-value-1")) {
		t.Fatalf("Secret stored without encryption starts %q, want protobuf in clear", raw[:min(len(raw), 40)])
	}
	stop()

	// With the site key.
	client, stop = startTestServer(t, etcdURL, func(c *Config) { c.SecretsEncryptionKey = key })
	createSecret(t, client, "new", "encrypted-value-2")
	wantEncrypted(t, etcd, "new", SecretsKeyName, "encrypted-value-2")
	wantSecretValue(t, client, "new", "encrypted-value-2")
	wantSecretValue(t, client, "old", "clear-value-1")
	list, err := client.CoreV1().Secrets("default").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) < 2 {
		t.Fatalf("list Secrets: %v (%d)", err, len(list.Items))
	}
	// Other kinds stay in clear.
	if _, err := client.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if resp, err := etcd.Get(context.Background(), testEtcdPrefix+"/configmaps/default/plain"); err != nil || len(resp.Kvs) != 1 || !bytes.HasPrefix(resp.Kvs[0].Value, protobufMagic) {
		t.Errorf("ConfigMap in etcd: %v %v", resp, err)
	}
	// A ConfigMap an earlier version stored as JSON still reads.
	if _, err := etcd.Put(context.Background(), testEtcdPrefix+"/configmaps/default/from-json",
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"from-json","namespace":"default","uid":"6d3c1e2a-0000-4000-8000-000000000001","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"k":"stored as JSON"}}`); err != nil {
		t.Fatal(err)
	}
	if cm, err := client.CoreV1().ConfigMaps("default").Get(context.Background(), "from-json", metav1.GetOptions{}); err != nil || cm.Data["k"] != "stored as JSON" {
		t.Errorf("ConfigMap stored as JSON: %v %v", cm, err)
	}
	stop()

	// Rotation: a configuration file with a new key first, the site key second.
	newKey := bytes.Repeat([]byte{9}, 32)
	file := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - secretbox:
      keys:
      - name: site-v2
        secret: `+base64.StdEncoding.EncodeToString(newKey)+`
      - name: site-v1
        secret: `+base64.StdEncoding.EncodeToString(key)+`
  - identity: {}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	client, _ = startTestServer(t, etcdURL, func(c *Config) {
		c.SecretsEncryptionKey = key // replaced by the file
		c.EncryptionProviderConfigFile = file
	})
	wantSecretValue(t, client, "new", "encrypted-value-2")
	wantSecretValue(t, client, "old", "clear-value-1")
	createSecret(t, client, "newer", "encrypted-value-3")
	wantEncrypted(t, etcd, "newer", "site-v2", "encrypted-value-3")
	// Rewriting re-encrypts with the first key (kubectl replace of every Secret).
	for _, name := range []string{"old", "new"} {
		s, err := client.CoreV1().Secrets("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Secrets("default").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		wantEncrypted(t, etcd, name, "site-v2", string(s.Data["v"]))
	}
}

func TestSecretsTransformerKeySize(t *testing.T) {
	if _, err := secretsTransformer(make([]byte, 16)); err == nil || !strings.Contains(err.Error(), "32") {
		t.Errorf("16-byte key: %v", err)
	}
}
