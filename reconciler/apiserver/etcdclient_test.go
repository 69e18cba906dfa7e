package apiserver

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// etcdConnections counts the established TCP connections to port on loopback (IPv4) from
// this process's network namespace: each one an etcd client's connection (the server's ends
// of them have the port as their local one).
func etcdConnections(t *testing.T, port int) int {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(want) < 4 {
		want = "0" + want
	}
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st ...: addresses as hex IP:PORT, st 01 is ESTABLISHED.
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "01" {
			continue
		}
		if _, remPort, ok := strings.Cut(fields[2], ":"); ok && remPort == want {
			n++
		}
	}
	return n
}

// The API server stores some 60 resources (built-in kinds, APIServices, CRDs) over one etcd
// client: a handful of connections to etcd (the storage's, its health checks', this test's),
// where a client per resource held one each, and reads, writes and watches still go through.
func TestAPIServerSharesOneEtcdClient(t *testing.T) {
	etcdURL, _ := startTestEtcd(t)
	u, err := url.Parse(etcdURL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	client, _ := startTestServer(t, etcdURL, nil)

	conns := etcdConnections(t, port)
	t.Logf("connections to etcd with the API server ready: %d", conns)
	if conns > 8 {
		t.Errorf("%d connections to etcd, want at most 8 (one client for all stores)", conns)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := client.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Added && cm.Name == "shared" {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the ConfigMap's creation was not watched")
	}
	if _, err := client.CoreV1().Secrets("default").Get(ctx, "shared", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}
