package apiserver

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
)

// The CertificateSigningRequest admission plugins of kube-apiserver, followed as of
// Kubernetes v1.37 (plugin/pkg/admission/certificates/{approval,signing,subjectrestriction}
// and IsAuthorizedForSignerName from plugin/pkg/admission/certificates/util.go, the same in
// pkg/certauthorization). Signers are a synthetic resource: RBAC grants verbs "approve" and
// "sign" on resource "signers" of group certificates.k8s.io, by signer name or by
// "<domain>/*" for every signer of a domain.
//
//   - CertificateApproval: every update of certificatesigningrequests/approval needs
//     "approve" on the request's signer (spec.signerName of the stored request).
//   - CertificateSigning: an update of certificatesigningrequests/status that changes
//     status.certificate or status.conditions needs "sign" on the signer. (Upstream checks the
//     conditions too since PodCertificateRequests came, v1.34; before, only the certificate.)
//   - CertificateSubjectRestriction: a request for signer kubernetes.io/kube-apiserver-client
//     may not ask for organization system:masters, whoever creates it.
//
// Upstream's ClusterTrustBundleAttest is not here: flotilla serves no ClusterTrustBundles,
// nor PodCertificateRequests (which upstream's CertificateSigning also checks).
const (
	CertificateApprovalPluginName           = "CertificateApproval"
	CertificateSigningPluginName            = "CertificateSigning"
	CertificateSubjectRestrictionPluginName = "CertificateSubjectRestriction"
)

// certificateApproval is upstream's CertificateApproval plugin.
type certificateApproval struct {
	*admission.Handler
	authz authorizer.Authorizer
}

func newCertificateApproval(authz authorizer.Authorizer) *certificateApproval {
	return &certificateApproval{Handler: admission.NewHandler(admission.Update), authz: authz}
}

var _ admission.ValidationInterface = (*certificateApproval)(nil)

// Validate verifies that the requesting user may approve requests of the signer.
func (p *certificateApproval) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "approval" || a.GetResource().GroupResource() != csrResource {
		return nil
	}
	// As upstream, the permission is checked against the stored request, in case the update
	// also tries to change the signer (which validation refuses).
	csr, ok := a.GetOldObject().(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.GetOldObject()))
	}
	if !isAuthorizedForSignerName(ctx, p.authz, a.GetUserInfo(), "approve", csr.Spec.SignerName) {
		klog.V(4).Infof("user not permitted to approve CertificateSigningRequest %q with signerName %q", csr.Name, csr.Spec.SignerName)
		return admission.NewForbidden(a, fmt.Errorf("user not permitted to approve requests with signerName %q", csr.Spec.SignerName))
	}
	return nil
}

// certificateSigning is upstream's CertificateSigning plugin, for CertificateSigningRequests.
type certificateSigning struct {
	*admission.Handler
	authz authorizer.Authorizer
}

func newCertificateSigning(authz authorizer.Authorizer) *certificateSigning {
	return &certificateSigning{Handler: admission.NewHandler(admission.Update), authz: authz}
}

var _ admission.ValidationInterface = (*certificateSigning)(nil)

// Validate verifies that the requesting user may sign requests of the signer when the
// update changes the certificate or the conditions.
func (p *certificateSigning) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "status" || a.GetResource().GroupResource() != csrResource {
		return nil
	}
	oldCSR, ok := a.GetOldObject().(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.GetOldObject()))
	}
	csr, ok := a.GetObject().(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.GetObject()))
	}
	if reflect.DeepEqual(oldCSR.Status.Certificate, csr.Status.Certificate) &&
		apiequality.Semantic.DeepEqual(oldCSR.Status.Conditions, csr.Status.Conditions) {
		return nil
	}
	if !isAuthorizedForSignerName(ctx, p.authz, a.GetUserInfo(), "sign", oldCSR.Spec.SignerName) {
		klog.V(4).Infof("user not permitted to sign CertificateSigningRequest %q with signerName %q", oldCSR.Name, oldCSR.Spec.SignerName)
		return admission.NewForbidden(a, fmt.Errorf("user not permitted to sign requests with signerName %q", oldCSR.Spec.SignerName))
	}
	return nil
}

// certificateSubjectRestriction is upstream's CertificateSubjectRestriction plugin.
type certificateSubjectRestriction struct {
	*admission.Handler
}

func newCertificateSubjectRestriction() *certificateSubjectRestriction {
	return &certificateSubjectRestriction{Handler: admission.NewHandler(admission.Create)}
}

var _ admission.ValidationInterface = (*certificateSubjectRestriction)(nil)

// Validate refuses a request for signer kubernetes.io/kube-apiserver-client whose subject
// has organization (group) system:masters.
func (p *certificateSubjectRestriction) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != csrResource || a.GetSubresource() != "" {
		return nil
	}
	csr, ok := a.GetObject().(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.GetObject()))
	}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientSignerName {
		return nil
	}
	parsed, err := parseCSRPEM(csr.Spec.Request)
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("failed to parse CSR: %v", err))
	}
	for _, group := range parsed.Subject.Organization {
		if group == user.SystemPrivilegedGroup {
			klog.V(4).Infof("CSR %s rejected by admission plugin %s for attempting to use signer %s with system:masters group",
				csr.Name, CertificateSubjectRestrictionPluginName, certificatesv1.KubeAPIServerClientSignerName)
			return admission.NewForbidden(a, fmt.Errorf("use of %s signer with system:masters group is not allowed",
				certificatesv1.KubeAPIServerClientSignerName))
		}
	}
	return nil
}

// parseCSRPEM is upstream's certificates.ParseCSR: the first PEM block, which must be a
// CERTIFICATE REQUEST.
func parseCSRPEM(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// isAuthorizedForSignerName is upstream's IsAuthorizedForSignerName: whether info may do
// verb on the synthetic resource signers named signerName or, failing that, named
// "<domain>/*" for the signer's domain (the part before the first "/"), e.g. kubernetes.io/*.
// An authorizer error counts as no permission for that name.
func isAuthorizedForSignerName(ctx context.Context, authz authorizer.Authorizer, info user.Info, verb, signerName string) bool {
	attr := signerAttributes(info, verb, signerName)
	decision, reason, err := authz.Authorize(ctx, attr)
	switch {
	case err != nil:
		klog.V(3).Infof("cannot authorize %q %q for policy: %v,%v", verb, attr.GetName(), reason, err)
	case decision == authorizer.DecisionAllow:
		return true
	}
	domain, _, _ := strings.Cut(signerName, "/")
	attr = signerAttributes(info, verb, domain+"/*")
	decision, reason, err = authz.Authorize(ctx, attr)
	switch {
	case err != nil:
		klog.V(3).Infof("cannot authorize %q %q for policy: %v,%v", verb, attr.GetName(), reason, err)
	case decision == authorizer.DecisionAllow:
		return true
	}
	return false
}

func signerAttributes(info user.Info, verb, signerName string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            info,
		Verb:            verb,
		Name:            signerName,
		APIGroup:        certificatesv1.GroupName,
		APIVersion:      "*",
		Resource:        "signers",
		ResourceRequest: true,
	}
}
