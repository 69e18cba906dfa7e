package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
)

// signerAuthorizer allows verb on signers by name ("verb name" in allowed), answers err for
// the names in failing, and records every question.
type signerAuthorizer struct {
	allowed map[string]bool
	failing map[string]bool
	asked   []authorizer.Attributes
}

func (s *signerAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	s.asked = append(s.asked, a)
	if a.GetResource() != "signers" || a.GetAPIGroup() != certificatesv1.GroupName || !a.IsResourceRequest() || a.GetAPIVersion() != "*" {
		return authorizer.DecisionNoOpinion, "not a signer", nil
	}
	if s.failing[a.GetName()] {
		return authorizer.DecisionNoOpinion, "broken", errors.New("authorizer failed")
	}
	if s.allowed[a.GetVerb()+" "+a.GetName()] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no rule allows it", nil
}

func (s *signerAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(s.Authorize(ctx, a))
}

func (s *signerAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func certAdmCSR(signer string, request []byte) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-1"},
		Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: signer, Request: request, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}},
	}
}

func certAdmAttrs(obj, old runtime.Object, subresource string, op admission.Operation, u user.Info) admission.Attributes {
	return admission.NewAttributesRecord(obj, old, certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "", "csr-1",
		certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests"), subresource, op, nil, false, u)
}

func wantForbidden(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: err = %v, want 403 containing %q", what, err, want)
	}
}

func TestCertificateApprovalAdmission(t *testing.T) {
	jane := &user.DefaultInfo{Name: "jane"}
	approved := func(signer string) (obj, old *certificatesv1.CertificateSigningRequest) {
		old = certAdmCSR(signer, nil)
		obj = old.DeepCopy()
		obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		return obj, old
	}
	for _, tc := range []struct {
		name    string
		signer  string
		allowed []string
		failing []string
		ok      bool
		asked   []string // names asked about, in order
	}{
		{name: "exact signer", signer: "example.com/foo", allowed: []string{"approve example.com/foo"}, ok: true, asked: []string{"example.com/foo"}},
		{name: "domain wildcard", signer: "example.com/foo", allowed: []string{"approve example.com/*"}, ok: true, asked: []string{"example.com/foo", "example.com/*"}},
		{name: "wildcard of a longer path", signer: "example.com/foo/bar", allowed: []string{"approve example.com/*"}, ok: true, asked: []string{"example.com/foo/bar", "example.com/*"}},
		{name: "kubernetes.io wildcard", signer: certificatesv1.KubeletServingSignerName, allowed: []string{"approve kubernetes.io/*"}, ok: true},
		{name: "error on the name, wildcard allowed", signer: "example.com/foo", failing: []string{"example.com/foo"}, allowed: []string{"approve example.com/*"}, ok: true},
		{name: "other signer", signer: "example.com/foo", allowed: []string{"approve example.com/bar"}, asked: []string{"example.com/foo", "example.com/*"}},
		{name: "other domain wildcard", signer: "example.com/foo", allowed: []string{"approve example.org/*"}},
		{name: "sign is not approve", signer: "example.com/foo", allowed: []string{"sign example.com/foo", "sign example.com/*"}},
		{name: "authorizer errors", signer: "example.com/foo", allowed: []string{"approve example.com/foo"}, failing: []string{"example.com/foo", "example.com/*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			authz := &signerAuthorizer{allowed: map[string]bool{}, failing: map[string]bool{}}
			for _, a := range tc.allowed {
				authz.allowed[a] = true
			}
			for _, f := range tc.failing {
				authz.failing[f] = true
			}
			obj, old := approved(tc.signer)
			err := newCertificateApproval(authz).Validate(context.Background(), certAdmAttrs(obj, old, "approval", admission.Update, jane), nil)
			if tc.ok && err != nil {
				t.Errorf("err = %v, want approval allowed", err)
			}
			if !tc.ok {
				wantForbidden(t, "approve", err, `user not permitted to approve requests with signerName "`+tc.signer+`"`)
			}
			if tc.asked != nil {
				var names []string
				for _, a := range authz.asked {
					names = append(names, a.GetName())
					if a.GetVerb() != "approve" || a.GetUser() != jane {
						t.Errorf("asked %+v", a)
					}
				}
				if strings.Join(names, ",") != strings.Join(tc.asked, ",") {
					t.Errorf("asked about %v, want %v", names, tc.asked)
				}
			}
		})
	}

	// The stored signer counts, not the one the update carries; Denied needs approve too.
	authz := &signerAuthorizer{allowed: map[string]bool{"approve example.com/mine": true}}
	obj, old := approved("example.com/theirs")
	obj.Spec.SignerName = "example.com/mine"
	wantForbidden(t, "approve with another signer in the update",
		newCertificateApproval(authz).Validate(context.Background(), certAdmAttrs(obj, old, "approval", admission.Update, jane), nil),
		`signerName "example.com/theirs"`)
	obj, old = approved("example.com/theirs")
	obj.Status.Conditions[0].Type = certificatesv1.CertificateDenied
	wantForbidden(t, "deny", newCertificateApproval(authz).Validate(context.Background(), certAdmAttrs(obj, old, "approval", admission.Update, jane), nil),
		"user not permitted to approve")

	// Other subresources and resources are not its business.
	for _, sub := range []string{"", "status"} {
		if err := newCertificateApproval(authz).Validate(context.Background(), certAdmAttrs(obj, old, sub, admission.Update, jane), nil); err != nil {
			t.Errorf("update of subresource %q: %v", sub, err)
		}
	}
	pod := &corev1.Pod{}
	podAttrs := admission.NewAttributesRecord(pod, pod, corev1.SchemeGroupVersion.WithKind("Pod"), "ns", "p", corev1.SchemeGroupVersion.WithResource("pods"), "approval", admission.Update, nil, false, jane)
	if err := newCertificateApproval(authz).Validate(context.Background(), podAttrs, nil); err != nil {
		t.Errorf("pods/approval: %v", err)
	}
	if p := newCertificateApproval(authz); p.Handles(admission.Create) || !p.Handles(admission.Update) {
		t.Error("CertificateApproval should handle update only")
	}
}

