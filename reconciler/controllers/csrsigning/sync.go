package csrsigning

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sync signs request name if it is approved, not yet issued, not failed and of a signer this
// controller serves; a request that breaks the signer's rules is marked Failed instead.
func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(csr.Status.Certificate) > 0 || !IsApproved(csr) || HasTrueCondition(csr, certificatesv1.CertificateFailed) {
		return nil
	}
	validate, ok := validators[csr.Spec.SignerName]
	if !ok {
		return nil
	}
	log := c.log.WithField("csr", name).WithField("signer", csr.Spec.SignerName)
	cr, err := ParseRequest(csr.Spec.Request)
	if err == nil {
		err = cr.CheckSignature()
	}
	if err == nil {
		err = validate(cr, csr.Spec.Usages)
	}
	var ku x509.KeyUsage
	var ext []x509.ExtKeyUsage
	if err == nil {
		ku, ext, err = x509Usages(csr.Spec.Usages)
	}
	if err != nil {
		log.WithError(err).Info("request fails its signer's rules")
		return c.fail(ctx, csr, err.Error())
	}
	certPEM, err := c.ca.SignRequest(cr, ku, ext, c.validity(csr.Spec.ExpirationSeconds))
	if err != nil {
		return fmt.Errorf("sign %s: %w", name, err)
	}
	csr = csr.DeepCopy()
	csr.Status.Certificate = certPEM
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed or deleted meanwhile: the informer brings it back if it still needs us.
			return nil
		}
		return fmt.Errorf("update the certificate of %s: %w", name, err)
	}
	log.WithField("user", csr.Spec.Username).Info("signed")
	return nil
}

// fail adds condition Failed with reason SignerValidationFailure and message.
func (c *Controller) fail(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, message string) error {
	csr = csr.DeepCopy()
	now := metav1.NewTime(c.now())
	csr.Status.Conditions = append(slices.Clone(csr.Status.Conditions), certificatesv1.CertificateSigningRequestCondition{
		Type:           certificatesv1.CertificateFailed,
		Status:         corev1.ConditionTrue,
		Reason:         ReasonSignerValidationFailure,
		Message:        message,
		LastUpdateTime: now,
	})
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("add the failure condition of %s: %w", csr.Name, err)
	}
	return nil
}

// validity is how long the certificate is valid: spec.expirationSeconds when given, at most
// the configured duration and at least MinDuration. SignRequest also ends it with the CA.
func (c *Controller) validity(expirationSeconds *int32) time.Duration {
	if expirationSeconds == nil {
		return c.duration
	}
	d := time.Duration(*expirationSeconds) * time.Second
	switch {
	case d > c.duration:
		return c.duration
	case d < MinDuration:
		return MinDuration
	default:
		return d
	}
}
