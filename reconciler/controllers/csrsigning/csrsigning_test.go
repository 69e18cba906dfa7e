package csrsigning

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// request is a certificate request to make.
type request struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []string
	emails []string
}

func requestPEM(t *testing.T, r request) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: r.cn, Organization: r.orgs}, DNSNames: r.dns, EmailAddresses: r.emails}
	for _, ip := range r.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func csr(t *testing.T, name, signer string, r request, usages []certificatesv1.KeyUsage, conds ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	out := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: requestPEM(t, r), SignerName: signer, Usages: usages, Username: "admin",
		},
	}
	for _, c := range conds {
		out.Status.Conditions = append(out.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: c, Status: corev1.ConditionTrue})
	}
	return out
}

var (
	clientUsages  = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	node9         = request{cn: "system:node:host-9", orgs: []string{"system:nodes"}}
)

// setup builds the signer on a fake clientset holding objs, with its cache synced.
func setup(t *testing.T, cfg Config, objs ...*certificatesv1.CertificateSigningRequest) (*Controller, *fake.Clientset, *pki.CA) {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cctx := &controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0), CA: ca}
	c, err := NewWithConfig(cctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cctx.Informers.Shutdown() })
	cctx.Informers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("cache did not sync")
	}
	return c, client, ca
}

func get(t *testing.T, client *fake.Clientset, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	out, err := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func issued(t *testing.T, ca *pki.CA, got *certificatesv1.CertificateSigningRequest) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(got.Status.Certificate)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: status.certificate %q", got.Name, got.Status.Certificate)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("%s: not signed by the CA: %v", got.Name, err)
	}
	return cert
}

func failure(got *certificatesv1.CertificateSigningRequest) string {
	for _, c := range got.Status.Conditions {
		if c.Type == certificatesv1.CertificateFailed && c.Status == corev1.ConditionTrue && c.Reason == ReasonSignerValidationFailure {
			return c.Message
		}
	}
	return ""
}

