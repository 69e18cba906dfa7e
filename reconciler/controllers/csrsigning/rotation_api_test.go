package csrsigning_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/nodes/certrotation"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrapproving"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// nodeCertStore writes a pair to dir/name.{crt,key} and returns its store, loaded.
func nodeCertStore(t *testing.T, dir, name string, certPEM, keyPEM []byte) *certrotation.FileStore {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := certrotation.NewFileStore(certFile, keyFile)
	if _, err := s.Current(); err != nil {
		t.Fatal(err)
	}
	return s
}

// renewal waits for the next certificate a store installs.
func renewal(t *testing.T, s *certrotation.FileStore) func() *tls.Certificate {
	ch := make(chan *tls.Certificate, 4)
	s.OnUpdate(func(c *tls.Certificate) { ch <- c })
	return func() *tls.Certificate {
		t.Helper()
		select {
		case c := <-ch:
			return c
		case <-time.After(90 * time.Second):
			t.Fatal("the certificate was not renewed")
			return nil
		}
	}
}

// csrOf returns the request the node filed for signer, which must be the only one.
func csrOf(t *testing.T, admin kubernetes.Interface, user, signer string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := admin.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.Username == user && c.Spec.SignerName == signer {
			out = append(out, c)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d requests of %s for %s", len(out), user, signer)
	}
	return &out[0]
}

func checkChain(t *testing.T, ca *pki.CA, c *x509.Certificate, usage x509.ExtKeyUsage) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
}

// TestNodeCertificateRotation renews a worker's two certificates end to end against a real
// API server and etcd, as nodes/host does on a worker: client-go's certificate manager files
// each request with the node's current client certificate (NodeRestriction and RBAC admit
// it), csrapproving approves it, csrsigning signs it for the 10 minutes asked (the shortest
// it signs), the store replaces the files, and the node identity's connections, closed,
// come back with the new certificate, which still works once the old one expired.
func TestNodeCertificateRotation(t *testing.T) {
	ca, admin, clientWithCert := site(t)
	ctx := context.Background()
	cs, ok := admin.(*kubernetes.Clientset)
	if !ok {
		t.Fatalf("admin client %T", admin)
	}
	u := cs.CoreV1().RESTClient().Get().URL()
	apiURL := u.Scheme + "://" + u.Host
	const user = "system:node:w1"
	nodes := []string{"system:nodes"}
	subject := pkix.Name{CommonName: user, Organization: nodes}
	lifetime := 10 * time.Minute
	dir := t.TempDir()

	// The Node, with the address its serving certificate names.
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The client certificate: 15 s left of 5 min 15 s, past its rotation window.
	oldCert, oldKey, err := ca.IssueClient(user, nodes, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	client := nodeCertStore(t, dir, "node-client", oldCert, oldKey)
	old := client.Cached()
	nodeCfg, closeAll, err := certrotation.ClientConfig(&rest.Config{Host: apiURL}, ca.CertFile(), client.Cached)
	if err != nil {
		t.Fatal(err)
	}
	client.OnUpdate(func(*tls.Certificate) { closeAll() })
	node, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	// A watch opened with the old certificate.
	w, err := node.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=w1"})
	if err != nil {
		t.Fatalf("the node identity with its first certificate: %v", err)
	}
	defer w.Stop()
	nextClient := renewal(t, client)
	newClient := func() (kubernetes.Interface, error) { return kubernetes.NewForConfig(nodeCfg) }
	m, err := certrotation.NewManager(ctx, certrotation.ManagerConfig{Name: "client", Store: client, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Template: &x509.CertificateRequest{Subject: subject}, Client: newClient, Lifetime: &lifetime})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	defer m.Stop()
	got := nextClient()
	c := got.Leaf
	if c.Subject.CommonName != user || len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != "system:nodes" {
		t.Errorf("renewed for %s", c.Subject)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life != lifetime {
		t.Errorf("renewed for %s, asked %s", life, lifetime)
	}
	if c.PublicKey.(*ecdsa.PublicKey).Equal(old.Leaf.PublicKey) {
		t.Error("renewed with the old key")
	}
	checkChain(t, ca, c, x509.ExtKeyUsageClientAuth)
	req := csrOf(t, admin, user, certificatesv1.KubeAPIServerClientKubeletSignerName)
	if cond := condition(req, certificatesv1.CertificateApproved); cond == nil || cond.Reason != csrapproving.ReasonAutoApproved || cond.Message != csrapproving.MessageSelfNodeClient {
		t.Errorf("client request %s: approval %+v", req.Name, cond)
	}
	if req.Spec.ExpirationSeconds == nil || *req.Spec.ExpirationSeconds != 600 {
		t.Errorf("client request asked for %v seconds", req.Spec.ExpirationSeconds)
	}
	// The open watch is closed by the rotation.
	select {
	case _, open := <-w.ResultChan():
		for open {
			_, open = <-w.ResultChan()
		}
	case <-time.After(30 * time.Second):
		t.Error("the watch opened with the old certificate is still open")
	}
	// Once the old certificate expired, the node identity still works: it presents the new one.
	time.Sleep(time.Until(old.Leaf.NotAfter) + 2*time.Second)
	if _, err := node.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{}); err != nil {
		t.Errorf("the node identity after rotation: %v", err)
	}
	if _, err := clientWithCert(oldCert, oldKey).CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("the old certificate after its expiry: %v, want 401", err)
	}

	// The serving certificate: one that does not name the host is renewed at once, with
	// the Node's names, filed with the (renewed) client certificate.
	sc, sk, err := ca.IssueClient(user, nodes, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving := nodeCertStore(t, dir, "node-serving", sc, sk)
	nextServing := renewal(t, serving)
	ms, err := certrotation.NewManager(ctx, certrotation.ManagerConfig{Name: "serving", Store: serving, SignerName: certificatesv1.KubeletServingSignerName,
		Template: &x509.CertificateRequest{Subject: subject, DNSNames: []string{"w1"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}},
		Client:   newClient, Lifetime: &lifetime})
	if err != nil {
		t.Fatal(err)
	}
	ms.Start()
	defer ms.Stop()
	s := nextServing().Leaf
	if len(s.DNSNames) != 1 || s.DNSNames[0] != "w1" || len(s.IPAddresses) != 1 || !s.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("serving certificate names %v %v", s.DNSNames, s.IPAddresses)
	}
	checkChain(t, ca, s, x509.ExtKeyUsageServerAuth)
	req = csrOf(t, admin, user, certificatesv1.KubeletServingSignerName)
	if cond := condition(req, certificatesv1.CertificateApproved); cond == nil || cond.Reason != csrapproving.ReasonAutoApproved || cond.Message != csrapproving.MessageSelfNodeServing {
		t.Errorf("serving request %s: approval %+v", req.Name, cond)
	}
}
