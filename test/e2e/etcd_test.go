package e2e

import (
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
)

// etcdClient talks to a host's etcd member with the site's client certificate.
func etcdClient(t testing.TB, h *devsite.Host) *clientv3.Client {
	t.Helper()
	pki := filepath.Join(h.DataDir, "pki")
	cli, err := etcd.NewClient([]string{"https://" + h.IP + ":2379"}, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "etcd-client.crt"), filepath.Join(pki, "etcd-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
