package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestRollingUpgrade restarts the hosts of a 3-host site one at a time with a binary
// stamped with another version, while a client sends requests through every host's Ingress:
// no request fails, the pods keep running (same pods, no container restarted), every host
// comes back Ready and `kubectl get nodes` and `flotilla version --site` show the new
// version. Then a host is refused when the site's data is in a format its binary cannot read.
func TestRollingUpgrade(t *testing.T) {
	const next = "v99.0.0-upgrade-test"
	newBin := restampedBinary(t, next)
	s, c := startPodSite(t, 3)
	applyExample(t, s.Hosts[0], "examples/hello")
	waitFor(t, 2*time.Minute, "hello available", func() (bool, string) {
		n, state := availableReplicas(c, "hello", "hello")
		return n == 3, state
	})
	for _, h := range s.Hosts {
		waitFor(t, 30*time.Second, "ingress of "+h.Name, func() (bool, string) {
			code, body, err := get("http://"+h.IP+"/", "")
			return code == 200, fmt.Sprint(code, body, err)
		})
	}
	pods, err := c.CoreV1().Pods("hello").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int32{} // pod UID -> container restarts
	for _, p := range pods.Items {
		before[string(p.UID)] = restarts(p.Status.ContainerStatuses)
	}

	load := startIngressLoad(s.Hosts)
	start := time.Now()
	for _, h := range s.Hosts {
		if err := h.Stop(90 * time.Second); err != nil {
			t.Fatal(err)
		}
		h.UseBinary(newBin)
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, h.Name+" Ready with flotilla "+next, func() (bool, string) {
			out, err := s.Hosts[0].Kubectl(context.Background(), "", "get", "node", h.Name, "--no-headers")
			f := strings.Fields(out)
			return err == nil && len(f) >= 5 && f[1] == "Ready" && strings.HasSuffix(f[4], "+flotilla."+next), fmt.Sprint(out, err)
		})
		waitFor(t, 30*time.Second, "ingress of "+h.Name+" after its upgrade", func() (bool, string) {
			code, body, err := get("http://"+h.IP+"/", "")
			return code == 200, fmt.Sprint(code, body, err)
		})
	}
	took := time.Since(start)
	sent, failed, movedOn, failures := load.stop()
	framework.Figure(t, "rolling upgrade of 3 hosts in %s: %d requests through the Ingresses of every host, %d failed, %d sent to the next host while one was down (connection refused)",
		took.Round(time.Second), sent, failed, movedOn)
	if failed > 0 {
		t.Errorf("%d of %d requests failed during the rolling upgrade, e.g. %v", failed, sent, failures)
	}
	if sent < 100 {
		t.Errorf("only %d requests were sent during the upgrade: the load did not run", sent)
	}

	pods, err = c.CoreV1().Pods("hello").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		r, ok := before[string(p.UID)]
		if !ok {
			t.Errorf("pod %s was created during the upgrade: the pods should have kept running", p.Name)
		} else if now := restarts(p.Status.ContainerStatuses); now != r {
			t.Errorf("pod %s: containers restarted %d times during the upgrade", p.Name, now-r)
		}
	}
	out, err := exec.Command(newBin, "version", "--site", "--kubeconfig", s.Hosts[0].Kubeconfig()).CombinedOutput()
	if err != nil || strings.Count(string(out), next) != 4 || !strings.Contains(string(out), "every host runs the same version") {
		t.Errorf("flotilla version --site: %v\n%s\nwant the binary and 3 hosts at %s", err, out, next)
	}

	t.Run("a host refuses a site whose data is in a format its binary cannot read", func(t *testing.T) {
		cli := hostEtcdClient(t, s.Hosts[0])
		ctx := context.Background()
		resp, err := cli.Get(ctx, etcd.StorageFormatKey)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the site's storage format is not recorded: %v %v", resp, err)
		}
		saved := string(resp.Kvs[0].Value)
		future, _ := json.Marshal(etcd.StorageRecord{Format: etcd.StorageFormat + 1, WrittenBy: "v100.0.0"})
		if _, err := cli.Put(ctx, etcd.StorageFormatKey, string(future)); err != nil {
			t.Fatal(err)
		}
		h := s.Hosts[2]
		if err := h.Stop(90 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, h.Name+" refuses to start", func() (bool, string) {
			return !h.Running(), tailLines(h.Logs(), 5)
		})
		if logs := h.Logs(); !strings.Contains(logs, "run flotilla v100.0.0 or newer on this host") {
			t.Fatalf("%s stopped without saying which version to run:\n%s", h.Name, tailLines(logs, 20))
		}
		if _, err := cli.Put(ctx, etcd.StorageFormatKey, saved); err != nil {
			t.Fatal(err)
		}
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, h.Name+" Ready again", func() (bool, string) {
			out, err := s.Hosts[0].Kubectl(context.Background(), "", "get", "node", h.Name, "--no-headers")
			f := strings.Fields(out)
			return err == nil && len(f) >= 2 && f[1] == "Ready", fmt.Sprint(out, err)
		})
	})
}

