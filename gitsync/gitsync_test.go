package gitsync

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/framework"
)

type repo struct {
	t   *testing.T
	dir string
}

func newRepo(t *testing.T) *repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if framework.InCI() {
			t.Fatal("git CLI not installed (Debian package git)")
		}
		t.Skip("git CLI not installed")
	}
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (empty content removes the file) and returns the new head.
func (r *repo) commit(files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		if content == "" {
			r.git("rm", "-q", name)
			continue
		}
		write(r.t, r.dir, name, content)
		r.git("add", name)
	}
	r.git("commit", "-q", "-m", "change")
	return r.git("rev-parse", "HEAD")
}

const (
	nsYAML     = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n"
	deployYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
`
	svcYAML = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: demo
spec:
  selector: {app: web}
  ports:
  - port: 80
`
	keepYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: keep
  namespace: demo
  annotations:
    flotilla.dev/prune: disabled
data: {a: b}
`
	localYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: local
  namespace: demo
  annotations:
    config.kubernetes.io/local-config: "true"
`
	newCMYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n  namespace: demo\ndata: {x: y}\n"
	badYAML   = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: bad
  namespace: demo
spec:
  selector:
    matchLabels: {app: bad}
  template:
    metadata:
      labels: {app: other}
    spec:
      containers:
      - name: c
        image: nginx
`
)

// testSA is ServiceAccount default/gitsync-test, which start binds to ClusterRole
// cluster-admin: the agent tests' GitSources name it in spec.serviceAccountName (only
// kube-system/root applies without one).
const testSA = "gitsync-test"

type env struct {
	t      *testing.T
	a      *framework.Agent
	client kubernetes.Interface
	cctx   *controllers.Context
}

func start(t *testing.T) *env {
	t.Helper()
	return startWith(t, "")
}

// startWith is start with the agent running agentControllers (a comma list of names; the
// controller under test is always run in the test's process) and given agentFlags.
func startWith(t *testing.T, agentControllers string, agentFlags ...string) *env {
	t.Helper()
	a := framework.StartAgent(t, framework.AgentOptions{Extra: append([]string{"--controllers=" + agentControllers, "--git-min-interval=1s"}, agentFlags...)})
	cctx, err := controllers.NewContext(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewWithConfig(cctx, Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, 2); err != nil && ctx.Err() == nil {
			t.Errorf("controller stopped: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	e := &env{t: t, a: a, client: a.Client(), cctx: cctx}
	e.serviceAccount("default", testSA, "ClusterRoleBinding", "cluster-admin")
	return e
}

// serviceAccount creates ServiceAccount ns/name and binds ClusterRole role to it: with a
// RoleBinding in ns when binding is "RoleBinding", cluster-wide when "ClusterRoleBinding".
func (e *env) serviceAccount(ns, name, binding, role string) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	var err error
	switch binding {
	case "RoleBinding":
		_, err = e.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
			Subjects: subjects, RoleRef: ref}, metav1.CreateOptions{})
	case "ClusterRoleBinding":
		_, err = e.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name + "-" + role},
			Subjects: subjects, RoleRef: ref}, metav1.CreateOptions{})
	default:
		e.t.Fatalf("binding %q: want RoleBinding or ClusterRoleBinding", binding)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) source() *v1alpha1.GitSource {
	e.t.Helper()
	u, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Get(context.Background(), "apps", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
		e.t.Fatal(err)
	}
	return &gs
}

// waitFor polls cond for up to 30 s, reporting the source's status on failure.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.t.Fatalf("waiting for %s: %v; status: %+v", what, err, e.source().Status)
	}
}

// holds checks cond every 100 ms for window and fails as soon as it returns a problem (""
// while all is well). Call it after a positive signal, with the reason the window suffices.
func (e *env) holds(window time.Duration, what string, cond func() string) {
	e.t.Helper()
	deadline := time.Now().Add(window)
	for {
		if problem := cond(); problem != "" {
			e.t.Fatalf("%s: %s", what, problem)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) readyAt(rev string) func() bool {
	return func() bool {
		st := e.source().Status
		c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonSucceeded &&
			c.Message == "Applied revision: main@sha1:"+rev && st.LastAppliedRevision == "main@sha1:"+rev
	}
}

func (e *env) exists(get func() (metav1.Object, error)) bool {
	_, err := get()
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

func TestGitSync(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML, "deploy.yaml": deployYAML, "svc.yaml": svcYAML,
		"keep.yaml": keepYAML, "local.yaml": localYAML})
	e := start(t)
	ctx := context.Background()
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
		"metadata": map[string]any{"name": "apps", "namespace": "default"},
		"spec":     map[string]any{"url": "file://" + r.dir, "interval": "2s", "serviceAccountName": testSA},
	}}
	if _, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Create(ctx, gs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deploy := func(name string) func() (metav1.Object, error) {
		return func() (metav1.Object, error) {
			return e.client.AppsV1().Deployments("demo").Get(ctx, name, metav1.GetOptions{})
		}
	}
	svc := func() (metav1.Object, error) {
		return e.client.CoreV1().Services("demo").Get(ctx, "web", metav1.GetOptions{})
	}
	cm := func(name string) func() (metav1.Object, error) {
		return func() (metav1.Object, error) {
			return e.client.CoreV1().ConfigMaps("demo").Get(ctx, name, metav1.GetOptions{})
		}
	}

	t.Log("first commit: Namespace, Deployment, Service applied with the source label")
	e.waitFor("first revision applied", e.readyAt(head))
	for _, get := range []func() (metav1.Object, error){deploy("web"), svc, cm("keep")} {
		o, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if o.GetLabels()[SourceLabel] != "default.apps" {
			t.Errorf("%s: labels %v", o.GetName(), o.GetLabels())
		}
	}
	if e.exists(cm("local")) {
		t.Error("local-config object was applied")
	}
	if inv := e.source().Status.Inventory; inv == nil || len(inv.Entries) != 4 {
		t.Errorf("inventory = %+v, want 4 entries", inv)
	}

	t.Log("kubectl scale of a git-owned field is reverted")
	e.a.MustKubectl("", "-n", "demo", "scale", "deployment/web", "--replicas=5")
	e.waitFor("replicas back to 2", func() bool {
		d, err := e.client.AppsV1().Deployments("demo").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas == 2
	})

	t.Log("objects removed from git are pruned unless annotated prune: disabled")
	head = r.commit(map[string]string{"svc.yaml": "", "keep.yaml": ""})
	e.waitFor("second revision applied", e.readyAt(head))
	e.waitFor("service pruned", func() bool { return !e.exists(svc) })
	if !e.exists(cm("keep")) {
		t.Error("prune: disabled ConfigMap was deleted")
	}
	if !e.exists(deploy("web")) {
		t.Error("deployment gone")
	}
	good := head

	t.Log("one invalid object: nothing of the commit applied, status names it")
	head = r.commit(map[string]string{"bad.yaml": badYAML, "fresh.yaml": newCMYAML})
	e.waitFor("stalled on validation", func() bool {
		st := e.source().Status
		c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue && st.LastAttemptedRevision == "main@sha1:"+head
	})
	st := e.source().Status
	ready := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ReasonValidationFailed ||
		!strings.Contains(ready.Message, "bad.yaml: Deployment demo/bad: spec.template.metadata.labels") {
		t.Errorf("Ready = %+v", ready)
	}
	if st.LastAppliedRevision != "main@sha1:"+good {
		t.Errorf("lastAppliedRevision = %s, want the previous one", st.LastAppliedRevision)
	}
	if e.exists(cm("fresh")) || e.exists(deploy("bad")) {
		t.Error("objects of an invalid revision were applied")
	}
	if !e.exists(deploy("web")) {
		t.Error("running revision touched")
	}

	t.Log("the next good commit applies")
	head = r.commit(map[string]string{"bad.yaml": ""})
	e.waitFor("fixed revision applied", e.readyAt(head))
	if !e.exists(cm("fresh")) {
		t.Error("fresh ConfigMap not applied")
	}
	if c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionStalled); c != nil {
		t.Errorf("still Stalled: %+v", c)
	}
	good = head

	t.Log("malformed YAML: Stalled with a clear message, running revision untouched")
	head = r.commit(map[string]string{"broken.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n"})
	e.waitFor("stalled on build", func() bool {
		st := e.source().Status
		c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == ReasonBuildFailed && st.LastAttemptedRevision == "main@sha1:"+head
	})
	st = e.source().Status
	t.Logf("build failure message: %s", apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady).Message)
	if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v", c)
	}
	if st.LastAppliedRevision != "main@sha1:"+good {
		t.Errorf("lastAppliedRevision = %s, want %s", st.LastAppliedRevision, good)
	}
	if !e.exists(deploy("web")) || !e.exists(cm("fresh")) {
		t.Error("running revision touched")
	}

	t.Log("events: fetched, applied, pruned and each failure are recorded on the GitSource")
	want := map[string]string{EventFetched: "Normal", EventApplied: "Normal", EventPruned: "Normal",
		ReasonValidationFailed: "Warning", ReasonBuildFailed: "Warning"}
	e.waitFor("events recorded", func() bool {
		got := e.eventReasons("apps")
		for reason, typ := range want {
			if !strings.HasPrefix(got[reason], typ+": ") {
				return false
			}
		}
		return true
	})
	for reason, ev := range e.eventReasons("apps") {
		t.Logf("event %s: %.150s", reason, ev)
	}
}

// eventReasons returns the reasons of the Events recorded on GitSource default/<name>.
func (e *env) eventReasons(name string) map[string]string {
	e.t.Helper()
	list, err := e.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "GitSource" && ev.InvolvedObject.Name == name {
			out[ev.Reason] = ev.Type + ": " + ev.Message
		}
	}
	return out
}
