package gitsync

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
)

// remoteCase is a repository whose kustomization names something outside the repository
// in one field (testdata/render_remote_fields.json, shared with cmd/flotilla's tests).
type remoteCase struct {
	Name string `json:"name"`
	// File is the kustomization the error names, Field the field, Value the name refused.
	File  string  `json:"file"`
	Field string  `json:"field"`
	Value *string `json:"value"`
	// KustomizeFetches: kustomize on its own would request the server.
	KustomizeFetches bool              `json:"kustomizeFetches"`
	Files            map[string]string `json:"files"`
}

// want is what the error of rendering the case (under prefix in the repository) says.
func (c remoteCase) want(prefix string) string {
	// A plugin configuration file is named from the repository's root too.
	w := prefix + c.File + ": " + strings.ReplaceAll(c.Field, "(app/", "("+prefix+"app/")
	if c.Value != nil {
		w += " " + strconv.Quote(*c.Value)
	}
	return w
}

func remoteCases(t *testing.T, url string) []remoteCase {
	t.Helper()
	b, err := os.ReadFile("testdata/render_remote_fields.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Cases []remoteCase }
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(b), "{{URL}}", url)), &d); err != nil {
		t.Fatal(err)
	}
	return d.Cases
}

// countingServer answers every request with a ConfigMap and counts the requests.
type countingServer struct {
	*httptest.Server
	n atomic.Int64
}

func newCountingServer(t *testing.T) *countingServer {
	s := &countingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		_, _ = w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\n"))
	}))
	t.Cleanup(s.Close)
	return s
}

// TestRenderRefusesRemoteFields: every field in which kustomize reads a file refuses a URL
// (and a remote git base, a helm chart, a plugin other than a builtin, a name that is not
// a file of the repository), in the kustomization rendered, its bases and its components,
// naming the file and the field, with no request to the server; from a work tree and from
// a commit.
func TestRenderRefusesRemoteFields(t *testing.T) {
	srv := newCountingServer(t)
	cases := remoteCases(t, srv.URL)
	ctx := context.Background()
	for _, c := range cases {
		t.Run("Render/"+c.Name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range c.Files {
				write(t, root, name, content)
			}
			_, err := Render(ctx, root, "app", Limits{})
			if err == nil || !strings.Contains(err.Error(), c.want("")) {
				t.Fatalf("err = %v\nwant %s", err, c.want(""))
			}
			if n := srv.n.Load(); n != 0 {
				t.Fatalf("the server saw %d request(s)", n)
			}
		})
	}

	// Every case in one commit, each in its own directory.
	r := newRepo(t)
	files := map[string]string{}
	for _, c := range cases {
		for name, content := range c.Files {
			files[c.Name+"/"+name] = content
		}
	}
	commit := r.commit(files)
	for _, c := range cases {
		t.Run("RenderCommit/"+c.Name, func(t *testing.T) {
			_, err := RenderCommit(ctx, r.dir, commit, c.Name+"/app", Limits{})
			if err == nil || !strings.Contains(err.Error(), c.want(c.Name+"/")) {
				t.Fatalf("err = %v\nwant %s", err, c.want(c.Name+"/"))
			}
			if n := srv.n.Load(); n != 0 {
				t.Fatalf("the server saw %d request(s)", n)
			}
		})
	}
}

// TestRenderRemoteFieldsReachKustomize shows the cases above are real: kustomize, with the
// options Render gives it but without checkLocal, requests the server for each case marked
// kustomizeFetches.
func TestRenderRemoteFieldsReachKustomize(t *testing.T) {
	srv := newCountingServer(t)
	_, errGit := exec.LookPath("git")
	// kustomize clones into a directory of the host's temporary directory, and removes it
	// through the (in-memory) file system it was given: keep them in the test's.
	t.Setenv("TMPDIR", t.TempDir())
	for _, c := range remoteCases(t, srv.URL) {
		if !c.KustomizeFetches {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			if strings.Contains(*c.Value, ".git//") && errGit != nil {
				t.Skip("kustomize clones with the git CLI, which is not installed")
			}
			mem := newMemFS()
			for name, content := range c.Files {
				if err := mem.WriteFile(name, []byte(content)); err != nil {
					t.Fatal(err)
				}
			}
			before := srv.n.Load()
			_, err := krusty.MakeKustomizer(kustomizeOptions()).Run(mem, "/app")
			if srv.n.Load() == before {
				t.Fatalf("kustomize did not request the server (err %v): the case proves nothing", err)
			}
		})
	}
}