func TestCertificateSigningAdmission(t *testing.T) {
	jane := &user.DefaultInfo{Name: "jane"}
	ctx := context.Background()
	base := certAdmCSR("example.com/foo", nil)
	base.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
	withCert := base.DeepCopy()
	withCert.Status.Certificate = []byte("cert")
	failed := base.DeepCopy()
	failed.Status.Conditions = append(failed.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue})
	labelled := base.DeepCopy()
	labelled.Labels = map[string]string{"a": "b"}

	none := &signerAuthorizer{}
	exact := &signerAuthorizer{allowed: map[string]bool{"sign example.com/foo": true}}
	wildcard := &signerAuthorizer{allowed: map[string]bool{"sign example.com/*": true}}
	approver := &signerAuthorizer{allowed: map[string]bool{"approve example.com/foo": true, "approve example.com/*": true}}
	other := &signerAuthorizer{allowed: map[string]bool{"sign example.com/bar": true, "sign example.org/*": true}}
	for _, tc := range []struct {
		name     string
		authz    *signerAuthorizer
		obj, old *certificatesv1.CertificateSigningRequest
		ok       bool
	}{
		{"certificate, exact signer", exact, withCert, base, true},
		{"certificate, domain wildcard", wildcard, withCert, base, true},
		{"certificate, approve only", approver, withCert, base, false},
		{"certificate, other signers", other, withCert, base, false},
		{"certificate, nothing", none, withCert, base, false},
		{"Failed condition, exact signer", exact, failed, base, true},
		{"Failed condition, nothing", none, failed, base, false},
		{"no status change", none, labelled, base, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newCertificateSigning(tc.authz).Validate(ctx, certAdmAttrs(tc.obj, tc.old, "status", admission.Update, jane), nil)
			if tc.ok && err != nil {
				t.Errorf("err = %v, want allowed", err)
			}
			if !tc.ok {
				wantForbidden(t, "sign", err, `user not permitted to sign requests with signerName "example.com/foo"`)
			}
		})
	}
	// The stored signer counts.
	moved := withCert.DeepCopy()
	moved.Spec.SignerName = "example.com/bar"
	wantForbidden(t, "sign with another signer in the update",
		newCertificateSigning(other).Validate(ctx, certAdmAttrs(moved, base, "status", admission.Update, jane), nil), `signerName "example.com/foo"`)
	// The main resource and /approval are not checked here.
	for _, sub := range []string{"", "approval"} {
		if err := newCertificateSigning(none).Validate(ctx, certAdmAttrs(withCert, base, sub, admission.Update, jane), nil); err != nil {
			t.Errorf("update of subresource %q: %v", sub, err)
		}
	}
	if len(none.asked) != 4 {
		t.Errorf("asked %d times, want 4 (name and wildcard for the refused certificate and condition, nothing for the rest)", len(none.asked))
	}
}

