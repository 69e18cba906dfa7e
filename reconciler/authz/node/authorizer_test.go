package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
)

func testPod(ns, name, node string, spec corev1.PodSpec) *corev1.Pod {
	spec.NodeName = node
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func newTestAuthorizer(t *testing.T, objs ...any) *Authorizer {
	t.Helper()
	podIdx, ingIdx := Indexers()
	podIdx[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, podIdx)
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ings := cache.NewIndexer(cache.MetaNamespaceKeyFunc, ingIdx)
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *corev1.Pod:
			err = pods.Add(o)
		case *corev1.PersistentVolumeClaim:
			err = claims.Add(o)
		case *networkingv1.Ingress:
			err = ings.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return New(pods, claims, ings, func() bool { return true })
}

func nodeUser(name string) user.Info {
	return &user.DefaultInfo{Name: "system:node:" + name, Groups: []string{"system:nodes", user.AllAuthenticated}}
}

func attrs(u user.Info, verb, resource, ns, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, Resource: resource, Namespace: ns, Name: name, ResourceRequest: true, APIVersion: "v1"}
}

func TestAuthorize(t *testing.T) {
	yes := true
	web := testPod("app", "web", "host-1", corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}},
		Volumes: []corev1.Volume{
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret"}}},
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vol-cm"}}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-secret"}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-cm"}, Optional: &yes}},
			}}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}},
		},
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-envfrom"}}}}}},
		Containers: []corev1.Container{{Name: "c",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "envfrom-cm"}}}},
			Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "env-secret"}, Key: "k"}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "env-cm"}, Key: "k"}}},
			}}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-secret"}}}}}}},
	})
	other := testPod("app", "db", "host-2", corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-secret"}}},
		{Name: "db", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "db"}}},
	}})
	pending := testPod("app", "pending", "", corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "pending-secret"}}}}})
	dataClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-data"}}
	scratchClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-scratch"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-scratch"}}
	dbClaim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "db"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-db"}}
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "site"},
		Spec: networkingv1.IngressSpec{TLS: []networkingv1.IngressTLS{{SecretName: "site-tls"}}}}
	a := newTestAuthorizer(t, web, other, pending, dataClaim, scratchClaim, dbClaim, ing)

	h1, h2 := nodeUser("host-1"), nodeUser("host-2")
	allowed := []authorizer.AttributesRecord{
		attrs(h1, "get", "secrets", "app", "pull"),
		attrs(h1, "get", "secrets", "app", "vol-secret"),
		attrs(h1, "list", "secrets", "app", "proj-secret"),
		attrs(h1, "watch", "secrets", "app", "init-envfrom"),
		attrs(h1, "get", "secrets", "app", "env-secret"),
		attrs(h1, "get", "secrets", "app", "debug-secret"),
		attrs(h1, "get", "configmaps", "app", "vol-cm"),
		attrs(h1, "watch", "configmaps", "app", "proj-cm"),
		attrs(h1, "list", "configmaps", "app", "envfrom-cm"),
		attrs(h1, "get", "configmaps", "app", "env-cm"),
		attrs(h1, "get", "persistentvolumeclaims", "app", "data"),
		attrs(h1, "watch", "persistentvolumeclaims", "app", "web-scratch"),
		attrs(h1, "get", "persistentvolumes", "", "pv-data"),
		attrs(h1, "list", "persistentvolumes", "", "pv-scratch"),
		attrs(h2, "get", "secrets", "app", "db-secret"),
		attrs(h2, "get", "persistentvolumes", "", "pv-db"),
		// Every host serves the Ingresses' TLS Secrets.
		attrs(h1, "get", "secrets", "web", "site-tls"),
		attrs(h2, "watch", "secrets", "web", "site-tls"),
	}
	for _, at := range allowed {
		if d, reason, err := a.Authorize(context.Background(), at); d != authorizer.DecisionAllow || err != nil {
			t.Errorf("%s %s %s/%s by %s: %v %q %v, want allowed", at.Verb, at.Resource, at.Namespace, at.Name, at.User.GetName(), d, reason, err)
		}
	}
	refused := []authorizer.AttributesRecord{
		// Another node's pod's objects.
		attrs(h1, "get", "secrets", "app", "db-secret"),
		attrs(h2, "get", "secrets", "app", "vol-secret"),
		attrs(h1, "get", "persistentvolumeclaims", "app", "db"),
		attrs(h1, "get", "persistentvolumes", "", "pv-db"),
		attrs(h2, "get", "persistentvolumes", "", "pv-data"),
		// Unreferenced, a pod's object in another namespace, an unbound pod's.
		attrs(h1, "get", "secrets", "app", "unused"),
		attrs(h1, "get", "secrets", "other", "vol-secret"),
		attrs(h1, "get", "secrets", "app", "pending-secret"),
		attrs(h1, "get", "secrets", "app", "vol-cm"), // a ConfigMap's name is no Secret
		attrs(h1, "get", "secrets", "other", "site-tls"),
		// Lists and watches without a name.
		attrs(h1, "list", "secrets", "app", ""),
		attrs(h1, "list", "secrets", "", ""),
		attrs(h1, "watch", "configmaps", "", ""),
		attrs(h1, "list", "persistentvolumes", "", ""),
		// Writes are not the authorizer's business.
		attrs(h1, "update", "secrets", "app", "vol-secret"),
		attrs(h1, "delete", "configmaps", "app", "vol-cm"),
		// Not a node: a user named like one without the group, another group's user.
		attrs(&user.DefaultInfo{Name: "system:node:host-1"}, "get", "secrets", "app", "vol-secret"),
		attrs(&user.DefaultInfo{Name: "alice", Groups: []string{"system:nodes"}}, "get", "secrets", "app", "vol-secret"),
		attrs(&user.DefaultInfo{Name: "system:node:", Groups: []string{"system:nodes"}}, "get", "secrets", "app", "vol-secret"),
	}
	for _, at := range refused {
		if d, _, err := a.Authorize(context.Background(), at); d != authorizer.DecisionNoOpinion || err != nil {
			t.Errorf("%s %s %s/%s by %s: %v %v, want no opinion", at.Verb, at.Resource, at.Namespace, at.Name, at.User.GetName(), d, err)
		}
	}
	// A subresource, another group, a non-resource request.
	sub := attrs(h1, "get", "secrets", "app", "vol-secret")
	sub.Subresource = "status"
	grp := attrs(h1, "get", "secrets", "app", "vol-secret")
	grp.APIGroup = "example.com"
	nonRes := authorizer.AttributesRecord{User: h1, Verb: "get", Path: "/api"}
	for _, at := range []authorizer.AttributesRecord{sub, grp, nonRes} {
		if d, _, _ := a.Authorize(context.Background(), at); d != authorizer.DecisionNoOpinion {
			t.Errorf("%+v: %v, want no opinion", at, d)
		}
	}
	// The reason of a list without a name says how to name the object.
	if _, reason, _ := a.Authorize(context.Background(), attrs(h1, "list", "secrets", "", "")); reason == "" {
		t.Error("a list without a name has no reason")
	}
}

