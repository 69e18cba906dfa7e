package gitsync

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

const (
	warnPodSecurity = `would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPath volumes (volume "root")`
	warnHostUsers   = "spec.template.spec.hostUsers: false is not carried out by flotilla"
	warnNamespace   = "existing pods in namespace \"demo\" violate the new PodSecurity enforce level"

	warnDaemonSetYAML = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: default
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      hostNetwork: true
      containers:
      - name: c
        image: busybox
      volumes:
      - name: root
        hostPath: {path: /}
`
	warnConfigMapYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: default\ndata: {a: b}\n"
	warnNamespaceYAML = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n"
)

// warningServer is an API that knows only the namespace "default" (and demo once applied),
// answers every server-side apply with the object sent, and adds Warning headers to those of
// DaemonSets (both warnings, the first twice) and Namespaces, dry-run or not.
type warningServer struct {
	*httptest.Server
	mu      sync.Mutex
	patches []string // "PATCH path dryRun=..."
}

func startWarningServer(t *testing.T) *warningServer {
	t.Helper()
	s := &warningServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// A request that is not an object's apply also warns, to show where its warnings go.
		w.Header().Add("Warning", `299 - "unrelated request"`)
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/default":
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default"}}`)
		case r.Method == http.MethodPatch:
			w.Header().Del("Warning")
			b, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.patches = append(s.patches, fmt.Sprintf("PATCH %s dryRun=%s", r.URL.Path, r.URL.Query().Get("dryRun")))
			s.mu.Unlock()
			switch {
			case strings.Contains(r.URL.Path, "/daemonsets/"):
				w.Header().Add("Warning", "299 - "+quoteWarning(warnPodSecurity))
				w.Header().Add("Warning", "299 - "+quoteWarning(warnHostUsers))
				w.Header().Add("Warning", "299 - "+quoteWarning(warnPodSecurity))
			case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/") && !strings.Contains(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/"):
				w.Header().Add("Warning", "299 - "+quoteWarning(warnNamespace))
			}
			_, _ = w.Write(b)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404,"message":"not found"}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// quoteWarning is text as the quoted warn-text of a Warning header.
func quoteWarning(text string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(text) + `"`
}

// recordedWarnings is a rest.WarningHandler that remembers what it was handed.
type recordedWarnings struct {
	mu    sync.Mutex
	texts []string
}

func (r *recordedWarnings) HandleWarningHeader(code int, agent, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.texts = append(r.texts, text)
}

func (r *recordedWarnings) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.texts)
}

