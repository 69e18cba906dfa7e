package gitsync

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// planSecretValues are the values the Secrets of these tests hold; no plan may show them,
// plain or base64-encoded.
var planSecretValues = []string{"old-pass-1234", "new-pass-5678", "CERT-OLD-abcd", "CERT-NEW-efgh",
	"removed-value-42", "added-value-43", "fresh-key-value-44", "fresh-token-value-45", "last-applied-value-46"}

func planAssertNoSecrets(t *testing.T, format, out string) {
	t.Helper()
	for _, v := range planSecretValues {
		for _, form := range []string{v, b64(v), strings.TrimRight(b64(v), "=")} {
			if strings.Contains(out, form) {
				t.Errorf("%s output shows the secret value %q (as %q):\n%s", format, v, form, out)
			}
		}
	}
}

// DiffObjects hides every value of a Secret: each changed, added or removed key of data and
// stringData (keys with dots included) reads "(value changed)", a whole map set on a null
// one is one change per key, and the last-applied annotation is never shown. A ConfigMap's
// data and the Secret's other fields are shown as they are.
func TestDiffObjectsRedactsSecrets(t *testing.T) {
	live := `apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: demo
  annotations: {team: a, kubectl.kubernetes.io/last-applied-configuration: '{"data":{"password":"` + b64("last-applied-value-46") + `"}}'}
type: Opaque
data: {password: ` + b64("old-pass-1234") + `, tls.crt: ` + b64("CERT-OLD-abcd") + `, removed: ` + b64("removed-value-42") + `, same: ` + b64("same") + `}
`
	planned := `apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: demo
  annotations: {team: b, kubectl.kubernetes.io/last-applied-configuration: '{"data":{"password":"` + b64("new-pass-5678") + `"}}'}
type: kubernetes.io/tls
data: {password: ` + b64("new-pass-5678") + `, tls.crt: ` + b64("CERT-NEW-efgh") + `, added: ` + b64("added-value-43") + `, same: ` + b64("same") + `}
`
	r := PlanRedacted
	tests := []struct {
		name          string
		live, planned string
		want          []FieldChange
	}{
		{"update", live, planned, []FieldChange{
			{Path: "metadata.annotations.team", Old: `"a"`, New: `"b"`},
			{Path: "data.added", New: r},
			{Path: "data.password", Old: r, New: r},
			{Path: "data.removed", Old: r},
			{Path: `data["tls.crt"]`, Old: r, New: r},
			{Path: "type", Old: `"Opaque"`, New: `"kubernetes.io/tls"`},
		}},
		{"create", "", "apiVersion: v1\nkind: Secret\nmetadata: {name: fresh, namespace: demo}\n" +
			"data: {api.key: " + b64("fresh-key-value-44") + "}\nstringData: {token: fresh-token-value-45}\n", []FieldChange{
			{Path: "apiVersion", New: `"v1"`}, {Path: "kind", New: `"Secret"`},
			{Path: "metadata.name", New: `"fresh"`}, {Path: "metadata.namespace", New: `"demo"`},
			{Path: `data["api.key"]`, New: r}, {Path: "stringData.token", New: r},
		}},
		{"whole map set on null", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: null\n",
			"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a.b: " + b64("added-value-43") + ", c: " + b64("fresh-key-value-44") + "}\n",
			[]FieldChange{{Path: `data["a.b"]`, New: r}, {Path: "data.c", New: r}}},
		{"whole map removed to null", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {p: removed-value-42}\n",
			"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: null\n",
			[]FieldChange{{Path: "stringData.p", Old: r}}},
		{"a field named like data is shown", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata-note: one\n",
			"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata-note: two\n",
			[]FieldChange{{Path: "data-note", Old: `"one"`, New: `"two"`}}},
		{"a ConfigMap's data is shown", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: a}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: b}\n",
			[]FieldChange{{Path: "data.k", Old: `"a"`, New: `"b"`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffObjects(planObj(t, tc.live), planObj(t, tc.planned))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DiffObjects:\n got  %+v\n want %+v", got, tc.want)
			}
			b, _ := json.Marshal(got)
			planAssertNoSecrets(t, "DiffObjects", string(b))
		})
	}
}

