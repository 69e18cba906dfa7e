package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

func servedResource(t *testing.T, gr schema.GroupResource) resource {
	t.Helper()
	for _, r := range servedResources() {
		if r.groupResource() == gr {
			return r
		}
	}
	t.Fatalf("%s is not served", gr)
	return resource{}
}

func testCSRRequest(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "jane"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCSRStrategies(t *testing.T) {
	r := servedResource(t, csrResource)
	if !r.status || r.namespaced || len(r.shortNames) != 1 || r.shortNames[0] != "csr" {
		t.Errorf("certificatesigningrequests resource = %+v", r)
	}
	s := newStrategy(NewScheme(), r, validation.DefaultOptions())
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{
		Name: "jane", UID: "uid-1", Groups: []string{"dev", "system:authenticated"}, Extra: map[string][]string{"scopes": {"a"}}})

	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "jane"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: testCSRRequest(t), SignerName: "kubernetes.io/kube-apiserver-client",
			Usages:   []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
			Username: "admin", Groups: []string{"system:masters"}, UID: "forged",
		},
		Status: certificatesv1.CertificateSigningRequestStatus{
			Conditions: []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}},
		},
	}
	s.PrepareForCreate(ctx, csr)
	if csr.Spec.Username != "jane" || csr.Spec.UID != "uid-1" || len(csr.Spec.Groups) != 2 || csr.Spec.Groups[0] != "dev" ||
		len(csr.Spec.Extra["scopes"]) != 1 {
		t.Errorf("requestor not taken from the request's user: %+v", csr.Spec)
	}
	if len(csr.Status.Conditions) != 0 || csr.Generation != 0 {
		t.Errorf("created with status %+v, generation %d", csr.Status, csr.Generation)
	}
	if errs := s.Validate(ctx, csr); len(errs) != 0 {
		t.Fatalf("valid CSR refused: %v", errs.ToAggregate())
	}
	csr.ResourceVersion = "1"

	t.Run("main resource changes metadata only", func(t *testing.T) {
		upd := csr.DeepCopy()
		upd.Labels = map[string]string{"a": "b"}
		upd.Spec.Username = "admin"
		upd.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		s.PrepareForUpdate(ctx, upd, csr)
		if upd.Spec.Username != "jane" || len(upd.Status.Conditions) != 0 || upd.Labels["a"] != "b" || upd.Generation != 0 {
			t.Errorf("after update: %+v", upd)
		}
		if errs := s.ValidateUpdate(ctx, upd, csr); len(errs) != 0 {
			t.Errorf("metadata update refused: %v", errs.ToAggregate())
		}
	})

	approve := func(old *certificatesv1.CertificateSigningRequest, types ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
		upd := old.DeepCopy()
		for _, typ := range types {
			upd.Status.Conditions = append(upd.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: typ, Status: corev1.ConditionTrue, Reason: "KubectlApprove"})
		}
		return upd
	}
	r0 := servedResource(t, csrResource)
	subs := extraSubresources(r0, &genericregistry.Store{}, s)
	approval, ok := subs["approval"].(*statusREST)
	if len(subs) != 1 || !ok {
		t.Fatalf("extraSubresources(certificatesigningrequests) = %v", subs)
	}
	as := approval.store.UpdateStrategy.(csrApprovalStrategy)
	var approved *certificatesv1.CertificateSigningRequest

	t.Run("approval sets the conditions only", func(t *testing.T) {
		upd := approve(csr, certificatesv1.CertificateApproved)
		upd.Spec.Usages = append(upd.Spec.Usages, certificatesv1.UsageServerAuth)
		upd.Status.Certificate = []byte("x")
		as.PrepareForUpdate(ctx, upd, csr)
		if len(upd.Spec.Usages) != 1 || len(upd.Status.Certificate) != 0 {
			t.Errorf("approval changed more than the conditions: %+v", upd)
		}
		c := upd.Status.Conditions[0]
		if c.LastUpdateTime.IsZero() || c.LastTransitionTime.IsZero() {
			t.Errorf("condition timestamps not set: %+v", c)
		}
		if errs := as.ValidateUpdate(ctx, upd, csr); len(errs) != 0 {
			t.Errorf("approval refused: %v", errs.ToAggregate())
		}
		approved = upd
	})
	t.Run("approval cannot both approve and deny", func(t *testing.T) {
		upd := approve(csr, certificatesv1.CertificateApproved, certificatesv1.CertificateDenied)
		as.PrepareForUpdate(ctx, upd, csr)
		if errs := as.ValidateUpdate(ctx, upd, csr); len(errs) != 1 || errs[0].Field != "status.conditions[1].type" {
			t.Errorf("errors = %v, want status.conditions[1].type", errs)
		}
	})
	t.Run("main resource cannot approve", func(t *testing.T) {
		upd := approve(csr, certificatesv1.CertificateApproved)
		// PrepareForUpdate puts the old status back; validation would refuse it otherwise.
		if errs := s.ValidateUpdate(ctx, upd, csr); len(errs) == 0 {
			t.Errorf("approval through the main resource validated")
		}
	})
	t.Run("status issues the certificate and keeps the approval", func(t *testing.T) {
		ss := statusStrategy{s}
		upd := approved.DeepCopy()
		upd.Status.Certificate = []byte("-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
		upd.Status.Conditions[0].Reason = "Changed"
		upd.Status.Conditions = append(upd.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue})
		ss.PrepareForUpdate(ctx, upd, approved)
		if upd.Status.Conditions[0].Reason != "KubectlApprove" {
			t.Errorf("status changed the approval: %+v", upd.Status.Conditions[0])
		}
		if upd.Status.Conditions[1].LastUpdateTime.IsZero() {
			t.Errorf("Failed condition has no lastUpdateTime")
		}
		// The certificate here is not DER: validation reports it, and nothing else.
		errs := ss.ValidateUpdate(ctx, upd, approved)
		if len(errs) != 1 || errs[0].Field != "status.certificate" {
			t.Errorf("errors = %v, want only status.certificate", errs)
		}
	})
	t.Run("reset fields", func(t *testing.T) {
		if got := s.GetResetFields()["certificates.k8s.io/v1"]; got == nil || !got.Has(pathOf("spec")) || !got.Has(pathOf("status")) {
			t.Errorf("main reset fields = %v", got)
		}
		if got := (statusStrategy{s}).GetResetFields()["certificates.k8s.io/v1"]; got == nil || !got.Has(pathOf("status", "conditions")) {
			t.Errorf("status reset fields = %v", got)
		}
		if got := as.GetResetFields()["certificates.k8s.io/v1"]; got == nil || !got.Has(pathOf("status", "certificate")) {
			t.Errorf("approval reset fields = %v", got)
		}
	})
	var _ rest.Updater = approval
}

