package snapshot

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla-dev/flotilla/internal/etcdtest"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

func freePort(t *testing.T) int { return etcdtest.FreePort(t) }

// server is a server host's data directory with a running etcd member, as the agent leaves
// it: pki (CA, etcd certificates), cluster.json, token, admin-token.
type server struct {
	dir    string
	client *clientv3.Client
	member *etcd.Member
	url    string
}

func startServer(t *testing.T, dir, name string, peerURL *url.URL) *server {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "pki"), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	srvCert, srvKey, err := ca.Ensure(pki.Request{Name: "etcd-server", CommonName: name, Usage: pki.Server | pki.Client, DNSNames: []string{"localhost"}, IPs: ips})
	if err != nil {
		t.Fatal(err)
	}
	peerCert, peerKey, err := ca.Ensure(pki.Request{Name: "etcd-peer", CommonName: name, Usage: pki.Server | pki.Client, DNSNames: []string{"localhost"}, IPs: ips})
	if err != nil {
		t.Fatal(err)
	}
	cliCert, cliKey, err := ca.Ensure(pki.Request{Name: "etcd-client", CommonName: "kube-apiserver-etcd-client", Usage: pki.Client})
	if err != nil {
		t.Fatal(err)
	}
	clientURL := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	if peerURL == nil {
		peerURL = &url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	}
	m, err := etcd.Start(context.Background(), etcd.Config{Name: name, DataDir: filepath.Join(dir, "etcd"), ClientURL: clientURL, PeerURL: *peerURL,
		CAFile: ca.CertFile(), ServerCert: srvCert, ServerKey: srvKey, PeerCert: peerCert, PeerKey: peerKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	cli, err := etcd.NewClient(m.ClientURLs(), ca.CertFile(), cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &server{dir: dir, client: cli, member: m, url: clientURL.String()}
}

func newServer(t *testing.T) *server {
	t.Helper()
	dir := t.TempDir()
	s := startServer(t, dir, "old-1", nil)
	st := &etcd.ClusterState{Member: true, PeerURL: "https://127.0.0.1:2380"}
	if err := st.Save(filepath.Join(dir, "cluster.json")); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"token": "FLO1:sha256:00:3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d\n", "admin-token": "admintoken\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestSaveRestoreRoundTrip(t *testing.T) {
	old := newServer(t)
	ctx := context.Background()
	for i := range 50 {
		if _, err := old.client.Put(ctx, fmt.Sprintf("/registry/configmaps/default/cm-%d", i), fmt.Sprintf("value-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.client.Put(ctx, "/registry/nodes/old-1", "node"); err != nil {
		t.Fatal(err)
	}
	// A leader-election key on a lease, as the controllers' campaign leaves it.
	lease, err := old.client.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.client.Put(ctx, "/flotilla/leader/flotilla-controllers/1", "old-1", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "site.snap")
	start := time.Now()
	m, err := Save(ctx, SaveOptions{DataDir: old.dir, Out: out, Endpoint: old.url, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved revision %d, %d keys, etcd.db %d bytes in %s", m.Revision, m.Keys, m.EtcdSize, time.Since(start))
	if m.Keys != 52 || m.Revision < 52 || m.Host != "old-1" || strings.Join(m.Members, ",") != "old-1" || strings.Join(m.Nodes, ",") != "old-1" || m.Kind != Kind {
		t.Fatalf("manifest: %+v", m)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file mode: %v %v", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	newDir := filepath.Join(t.TempDir(), "new")
	peerURL := &url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	if _, err := Restore(RestoreOptions{File: out, DataDir: newDir, Name: "new-1", PeerURL: peerURL.String()}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pki/ca.crt", "pki/ca.key", "token", "admin-token"} {
		want, _ := os.ReadFile(filepath.Join(old.dir, f))
		got, err := os.ReadFile(filepath.Join(newDir, f))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s not restored: %q %v", f, got, err)
		}
	}
	if _, err := os.Stat(filepath.Join(newDir, "cluster.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster.json should be left absent (the agent starts as the first host): %v", err)
	}
	// The restored member starts on its own (one member, this name and peer URL) with the data.
	old.member.Close()
	restored := startServer(t, newDir, "new-1", peerURL)
	list, err := restored.client.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 1 || list.Members[0].Name != "new-1" || list.Members[0].PeerURLs[0] != peerURL.String() {
		t.Fatalf("members: %v", list.Members)
	}
	resp, err := restored.client.Get(ctx, "/registry/configmaps/default/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 50 || resp.Header.Revision < RevisionBump {
		t.Fatalf("restored keys: %d at revision %d, %v", len(resp.Kvs), resp.Header.Revision, err)
	}
	// The old campaign's lease was not kept alive: its key goes, no campaign waits on it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := restored.client.Get(ctx, "/flotilla/leader/", clientv3.WithPrefix())
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old site's election key is still there: %v %v", resp, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeTestArchive writes a snapshot-shaped file whose entries the test chooses.
func writeTestArchive(t *testing.T, entries map[string]string, order []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.snap")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, name := range order {
		if err := addFile(tw, name, []byte(entries[name])); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	gz.Close()
	f.Close()
	return p
}

func TestRestoreRefusesBadInput(t *testing.T) {
	old := newServer(t)
	good := filepath.Join(t.TempDir(), "good.snap")
	if _, err := Save(context.Background(), SaveOptions{DataDir: old.dir, Out: good, Endpoint: old.url}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.snap")
	os.WriteFile(truncated, data[:len(data)/2], 0o600)
	corrupt := filepath.Join(t.TempDir(), "corrupt.snap")
	bad := append([]byte(nil), data...)
	bad[len(bad)/2] ^= 0xff
	os.WriteFile(corrupt, bad, 0o600)
	notGzip := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notGzip, []byte("hello, not a snapshot\n"), 0o600)
	otherTar := writeTestArchive(t, map[string]string{"README": "hi"}, []string{"README"})
	newer := writeTestArchive(t, map[string]string{entryManifest: `{"kind":"FlotillaSnapshot","format":99}`}, []string{entryManifest})
	noDB := writeTestArchive(t, map[string]string{entryManifest: `{"kind":"FlotillaSnapshot","format":1}`}, []string{entryManifest})

	for _, c := range []struct {
		name, file, want string
	}{
		{"truncated", truncated, "truncated or damaged"},
		{"corrupt", corrupt, ""},
		{"not gzip", notGzip, "not a flotilla snapshot"},
		{"another tar", otherTar, "not a flotilla snapshot"},
		{"newer format", newer, "use a newer flotilla"},
		{"no etcd.db", noDB, "no etcd.db"},
		{"missing file", filepath.Join(t.TempDir(), "absent.snap"), "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new")
			_, err := Restore(RestoreOptions{File: c.file, DataDir: dir, Name: "n", PeerURL: "https://127.0.0.1:2380"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a failed restore should remove the directory it created: %v", err)
			}
		})
	}

	t.Run("non-empty data dir", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "cluster.json"), []byte("{}"), 0o600)
		_, err := Restore(RestoreOptions{File: good, DataDir: dir, Name: "n", PeerURL: "https://127.0.0.1:2380"})
		if err == nil || !strings.Contains(err.Error(), "is not empty (cluster.json)") {
			t.Fatalf("got %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err != nil {
			t.Fatalf("the refused directory was touched: %v", err)
		}
	})
	t.Run("empty data dir", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Restore(RestoreOptions{File: good, DataDir: dir, Name: "n", PeerURL: "https://127.0.0.1:2380"}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSaveRefusesBadDataDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := Save(context.Background(), SaveOptions{DataDir: dir, Out: filepath.Join(dir, "x")}); err == nil || !strings.Contains(err.Error(), "no cluster.json") {
		t.Fatalf("got %v", err)
	}
	(&etcd.ClusterState{Worker: true}).Save(filepath.Join(dir, "cluster.json"))
	if _, err := Save(context.Background(), SaveOptions{DataDir: dir, Out: filepath.Join(dir, "x")}); err == nil || !strings.Contains(err.Error(), "worker") {
		t.Fatalf("got %v", err)
	}
}

func TestVerifyDBRefusesDamage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db")
	os.WriteFile(p, make([]byte, 512+32), 0o600)
	if _, _, err := VerifyDB(p); err == nil || !strings.Contains(err.Error(), "trailer does not match") {
		t.Fatalf("got %v", err)
	}
	os.WriteFile(p, make([]byte, 1000), 0o600)
	if _, _, err := VerifyDB(p); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("got %v", err)
	}
}

// A host that joined the site has no <data-dir>/token: its agent's --token-file is given.
func TestSaveOnJoinedHost(t *testing.T) {
	s := newServer(t)
	token, _ := os.ReadFile(filepath.Join(s.dir, "token"))
	os.Remove(filepath.Join(s.dir, "token"))
	out := filepath.Join(t.TempDir(), "x.snap")
	if _, err := Save(context.Background(), SaveOptions{DataDir: s.dir, Out: out, Endpoint: s.url}); err == nil || !strings.Contains(err.Error(), "give --token-file") {
		t.Fatalf("got %v", err)
	}
	if _, err := Save(context.Background(), SaveOptions{DataDir: s.dir, Out: out, Endpoint: s.url, Token: "weak"}); err == nil || !strings.Contains(err.Error(), "join token") {
		t.Fatalf("a token that does not parse should be refused: %v", err)
	}
	if _, err := Save(context.Background(), SaveOptions{DataDir: s.dir, Out: out, Endpoint: s.url, Token: string(token)}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "new")
	if _, err := Restore(RestoreOptions{File: out, DataDir: dir, Name: "n", PeerURL: "https://127.0.0.1:2380"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "token")); string(got) != string(token) {
		t.Fatalf("restored token %q, want %q", got, token)
	}
}