// planSecretApplier is an Applier whose dry-run apply answers as the API does for a Secret
// gitsync alone manages: the object is what was sent, stringData moved into data
// (base64-encoded).
func planSecretApplier(t *testing.T, objs ...runtime.Object) *Applier {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "secrets"}:    "SecretList",
		{Version: "v1", Resource: "namespaces"}: "NamespaceList",
		GitSourceResource:                       "GitSourceList",
	}, objs...)
	dyn.PrependReactor("patch", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		var obj map[string]any
		if err := json.Unmarshal(p.GetPatch(), &obj); err != nil {
			return true, nil, err
		}
		u := &unstructured.Unstructured{Object: obj}
		if sd, ok := obj["stringData"].(map[string]any); ok {
			data, _ := obj["data"].(map[string]any)
			if data == nil {
				data = map[string]any{}
			}
			for k, v := range sd {
				data[k] = b64(v.(string))
			}
			obj["data"] = data
			delete(obj, "stringData")
		}
		u.SetNamespace(p.GetNamespace())
		u.SetResourceVersion("2")
		return true, u, nil
	})
	return &Applier{Dynamic: dyn, Mapper: apiserver.OfflineRESTMapper()}
}

func planYAMLObject(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return u
}

// A plan with a Secret created and a Secret updated shows which keys change, in text,
// markdown and json, and never a value.
func TestPlanNeverShowsSecretValues(t *testing.T) {
	repo := t.TempDir()
	files := map[string]string{
		"app/db.yaml": `apiVersion: v1
kind: Secret
metadata: {name: db, namespace: demo}
type: Opaque
stringData: {password: new-pass-5678}
data: {tls.crt: ` + b64("CERT-NEW-efgh") + `, added: ` + b64("added-value-43") + `}
`,
		"app/fresh.yaml": `apiVersion: v1
kind: Secret
metadata:
  name: fresh
  namespace: demo
  annotations: {kubectl.kubernetes.io/last-applied-configuration: '{"stringData":{"token":"last-applied-value-46"}}'}
data: {api.key: ` + b64("fresh-key-value-44") + `}
stringData: {token: fresh-token-value-45}
`,
	}
	for name, content := range files {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ns := planYAMLObject(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n")
	live := planYAMLObject(t, `apiVersion: v1
kind: Secret
metadata: {name: db, namespace: demo, resourceVersion: "1", labels: {flotilla.dev/source: kube-system.root}}
type: Opaque
data: {password: `+b64("old-pass-1234")+`, tls.crt: `+b64("CERT-OLD-abcd")+`, removed: `+b64("removed-value-42")+`}
`)
	a := planSecretApplier(t, ns, live)
	p, err := a.Plan(context.Background(), PlanOptions{RepoDir: repo, Path: "app", Source: DefaultPlanSource})
	if err != nil {
		t.Fatal(err)
	}
	items := map[string]PlanItem{}
	for _, it := range p.Items {
		items[it.Ref()] = it
	}
	r := PlanRedacted
	upd := items["Secret demo/db"]
	if upd.Action != PlanUpdate {
		t.Fatalf("Secret demo/db: %+v, want an update", upd)
	}
	if want := []FieldChange{{Path: "data.added", New: r}, {Path: "data.password", Old: r, New: r},
		{Path: "data.removed", Old: r}, {Path: `data["tls.crt"]`, Old: r, New: r}}; !reflect.DeepEqual(upd.Changes, want) {
		t.Errorf("update changes:\n got  %+v\n want %+v", upd.Changes, want)
	}
	create := items["Secret demo/fresh"]
	if create.Action != PlanCreate {
		t.Fatalf("Secret demo/fresh: %+v, want a create", create)
	}
	var shown []string
	for _, c := range create.Changes {
		if strings.HasPrefix(c.Path, "data") || strings.HasPrefix(c.Path, "stringData") {
			shown = append(shown, c.Path+"="+c.New)
		}
	}
	if want := []string{`data["api.key"]=` + r, "stringData.token=" + r}; !reflect.DeepEqual(shown, want) {
		t.Errorf("create shows %v, want %v", shown, want)
	}

	text := p.Text()
	md := p.Markdown()
	js, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for format, out := range map[string]string{"text": text, "markdown": md, "json": string(js)} {
		planAssertNoSecrets(t, format, out)
		if !strings.Contains(out, r) {
			t.Errorf("%s output does not say which values change:\n%s", format, out)
		}
	}
	for _, want := range []string{"- data.password: " + r, "+ data.added: " + r, `- data["tls.crt"]: ` + r} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(md, "+ stringData.token: "+r) {
		t.Errorf("markdown lacks the created Secret's key:\n%s", md)
	}
	var back Plan
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, p) {
		t.Errorf("json round trip changed the plan:\n%s", js)
	}
}