// restampedBinary builds flotilla as `make build` does, stamped with version, into a
// directory of the test (the file is named flotilla, as the site's hosts expect).
func restampedBinary(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", framework.RepoRoot(), "build", "BIN="+dir, "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build VERSION=%s: %v\n%s", version, err, out)
	}
	return filepath.Join(dir, "flotilla")
}

func restarts(statuses []corev1.ContainerStatus) int32 {
	var n int32
	for _, s := range statuses {
		n += s.RestartCount
	}
	return n
}

// hostEtcdClient is a client of a server host's etcd member with its client certificate.
func hostEtcdClient(t *testing.T, h *devsite.Host) *clientv3.Client {
	t.Helper()
	pki := filepath.Join(h.DataDir, "pki")
	tlsCfg, err := transport.TLSInfo{CertFile: filepath.Join(pki, "etcd-client.crt"), KeyFile: filepath.Join(pki, "etcd-client.key"),
		TrustedCAFile: filepath.Join(pki, "ca.crt")}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + h.IP + ":2379"}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// ingressLoad sends GET / through the hosts' Ingresses in turn, as a client that knows every
// host's address does: a host that refuses the connection (its agent restarting, nothing was
// sent) is skipped for the next one. Anything else is a failure: an error once the
// connection was made, a timeout, a status other than 200.
type ingressLoad struct {
	cancel                  context.CancelFunc
	wg                      sync.WaitGroup
	sent, failed, refusedTo atomic.Int64
	mu                      sync.Mutex
	failures                []string
}

func startIngressLoad(hosts []*devsite.Host) *ingressLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &ingressLoad{cancel: cancel}
	const clients = 4
	for w := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			defer hc.CloseIdleConnections()
			for i := w; ctx.Err() == nil; i++ {
				l.one(ctx, hc, hosts, i)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

func (l *ingressLoad) one(ctx context.Context, hc *http.Client, hosts []*devsite.Host, i int) {
	for try := range hosts {
		h := hosts[(i+try)%len(hosts)]
		var reused, wrote bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
			WroteRequest: func(httptrace.WroteRequestInfo) { wrote = true }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, "http://"+h.IP+"/", nil)
		sentAt := time.Now()
		resp, err := hc.Do(req)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			l.refusedTo.Add(1)
			continue
		}
		l.sent.Add(1)
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d: %.100s", resp.StatusCode, body)
			}
		}
		if err != nil {
			l.failed.Add(1)
			l.mu.Lock()
			if len(l.failures) < 5 {
				l.failures = append(l.failures, fmt.Sprintf("%s %s (connection reused %v, request written %v): %v", sentAt.Format("15:04:05.000"), h.Name, reused, wrote, err))
			}
			l.mu.Unlock()
		}
		return
	}
	l.sent.Add(1)
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.failures) < 5 {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+": every host refused the connection")
	}
	l.mu.Unlock()
}

func (l *ingressLoad) stop() (sent, failed, refusedTo int64, failures []string) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent.Load(), l.failed.Load(), l.refusedTo.Load(), l.failures
}