func TestPopulateConditionTimestampsKeepsTransition(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Hour))
	old := &certificatesv1.CertificateSigningRequest{Status: certificatesv1.CertificateSigningRequestStatus{
		Conditions: []certificatesv1.CertificateSigningRequestCondition{{Type: "Approved", Status: "True", LastTransitionTime: then}}}}
	csr := &certificatesv1.CertificateSigningRequest{Status: certificatesv1.CertificateSigningRequestStatus{
		Conditions: []certificatesv1.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}, {Type: "Failed", Status: "True"}}}}
	populateConditionTimestamps(csr, old, now)
	if c := csr.Status.Conditions[0]; !c.LastTransitionTime.Equal(&then) || !c.LastUpdateTime.Equal(&now) {
		t.Errorf("Approved timestamps = %v / %v", c.LastTransitionTime, c.LastUpdateTime)
	}
	if c := csr.Status.Conditions[1]; !c.LastTransitionTime.Equal(&now) {
		t.Errorf("Failed lastTransitionTime = %v", c.LastTransitionTime)
	}
}

func TestExtraSubresourcesOnlyForCSRs(t *testing.T) {
	for _, r := range servedResources() {
		if r.groupResource() != csrResource && extraSubresources(r, &genericregistry.Store{}, nil) != nil {
			t.Errorf("%s has extra subresources", r.groupResource())
		}
	}
}

func TestWebhookConfigurationGeneration(t *testing.T) {
	r := servedResource(t, schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"})
	if r.namespaced || len(r.categories) != 1 || r.categories[0] != "api-extensions" {
		t.Errorf("validatingwebhookconfigurations resource = %+v", r)
	}
	s := newStrategy(NewScheme(), r, validation.DefaultOptions())
	c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	s.PrepareForCreate(context.Background(), c)
	if c.Generation != 1 {
		t.Fatalf("generation on create = %d, want 1", c.Generation)
	}
	upd := c.DeepCopy()
	upd.Labels = map[string]string{"a": "b"}
	s.PrepareForUpdate(context.Background(), upd, c)
	if upd.Generation != 1 {
		t.Errorf("generation after a label change = %d, want 1", upd.Generation)
	}
	upd2 := upd.DeepCopy()
	upd2.Webhooks = []admissionregistrationv1.ValidatingWebhook{{Name: "x.example.com"}}
	s.PrepareForUpdate(context.Background(), upd2, upd)
	if upd2.Generation != 2 {
		t.Errorf("generation after a webhook change = %d, want 2", upd2.Generation)
	}
}

func TestRBACResources(t *testing.T) {
	for res, namespaced := range map[string]bool{"roles": true, "rolebindings": true, "clusterroles": false, "clusterrolebindings": false} {
		r := servedResource(t, schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: res})
		if r.namespaced != namespaced || r.status {
			t.Errorf("%s: namespaced %v status %v", res, r.namespaced, r.status)
		}
		if _, ok := validation.For(r.gvk().GroupKind(), validation.DefaultOptions()); !ok {
			t.Errorf("%s: no validation", res)
		}
	}
}

func pathOf(parts ...any) fieldpath.Path { return fieldpath.MakePathOrDie(parts...) }
