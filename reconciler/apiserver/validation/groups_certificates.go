package validation

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CertificateSigningRequest validation follows upstream's pkg/apis/certificates/validation,
// rules and messages, for the v1 type. Which fields a request may change is decided by the
// endpoint: the main resource changes metadata only, /status the certificate and the
// conditions other than Approved/Denied, /approval the conditions.

// legacyUnknownSignerName is the signer of CSRs created through certificates.k8s.io/v1beta1
// without one; the v1 API does not accept it for new requests.
const legacyUnknownSignerName = "kubernetes.io/legacy-unknown"

var (
	// csrTrueOnlyConditions may only have status True.
	csrTrueOnlyConditions = sets.New(string(certificatesv1.CertificateApproved), string(certificatesv1.CertificateDenied), string(certificatesv1.CertificateFailed))
	csrTrueStatusOnly     = sets.New(string(corev1.ConditionTrue))
	csrAllStatusValues    = sets.New(string(corev1.ConditionTrue), string(corev1.ConditionFalse), string(corev1.ConditionUnknown))

	csrValidUsages = sets.New(
		string(certificatesv1.UsageSigning), string(certificatesv1.UsageDigitalSignature), string(certificatesv1.UsageContentCommitment),
		string(certificatesv1.UsageKeyEncipherment), string(certificatesv1.UsageKeyAgreement), string(certificatesv1.UsageDataEncipherment),
		string(certificatesv1.UsageCertSign), string(certificatesv1.UsageCRLSign), string(certificatesv1.UsageEncipherOnly),
		string(certificatesv1.UsageDecipherOnly), string(certificatesv1.UsageAny), string(certificatesv1.UsageServerAuth),
		string(certificatesv1.UsageClientAuth), string(certificatesv1.UsageCodeSigning), string(certificatesv1.UsageEmailProtection),
		string(certificatesv1.UsageSMIME), string(certificatesv1.UsageIPsecEndSystem), string(certificatesv1.UsageIPsecTunnel),
		string(certificatesv1.UsageIPsecUser), string(certificatesv1.UsageTimestamping), string(certificatesv1.UsageOCSPSigning),
		string(certificatesv1.UsageMicrosoftSGC), string(certificatesv1.UsageNetscapeSGC),
	)
)

// csrOptions are upstream's certificateValidationOptions: what the endpoint may change, and
// the bad data tolerated on update because the stored object already has it.
type csrOptions struct {
	allowSettingApprovalConditions bool
	allowSettingCertificate        bool

	allowBothApprovedAndDenied   bool
	allowLegacySignerName        bool
	allowDuplicateConditionTypes bool
	allowEmptyConditionType      bool
	allowArbitraryCertificate    bool
	allowUnknownUsages           bool
	allowDuplicateUsages         bool
}

func csrValidationOptions(csr, old *certificatesv1.CertificateSigningRequest) csrOptions {
	if old == nil {
		return csrOptions{}
	}
	o := csrOptions{
		allowLegacySignerName:     old.Spec.SignerName == legacyUnknownSignerName,
		allowArbitraryCertificate: bytes.Equal(csr.Status.Certificate, old.Status.Certificate) || validateCertificate(old.Status.Certificate) != nil,
	}
	approved, denied := false, false
	seen := map[certificatesv1.RequestConditionType]bool{}
	for _, c := range old.Status.Conditions {
		approved = approved || c.Type == certificatesv1.CertificateApproved
		denied = denied || c.Type == certificatesv1.CertificateDenied
		o.allowDuplicateConditionTypes = o.allowDuplicateConditionTypes || seen[c.Type]
		seen[c.Type] = true
		o.allowEmptyConditionType = o.allowEmptyConditionType || c.Type == ""
	}
	o.allowBothApprovedAndDenied = approved && denied
	usages := map[certificatesv1.KeyUsage]bool{}
	for _, u := range old.Spec.Usages {
		o.allowUnknownUsages = o.allowUnknownUsages || !csrValidUsages.Has(string(u))
		o.allowDuplicateUsages = o.allowDuplicateUsages || usages[u]
		usages[u] = true
	}
	return o
}

// ValidateCertificateSigningRequest validates a CertificateSigningRequest on create.
func ValidateCertificateSigningRequest(csr *certificatesv1.CertificateSigningRequest) field.ErrorList {
	return validateCSR(csr, csrValidationOptions(csr, nil))
}

