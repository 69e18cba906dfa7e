package apiserver

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"

	"github.com/flotilla-dev/flotilla/reconciler/authz"
)

// verbAuthorizer allows the verbs of allowed on every resource.
type verbAuthorizer struct {
	authorizer.Authorizer
	allowed map[string]bool
}

func allowVerbs(verbs ...string) verbAuthorizer {
	v := verbAuthorizer{Authorizer: authorizerfactory.NewAlwaysDenyAuthorizer(), allowed: map[string]bool{}}
	for _, verb := range verbs {
		v.allowed[verb] = true
	}
	return v
}

func (v verbAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if v.allowed[a.GetVerb()] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no rule allows it", nil
}

func connectAttrs(subresource string, u user.Info) admission.Attributes {
	return admission.NewAttributesRecord(&corev1.PodExecOptions{}, nil, corev1.SchemeGroupVersion.WithKind("PodExecOptions"), "default", "web",
		corev1.SchemeGroupVersion.WithResource("pods"), subresource, admission.Connect, nil, false, u)
}

// A connection to a pod needs create on the subresource, whatever verb it came with.
func TestConnectNeedsCreate(t *testing.T) {
	reader := &user.DefaultInfo{Name: "reader"}
	ctx := context.Background()
	readOnly := newConnectCreateGuard(allowVerbs("get"))
	for _, sub := range []string{"exec", "attach", "portforward"} {
		err := readOnly.Validate(ctx, connectAttrs(sub, reader), nil)
		if err == nil || !strings.Contains(err.Error(), `cannot create resource "pods/`+sub+`"`) {
			t.Errorf("%s with get only: %v, want refused", sub, err)
		}
	}
	if err := readOnly.Validate(ctx, connectAttrs("log", reader), nil); err != nil {
		t.Errorf("pods/log is not a connection that needs create: %v", err)
	}
	if err := newConnectCreateGuard(allowVerbs("create")).Validate(ctx, connectAttrs("exec", reader), nil); err != nil {
		t.Errorf("exec with create: %v", err)
	}
}

// A plan-only user's writes pass only as dry-runs; connections and other users are not its
// business, access reviews are not writes.
func TestPlannerGuard(t *testing.T) {
	planner := &user.DefaultInfo{Name: "ci", Groups: []string{authz.PlannersGroup, user.AllAuthenticated}}
	editor := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}
	attrs := func(u user.Info, op admission.Operation, dryRun bool) admission.Attributes {
		return admission.NewAttributesRecord(cm, nil, corev1.SchemeGroupVersion.WithKind("ConfigMap"), "default", "c",
			corev1.SchemeGroupVersion.WithResource("configmaps"), "", op, nil, dryRun, u)
	}
	g := newPlannerGuard()
	ctx := context.Background()
	for _, op := range []admission.Operation{admission.Create, admission.Update, admission.Delete} {
		if err := g.Admit(ctx, attrs(planner, op, false), nil); err == nil || !strings.Contains(err.Error(), "plan-only credential") {
			t.Errorf("planner %s: %v, want refused", op, err)
		}
		if err := g.Admit(ctx, attrs(planner, op, true), nil); err != nil {
			t.Errorf("planner dry-run %s: %v", op, err)
		}
		if err := g.Validate(ctx, attrs(editor, op, false), nil); err != nil {
			t.Errorf("editor %s: %v", op, err)
		}
	}
	if err := g.Admit(ctx, connectAttrs("exec", planner), nil); err == nil {
		t.Error("planner exec: allowed")
	}
}

// Settings the node agent does not carry out are named, one warning each.
func TestUnappliedPodSettings(t *testing.T) {
	unmasked := corev1.UnmaskedProcMount
	spec := &corev1.PodSpec{
		HostUsers: new(false), ShareProcessNamespace: new(true),
		Containers: []corev1.Container{{Name: "a"}, {Name: "b", SecurityContext: &corev1.SecurityContext{ProcMount: &unmasked,
			SELinuxOptions: &corev1.SELinuxOptions{Level: "s0"}}}},
		Volumes: []corev1.Volume{
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}}},
			{Name: "certs", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca.pem"}},
			}}}},
		},
	}
	got := strings.Join(unappliedPodSettings("spec.template.spec", spec), "\n")
	for _, want := range []string{"spec.template.spec.hostUsers: false", "spec.template.spec.shareProcessNamespace",
		"spec.template.spec.containers[1].securityContext.procMount: Unmasked", "spec.template.spec.containers[1].securityContext.seLinuxOptions",
		`spec.template.spec.volumes[1].nfs (volume "share") is not carried out by flotilla: the pod cannot start; the node agent mounts emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim or ephemeral volumes`,
		`spec.template.spec.volumes[2].projected.sources[1].clusterTrustBundle (volume "certs") is not carried out by flotilla: the pod cannot start; a projected volume may hold configMap, secret, downwardAPI or serviceAccountToken`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "volumes["); n != 2 {
		t.Errorf("%d warnings about volumes, want 2 (nfs, clusterTrustBundle):\n%s", n, got)
	}
	if w := unappliedPodSettings("spec", &corev1.PodSpec{Containers: []corev1.Container{{Name: "plain"}}}); len(w) != 0 {
		t.Errorf("a plain pod gets warnings: %v", w)
	}
	nfs := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}}}}
	if got, want := unmountableVolume(nfs), "spec.nfs is not carried out by flotilla: a pod using this volume cannot start; the node agent mounts local and hostPath volumes"; got != want {
		t.Errorf("an NFS PersistentVolume: %q, want %q", got, want)
	}
	local := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		Local: &corev1.LocalVolumeSource{Path: "/srv"}}}}
	if got := unmountableVolume(local); got != "" {
		t.Errorf("a local PersistentVolume gets a warning: %q", got)
	}
	for resource, want := range map[schema.GroupResource]string{{Resource: "pods"}: "spec", {Group: "apps", Resource: "deployments"}: "spec.template.spec",
		{Group: "batch", Resource: "cronjobs"}: "spec.jobTemplate.spec.template.spec"} {
		if got := podSpecPath(resource); got != want {
			t.Errorf("podSpecPath(%v) = %q, want %q", resource, got, want)
		}
	}
}
