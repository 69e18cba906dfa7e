package csrsigning

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// The rules of the kubernetes.io signers, as upstream's
// pkg/apis/certificates/v1 ValidateKubeletClientCSR and ValidateKubeletServingCSR and the
// signer's isKubeAPIServerClient (pkg/controller/certificates/signer), with their messages.

// NodeUserPrefix starts the user name (and the certificate's common name) of a node;
// NodesGroup is the only organization of a node's certificates.
const (
	NodeUserPrefix = rbac.NodeUserPrefix
	NodesGroup     = rbac.NodesGroup
)

var (
	errOrganizationNotSystemNodes = errors.New("subject organization is not system:nodes")
	errCommonNameNotSystemNode    = errors.New("subject common name does not begin with system:node:")
	errDNSOrIPSANRequired         = errors.New("DNS or IP subjectAltName is required")
	errDNSSANNotAllowed           = errors.New("DNS subjectAltNames are not allowed")
	errEmailSANNotAllowed         = errors.New("Email subjectAltNames are not allowed")
	errIPSANNotAllowed            = errors.New("IP subjectAltNames are not allowed")
	errURISANNotAllowed           = errors.New("URI subjectAltNames are not allowed")
)

// usageSet says whether usages are exactly one of the sets.
func usagesAreOneOf(usages []certificatesv1.KeyUsage, sets ...[]certificatesv1.KeyUsage) bool {
	have := map[certificatesv1.KeyUsage]bool{}
	for _, u := range usages {
		have[u] = true
	}
	for _, set := range sets {
		if len(set) != len(have) {
			continue
		}
		match := true
		for _, u := range set {
			match = match && have[u]
		}
		if match {
			return true
		}
	}
	return false
}