// ValidateCertificateSigningRequestUpdate validates an update through the main resource.
func ValidateCertificateSigningRequestUpdate(csr, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
	return validateCSRUpdate(csr, old, csrValidationOptions(csr, old))
}

// ValidateCertificateSigningRequestStatusUpdate validates an update through /status, which may
// set the certificate.
func ValidateCertificateSigningRequestStatusUpdate(csr, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
	o := csrValidationOptions(csr, old)
	o.allowSettingCertificate = true
	return validateCSRUpdate(csr, old, o)
}

// ValidateCertificateSigningRequestApprovalUpdate validates an update through /approval, which
// may add the Approved or Denied condition.
func ValidateCertificateSigningRequestApprovalUpdate(csr, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
	o := csrValidationOptions(csr, old)
	o.allowSettingApprovalConditions = true
	return validateCSRUpdate(csr, old, o)
}

// anyName is upstream's ValidateCertificateRequestName: a CSR may have any name.
func anyName(string, bool) []string { return nil }

func validateCSR(csr *certificatesv1.CertificateSigningRequest, o csrOptions) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&csr.ObjectMeta, false, anyName, metaPath)
	if err := checkCSRRequest(csr.Spec.Request); err != nil {
		errs = append(errs, field.Invalid(specPath.Child("request"), csr.Spec.Request, err.Error()))
	}
	up := specPath.Child("usages")
	if len(csr.Spec.Usages) == 0 {
		errs = append(errs, field.Required(up, ""))
	}
	if !o.allowUnknownUsages {
		for i, u := range csr.Spec.Usages {
			if !csrValidUsages.Has(string(u)) {
				errs = append(errs, field.NotSupported(up.Index(i), u, sets.List(csrValidUsages)))
			}
		}
	}
	if !o.allowDuplicateUsages {
		seen := map[certificatesv1.KeyUsage]bool{}
		for i, u := range csr.Spec.Usages {
			if seen[u] {
				errs = append(errs, field.Duplicate(up.Index(i), u))
			}
			seen[u] = true
		}
	}
	sp := specPath.Child("signerName")
	if !o.allowLegacySignerName && csr.Spec.SignerName == legacyUnknownSignerName {
		errs = append(errs, field.Invalid(sp, csr.Spec.SignerName, "the legacy signerName is not allowed via this API version"))
	} else {
		errs = append(errs, ValidateSignerName(sp, csr.Spec.SignerName)...)
	}
	if s := csr.Spec.ExpirationSeconds; s != nil && *s < 600 {
		errs = append(errs, field.Invalid(specPath.Child("expirationSeconds"), *s, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	errs = append(errs, validateCSRConditions(statusPath.Child("conditions"), csr, o)...)
	if !o.allowArbitraryCertificate {
		if err := validateCertificate(csr.Status.Certificate); err != nil {
			errs = append(errs, field.Invalid(statusPath.Child("certificate"), "<certificate data>", err.Error()))
		}
	}
	return errs
}

// checkCSRRequest parses a PEM CERTIFICATE REQUEST and checks its signature.
func checkCSRRequest(pemBytes []byte) error {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err
	}
	return req.CheckSignature()
}

// validateCertificate accepts nothing, or one or more CERTIFICATE PEM blocks without headers
// that parse.
func validateCertificate(pemData []byte) error {
	if len(pemData) == 0 {
		return nil
	}
	blocks := 0
	for {
		block, rest := pem.Decode(pemData)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("only CERTIFICATE PEM blocks are allowed, found %q", block.Type)
		}
		if len(block.Headers) != 0 {
			return errors.New("no PEM block headers are permitted")
		}
		blocks++
		certs, err := x509.ParseCertificates(block.Bytes)
		if err != nil {
			return err
		}
		if len(certs) == 0 {
			return errors.New("found CERTIFICATE PEM block containing 0 certificates")
		}
		pemData = rest
	}
	if blocks == 0 {
		return errors.New("must contain at least one CERTIFICATE PEM block")
	}
	return nil
}