// TestNotSynced: until the informers are synced, nothing is allowed.
func TestNotSynced(t *testing.T) {
	a := newTestAuthorizer(t, testPod("app", "web", "host-1", corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}}}))
	a.synced = []cache.InformerSynced{func() bool { return false }}
	if d, _, _ := a.Authorize(context.Background(), attrs(nodeUser("host-1"), "get", "secrets", "app", "s")); d != authorizer.DecisionNoOpinion {
		t.Errorf("unsynced: %v", d)
	}
}

// TestFromInformers follows pods bound, rebound and deleted through real (fake-client)
// informers.
func TestFromInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	a, err := NewFromInformers(f)
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	get := attrs(nodeUser("host-1"), "get", "secrets", "app", "s")
	decide := func() authorizer.Decision {
		d, _, _ := a.Authorize(ctx, get)
		return d
	}
	if d := decide(); d != authorizer.DecisionNoOpinion {
		t.Fatalf("no pods: %v", d)
	}
	pod := testPod("app", "web", "host-1", corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}}})
	if _, err := client.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, want authorizer.Decision) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for decide() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: decision stays %v", what, decide())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("pod bound", authorizer.DecisionAllow)
	if err := client.CoreV1().Pods("app").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("pod deleted", authorizer.DecisionNoOpinion)
}

// selected is attrs of a list or watch with a label selector.
func selected(u user.Info, verb, selector string) authorizer.AttributesRecord {
	at := attrs(u, verb, "persistentvolumes", "", "")
	sel, err := labels.Parse(selector)
	if err != nil {
		at.LabelSelectorParsingErr = err
		return at
	}
	at.LabelSelectorRequirements, _ = sel.Requirements()
	return at
}

