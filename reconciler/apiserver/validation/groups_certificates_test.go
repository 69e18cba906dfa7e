package validation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"sort"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// testCSRAndCert returns a PEM certificate request and a PEM certificate for the same key.
func testCSRAndCert(t *testing.T) (csrPEM, certPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "jane", Organization: []string{"dev"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jane"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})
}

func testCSR(t *testing.T, request []byte) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "jane", ResourceVersion: "1"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           request,
			SignerName:        "kubernetes.io/kube-apiserver-client",
			ExpirationSeconds: ptr.To[int32](86400),
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature},
			Username:          "admin",
			Groups:            []string{"system:masters"},
		},
	}
}

func cond(t certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
	return certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Reason: "Test"}
}

func TestValidateCertificateSigningRequest(t *testing.T) {
	request, cert := testCSRAndCert(t)
	checkErrs(t, ValidateCertificateSigningRequest(testCSR(t, request)), none())
	cases := []struct {
		name   string
		mutate func(*certificatesv1.CertificateSigningRequest)
		want   []string
	}{
		{"no request", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = nil }, errs(inv("spec.request"))},
		{"a certificate, not a request", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = cert }, errs(inv("spec.request"))},
		{"garbage in the PEM block", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("nope")})
		}, errs(inv("spec.request"))},
		{"bad signature", func(c *certificatesv1.CertificateSigningRequest) {
			b, _ := pem.Decode(c.Spec.Request)
			b.Bytes[len(b.Bytes)-3] ^= 0xff
			c.Spec.Request = pem.EncodeToMemory(b)
		}, errs(inv("spec.request"))},
		{"no usages", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil }, errs(req("spec.usages"))},
		{"unknown usage", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages[1] = "world domination" }, errs(nsup("spec.usages[1]"))},
		{"duplicate usage", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages[1] = c.Spec.Usages[0] }, errs(dup("spec.usages[1]"))},
		{"no signerName", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "" }, errs(req("spec.signerName"))},
		{"signerName without path", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com" }, errs(inv("spec.signerName"))},
		{"signerName with two slashes", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com/a/b" }, errs(inv("spec.signerName"))},
		{"signerName one-label domain", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example/signer" }, errs(inv("spec.signerName"))},
		{"signerName bad domain label", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "Example_.com/signer" }, errs(inv("spec.signerName"))},
		{"signerName bad path", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com/Signer" }, errs(inv("spec.signerName"))},
		{"signerName namespaced path", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com/ns.my-signer" }, none()},
		{"signerName too long", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.SignerName = strings.Repeat(strings.Repeat("a", 60)+".", 5) + "com/x" // a 308-character domain
		}, errs(long("spec.signerName"))},
		{"legacy signerName", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/legacy-unknown" }, errs(inv("spec.signerName"))},
		{"expirationSeconds 599", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To[int32](599) }, errs(inv("spec.expirationSeconds"))},
		{"expirationSeconds 600", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To[int32](600) }, none()},
		{"any name", func(c *certificatesv1.CertificateSigningRequest) { c.Name = "Node:CSR_1" }, none()},
		{"no name", func(c *certificatesv1.CertificateSigningRequest) { c.Name = "" }, errs(req("metadata.name"))},
		{"Approved and Denied", func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond("Approved"), cond("Denied")}
		}, errs(inv("status.conditions[1].type"))},
		{"Approved False", func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond("Approved")}
			c.Status.Conditions[0].Status = corev1.ConditionFalse
		}, errs(nsup("status.conditions[0].status"))},
		{"custom condition False", func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond("example.com/Checked")}
			c.Status.Conditions[0].Status = corev1.ConditionFalse
		}, none()},
		{"condition without type and status", func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{}}
		}, errs(req("status.conditions[0].type"), req("status.conditions[0].status"))},
		{"duplicate condition", func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond("Failed"), cond("Failed")}
		}, errs(dup("status.conditions[1].type"))},
		{"certificate not PEM", func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = []byte("junk") }, errs(inv("status.certificate"))},
		{"certificate is a request", func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = c.Spec.Request }, errs(inv("status.certificate"))},
		{"certificate chain", func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Certificate = append(append([]byte{}, cert...), cert...)
		}, none()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			csr := testCSR(t, request)
			c.mutate(csr)
			checkErrs(t, ValidateCertificateSigningRequest(csr), c.want)
		})
	}
	t.Run("messages as upstream", func(t *testing.T) {
		csr := testCSR(t, []byte("x"))
		csr.Spec.SignerName = "example.com"
		got := ValidateCertificateSigningRequest(csr).ToAggregate().Error()
		for _, want := range []string{"PEM block type must be CERTIFICATE REQUEST",
			"spec.signerName: Invalid value: \"example.com\": must be a fully qualified domain and path of the form 'example.com/signer-name'"} {
			if !strings.Contains(got, want) {
				t.Errorf("errors %q\nlack %q", got, want)
			}
		}
	})
}