// warningApplier is an Applier on a dynamic client of s set up by CollectWarnings, whose
// configuration had the handler prior.
func warningApplier(t *testing.T, s *warningServer, prior rest.WarningHandler) *Applier {
	t.Helper()
	cfg := &rest.Config{Host: s.URL, WarningHandler: prior}
	CollectWarnings(cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	return &Applier{Dynamic: dyn, Mapper: mapper}
}

func warningObjects(t *testing.T, files map[string]string) []Object {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := Render(context.Background(), dir, "", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestApplyWarnings applies a DaemonSet, a ConfigMap and a Namespace, each in its own
// request: the warnings come back attributed to the object whose apply they answered, once
// each, and the warnings of requests made for no object go to the handler the configuration
// had.
func TestApplyWarnings(t *testing.T) {
	s := startWarningServer(t)
	prior := &recordedWarnings{}
	a := warningApplier(t, s, prior)
	objs, fails := a.Prepare(warningObjects(t, map[string]string{
		"ds.yaml": warnDaemonSetYAML, "cm.yaml": warnConfigMapYAML, "ns.yaml": warnNamespaceYAML}), "default.src")
	if len(fails) > 0 {
		t.Fatal(fails)
	}
	applied, warnings, err := a.ApplyObjects(context.Background(), objs, "default.src")
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 3 {
		t.Fatalf("applied %d objects, want 3", len(applied))
	}
	want := []string{
		"Namespace demo: " + warnNamespace,
		"DaemonSet default/agent: " + warnPodSecurity,
		"DaemonSet default/agent: " + warnHostUsers,
	}
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
	// The Namespace's apply reads it first: that request's warning is not the object's.
	for _, w := range warnings {
		if strings.Contains(w, "unrelated request") {
			t.Errorf("warning of a read attributed to an object: %s", w)
		}
	}
	if got := prior.list(); !slices.Contains(got, "unrelated request") {
		t.Errorf("handler of the configuration got %q, want the warning of the Namespace's read", got)
	}
	for _, w := range prior.list() {
		if w != "unrelated request" {
			t.Errorf("handler of the configuration got an object's warning %q", w)
		}
	}

	// Without CollectWarnings nothing is attributed (and nothing fails).
	plain, err := dynamic.NewForConfig(&rest.Config{Host: s.URL, WarningHandler: &recordedWarnings{}})
	if err != nil {
		t.Fatal(err)
	}
	b := &Applier{Dynamic: plain, Mapper: a.Mapper}
	if _, warnings, err := b.ApplyObjects(context.Background(), objs, "default.src"); err != nil || len(warnings) > 0 {
		t.Errorf("client without CollectWarnings: warnings %q, err %v", warnings, err)
	}
}

// TestPlanWarnings plans a DaemonSet whose dry-run the API answers with warnings: they are
// plan warnings naming the object, once each, in every format.
func TestPlanWarnings(t *testing.T) {
	s := startWarningServer(t)
	a := warningApplier(t, s, &recordedWarnings{})
	dir := t.TempDir()
	write(t, dir, "ds.yaml", warnDaemonSetYAML)
	write(t, dir, "cm.yaml", warnConfigMapYAML)
	p, err := a.Plan(context.Background(), PlanOptions{RepoDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range p.Items {
		if it.Action != PlanCreate {
			t.Errorf("%s: %s %s, want create", it.Ref(), it.Action, it.Reason)
		}
	}
	want := []string{
		"DaemonSet default/agent: " + warnPodSecurity,
		"DaemonSet default/agent: " + warnHostUsers,
	}
	var got []string
	for _, w := range p.Warnings {
		if strings.HasPrefix(w, "GitSource ") || strings.HasPrefix(w, "scheduling not simulated: ") {
			continue // the source does not exist on this server, nor do Nodes
		}
		got = append(got, w)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plan warnings:\n%s\nwant:\n%s", strings.Join(p.Warnings, "\n"), strings.Join(want, "\n"))
	}
	if text := p.Text(); !strings.Contains(text, "warning: DaemonSet default/agent: "+warnPodSecurity+"\n") {
		t.Errorf("text plan does not show the warning:\n%s", text)
	}
	if md := p.Markdown(); !strings.Contains(md, "DaemonSet default/agent: would violate PodSecurity") {
		t.Errorf("markdown plan does not show the warning:\n%s", md)
	}
	b, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(decoded.Warnings, want[0]) {
		t.Errorf("json plan warnings %q, want %q among them", decoded.Warnings, want[0])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pa := range s.patches {
		if !strings.HasSuffix(pa, "dryRun=All") {
			t.Errorf("plan changed the server: %s", pa)
		}
	}
}

// TestReconcileReportsWarningsOncePerRevision drives full rounds of the controller: the API's
// warnings for the apply of a revision are Warning events APIWarning on the GitSource, each
// once while the revision stays the same (every round re-applies it), and again for a new
// revision.
func TestReconcileReportsWarningsOncePerRevision(t *testing.T) {
	r := newRepo(t)
	head1 := r.commit(map[string]string{"ds.yaml": warnDaemonSetYAML, "cm.yaml": warnConfigMapYAML})
	s := startWarningServer(t)
	a := warningApplier(t, s, &recordedWarnings{})
	rec := record.NewFakeRecorder(100)
	c := &Controller{
		cfg:      Config{CacheDir: t.TempDir()},
		dyn:      a.Dynamic,
		applier:  a,
		recorder: rec,
		log:      logrus.NewEntry(logrus.StandardLogger()),
		state:    map[string]*sourceState{},
	}
	// The root source: applied with the controller's own Applier, without a ServiceAccount.
	gs := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: RootNamespace, Name: RootName, Generation: 1},
		Spec: v1alpha1.GitSourceSpec{URL: "file://" + r.dir}}
	st := &v1alpha1.GitSourceStatus{}
	ss := &sourceState{}
	round := func(t *testing.T, head string) []string {
		t.Helper()
		if _, err := c.reconcile(context.Background(), gs, st, ss); err != nil {
			t.Fatalf("round: %v", err)
		}
		if !strings.HasSuffix(st.LastAppliedRevision, head) {
			t.Fatalf("status %+v: revision %s not applied", st, head)
		}
		var events []string
		for {
			select {
			case e := <-rec.Events:
				if strings.Contains(e, EventAPIWarning) {
					events = append(events, e)
				}
			default:
				return events
			}
		}
	}
	want := []string{
		"Warning APIWarning DaemonSet default/agent: " + warnPodSecurity,
		"Warning APIWarning DaemonSet default/agent: " + warnHostUsers,
	}
	if got := round(t, head1); !slices.Equal(got, want) {
		t.Fatalf("first round events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := round(t, head1); len(got) > 0 {
		t.Errorf("same revision applied again: warnings reported again:\n%s", strings.Join(got, "\n"))
	}
	head2 := r.commit(map[string]string{"cm.yaml": strings.Replace(warnConfigMapYAML, "{a: b}", "{a: c}", 1)})
	if got := round(t, head2); !slices.Equal(got, want) {
		t.Errorf("new revision events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := round(t, head2); len(got) > 0 {
		t.Errorf("new revision applied again: warnings reported again:\n%s", strings.Join(got, "\n"))
	}
}