var (
	kubeletClientUsages = []certificatesv1.KeyUsage{
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	kubeletClientUsagesNoRSA = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	kubeletServingUsages     = []certificatesv1.KeyUsage{
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
	kubeletServingUsagesNoRSA = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	kubeAPIServerClientUsages = []certificatesv1.KeyUsage{
		certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment}
)

// ValidateKubeletClient checks a request of kubernetes.io/kube-apiserver-client-kubelet:
// organization exactly system:nodes, common name system:node:<name>, no subject alternative
// names, and the usages digital signature and client auth, with key encipherment or not.
func ValidateKubeletClient(cr *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	if !slices.Equal(cr.Subject.Organization, []string{NodesGroup}) {
		return errOrganizationNotSystemNodes
	}
	if len(cr.DNSNames) > 0 {
		return errDNSSANNotAllowed
	}
	if len(cr.EmailAddresses) > 0 {
		return errEmailSANNotAllowed
	}
	if len(cr.IPAddresses) > 0 {
		return errIPSANNotAllowed
	}
	if len(cr.URIs) > 0 {
		return errURISANNotAllowed
	}
	if !strings.HasPrefix(cr.Subject.CommonName, NodeUserPrefix) {
		return errCommonNameNotSystemNode
	}
	if !usagesAreOneOf(usages, kubeletClientUsages, kubeletClientUsagesNoRSA) {
		return fmt.Errorf("usages did not match %v", sortedUsages(kubeletClientUsages))
	}
	return nil
}

// ValidateKubeletServing checks a request of kubernetes.io/kubelet-serving: organization
// exactly system:nodes, at least one DNS or IP subject alternative name and no email or
// URI ones, the usages digital signature and server auth, with key encipherment or not, and
// common name system:node:<name>.
func ValidateKubeletServing(cr *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	if !slices.Equal(cr.Subject.Organization, []string{NodesGroup}) {
		return errOrganizationNotSystemNodes
	}
	if len(cr.DNSNames) == 0 && len(cr.IPAddresses) == 0 {
		return errDNSOrIPSANRequired
	}
	if len(cr.EmailAddresses) > 0 {
		return errEmailSANNotAllowed
	}
	if len(cr.URIs) > 0 {
		return errURISANNotAllowed
	}
	if !usagesAreOneOf(usages, kubeletServingUsages, kubeletServingUsagesNoRSA) {
		return fmt.Errorf("usages did not match %v", sortedUsages(kubeletServingUsages))
	}
	if !strings.HasPrefix(cr.Subject.CommonName, NodeUserPrefix) {
		return errCommonNameNotSystemNode
	}
	return nil
}

// validateKubeAPIServerClient checks a request of kubernetes.io/kube-apiserver-client: only
// client auth, digital signature and key encipherment.
func validateKubeAPIServerClient(_ *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	for _, u := range usages {
		if !slices.Contains(kubeAPIServerClientUsages, u) {
			return fmt.Errorf("invalid usage for client certificate: %s", u)
		}
	}
	return nil
}

// validators are the rules of each signer this controller serves.
var validators = map[string]func(*x509.CertificateRequest, []certificatesv1.KeyUsage) error{
	certificatesv1.KubeAPIServerClientSignerName:        validateKubeAPIServerClient,
	certificatesv1.KubeAPIServerClientKubeletSignerName: ValidateKubeletClient,
	certificatesv1.KubeletServingSignerName:             ValidateKubeletServing,
}

func sortedUsages(usages []certificatesv1.KeyUsage) []string {
	out := make([]string, len(usages))
	for i, u := range usages {
		out[i] = string(u)
	}
	slices.Sort(out)
	return out
}

// ParseRequest parses spec.request, a PEM CERTIFICATE REQUEST block.
func ParseRequest(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// HasTrueCondition reports whether the request has a condition of type t with status True
// (a condition without a status counts as True, as upstream).
func HasTrueCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && (len(c.Status) == 0 || c.Status == corev1.ConditionTrue) {
			return true
		}
	}
	return false
}

// IsApproved reports whether the request is approved and not denied.
func IsApproved(csr *certificatesv1.CertificateSigningRequest) bool {
	return HasTrueCondition(csr, certificatesv1.CertificateApproved) && !HasTrueCondition(csr, certificatesv1.CertificateDenied)
}

var keyUsages = map[certificatesv1.KeyUsage]x509.KeyUsage{
	certificatesv1.UsageSigning:           x509.KeyUsageDigitalSignature,
	certificatesv1.UsageDigitalSignature:  x509.KeyUsageDigitalSignature,
	certificatesv1.UsageContentCommitment: x509.KeyUsageContentCommitment,
	certificatesv1.UsageKeyEncipherment:   x509.KeyUsageKeyEncipherment,
	certificatesv1.UsageKeyAgreement:      x509.KeyUsageKeyAgreement,
	certificatesv1.UsageDataEncipherment:  x509.KeyUsageDataEncipherment,
	certificatesv1.UsageCertSign:          x509.KeyUsageCertSign,
	certificatesv1.UsageCRLSign:           x509.KeyUsageCRLSign,
	certificatesv1.UsageEncipherOnly:      x509.KeyUsageEncipherOnly,
	certificatesv1.UsageDecipherOnly:      x509.KeyUsageDecipherOnly,
}

var extKeyUsages = map[certificatesv1.KeyUsage]x509.ExtKeyUsage{
	certificatesv1.UsageAny:             x509.ExtKeyUsageAny,
	certificatesv1.UsageServerAuth:      x509.ExtKeyUsageServerAuth,
	certificatesv1.UsageClientAuth:      x509.ExtKeyUsageClientAuth,
	certificatesv1.UsageCodeSigning:     x509.ExtKeyUsageCodeSigning,
	certificatesv1.UsageEmailProtection: x509.ExtKeyUsageEmailProtection,
	certificatesv1.UsageSMIME:           x509.ExtKeyUsageEmailProtection,
	certificatesv1.UsageIPsecEndSystem:  x509.ExtKeyUsageIPSECEndSystem,
	certificatesv1.UsageIPsecTunnel:     x509.ExtKeyUsageIPSECTunnel,
	certificatesv1.UsageIPsecUser:       x509.ExtKeyUsageIPSECUser,
	certificatesv1.UsageTimestamping:    x509.ExtKeyUsageTimeStamping,
	certificatesv1.UsageOCSPSigning:     x509.ExtKeyUsageOCSPSigning,
	certificatesv1.UsageMicrosoftSGC:    x509.ExtKeyUsageMicrosoftServerGatedCrypto,
	certificatesv1.UsageNetscapeSGC:     x509.ExtKeyUsageNetscapeServerGatedCrypto,
}

// x509Usages maps the request's usages to the certificate's key usage and extended key
// usages, in the request's order without repeats.
func x509Usages(usages []certificatesv1.KeyUsage) (x509.KeyUsage, []x509.ExtKeyUsage, error) {
	var ku x509.KeyUsage
	var ext []x509.ExtKeyUsage
	for _, u := range usages {
		if k, ok := keyUsages[u]; ok {
			ku |= k
		} else if e, ok := extKeyUsages[u]; ok {
			if !slices.Contains(ext, e) {
				ext = append(ext, e)
			}
		} else {
			return 0, nil, fmt.Errorf("unrecognized usage: %s", u)
		}
	}
	return ku, ext, nil
}
