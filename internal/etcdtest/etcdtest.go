// Package etcdtest runs a real one-member etcd for unit tests.
package etcdtest

import (
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// FreePort returns a TCP port free on loopback at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs a one-member etcd (plain HTTP on loopback, data in a temporary directory) until
// the end of the test; it returns its client URL and a client.
func Start(t testing.TB) (string, *clientv3.Client) {
	t.Helper()
	ec := embed.NewConfig()
	ec.Dir = t.TempDir()
	ec.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(FreePort(t))}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(FreePort(t))}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ListenMetricsUrls = nil
	// As the hosts' members (reconciler/etcd.Start): quiet watches learn the revision.
	ec.WatchProgressNotifyInterval = 2 * time.Second
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd not ready after a minute")
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return client.String(), c
}
