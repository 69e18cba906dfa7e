package unenforced_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	unenforcedcontroller "github.com/flotilla-dev/flotilla/reconciler/controllers/unenforced"
	"github.com/flotilla-dev/flotilla/reconciler/unenforced"
	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// quotaKind and csrKind stand for a namespaced and a cluster-scoped kind: no kind is
// unenforced since ResourceQuotas are enforced and csrsigning signs CertificateSigningRequests,
// so the tests add them to unenforced.Kinds (withTestKinds).
var (
	quotaKind = unenforced.Kind{Resource: corev1.Resource("resourcequotas"), Version: "v1",
		Kind: "ResourceQuota", Effect: "test: a namespaced kind"}
	csrKind = unenforced.Kind{Resource: certificatesv1.Resource("certificatesigningrequests"), Version: "v1",
		Kind: "CertificateSigningRequest", Effect: "test: a cluster-scoped kind"}
)

// withTestKinds adds quotaKind and csrKind to unenforced.Kinds until the test ends.
func withTestKinds(t *testing.T) {
	saved := unenforced.Kinds
	unenforced.Kinds = append(slices.Clone(saved), quotaKind, csrKind)
	t.Cleanup(func() { unenforced.Kinds = saved })
}

func kind(t *testing.T, name string) unenforced.Kind {
	t.Helper()
	for _, k := range unenforced.Kinds {
		if k.Kind == name {
			return k
		}
	}
	t.Fatalf("%s is not in unenforced.Kinds", name)
	return unenforced.Kind{}
}

func object(k unenforced.Kind, ns, name, rv string, generation int64) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: k.GroupVersionResource().GroupVersion().String(), Kind: k.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			ResourceVersion: rv, Generation: generation},
	}
}

// A ResourceQuota created after the start gets the event, one that existed before does not; a
// spec change (new generation) gets it again, a metadata-only change does not. A
// cluster-scoped CertificateSigningRequest, here without a generation, gets it on create and
// on every change.
func TestUnenforcedEvents(t *testing.T) {
	withTestKinds(t)
	quota, clusterRole := kind(t, "ResourceQuota"), kind(t, "CertificateSigningRequest")
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	client := metadatafake.NewSimpleMetadataClient(scheme, object(quota, "team-a", "old", "1", 1))
	rec := record.NewFakeRecorder(100)
	rec.IncludeObject = true
	cctx := &controllers.Context{
		Metadata:          client,
		MetadataInformers: metadatainformer.NewSharedInformerFactory(client, 0),
		Informers:         informers.NewSharedInformerFactory(fake.NewClientset(), 0),
		Recorder:          func(string) record.EventRecorder { return rec },
	}
	c, err := unenforcedcontroller.New(cctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cctx.MetadataInformers.Start(ctx.Done())
	defer cctx.MetadataInformers.Shutdown()
	cctx.Informers.Start(ctx.Done())
	defer cctx.Informers.Shutdown()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 1) }()
	for _, k := range unenforced.Kinds {
		inf := cctx.MetadataInformers.ForResource(k.GroupVersionResource()).Informer()
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("caches did not sync")
		}
	}

	expect := func(what string, k unenforced.Kind) {
		t.Helper()
		want := "Warning " + unenforcedcontroller.Reason + " " + unenforced.Message(k) +
			" involvedObject{kind=" + k.Kind + ",apiVersion=" + k.GroupVersionResource().GroupVersion().String() + "}"
		select {
		case got := <-rec.Events:
			if got != want {
				t.Errorf("%s: event %q, want %q", what, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event", what)
		}
	}
	expectNone := func(what string) {
		t.Helper()
		select {
		case got := <-rec.Events:
			t.Errorf("%s: unexpected event %q", what, got)
		case <-time.After(300 * time.Millisecond):
		}
	}
	getter := func(gvr schema.GroupVersionResource, ns string) metadatafake.MetadataClient {
		return client.Resource(gvr).Namespace(ns).(metadatafake.MetadataClient)
	}
	np := getter(quota.GroupVersionResource(), "team-a")
	cr := getter(clusterRole.GroupVersionResource(), "")

	expectNone("ResourceQuota created before the start")

	if _, err := np.CreateFake(object(quota, "team-a", "new", "2", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("new ResourceQuota", quota)

	if _, err := np.UpdateFake(object(quota, "team-a", "new", "3", 2), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("ResourceQuota with a new generation", quota)

	labelled := object(quota, "team-a", "new", "4", 2)
	labelled.Labels = map[string]string{"team": "a"}
	if _, err := np.UpdateFake(labelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectNone("ResourceQuota with new labels only")

	if _, err := cr.CreateFake(object(clusterRole, "", "viewer", "5", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("new CertificateSigningRequest", clusterRole)
	if _, err := cr.UpdateFake(object(clusterRole, "", "viewer", "6", 0), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("changed CertificateSigningRequest", clusterRole)

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Against a real agent: a new ResourceQuota gets the NotEnforced event in its namespace, a new
// CertificateSigningRequest (cluster-scoped) gets it in namespace default, and a
// Service with the topology-mode annotation gets the API's warning and the event.
func TestUnenforcedEventsAgent(t *testing.T) {
	withTestKinds(t)
	a, client, c := controllertest.StartController(t, unenforcedcontroller.NewController)
	controllertest.Eventually(t, 30*time.Second, "informers synced", func() (bool, error) { return c.HasSynced(), nil })
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}}}
	if _, err := client.CoreV1().ResourceQuotas("default").Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "unenforced-csr"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrPEM(t), SignerName: "example.com/signer",
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}}}
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Service's topology-mode annotation: the API's warning, then the event.
	warnings := &framework.Warnings{}
	cfg := rest.CopyConfig(a.RESTConfig())
	cfg.WarningHandler = warnings
	wclient, err := kubeclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "topology", Annotations: map[string]string{corev1.AnnotationTopologyMode: "Auto"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := wclient.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	topologyMessage := unenforced.ServiceSettings(svc)[0]
	if got := warnings.Take(); !slices.Contains(got, topologyMessage) {
		t.Errorf("creating the Service warned %q, want %q", got, topologyMessage)
	}
	// The annotation added to a Service later, which changes no generation: the event too.
	later := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "annotated-later"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if later, err = client.CoreV1().Services("default").Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	later.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
	if _, err := client.CoreV1().Services("default").Update(ctx, later, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ kind, name, namespace, message string }{
		{"ResourceQuota", "compute", "default", unenforced.Message(kind(t, "ResourceQuota"))},
		{"CertificateSigningRequest", "unenforced-csr", "", unenforced.Message(kind(t, "CertificateSigningRequest"))},
		{"Service", "topology", "default", topologyMessage},
		{"Service", "annotated-later", "default", topologyMessage},
	} {
		message := want.message
		controllertest.Eventually(t, 30*time.Second, "NotEnforced event on "+want.kind, func() (bool, error) {
			list, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, ev := range list.Items {
				o := ev.InvolvedObject
				if ev.Type == corev1.EventTypeWarning && ev.Reason == unenforcedcontroller.Reason && ev.Message == message &&
					ev.Source.Component == unenforcedcontroller.Component &&
					o.Kind == want.kind && o.Name == want.name && o.Namespace == want.namespace && o.UID != "" {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

// csrPEM is a PEM certificate request for a new key.
func csrPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "unenforced"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
