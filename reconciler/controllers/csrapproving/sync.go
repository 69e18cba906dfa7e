package csrapproving

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrsigning"
)

const (
	// ReasonAutoApproved is the reason of the Approved condition this controller sets.
	ReasonAutoApproved = "AutoApproved"
	// MessageSelfNodeClient is upstream's message for a node's own client certificate.
	MessageSelfNodeClient = "Auto approving self kubelet client certificate after SubjectAccessReview."
	// MessageSelfNodeServing is the message for a node's serving certificate.
	MessageSelfNodeServing = "Auto approving self kubelet serving certificate: its names are addresses of the requesting node."
)

// sync approves request name when it is a node's request for itself (see the package
// comment); any other request is left alone.
func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(csr.Status.Certificate) > 0 || csrsigning.HasTrueCondition(csr, certificatesv1.CertificateApproved) ||
		csrsigning.HasTrueCondition(csr, certificatesv1.CertificateDenied) {
		return nil
	}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName && csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return nil
	}
	cr, err := csrsigning.ParseRequest(csr.Spec.Request)
	if err != nil {
		// Nothing to approve; the signer reports it if a human approves it anyway.
		return nil
	}
	log := c.log.WithField("csr", name).WithField("user", csr.Spec.Username)
	var message string
	switch csr.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		if !isSelfNodeClient(csr, cr) {
			return nil
		}
		allowed, err := c.mayCreateSelfNodeClient(ctx, csr)
		if err != nil {
			return err
		}
		if !allowed {
			log.Info("a node's own client certificate request, but the SubjectAccessReview for certificatesigningrequests/selfnodeclient did not allow it: left for a human")
			return nil
		}
		message = MessageSelfNodeClient
	case certificatesv1.KubeletServingSignerName:
		node, ok := requestingNode(csr, cr)
		if !ok || csrsigning.ValidateKubeletServing(cr, csr.Spec.Usages) != nil {
			return nil
		}
		n, err := c.nodeLister.Get(node)
		if apierrors.IsNotFound(err) {
			// The node may register after asking: try again later.
			return fmt.Errorf("node %s of serving certificate request %s not found", node, name)
		}
		if err != nil {
			return err
		}
		if why := servingNamesAllowed(n, cr); why != "" {
			log.Info("a node's serving certificate request with " + why + ": left for a human")
			return nil
		}
		message = MessageSelfNodeServing
	}
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type:           certificatesv1.CertificateApproved,
		Status:         corev1.ConditionTrue,
		Reason:         ReasonAutoApproved,
		Message:        message,
		LastUpdateTime: metav1.Now(),
	})
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("approve %s: %w", name, err)
	}
	log.WithField("signer", csr.Spec.SignerName).Info("approved")
	return nil
}

// isSelfNodeClient is upstream's selfnodeclient recognizer: a valid
// kube-apiserver-client-kubelet request whose common name is the requester's name.
func isSelfNodeClient(csr *certificatesv1.CertificateSigningRequest, cr *x509.CertificateRequest) bool {
	return csr.Spec.Username == cr.Subject.CommonName && csrsigning.ValidateKubeletClient(cr, csr.Spec.Usages) == nil
}

// mayCreateSelfNodeClient asks the API's authorizer whether the requester may create
// certificatesigningrequests/selfnodeclient, as upstream does.
func (c *Controller) mayCreateSelfNodeClient(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (bool, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range csr.Spec.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: csr.Spec.Username, UID: csr.Spec.UID, Groups: csr.Spec.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: certificatesv1.GroupName, Resource: "certificatesigningrequests", Subresource: "selfnodeclient",
			Verb: "create", Version: "*",
		},
	}}
	out, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview for %s: %w", csr.Name, err)
	}
	return out.Status.Allowed, nil
}

// requestingNode returns X when the requester is system:node:X in group system:nodes and the
// request's common name is the requester's name.
func requestingNode(csr *certificatesv1.CertificateSigningRequest, cr *x509.CertificateRequest) (string, bool) {
	node, ok := strings.CutPrefix(csr.Spec.Username, csrsigning.NodeUserPrefix)
	if !ok || node == "" || cr.Subject.CommonName != csr.Spec.Username || !slices.Contains(csr.Spec.Groups, csrsigning.NodesGroup) {
		return "", false
	}
	return node, true
}

// servingNamesAllowed returns "" when every name of a serving certificate request is the
// node's own: each IP address among status.addresses of the Node, each DNS name the Node's
// name or a Hostname, InternalDNS or ExternalDNS address of it; else what is not.
//
// Upstream approves no serving certificates; k3s and kubelet-csr-approver do, after this
// check. Without it, a node could be issued by the site CA a certificate for another
// host's address, or for the API server's names and ClusterIP (kubernetes.default.svc,
// 10.96.0.1), which pods trust through kube-root-ca.crt: it could then impersonate them.
// The addresses are those the node reported in its Node's status, so this keeps a node to
// the addresses it claims there, which the Service proxy and the API already trust. Until a
// NodeRestriction admission keeps each node to its own Node, a node could first write other
// addresses into its status: the check is only as strong as that (see the README's RBAC
// limits).
func servingNamesAllowed(node *corev1.Node, cr *x509.CertificateRequest) string {
	var ips []net.IP
	dns := []string{node.Name}
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip := net.ParseIP(a.Address); ip != nil {
				ips = append(ips, ip)
			}
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			dns = append(dns, strings.ToLower(a.Address))
		}
	}
	for _, ip := range cr.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			return fmt.Sprintf("IP address %s, not an address of Node %s", ip, node.Name)
		}
	}
	for _, d := range cr.DNSNames {
		if !slices.Contains(dns, strings.ToLower(d)) {
			return fmt.Sprintf("DNS name %s, not a name of Node %s", d, node.Name)
		}
	}
	return ""
}