func TestSigns(t *testing.T) {
	approved := certificatesv1.CertificateApproved
	exp := int32(3600)
	short := csr(t, "short", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane", orgs: []string{"team-a"}},
		[]certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}, approved)
	short.Spec.ExpirationSeconds = &exp
	long := csr(t, "long", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"}, clientUsages, approved)
	long.Spec.ExpirationSeconds = new(int32(365 * 24 * 3600))
	c, client, ca := setup(t, Config{Duration: 48 * time.Hour},
		csr(t, "client", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane", orgs: []string{"team-a"}}, clientUsages, approved),
		csr(t, "kubelet-client", certificatesv1.KubeAPIServerClientKubeletSignerName, node9, clientUsages, approved),
		csr(t, "serving", certificatesv1.KubeletServingSignerName,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes"}, dns: []string{"host-9"}, ips: []string{"10.0.0.9"}}, servingUsages, approved),
		short, long,
		csr(t, "pending", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"}, clientUsages),
		csr(t, "denied", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"}, clientUsages, approved, certificatesv1.CertificateDenied),
		csr(t, "failed", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"}, clientUsages, approved, certificatesv1.CertificateFailed),
		csr(t, "other-signer", "example.com/signer", request{cn: "jane"}, clientUsages, approved),
	)
	ctx := context.Background()
	for _, name := range []string{"client", "kubelet-client", "serving", "short", "long", "pending", "denied", "failed", "other-signer", "gone"} {
		if err := c.sync(ctx, name); err != nil {
			t.Errorf("sync %s: %v", name, err)
		}
	}
	start := time.Now()

	cert := issued(t, ca, get(t, client, "client"))
	if cert.Subject.CommonName != "jane" || !slices.Equal(cert.Subject.Organization, []string{"team-a"}) ||
		cert.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment ||
		!slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client certificate %v %v %v", cert.Subject, cert.KeyUsage, cert.ExtKeyUsage)
	}
	if d := cert.NotAfter.Sub(start); d < 47*time.Hour || d > 48*time.Hour {
		t.Errorf("client certificate valid for %v, want the configured 48h", d)
	}
	cert = issued(t, ca, get(t, client, "kubelet-client"))
	if cert.Subject.CommonName != "system:node:host-9" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("kubelet client certificate %v", cert.Subject)
	}
	cert = issued(t, ca, get(t, client, "serving"))
	if !slices.Equal(cert.DNSNames, []string{"host-9"}) || len(cert.IPAddresses) != 1 ||
		!slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("serving certificate %v %v %v", cert.DNSNames, cert.IPAddresses, cert.ExtKeyUsage)
	}
	// spec.expirationSeconds shortens, and never lengthens past the configured duration.
	if cert = issued(t, ca, get(t, client, "short")); cert.NotAfter.Sub(cert.NotBefore) != time.Hour {
		t.Errorf("short certificate valid from %v to %v", cert.NotBefore, cert.NotAfter)
	}
	if cert = issued(t, ca, get(t, client, "long")); cert.NotAfter.Sub(start) > 48*time.Hour {
		t.Errorf("long certificate valid until %v", cert.NotAfter)
	}
	for _, name := range []string{"pending", "denied", "failed", "other-signer"} {
		if got := get(t, client, name); len(got.Status.Certificate) > 0 || (name != "failed" && failure(got) != "") {
			t.Errorf("%s: signed or failed: %+v", name, got.Status)
		}
	}

	// An issued request is not signed again.
	before := get(t, client, "client").Status.Certificate
	if err := c.sync(ctx, "client"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(get(t, client, "client").Status.Certificate, before) {
		t.Error("signed twice")
	}
}

func TestFailsRequestsBreakingTheRules(t *testing.T) {
	approved := certificatesv1.CertificateApproved
	for _, tc := range []struct {
		name, signer string
		r            request
		usages       []certificatesv1.KeyUsage
		message      string
	}{
		{"client-server-auth", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"},
			[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, "invalid usage for client certificate: server auth"},
		{"client-cert-sign", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"},
			[]certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageCertSign}, "invalid usage for client certificate: cert sign"},
		{"kubelet-client-org", certificatesv1.KubeAPIServerClientKubeletSignerName,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes", "system:masters"}}, clientUsages, "subject organization is not system:nodes"},
		{"kubelet-client-cn", certificatesv1.KubeAPIServerClientKubeletSignerName,
			request{cn: "jane", orgs: []string{"system:nodes"}}, clientUsages, "subject common name does not begin with system:node:"},
		{"kubelet-client-san", certificatesv1.KubeAPIServerClientKubeletSignerName,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes"}, dns: []string{"host-9"}}, clientUsages, "DNS subjectAltNames are not allowed"},
		{"kubelet-client-ip", certificatesv1.KubeAPIServerClientKubeletSignerName,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes"}, ips: []string{"10.0.0.9"}}, clientUsages, "IP subjectAltNames are not allowed"},
		{"kubelet-client-usages", certificatesv1.KubeAPIServerClientKubeletSignerName, node9,
			[]certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}, "usages did not match [client auth digital signature key encipherment]"},
		{"serving-no-san", certificatesv1.KubeletServingSignerName, node9, servingUsages, "DNS or IP subjectAltName is required"},
		{"serving-email", certificatesv1.KubeletServingSignerName,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes"}, dns: []string{"host-9"}, emails: []string{"a@b.c"}}, servingUsages, "Email subjectAltNames are not allowed"},
		{"serving-client-auth", certificatesv1.KubeletServingSignerName,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes"}, dns: []string{"host-9"}}, clientUsages, "usages did not match [digital signature key encipherment server auth]"},
		{"serving-cn", certificatesv1.KubeletServingSignerName,
			request{cn: "host-9", orgs: []string{"system:nodes"}, dns: []string{"host-9"}}, servingUsages, "subject common name does not begin with system:node:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, client, _ := setup(t, DefaultConfig(), csr(t, tc.name, tc.signer, tc.r, tc.usages, approved))
			if err := c.sync(context.Background(), tc.name); err != nil {
				t.Fatal(err)
			}
			got := get(t, client, tc.name)
			if len(got.Status.Certificate) > 0 {
				t.Error("signed")
			}
			if msg := failure(got); msg != tc.message {
				t.Errorf("failure %q, want %q (conditions %+v)", msg, tc.message, got.Status.Conditions)
			}
		})
	}
}

// A request whose signature does not verify is Failed, not signed.
func TestFailsForgedRequest(t *testing.T) {
	bad := csr(t, "forged", certificatesv1.KubeAPIServerClientSignerName, request{cn: "jane"}, clientUsages, certificatesv1.CertificateApproved)
	b, _ := pem.Decode(bad.Spec.Request)
	b.Bytes[len(b.Bytes)-3] ^= 0xff // in the signature
	bad.Spec.Request = pem.EncodeToMemory(b)
	c, client, _ := setup(t, DefaultConfig(), bad)
	if err := c.sync(context.Background(), "forged"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, client, "forged"); len(got.Status.Certificate) > 0 || failure(got) == "" {
		t.Errorf("forged request: %+v", got.Status)
	}
}

func TestValidity(t *testing.T) {
	c := &Controller{duration: 30 * 24 * time.Hour}
	for _, tc := range []struct {
		seconds *int32
		want    time.Duration
	}{
		{nil, 30 * 24 * time.Hour},
		{new(int32(3600)), time.Hour},
		{new(int32(60)), MinDuration},
		{new(int32(400 * 24 * 3600)), 30 * 24 * time.Hour},
	} {
		if got := c.validity(tc.seconds); got != tc.want {
			t.Errorf("validity(%v) = %v, want %v", tc.seconds, got, tc.want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	client := fake.NewClientset()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(&controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0)}); err == nil {
		t.Error("New without a CA succeeded")
	}
	_, err = NewWithConfig(&controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0), CA: ca}, Config{Duration: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "shorter than 10m0s") {
		t.Errorf("a one-minute duration: %v", err)
	}
}