func certAdmRequest(t *testing.T, cn string, orgs ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCertificateSubjectRestrictionAdmission(t *testing.T) {
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	ctx := context.Background()
	p := newCertificateSubjectRestriction()
	masters := certAdmRequest(t, "eve", "dev", user.SystemPrivilegedGroup)
	for _, tc := range []struct {
		name    string
		csr     *certificatesv1.CertificateSigningRequest
		wantErr string
	}{
		{"system:masters for kube-apiserver-client", certAdmCSR(certificatesv1.KubeAPIServerClientSignerName, masters),
			"use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"},
		{"other groups", certAdmCSR(certificatesv1.KubeAPIServerClientSignerName, certAdmRequest(t, "jane", "dev", "system:masters-not")), ""},
		{"system:masters for another signer", certAdmCSR("example.com/foo", masters), ""},
		{"system:masters for the kubelet client signer", certAdmCSR(certificatesv1.KubeAPIServerClientKubeletSignerName, masters), ""},
		{"unparsable request", certAdmCSR(certificatesv1.KubeAPIServerClientSignerName, []byte("junk")), "failed to parse CSR: PEM block type must be CERTIFICATE REQUEST"},
		{"unparsable request for another signer", certAdmCSR("example.com/foo", []byte("junk")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Validate(ctx, certAdmAttrs(tc.csr, nil, "", admission.Create, admin), nil)
			if tc.wantErr == "" && err != nil {
				t.Errorf("err = %v, want allowed", err)
			}
			if tc.wantErr != "" {
				wantForbidden(t, "create", err, tc.wantErr)
			}
		})
	}
	if p.Handles(admission.Update) || !p.Handles(admission.Create) {
		t.Error("CertificateSubjectRestriction should handle create only")
	}
}

// TestCertificateAdmissionServer: against a real API server, a user bound only to update
// certificatesigningrequests/approval and /status cannot approve or sign until granted
// approve and sign on the signer; nobody may request system:masters from the
// kube-apiserver-client signer.
func TestCertificateAdmissionServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and the API server")
	}
	ctx := context.Background()
	admin, clientFor, ca := startCertServer(t)
	jane := clientFor("jane")
	bind := func(name string, rules ...rbacv1.PolicyRule) {
		t.Helper()
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	csrs := func(c kubernetes.Interface) interface {
		Get(context.Context, string, metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error)
		UpdateApproval(context.Context, string, *certificatesv1.CertificateSigningRequest, metav1.UpdateOptions) (*certificatesv1.CertificateSigningRequest, error)
		UpdateStatus(context.Context, *certificatesv1.CertificateSigningRequest, metav1.UpdateOptions) (*certificatesv1.CertificateSigningRequest, error)
	} {
		return c.CertificatesV1().CertificateSigningRequests()
	}
	approve := func() error {
		csr, err := csrs(jane).Get(ctx, "csr-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test"})
		_, err = csrs(jane).UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		return err
	}
	caPEM, err := os.ReadFile(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	sign := func() error {
		csr, err := csrs(jane).Get(ctx, "csr-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		csr.Status.Certificate = caPEM
		_, err = csrs(jane).UpdateStatus(ctx, csr, metav1.UpdateOptions{})
		return err
	}
	// canI is nil once jane may verb resource by RBAC (what the authorizer sees).
	canI := func(verb, resource, subresource, name string) error {
		r, err := jane.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: certificatesv1.GroupName, Resource: resource, Subresource: subresource, Name: name}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !r.Status.Allowed {
			return fmt.Errorf("jane may not %s %s/%s %s", verb, resource, subresource, name)
		}
		return nil
	}
	// Until the RBAC authorizer sees a new binding, jane keeps getting RBAC's 403.
	eventually := func(what string, f func() error) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return f() == nil, nil
		}); err != nil {
			t.Fatalf("%s: %v", what, f())
		}
	}

	// The admin may not ask the kube-apiserver-client signer for system:masters.
	_, err = admin.CertificatesV1().CertificateSigningRequests().Create(ctx,
		certAdmCSR(certificatesv1.KubeAPIServerClientSignerName, certAdmRequest(t, "eve", user.SystemPrivilegedGroup)), metav1.CreateOptions{})
	wantForbidden(t, "create a system:masters request", err, "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed")
	if _, err := admin.CertificatesV1().CertificateSigningRequests().Create(ctx, certAdmCSR("example.com/foo", certAdmRequest(t, "jane", "dev")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// jane may update the approval and status subresources, but holds no signer.
	bind("test-csr-writer",
		rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests"}},
		rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{certificatesv1.GroupName},
			Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}})
	eventually("jane reads the request", func() error { _, err := csrs(jane).Get(ctx, "csr-1", metav1.GetOptions{}); return err })
	// The RBAC check of the subresource passes; admission refuses.
	eventually("jane may update certificatesigningrequests/approval", func() error { return canI("update", "certificatesigningrequests", "approval", "") })
	wantForbidden(t, "approve without approve on the signer", approve(), `user not permitted to approve requests with signerName "example.com/foo"`)
	// approve on another signer, or sign on this one, is not enough.
	bind("test-csr-other", rbacv1.PolicyRule{Verbs: []string{"approve"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/bar", "example.org/*"}},
		rbacv1.PolicyRule{Verbs: []string{"sign"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/foo"}})
	eventually("jane may approve example.com/bar", func() error { return canI("approve", "signers", "", "example.com/bar") })
	wantForbidden(t, "approve with approve on other signers", approve(), `user not permitted to approve requests with signerName "example.com/foo"`)

	bind("test-csr-approver", rbacv1.PolicyRule{Verbs: []string{"approve"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/foo"}})
	eventually("approve with approve on signers/example.com/foo", approve)

	// Signing: refused with approve only on the domain, allowed with sign on example.com/*.
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "test-csr-other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the authorizer sees the deletion before trying to sign: a
	// sign that slipped through first would store the certificate, and an
	// unchanged certificate is not checked again.
	eventually("the authorizer no longer lets jane sign example.com/foo", func() error {
		if canI("sign", "signers", "", "example.com/foo") == nil {
			return errors.New("jane may still sign")
		}
		return nil
	})
	wantForbidden(t, "sign without sign on the signer", sign(), `user not permitted to sign requests with signerName "example.com/foo"`)
	bind("test-csr-signer", rbacv1.PolicyRule{Verbs: []string{"sign"}, APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/*"}})
	eventually("sign with sign on signers/example.com/*", sign)
	if csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "csr-1", metav1.GetOptions{}); err != nil || len(csr.Status.Certificate) == 0 {
		t.Errorf("csr-1 after signing: %v, %v", csr, err)
	}
}