func validateCSRConditions(p *field.Path, csr *certificatesv1.CertificateSigningRequest, o csrOptions) field.ErrorList {
	var errs field.ErrorList
	seen := map[certificatesv1.RequestConditionType]bool{}
	approved, denied := false, false
	for i, c := range csr.Status.Conditions {
		cp := p.Index(i)
		if !o.allowEmptyConditionType && c.Type == "" {
			errs = append(errs, field.Required(cp.Child("type"), ""))
		}
		allowed := csrAllStatusValues
		if csrTrueOnlyConditions.Has(string(c.Type)) {
			allowed = csrTrueStatusOnly
		}
		switch {
		case c.Status == "":
			errs = append(errs, field.Required(cp.Child("status"), ""))
		case !allowed.Has(string(c.Status)):
			errs = append(errs, field.NotSupported(cp.Child("status"), c.Status, sets.List(allowed)))
		}
		if !o.allowBothApprovedAndDenied {
			switch c.Type {
			case certificatesv1.CertificateApproved:
				approved = true
				if denied {
					errs = append(errs, field.Invalid(cp.Child("type"), c.Type, "Approved and Denied conditions are mutually exclusive"))
				}
			case certificatesv1.CertificateDenied:
				denied = true
				if approved {
					errs = append(errs, field.Invalid(cp.Child("type"), c.Type, "Approved and Denied conditions are mutually exclusive"))
				}
			}
		}
		if !o.allowDuplicateConditionTypes {
			if seen[c.Type] {
				errs = append(errs, field.Duplicate(cp.Child("type"), c.Type))
			}
			seen[c.Type] = true
		}
	}
	return errs
}

func validateCSRUpdate(csr, old *certificatesv1.CertificateSigningRequest, o csrOptions) field.ErrorList {
	errs := validateCSR(csr, o)
	cp := statusPath.Child("conditions")
	// Approved, Denied and Failed conditions are never removed.
	for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed} {
		if len(csrConditions(csr, t)) < len(csrConditions(old, t)) {
			errs = append(errs, field.Forbidden(cp, fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	if !o.allowSettingApprovalConditions {
		for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied} {
			oldConds, newConds := csrConditions(old, t), csrConditions(csr, t)
			switch {
			case len(newConds) < len(oldConds):
				// Reported above.
			case len(newConds) > len(oldConds):
				errs = append(errs, field.Forbidden(cp, fmt.Sprintf("updates may not add a condition of type %q", t)))
			case !apiequality.Semantic.DeepEqual(oldConds, newConds):
				errs = append(errs, field.Forbidden(cp, fmt.Sprintf("updates may not modify a condition of type %q\n%v", t, diff.Diff(oldConds, newConds))))
			}
		}
	}
	if !bytes.Equal(csr.Status.Certificate, old.Status.Certificate) {
		if !o.allowSettingCertificate {
			errs = append(errs, field.Forbidden(statusPath.Child("certificate"), "updates may not set certificate content"))
		} else if len(old.Status.Certificate) > 0 {
			errs = append(errs, field.Forbidden(statusPath.Child("certificate"), "updates may not modify existing certificate content"))
		}
	}
	return append(errs, validateMetaUpdate(&csr.ObjectMeta, &old.ObjectMeta)...)
}

func csrConditions(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) []certificatesv1.CertificateSigningRequestCondition {
	var out []certificatesv1.CertificateSigningRequestCondition
	for _, c := range csr.Status.Conditions {
		if c.Type == t {
			out = append(out, c)
		}
	}
	return out
}

// ValidateSignerName checks a signer name of the form "example.com/signer-name": a domain of at
// least two DNS labels, one "/", and a path of DNS subdomains separated by dots, as upstream.
func ValidateSignerName(p *field.Path, signerName string) field.ErrorList {
	if signerName == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	segments := strings.Split(signerName, "/")
	if len(segments) != 2 {
		return field.ErrorList{field.Invalid(p, signerName, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	const maxDomain = utilvalidation.DNS1123SubdomainMaxLength
	if len(segments[0]) > maxDomain {
		errs = append(errs, field.TooLong(p, "", maxDomain))
	}
	domainLabels := strings.Split(segments[0], ".")
	for _, l := range domainLabels {
		if msgs := utilvalidation.IsDNS1123Label(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, segments[0], fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	if len(domainLabels) < 2 {
		errs = append(errs, field.Invalid(p, segments[0], "should be a domain with at least two segments separated by dots"))
	}
	for _, l := range strings.Split(segments[1], ".") {
		if msgs := utilvalidation.IsDNS1123Subdomain(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, segments[1], fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	// <fqdn>/<namespace>.<name>: 253 + 1 + 63 + 1 + 253.
	const maxPath = utilvalidation.DNS1123SubdomainMaxLength + utilvalidation.DNS1123LabelMaxLength + 1
	if max := maxDomain + maxPath + 1; len(signerName) > max {
		errs = append(errs, field.TooLong(p, "", max))
	}
	return errs
}