func TestValidateCertificateSigningRequestUpdates(t *testing.T) {
	request, cert := testCSRAndCert(t)
	approved := func() *certificatesv1.CertificateSigningRequest {
		c := testCSR(t, request)
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{cond("Approved")}
		return c
	}
	withCert := func(c *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequest {
		c = c.DeepCopy()
		c.Status.Certificate = cert
		return c
	}
	withConds := func(c *certificatesv1.CertificateSigningRequest, cs ...certificatesv1.CertificateSigningRequestCondition) *certificatesv1.CertificateSigningRequest {
		c = c.DeepCopy()
		c.Status.Conditions = cs
		return c
	}
	cases := []struct {
		name     string
		validate func(csr, old *certificatesv1.CertificateSigningRequest) []string
		old, csr *certificatesv1.CertificateSigningRequest
		want     []string
	}{
		// /approval
		{"approve", approvalErrs, testCSR(t, request), approved(), none()},
		{"deny", approvalErrs, testCSR(t, request), withConds(testCSR(t, request), cond("Denied")), none()},
		{"approve and deny", approvalErrs, testCSR(t, request), withConds(testCSR(t, request), cond("Approved"), cond("Denied")), errs(inv("status.conditions[1].type"))},
		{"deny an approved request", approvalErrs, approved(), withConds(testCSR(t, request), cond("Denied")),
			errs(forb("status.conditions"))},
		{"approval does not remove Failed", approvalErrs, withConds(testCSR(t, request), cond("Failed")), approved(), errs(forb("status.conditions"))},
		{"approval cannot set the certificate", approvalErrs, approved(), withCert(approved()), errs(forb("status.certificate"))},
		// /status
		{"issue the certificate", statusErrs, approved(), withCert(approved()), none()},
		{"replace the certificate", statusErrs, withCert(approved()), withCert(withConds(approved(), cond("Approved"), cond("Failed"))), none()},
		{"status cannot approve", statusErrs, testCSR(t, request), approved(), errs(forb("status.conditions"))},
		{"status cannot change the approval", statusErrs, approved(), withConds(testCSR(t, request), certificatesv1.CertificateSigningRequestCondition{
			Type: "Approved", Status: corev1.ConditionTrue, Reason: "Other"}), errs(forb("status.conditions"))},
		{"status adds Failed", statusErrs, approved(), withConds(approved(), cond("Approved"), cond("Failed")), none()},
		{"status issues a bad certificate", statusErrs, approved(), func() *certificatesv1.CertificateSigningRequest {
			c := approved()
			c.Status.Certificate = []byte("junk")
			return c
		}(), errs(inv("status.certificate"))},
		// main resource
		{"labels", mainErrs, approved(), func() *certificatesv1.CertificateSigningRequest {
			c := approved()
			c.Labels = map[string]string{"a": "b"}
			return c
		}(), none()},
		{"main cannot approve", mainErrs, testCSR(t, request), approved(), errs(forb("status.conditions"))},
		{"main cannot issue", mainErrs, approved(), withCert(approved()), errs(forb("status.certificate"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.validate(c.csr, c.old)
			want := append([]string(nil), c.want...)
			sort.Strings(want)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("errors = %q, want %q", got, c.want)
			}
		})
	}
	t.Run("issued certificate cannot be modified", func(t *testing.T) {
		old := withCert(approved())
		_, other := testCSRAndCert(t)
		csr := approved()
		csr.Status.Certificate = other
		got := ValidateCertificateSigningRequestStatusUpdate(csr, old)
		checkErrs(t, got, errs(forb("status.certificate")))
	})
	t.Run("stored Approved and Denied stay accepted", func(t *testing.T) {
		old := withConds(testCSR(t, request), cond("Approved"), cond("Denied"))
		csr := old.DeepCopy()
		csr.Labels = map[string]string{"a": "b"}
		checkErrs(t, ValidateCertificateSigningRequestUpdate(csr, old), none())
	})
	t.Run("stored legacy signer stays accepted", func(t *testing.T) {
		old := testCSR(t, request)
		old.Spec.SignerName = "kubernetes.io/legacy-unknown"
		checkErrs(t, ValidateCertificateSigningRequestUpdate(old.DeepCopy(), old), none())
	})
	t.Run("modify message names the condition", func(t *testing.T) {
		old := approved()
		csr := withConds(old, certificatesv1.CertificateSigningRequestCondition{Type: "Approved", Status: corev1.ConditionTrue, Reason: "Other"})
		got := ValidateCertificateSigningRequestUpdate(csr, old).ToAggregate().Error()
		if !strings.Contains(got, `updates may not modify a condition of type "Approved"`) {
			t.Errorf("error %q", got)
		}
	})
}

// typePaths returns the sorted "<type> <path>" of each error, as checkErrs compares them.
func typePaths(el field.ErrorList) []string {
	var out []string
	for _, e := range el {
		out = append(out, string(e.Type)+" "+e.Field)
	}
	sort.Strings(out)
	return out
}

func approvalErrs(csr, old *certificatesv1.CertificateSigningRequest) []string {
	return typePaths(ValidateCertificateSigningRequestApprovalUpdate(csr, old))
}

func statusErrs(csr, old *certificatesv1.CertificateSigningRequest) []string {
	return typePaths(ValidateCertificateSigningRequestStatusUpdate(csr, old))
}

func mainErrs(csr, old *certificatesv1.CertificateSigningRequest) []string {
	return typePaths(ValidateCertificateSigningRequestUpdate(csr, old))
}