// TestRenderLocalFieldsStillRender: the same fields naming files of the repository render.
func TestRenderLocalFieldsStillRender(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"base/kustomization.yaml": "resources:\n- cm.yaml\n",
		"base/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: v\n",
		"comp/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- path: comp-patch.yaml\n",
		"comp/comp-patch.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  comp: \"yes\"\n",
		"app/kustomization.yaml": `resources:
- ../base
- ./github.com/org/repo
components:
- ../comp
configMapGenerator:
- name: gen
  files:
  - a.txt
  - key=a.txt
  envs:
  - e.env
secretGenerator:
- name: sec
  env: e.env
patches:
- path: patch.yaml
patchesStrategicMerge:
- sm.yaml
- |
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: cm
  data:
    inline: "yes"
replacements:
- path: repl.yaml
crds:
- crd.json
configurations:
- config.yaml
generators:
- gen.yaml
transformers:
- t.yaml
- |
  apiVersion: builtin
  kind: LabelTransformer
  metadata:
    name: inline
  labels:
    inline: "yes"
  fieldSpecs:
  - path: metadata/labels
    create: true
`,
		"app/github.com/org/repo/kustomization.yaml": "resources:\n- cm.yaml\n",
		"app/github.com/org/repo/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vendored\n",
		"app/a.txt":                                  "a",
		"app/e.env":                                  "E=1\n",
		"app/patch.yaml":                             "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  patched: \"yes\"\n",
		"app/sm.yaml":                                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  sm: \"yes\"\n",
		"app/repl.yaml":                              "source:\n  kind: ConfigMap\n  name: cm\n  fieldPath: data.k\ntargets:\n- select:\n    kind: ConfigMap\n    name: vendored\n  fieldPaths:\n  - data.copied\n  options:\n    create: true\n",
		"app/crd.json":                               "{}\n",
		"app/config.yaml":                            "nameReference: []\n",
		"app/gen.yaml":                               "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata:\n  name: fromplugin\nfiles:\n- a.txt\n",
		"app/t.yaml":                                 "apiVersion: builtin\nkind: PatchTransformer\nmetadata:\n  name: p\npath: patch2.yaml\ntarget:\n  kind: ConfigMap\n  name: vendored\n",
		"app/patch2.yaml":                            "- op: add\n  path: /data/fromTransformer\n  value: \"yes\"\n",
	} {
		write(t, root, name, content)
	}
	objs, err := Render(context.Background(), root, "app", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Obj.GetKind()+"/"+o.Obj.GetName())
		if o.Obj.GetName() == "cm" {
			data := o.Obj.Object["data"].(map[string]any)
			for _, k := range []string{"k", "comp", "patched", "sm", "inline"} {
				if data[k] == nil {
					t.Errorf("cm lacks data.%s: %v", k, data)
				}
			}
		}
		if o.Obj.GetName() == "vendored" {
			data, _ := o.Obj.Object["data"].(map[string]any)
			if data["copied"] != "v" || data["fromTransformer"] != "yes" {
				t.Errorf("vendored: data %v", data)
			}
		}
		if o.Obj.GetLabels()["inline"] != "yes" {
			t.Errorf("%s/%s: inline transformer did not run", o.Obj.GetKind(), o.Obj.GetName())
		}
	}
	slices.Sort(got)
	want := []string{"ConfigMap/cm", "ConfigMap/fromplugin-", "ConfigMap/gen-", "ConfigMap/vendored", "Secret/sec-"}
	if len(got) != len(want) {
		t.Fatalf("rendered %v, want %v", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("rendered %v, want %v", got, want)
		}
	}
}

