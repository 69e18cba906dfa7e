package apiserver

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/internal/etcdtest"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// The real API server (New) on a real, embedded etcd: for what only the whole server shows
// (the audit log, what etcd holds).

// testEtcdPrefix is where the server keeps objects in etcd (storagebackend's "/registry").
const testEtcdPrefix = "/registry"

// testAdminToken authenticates testAdminUser (system:masters).
const (
	testAdminToken = "test-admin-token"
	testAdminUser  = "alice"
)

func freePort(t *testing.T) int { return etcdtest.FreePort(t) }

// startTestEtcd runs a one-member etcd for the test; it returns its client URL and a client.
func startTestEtcd(t *testing.T) (string, *clientv3.Client) { return etcdtest.Start(t) }

// startTestServer runs New on etcdURL with a serving certificate of a test CA, the admin
// token and what mutate sets, until stop or the end of the test; it returns a client of
// testAdminUser once /readyz answers ok.
func startTestServer(t *testing.T, etcdURL string, mutate func(*Config)) (client kubernetes.Interface, stop func()) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "pki"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Ensure(pki.Request{Name: "apiserver", CommonName: "apiserver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.Server})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		BindAddress: net.IPv4(127, 0, 0, 1), Port: freePort(t), AdvertiseAddress: net.IPv4(127, 0, 0, 1),
		ServingCertFile: cert, ServingKeyFile: key,
		Etcd: EtcdClientConfig{Servers: []string{etcdURL}},
		Tokens: map[string]*user.DefaultInfo{
			testAdminToken: {Name: testAdminUser, UID: testAdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		},
		ClientCAFile:             ca.CertFile(),
		Validation:               validation.DefaultOptions(),
		DefaultTolerationSeconds: 300,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	stopped := make(chan struct{})
	go func() { runErr = s.Run(ctx); close(stopped) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Error("API server did not stop within 30s")
			}
			s.Destroy()
		})
	}
	t.Cleanup(stop)
	rc := restclient.CopyConfig(s.Loopback)
	rc.BearerToken = testAdminToken
	client, err = kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	readyCtx, cancelReady := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelReady()
	if err := wait.PollUntilContextCancel(readyCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-stopped:
			t.Fatalf("API server stopped before it was ready: %v", runErr)
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	}); err != nil {
		t.Fatalf("API server not ready: %v", err)
	}
	return client, stop
}

// startCertServer starts etcd and an API server whose clients may authenticate with
// certificates of a test CA, and returns an admin client and a maker of clients for a
// user (common name) and groups (organizations), and the CA.
func startCertServer(t *testing.T) (admin kubernetes.Interface, clientFor func(user string, groups ...string) kubernetes.Interface, ca *pki.CA) {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	servingCert, servingKey, err := ca.Ensure(pki.Request{Name: "apiserver", CommonName: "apiserver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.Server})
	if err != nil {
		t.Fatal(err)
	}
	etcdURL, _ := startTestEtcd(t)
	var port int
	admin, _ = startTestServer(t, etcdURL, func(c *Config) {
		c.ServingCertFile, c.ServingKeyFile, c.ClientCAFile = servingCert, servingKey, ca.CertFile()
		port = c.Port
	})
	return admin, func(user string, groups ...string) kubernetes.Interface {
		t.Helper()
		cert, key, err := ca.Ensure(pki.Request{Name: "client-" + strings.ReplaceAll(user, ":", "-"), CommonName: user, Organization: groups, Usage: pki.Client})
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubernetes.NewForConfig(&restclient.Config{Host: "https://127.0.0.1:" + strconv.Itoa(port),
			TLSClientConfig: restclient.TLSClientConfig{CAFile: ca.CertFile(), CertFile: cert, KeyFile: key}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}, ca
}
