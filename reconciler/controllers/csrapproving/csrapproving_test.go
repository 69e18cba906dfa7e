package csrapproving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrsigning"
)

type request struct {
	cn   string
	orgs []string
	dns  []string
	ips  []string
}

func requestPEM(t *testing.T, r request) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: r.cn, Organization: r.orgs}, DNSNames: r.dns}
	for _, ip := range r.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

var (
	clientUsages  = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
	nodeGroups    = []string{"system:nodes", "system:authenticated"}
)

func csr(t *testing.T, name, signer, username string, groups []string, r request, usages []certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: requestPEM(t, r), SignerName: signer, Usages: usages, Username: username, Groups: groups,
		},
	}
}

// setup builds the approver on a fake clientset holding objs; SubjectAccessReviews allow
// what allow says.
func setup(t *testing.T, allow func(authorizationv1.SubjectAccessReviewSpec) bool, objs ...runtime.Object) (*Controller, *fake.Clientset, *[]authorizationv1.SubjectAccessReviewSpec) {
	t.Helper()
	client := fake.NewClientset(objs...)
	var reviews []authorizationv1.SubjectAccessReviewSpec
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		reviews = append(reviews, sar.Spec)
		sar.Status.Allowed = allow(sar.Spec)
		return true, sar, nil
	})
	cctx := &controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0)}
	r, err := New(cctx)
	if err != nil {
		t.Fatal(err)
	}
	c := r.(*Controller)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cctx.Informers.Shutdown() })
	cctx.Informers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("caches did not sync")
	}
	return c, client, &reviews
}

// approval returns the message of the AutoApproved condition, and whether there is one.
func approval(t *testing.T, client *fake.Clientset, name string) (string, bool) {
	t.Helper()
	got, err := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved {
			if c.Status != corev1.ConditionTrue || c.Reason != ReasonAutoApproved {
				t.Errorf("%s: approval %+v", name, c)
			}
			return c.Message, true
		}
	}
	if len(got.Status.Conditions) > 0 {
		t.Errorf("%s: conditions %+v", name, got.Status.Conditions)
	}
	return "", false
}

func node(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func TestApprovesSelfNodeClient(t *testing.T) {
	self := request{cn: "system:node:host-9", orgs: []string{"system:nodes"}}
	objs := []runtime.Object{
		csr(t, "self", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:host-9", nodeGroups, self, clientUsages),
		csr(t, "other-node", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:host-9", nodeGroups,
			request{cn: "system:node:host-8", orgs: []string{"system:nodes"}}, clientUsages),
		csr(t, "masters", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:host-9", nodeGroups,
			request{cn: "system:node:host-9", orgs: []string{"system:nodes", "system:masters"}}, clientUsages),
		csr(t, "server-usage", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:host-9", nodeGroups, self,
			[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth}),
		csr(t, "not-allowed", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:host-7", []string{"system:authenticated"},
			request{cn: "system:node:host-7", orgs: []string{"system:nodes"}}, clientUsages),
		csr(t, "apiserver-client", certificatesv1.KubeAPIServerClientSignerName, "system:node:host-9", nodeGroups, self, clientUsages),
		csr(t, "other-signer", "example.com/signer", "system:node:host-9", nodeGroups, self, clientUsages),
	}
	c, client, reviews := setup(t, func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return s.User == "system:node:host-9" && len(s.Groups) > 0 && s.Groups[0] == "system:nodes"
	}, objs...)
	for _, name := range []string{"self", "other-node", "masters", "server-usage", "not-allowed", "apiserver-client", "other-signer", "gone"} {
		if err := c.sync(context.Background(), name); err != nil {
			t.Errorf("sync %s: %v", name, err)
		}
	}
	if msg, ok := approval(t, client, "self"); !ok || msg != "Auto approving self kubelet client certificate after SubjectAccessReview." {
		t.Errorf("self: approved %v, %q", ok, msg)
	}
	for _, name := range []string{"other-node", "masters", "server-usage", "not-allowed", "apiserver-client", "other-signer"} {
		if _, ok := approval(t, client, name); ok {
			t.Errorf("%s approved", name)
		}
	}
	// Reviews were asked for the two recognized requests only, for selfnodeclient.
	if len(*reviews) != 2 {
		t.Fatalf("reviews %+v", *reviews)
	}
	ra := (*reviews)[0].ResourceAttributes
	if ra == nil || ra.Group != "certificates.k8s.io" || ra.Resource != "certificatesigningrequests" || ra.Subresource != "selfnodeclient" || ra.Verb != "create" {
		t.Errorf("review %+v", ra)
	}

	// An approved request is not approved again, once the controller's cache shows it
	// approved (as the informer's update event would requeue it).
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := c.lister.Get("self")
		return err == nil && csrsigning.HasTrueCondition(got, certificatesv1.CertificateApproved), nil
	}); err != nil {
		t.Fatalf("the approval never reached the controller's cache: %v", err)
	}
	if err := c.sync(context.Background(), "self"); err != nil || len(*reviews) != 2 {
		t.Errorf("second sync: %v, %d reviews", err, len(*reviews))
	}
}