// TestCheckLocalKnowsEveryField fails when kustomize gains a field of its Kustomization, or
// a builtin plugin, that checkLocal does not classify: a new field may name a file to read
// (perhaps a URL), and must then be checked.
func TestCheckLocalKnowsEveryField(t *testing.T) {
	// Fields that name files (checked by checkLocal), and fields that name none.
	checked := []string{"resources", "bases", "components", "crds", "configurations", "openapi",
		"configMapGenerator", "secretGenerator", "patches", "patchesJson6902", "patchesStrategicMerge",
		"replacements", "helmCharts", "helmChartInflationGenerator", "helmGlobals", "generators",
		"transformers", "validators"}
	noFiles := []string{"metadata", "namePrefix", "nameSuffix", "namespace", "commonLabels", "labels",
		"commonAnnotations", "images", "imageTags", "replicas", "vars", "sortOptions", "generatorOptions",
		"buildMetadata"}
	typ := reflect.TypeFor[kustypes.Kustomization]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Anonymous { // TypeMeta: apiVersion, kind
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !slices.Contains(checked, name) && !slices.Contains(noFiles, name) {
			t.Errorf("kustomize's Kustomization has a field %q (%s) that checkLocal does not know: check it, or list it as naming no file", name, f.Name)
		}
	}

	// Builtin plugins that read files (their fields are checked), and those that read none.
	pluginsChecked := []string{"ConfigMapGenerator", "SecretGenerator", "PatchTransformer", "PatchJson6902Transformer",
		"PatchStrategicMergeTransformer", "ReplacementTransformer", "ValueAddTransformer", "HelmChartInflationGenerator"}
	pluginsNoFiles := []string{"AnnotationsTransformer", "HashTransformer", "IAMPolicyGenerator", "ImageTagTransformer",
		"LabelTransformer", "NamespaceTransformer", "PrefixTransformer", "SuffixTransformer", "PrefixSuffixTransformer",
		"ReplicaCountTransformer", "SortOrderTransformer", "LegacyOrderTransformer"}
	for _, name := range krusty.GetBuiltinPluginNames() {
		if !slices.Contains(pluginsChecked, name) && !slices.Contains(pluginsNoFiles, name) {
			t.Errorf("kustomize has a builtin plugin %s that checkLocal does not know: check the files its configuration names, or list it as reading none", name)
		}
	}
}

// TestIsURLAndGitURL: what is refused as a URL or a remote git base, and what is a local name.
func TestIsURLAndGitURL(t *testing.T) {
	for _, s := range []string{"https://x/y", "HTTP://x/y", "http:x", "ssh://git@host/r", "file:///etc/passwd", "git::https://x/r", "s3://b/k"} {
		if !isURL(s) {
			t.Errorf("isURL(%q) = false", s)
		}
	}
	for _, s := range []string{"git@github.com:org/repo", "github.com/org/repo", "GitHub.com:org/repo", "git::x/y", "user-1@host:org/repo"} {
		if isURL(s) || !isGitURL(s) {
			t.Errorf("isURL(%q) = %v, isGitURL = %v: want a git URL", s, isURL(s), isGitURL(s))
		}
	}
	for _, s := range []string{"cm.yaml", "../base", "./github.com/org/repo", "a:b.yaml", "100%/x#y@z=w~.yaml", "/abs/cm.yaml", "with space.yaml"} {
		if isURL(s) || isGitURL(s) {
			t.Errorf("%q: refused as a URL (%v) or git URL (%v)", s, isURL(s), isGitURL(s))
		}
	}
	if p, ok := fileSourcePath("k=a/b.txt"); !ok || p != "a/b.txt" {
		t.Errorf("fileSourcePath(k=a/b.txt) = %q, %v", p, ok)
	}
	if _, ok := fileSourcePath("a=b=c"); ok {
		t.Errorf("fileSourcePath(a=b=c): kustomize refuses it")
	}
}
