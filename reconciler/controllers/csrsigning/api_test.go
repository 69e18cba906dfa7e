package csrsigning_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrapproving"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrsigning"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// site runs an agent without controllers, and csrapproving and csrsigning against its API,
// each with its own component identity (so with the permissions of its bootstrap role), the
// informers with the controller manager's. It returns the site CA and a client-certificate
// administrator's client and a maker of clients with a client certificate.
func site(t *testing.T) (*pki.CA, kubernetes.Interface, func(certPEM, keyPEM []byte) kubernetes.Interface) {
	t.Helper()
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	ca, err := pki.LoadCA(filepath.Join(a.DataDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	withCert := func(certPEM, keyPEM []byte) *rest.Config {
		cfg := rest.AnonymousClientConfig(a.RESTConfig())
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = certPEM, keyPEM
		return cfg
	}
	configFor := func(user string, groups ...string) *rest.Config {
		certPEM, keyPEM, err := ca.IssueClient(user, groups, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return withCert(certPEM, keyPEM)
	}
	clientWithCert := func(certPEM, keyPEM []byte) kubernetes.Interface {
		c, err := kubernetes.NewForConfig(withCert(certPEM, keyPEM))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cctx, err := controllers.NewContext(configFor(rbac.ControllerManagerUser))
	if err != nil {
		t.Fatal(err)
	}
	cctx.CA = ca
	var runners []controllers.Runner
	for name, ctor := range map[string]controllers.Constructor{"csrsigning": csrsigning.New, "csrapproving": csrapproving.New} {
		own := *cctx
		if own.Client, err = kubernetes.NewForConfig(configFor(rbac.ControllerUser(name))); err != nil {
			t.Fatal(err)
		}
		r, err := ctor(&own)
		if err != nil {
			t.Fatal(err)
		}
		runners = append(runners, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx.Informers.Start(ctx.Done())
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Go(func() {
			if err := r.Run(ctx, 2); err != nil && ctx.Err() == nil {
				t.Errorf("controller stopped: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		cctx.Informers.Shutdown()
	})
	return ca, a.Client(), clientWithCert
}

// newRequest makes a PEM certificate request and its key.
func newRequest(t *testing.T, cn string, orgs []string, dns []string, ips ...string) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key
}

func create(t *testing.T, client kubernetes.Interface, name, signer string, request []byte, usages ...certificatesv1.KeyUsage) {
	t.Helper()
	_, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: request, SignerName: signer, Usages: usages},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CertificateSigningRequest %s: %v", name, err)
	}
}

func get(t *testing.T, client kubernetes.Interface, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func condition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i, c := range csr.Status.Conditions {
		if c.Type == typ {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

// approve approves a request as an administrator does with `kubectl certificate approve`.
func approve(t *testing.T, admin kubernetes.Interface, name string) {
	t.Helper()
	csr := get(t, admin, name)
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "approved by the test"})
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approve %s: %v", name, err)
	}
}

// signed waits for the certificate of request name and checks it chains to the CA.
func signed(t *testing.T, ca *pki.CA, client kubernetes.Interface, name string) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	controllertest.Eventually(t, 30*time.Second, "certificate of "+name, func() (bool, error) {
		csr := get(t, client, name)
		if c := condition(csr, certificatesv1.CertificateFailed); c != nil {
			t.Fatalf("%s failed: %s", name, c.Message)
		}
		if len(csr.Status.Certificate) == 0 {
			return false, nil
		}
		b, _ := pem.Decode(csr.Status.Certificate)
		if b == nil {
			t.Fatalf("%s: certificate not PEM: %q", name, csr.Status.Certificate)
		}
		var err error
		cert, err = x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return true, nil
	})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("%s: certificate does not chain to the site CA: %v", name, err)
	}
	return cert
}

func TestCertificateSigningRequests(t *testing.T) {
	ca, admin, clientWithCert := site(t)
	ctx := context.Background()
	// host-9 as the node agent is: a client certificate of the site CA.
	host9Cert, host9Key, err := ca.IssueClient("system:node:host-9", []string{"system:nodes"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	host9 := clientWithCert(host9Cert, host9Key)
	nodes := []string{"system:nodes"}

	// A node renewing its own client certificate: approved and signed.
	req, key := newRequest(t, "system:node:host-9", nodes, nil)
	create(t, host9, "host-9-client", certificatesv1.KubeAPIServerClientKubeletSignerName, req,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth)
	// host-9 asks for host-8's: NodeRestriction refuses to file it.
	req8, _ := newRequest(t, "system:node:host-8", nodes, nil)
	_, err = host9.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "host-9-for-host-8"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: req8, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("host-9 filing a request for host-8's certificate: %v, want 403", err)
	}
	// Filed by someone else (here an administrator), the approver leaves it for a human:
	// the requester is not host-8.
	create(t, admin, "admin-for-host-8", certificatesv1.KubeAPIServerClientKubeletSignerName, req8,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth)

	cert := signed(t, ca, host9, "host-9-client")
	if cert.Subject.CommonName != "system:node:host-9" || !slices.Equal(cert.Subject.Organization, nodes) ||
		cert.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("node client certificate: %v, key usage %v, %v", cert.Subject, cert.KeyUsage, cert.ExtKeyUsage)
	}
	if d := time.Until(cert.NotAfter); d < csrsigning.DefaultDuration-time.Hour || d > csrsigning.DefaultDuration {
		t.Errorf("node client certificate valid until %v", cert.NotAfter)
	}
	c := condition(get(t, admin, "host-9-client"), certificatesv1.CertificateApproved)
	if c == nil || c.Reason != "AutoApproved" || c.Message != "Auto approving self kubelet client certificate after SubjectAccessReview." {
		t.Errorf("approval %+v", c)
	}
	// The new certificate is a credential of host-9.
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	renewed := clientWithCert(get(t, admin, "host-9-client").Status.Certificate, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if _, err := renewed.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("host-9 with its new certificate may not list nodes: %v", err)
	}

	// Approved by an administrator: a kube-apiserver-client certificate is signed.
	reqJane, _ := newRequest(t, "jane", []string{"team-a"}, nil)
	create(t, admin, "jane", certificatesv1.KubeAPIServerClientSignerName, reqJane, certificatesv1.UsageClientAuth)
	approve(t, admin, "jane")
	if cert := signed(t, ca, admin, "jane"); cert.Subject.CommonName != "jane" || !slices.Equal(cert.Subject.Organization, []string{"team-a"}) ||
		!slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("jane's certificate: %v %v", cert.Subject, cert.ExtKeyUsage)
	}

	// A client certificate that asks to serve: Failed, not signed.
	create(t, admin, "server-usage", certificatesv1.KubeAPIServerClientSignerName, reqJane,
		certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth)
	approve(t, admin, "server-usage")
	controllertest.Eventually(t, 30*time.Second, "server-usage Failed", func() (bool, error) {
		csr := get(t, admin, "server-usage")
		c := condition(csr, certificatesv1.CertificateFailed)
		if c == nil {
			return false, nil
		}
		if c.Reason != "SignerValidationFailure" || c.Message != "invalid usage for client certificate: server auth" || len(csr.Status.Certificate) > 0 {
			t.Errorf("server-usage: %+v, certificate %q", c, csr.Status.Certificate)
		}
		return true, nil
	})

	// A node's serving certificate for its own addresses: approved and signed.
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-9"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "host-9", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}, {Type: corev1.NodeHostName, Address: "host-9"}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reqServing, _ := newRequest(t, "system:node:host-9", nodes, []string{"host-9"}, "10.0.0.9")
	create(t, host9, "host-9-serving", certificatesv1.KubeletServingSignerName, reqServing,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
	// And one for the API server's ClusterIP: left for a human.
	reqAPI, _ := newRequest(t, "system:node:host-9", nodes, nil, "10.96.0.1")
	create(t, host9, "host-9-apiserver-ip", certificatesv1.KubeletServingSignerName, reqAPI,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
	if cert := signed(t, ca, host9, "host-9-serving"); !slices.Equal(cert.DNSNames, []string{"host-9"}) ||
		len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("10.0.0.9")) ||
		!slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("serving certificate: %v %v %v", cert.DNSNames, cert.IPAddresses, cert.ExtKeyUsage)
	}

	// By now the controllers have seen every request (each is handled within a sync of its
	// own, and later ones are done); give the others a little more and check they stay
	// pending.
	controllertest.Consistently(t, 2*time.Second, "requests for others left pending", func() (bool, error) {
		for _, name := range []string{"admin-for-host-8", "host-9-apiserver-ip"} {
			csr := get(t, admin, name)
			if len(csr.Status.Conditions) > 0 || len(csr.Status.Certificate) > 0 {
				t.Errorf("%s: %+v", name, csr.Status)
				return false, nil
			}
		}
		return true, nil
	})
}
