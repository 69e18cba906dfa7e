package printers

import (
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

var webhooksColumn = col("Webhooks", "integer", "Webhooks indicates the number of webhooks registered in this configuration")

var validatingWebhookPrinter = named([]metav1.TableColumnDefinition{webhooksColumn, ageColumn},
	func(c *admissionregistrationv1.ValidatingWebhookConfiguration, clk clock) []any {
		return []any{int64(len(c.Webhooks)), clk.age(c.CreationTimestamp)}
	})

var mutatingWebhookPrinter = named([]metav1.TableColumnDefinition{webhooksColumn, ageColumn},
	func(c *admissionregistrationv1.MutatingWebhookConfiguration, clk clock) []any {
		return []any{int64(len(c.Webhooks)), clk.age(c.CreationTimestamp)}
	})

// csrPrinter prints NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION, as upstream.
var csrPrinter = named([]metav1.TableColumnDefinition{
	ageColumn,
	col("SignerName", "string", "signerName indicates the requested signer, and is a qualified name."),
	col("Requestor", "string", "request contains an x509 certificate signing request encoded in a \"CERTIFICATE REQUEST\" PEM block."),
	col("RequestedDuration", "string", "expirationSeconds is the requested duration of validity of the issued certificate."),
	col("Condition", "string", "conditions applied to the request. Known conditions are \"Approved\", \"Denied\", and \"Failed\"."),
}, func(csr *certificatesv1.CertificateSigningRequest, c clock) []any {
	signer := none
	if csr.Spec.SignerName != "" {
		signer = csr.Spec.SignerName
	}
	requested := none
	if s := csr.Spec.ExpirationSeconds; s != nil {
		requested = duration.HumanDuration(time.Duration(*s) * time.Second)
	}
	return []any{c.age(csr.CreationTimestamp), signer, csr.Spec.Username, requested, csrCondition(csr)}
})

// csrCondition is the CONDITION cell: Denied over Approved over Pending, then ",Failed" and
// ",Issued".
func csrCondition(csr *certificatesv1.CertificateSigningRequest) string {
	var approved, denied, failed bool
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	status := "Pending"
	switch {
	case denied:
		status = "Denied"
	case approved:
		status = "Approved"
	}
	if failed {
		status += ",Failed"
	}
	if len(csr.Status.Certificate) > 0 {
		status += ",Issued"
	}
	return status
}