func TestApprovesSelfNodeServing(t *testing.T) {
	serving := func(name, user string, groups []string, r request) runtime.Object {
		return csr(t, name, certificatesv1.KubeletServingSignerName, user, groups, r, servingUsages)
	}
	n9 := []string{"system:nodes"}
	objs := []runtime.Object{
		node("host-9",
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.9"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.9"},
			corev1.NodeAddress{Type: corev1.NodeHostName, Address: "host-9.example"}),
		serving("own", "system:node:host-9", n9,
			request{cn: "system:node:host-9", orgs: n9, dns: []string{"host-9", "HOST-9.example"}, ips: []string{"10.0.0.9", "203.0.113.9"}}),
		serving("foreign-ip", "system:node:host-9", n9, request{cn: "system:node:host-9", orgs: n9, ips: []string{"10.0.0.9", "10.96.0.1"}}),
		serving("foreign-dns", "system:node:host-9", n9, request{cn: "system:node:host-9", orgs: n9, dns: []string{"kubernetes.default.svc"}}),
		serving("other-cn", "system:node:host-9", n9, request{cn: "system:node:host-8", orgs: n9, ips: []string{"10.0.0.9"}}),
		serving("not-in-group", "system:node:host-9", nil, request{cn: "system:node:host-9", orgs: n9, ips: []string{"10.0.0.9"}}),
		serving("not-a-node", "jane", n9, request{cn: "jane", orgs: n9, ips: []string{"10.0.0.9"}}),
		serving("no-node", "system:node:host-5", n9, request{cn: "system:node:host-5", orgs: n9, ips: []string{"10.0.0.5"}}),
	}
	c, client, reviews := setup(t, func(authorizationv1.SubjectAccessReviewSpec) bool { return true }, objs...)
	for _, name := range []string{"own", "foreign-ip", "foreign-dns", "other-cn", "not-in-group", "not-a-node"} {
		if err := c.sync(context.Background(), name); err != nil {
			t.Errorf("sync %s: %v", name, err)
		}
	}
	if msg, ok := approval(t, client, "own"); !ok || msg != MessageSelfNodeServing {
		t.Errorf("own: approved %v, %q", ok, msg)
	}
	for _, name := range []string{"foreign-ip", "foreign-dns", "other-cn", "not-in-group", "not-a-node"} {
		if _, ok := approval(t, client, name); ok {
			t.Errorf("%s approved", name)
		}
	}
	// A node that is not registered yet: tried again later.
	if err := c.sync(context.Background(), "no-node"); err == nil || !strings.Contains(err.Error(), "node host-5") {
		t.Errorf("sync of a request of an unknown node: %v", err)
	}
	if len(*reviews) != 0 {
		t.Errorf("reviews for serving certificates: %+v", *reviews)
	}
}