// TestAuthorizeLocalVolumes: a host lists and watches the local volumes labelled with its
// name, by that label selector only, and gets, updates and patches one of them by name;
// another host's volume, an unlabelled one and every other write stay with RBAC.
func TestAuthorizeLocalVolumes(t *testing.T) {
	volumes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, node := range map[string]string{"pvc-1": "host-1", "pvc-2": "host-2", "pvc-3": ""} {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if node != "" {
			pv.Labels = map[string]string{localpv.LabelNode: node}
		}
		if err := volumes.Add(pv); err != nil {
			t.Fatal(err)
		}
	}
	a := newTestAuthorizer(t).WithVolumes(volumes)
	h1 := nodeUser("host-1")
	allowed := []authorizer.AttributesRecord{
		selected(h1, "list", localpv.LabelNode+"=host-1"),
		selected(h1, "watch", localpv.LabelNode+"==host-1"),
		selected(h1, "watch", localpv.LabelNode+" in (host-1)"),
		// More requirements only narrow the answer.
		selected(h1, "list", "app=x,"+localpv.LabelNode+"=host-1"),
		attrs(h1, "get", "persistentvolumes", "", "pvc-1"),
		attrs(h1, "update", "persistentvolumes", "", "pvc-1"),
		attrs(h1, "patch", "persistentvolumes", "", "pvc-1"),
	}
	for _, at := range allowed {
		if d, reason, err := a.Authorize(context.Background(), at); d != authorizer.DecisionAllow || err != nil {
			t.Errorf("%s %s %q selector %v: %v %q %v, want allowed", at.Verb, at.Resource, at.Name, at.LabelSelectorRequirements, d, reason, err)
		}
	}
	refused := []authorizer.AttributesRecord{
		selected(h1, "list", localpv.LabelNode+"=host-2"),
		selected(h1, "list", localpv.LabelNode+"!=host-2"),
		selected(h1, "watch", localpv.LabelNode+" in (host-1,host-2)"),
		selected(h1, "list", localpv.LabelNode),
		selected(h1, "list", "app=x"),
		selected(h1, "list", localpv.LabelNode+" notin (host-2)"),
		selected(h1, "list", "=bad"),
		attrs(h1, "list", "persistentvolumes", "", ""),
		attrs(h1, "get", "persistentvolumes", "", "pvc-2"),
		attrs(h1, "update", "persistentvolumes", "", "pvc-2"),
		attrs(h1, "patch", "persistentvolumes", "", "pvc-3"),
		attrs(h1, "update", "persistentvolumes", "", "missing"),
		attrs(h1, "update", "persistentvolumes", "", ""),
		attrs(h1, "delete", "persistentvolumes", "", "pvc-1"),
		attrs(h1, "create", "persistentvolumes", "", ""),
		// The label selector opens persistentvolumes only.
		func() authorizer.AttributesRecord {
			at := selected(h1, "list", localpv.LabelNode+"=host-1")
			at.Resource = "secrets"
			return at
		}(),
		// Only hosts.
		selected(&user.DefaultInfo{Name: "system:node:host-1"}, "list", localpv.LabelNode+"=host-1"),
	}
	for _, at := range refused {
		if d, _, err := a.Authorize(context.Background(), at); d != authorizer.DecisionNoOpinion || err != nil {
			t.Errorf("%s %s %q selector %v by %s: %v %v, want no opinion", at.Verb, at.Resource, at.Name, at.LabelSelectorRequirements, at.User.GetName(), d, err)
		}
	}
	// A volume's status stays the controllers'.
	status := attrs(h1, "update", "persistentvolumes", "", "pvc-1")
	status.Subresource = "status"
	if d, _, _ := a.Authorize(context.Background(), status); d != authorizer.DecisionNoOpinion {
		t.Errorf("update persistentvolumes/status: %v, want no opinion", d)
	}
	// Without the volumes' cache, only the label selector is allowed.
	bare := newTestAuthorizer(t)
	if d, _, _ := bare.Authorize(context.Background(), attrs(h1, "update", "persistentvolumes", "", "pvc-1")); d != authorizer.DecisionNoOpinion {
		t.Errorf("update without a volume cache: %v", d)
	}
}
