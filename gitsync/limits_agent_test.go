package gitsync

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// configMaps is a file of n ConfigMaps cm-0 ... in namespace default whose key "v" is value.
func configMaps(n int, value string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d, namespace: default}\ndata: {v: %q}\n", i, value)
	}
	return b.String()
}

// requestFetch asks the controller to fetch ns/name at once, as the push webhook does.
func requestFetch(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestedAtAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := dyn.Resource(GitSourceResource).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// getSource reads GitSource ns/name.
func getSource(ctx context.Context, dyn dynamic.Interface, ns, name string) (*v1alpha1.GitSource, error) {
	u, err := dyn.Resource(GitSourceResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
		return nil, err
	}
	return &gs, nil
}

// TestLimitsAgainstAgent: the agent's own gitsync (root source from --git-url, with low
// limits) applies a small revision; a revision over --git-max-objects and then a
// repository over --git-max-repo-size stall the source with the limit named while the
// objects of the last good revision stay applied and the agent stays up; a revision within
// the limits is applied again. The agent's memory is printed.
func TestLimitsAgainstAgent(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"cms.yaml": configMaps(5, "one")})
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=gitsync", "--git-url", "file://" + r.dir,
		"--git-max-objects=20", "--git-max-repo-size=4Mi"}})
	pid := agentPID(t, a.DataDir)
	dyn, err := dynamic.NewForConfig(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := a.Client()
	var gs *v1alpha1.GitSource
	waitSource := func(what string, cond func(*v1alpha1.GitSource) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			g, err := getSource(ctx, dyn, "kube-system", "root")
			if err != nil {
				return false, nil
			}
			gs = g
			return cond(g), nil
		})
		if err != nil {
			var conds []metav1.Condition
			if gs != nil {
				conds = gs.Status.Conditions
			}
			t.Fatalf("waiting for %s: %v; conditions %+v", what, err, conds)
		}
	}
	appliedAt := func(head string) func(*v1alpha1.GitSource) bool {
		return func(g *v1alpha1.GitSource) bool {
			c := apimeta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionTrue && g.Status.LastAppliedRevision == "main@sha1:"+head
		}
	}
	stalledOn := func(head, flag string) func(*v1alpha1.GitSource) bool {
		return func(g *v1alpha1.GitSource) bool {
			c := apimeta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionStalled)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, flag) &&
				(head == "" || g.Status.LastAttemptedRevision == "main@sha1:"+head)
		}
	}
	value := func() string {
		t.Helper()
		cm, err := client.CoreV1().ConfigMaps("default").Get(context.Background(), "cm-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data["v"]
	}
	waitSource("the first revision applied", appliedAt(head))
	good := head
	t.Logf("first revision applied; agent %s", procStatus(t, pid, "VmRSS"))

	head = r.commit(map[string]string{"cms.yaml": configMaps(30, "two")})
	requestFetch(t, dyn, "kube-system", "root")
	waitSource("the source stalled on --git-max-objects", stalledOn(head, "--git-max-objects"))
	ready := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
	t.Logf("over the object limit: Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	if gs.Status.LastAppliedRevision != "main@sha1:"+good || value() != "one" {
		t.Fatalf("after a revision over the object limit: last applied %s, cm-0 v=%q; want %s still applied", gs.Status.LastAppliedRevision, value(), good)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Get(context.Background(), "cm-25", metav1.GetOptions{}); err == nil {
		t.Fatal("ConfigMap cm-25 of the refused revision exists")
	}

	blob := make([]byte, 16<<20) // random: git cannot compress it
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	head = r.commit(map[string]string{"cms.yaml": configMaps(5, "three"), "big.bin": string(blob)})
	requestFetch(t, dyn, "kube-system", "root")
	waitSource("the source stalled on --git-max-repo-size", stalledOn("", "--git-max-repo-size"))
	ready = apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
	t.Logf("over the size limit: Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	if gs.Status.LastAppliedRevision != "main@sha1:"+good || value() != "one" {
		t.Fatalf("after a repository over the size limit: last applied %s, cm-0 v=%q; want %s still applied", gs.Status.LastAppliedRevision, value(), good)
	}
	status := procStatus(t, pid, "VmRSS", "VmHWM")
	framework.Figure(t, "agent after the refused fetch of a 16 MiB repository (limit 4Mi): %s", status)
	if hwm := kib(status, "VmHWM"); hwm > 1<<20 {
		t.Fatalf("the agent's peak RSS is %d KiB, over 1 GiB", hwm)
	}

	head = r.commit(map[string]string{"cms.yaml": configMaps(5, "four"), "big.bin": ""})
	requestFetch(t, dyn, "kube-system", "root")
	waitSource("a revision within the limits applied", appliedAt(head))
	if v := value(); v != "four" {
		t.Fatalf("cm-0 v=%q after the revision within the limits, want four", v)
	}
	if c := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionStalled); c != nil {
		t.Fatalf("still Stalled after a good revision: %+v", c)
	}
}

// kib reads "Field: N kB" from procStatus output.
func kib(status, field string) int64 {
	for _, part := range strings.Split(status, ", ") {
		if f := strings.Fields(part); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// TestSecretChangeFetchesAgainstAgent: a source whose https credentials are wrong stalls;
// correcting its Secret fetches at once (the interval is an hour), and a CA bundle in the
// Secret is what the server's certificate is checked against.
func TestSecretChangeFetchesAgainstAgent(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	url, ca, _ := serveTLS(t, r, "deploy", "right")
	e := start(t)
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "creds"},
		Data: map[string][]byte{"username": []byte("deploy"), "password": []byte("wrong"), CAKey: ca}}
	if _, err := e.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createSource(map[string]any{"url": url, "interval": "1h", "secretRef": map[string]any{"name": "creds"}})
	e.waitFor("the source stalled on the wrong password", func() bool {
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "refused the credentials")
	})
	sec.Data["password"] = []byte("right")
	if _, err := e.client.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the revision applied after the Secret was corrected", e.readyAt(head))
}

// TestInsecureSourceAgainstAgent: the API refuses an http:// source unless it is insecure;
// an insecure one is fetched, with a Warning condition that says what to change.
func TestInsecureSourceAgainstAgent(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	url, _ := servePlain(t, r)
	e := start(t)
	_, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Create(context.Background(), sourceObject("apps", map[string]any{"url": url}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.url") || !strings.Contains(err.Error(), "spec.insecure") {
		t.Fatalf("creating an http:// source: %v, want a refusal naming spec.url and spec.insecure", err)
	}
	t.Logf("refused: %v", err)
	e.createSource(map[string]any{"url": url, "insecure": true})
	e.waitFor("the insecure source applied", e.readyAt(head))
	w := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionWarning)
	if w == nil || w.Status != metav1.ConditionTrue || w.Reason != ReasonInsecureTransport || !strings.Contains(w.Message, "http://") {
		t.Fatalf("Warning condition %+v, want True/%s naming http://", w, ReasonInsecureTransport)
	}
	t.Logf("warning: %s", w.Message)
}
