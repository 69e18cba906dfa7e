package api

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// gitSourceManifest is GitSource default/name with the given spec lines (indented under spec:).
func gitSourceManifest(name, spec string) string {
	return "apiVersion: flotilla.dev/v1alpha1\nkind: GitSource\nmetadata:\n  name: " + name +
		"\n  namespace: default\nspec:\n" + spec
}

// TestGitSourceValidation checks through kubectl that the API validates and defaults
// GitSources: an http:// URL needs spec.insecure, which is then accepted with a warning; an
// interval under the minimum is refused; what is left unset reads back defaulted.
func TestGitSourceValidation(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})

	wantInvalid := func(t *testing.T, manifest string, want ...string) {
		t.Helper()
		out, errOut, err := a.Kubectl(manifest, "create", "-f", "-")
		if err == nil {
			t.Fatalf("accepted, want 422: %s", out)
		}
		if !strings.Contains(errOut, "is invalid") {
			t.Errorf("not refused as invalid (422):\n%s", errOut)
		}
		for _, w := range want {
			if !strings.Contains(errOut, w) {
				t.Errorf("error does not say %q:\n%s", w, errOut)
			}
		}
	}

	t.Run("http without insecure is refused", func(t *testing.T) {
		wantInvalid(t, gitSourceManifest("plain", "  url: http://git.example.com/site.git\n"),
			"spec.url", "http:// sends the repository (and any credentials) in the clear",
			"set spec.insecure: true to accept it")
	})

	t.Run("http with insecure is created with a warning", func(t *testing.T) {
		_, errOut, err := a.Kubectl(gitSourceManifest("plain", "  url: http://git.example.com/site.git\n  insecure: true\n"),
			"create", "-f", "-")
		if err != nil {
			t.Fatalf("kubectl create: %v\n%s", err, errOut)
		}
		want := "Warning: spec.insecure: the repository is fetched over http:// without TLS: " +
			"a network attacker can change what is applied; set spec.verify to require signed commits"
		if !strings.Contains(errOut, want) {
			t.Errorf("kubectl create printed:\n%s\nwant the warning %q", errOut, want)
		}
	})

	t.Run("interval under the minimum is refused", func(t *testing.T) {
		wantInvalid(t, gitSourceManifest("fast", "  url: https://git.example.com/site.git\n  interval: 5s\n"),
			"spec.interval", "at least 10s")
	})

	t.Run("unset fields read back defaulted", func(t *testing.T) {
		a.MustKubectl(gitSourceManifest("defaults", "  url: https://git.example.com/site.git\n"), "create", "-f", "-")
		got := a.MustKubectl("", "get", "gitsource", "defaults", "-n", "default",
			"-o", `jsonpath={.spec.interval} {.spec.ref} {.spec.prune} [{.spec.timeout}]`)
		if want := `1m0s {"branch":"main"} true []`; got != want {
			t.Errorf("spec read back as %q, want %q", got, want)
		}
	})

	t.Run("an update is validated as a create", func(t *testing.T) {
		_, errOut, err := a.Kubectl("", "patch", "gitsource", "defaults", "-n", "default", "--type=merge",
			"-p", `{"spec":{"ref":{"branch":null,"commit":"abc"}}}`)
		if err == nil || !strings.Contains(errOut, "spec.ref.commit") {
			t.Errorf("patch to a short commit: err=%v\n%s\nwant 422 naming spec.ref.commit", err, errOut)
		}
		_, errOut, err = a.Kubectl("", "patch", "gitsource", "defaults", "-n", "default", "--type=merge",
			"-p", `{"spec":{"url":"git://git.example.com/site.git","insecure":true}}`)
		if err != nil {
			t.Fatalf("patch to git:// with insecure: %v\n%s", err, errOut)
		}
		if !strings.Contains(errOut, "Warning: spec.insecure: the repository is fetched over git:// without TLS") {
			t.Errorf("patch to git:// printed:\n%s\nwant the insecure warning", errOut)
		}
	})

	t.Run("a status update is quiet and keeps the spec", func(t *testing.T) {
		cfg := a.RESTConfig()
		warnings := &framework.Warnings{}
		cfg.WarningHandler = warnings
		res := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "flotilla.dev", Version: "v1alpha1", Resource: "gitsources"}).
			Namespace("default")
		ctx := context.Background()
		gs, err := res.Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(gs.Object, "main@sha1:0123456789abcdef0123456789abcdef01234567", "status", "lastFetchedRevision"); err != nil {
			t.Fatal(err)
		}
		// The spec sent with a status update is ignored (not refused): the stored one stays.
		if err := unstructured.SetNestedField(gs.Object, "1s", "spec", "interval"); err != nil {
			t.Fatal(err)
		}
		updated, err := res.UpdateStatus(ctx, gs, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("status update: %v", err)
		}
		if iv, _, _ := unstructured.NestedString(updated.Object, "spec", "interval"); iv != "1m0s" {
			t.Errorf("spec.interval after a status update = %q, want the stored 1m0s", iv)
		}
		if w := warnings.Take(); len(w) != 0 {
			t.Errorf("status update answered warnings %q, want none", w)
		}
	})
}
