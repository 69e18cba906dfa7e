package gitsync

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// kustomize reads every file through its loader, which fetches a name with an http(s)
// scheme over HTTP, and clones a base or component that reads as a git URL with the git
// program; neither can be turned off or redirected through krusty's options, and the
// file system Render hands it is never asked. So checkLocal reads every kustomization the
// build reaches, and every builtin plugin configuration it names, exactly as kustomize will
// (with its own decoders), and refuses each field that names something other than a file of
// the repository before kustomize runs. The fields are those of kustomize's Kustomization
// (types.Kustomization) and of its builtin plugins that name a file; render_local_test.go
// fails when kustomize gains a field this does not classify.

// Reasons a name is refused.
const (
	reasonURL         = "only files in the repository can be read (no URLs)"
	reasonBaseURL     = "only files and directories in the repository can be read (no URLs: remote bases are not allowed)"
	reasonFileMissing = "not a file in the repository"
	reasonBaseMissing = "not a file or directory in the repository"
	reasonHelm        = "flotilla does not run helm: render the chart into the repository (helm template) and list the result in resources"
	reasonPluginDir   = "a directory of plugin configurations is not supported: list its configuration files here instead"
	reasonNotBuiltin  = "only kustomize's builtin plugins run (apiVersion: builtin); exec, Go and container (KRM function) plugins are refused"
)

// checkLocal refuses the kustomization at dir of mem, and every kustomization it reaches
// (its bases and components, recursively), when a field names anything kustomize would
// fetch from the network or run: a URL, a remote git base, a helm chart, a plugin other
// than kustomize's builtin ones. Every name must be a file (or, for a base, a directory)
// of the repository. Errors name the kustomization file and the field.
func checkLocal(mem *memFS, dir string) error {
	rf := provider.NewDefaultDepProvider().GetResourceFactory()
	c := &localCheck{mem: mem, rf: rf, rmf: resmap.NewFactory(rf), seen: map[string]bool{}}
	return c.kustomization(dir)
}

type localCheck struct {
	mem  *memFS
	rf   *resource.Factory
	rmf  *resmap.Factory
	seen map[string]bool
}

// kustCheck is the check of one kustomization file.
type kustCheck struct {
	*localCheck
	dir  string // the kustomization's directory: names are relative to it
	name string // the file, relative to the repository root
}

// fail is the error for field (value) of the kustomization.
func (f *kustCheck) fail(field, value, reason string) error {
	return fmt.Errorf("%s: %s %q: %s", f.name, field, value, reason)
}

// gitURL is the error for a base (field) that kustomize would clone as a git repository.
func (f *kustCheck) gitURL(field, name string) error {
	reason := "kustomize reads this as a remote git repository (remote bases are not allowed)"
	if f.mem.Exists(f.resolve(name)) {
		reason += fmt.Sprintf(`; for the repository's own %s write "./%s"`, name, name)
	}
	return f.fail(field, name, reason)
}

func (c *localCheck) kustomization(dir string) error {
	if c.seen[dir] {
		return nil
	}
	c.seen[dir] = true
	name, err := kustomizationFile(c.mem, dir)
	if err != nil || name == "" {
		// A base without a kustomization: kustomize refuses it, reading nothing.
		return err
	}
	b, err := c.mem.ReadFile(name)
	if err != nil {
		return err
	}
	f := &kustCheck{localCheck: c, dir: dir, name: strings.TrimPrefix(name, "/")}
	var k kustypes.Kustomization
	// kustomize's own decoder (strict, as the build reads it).
	if err := k.Unmarshal(b); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	return f.check(&k)
}

// check checks every field of k that names a file.
func (f *kustCheck) check(k *kustypes.Kustomization) error {
	for _, l := range []struct {
		field   string
		entries []string
	}{{"resources", k.Resources}, {"bases", k.Bases}, {"components", k.Components}} {
		for i, e := range l.entries {
			if err := f.base(fmt.Sprintf("%s[%d]", l.field, i), e); err != nil {
				return err
			}
		}
	}
	for _, l := range []struct {
		field   string
		entries []string
	}{{"crds", k.Crds}, {"configurations", k.Configurations}} {
		for i, e := range l.entries {
			if err := f.file(fmt.Sprintf("%s[%d]", l.field, i), e); err != nil {
				return err
			}
		}
	}
	if p, ok := k.OpenAPI["path"]; ok {
		if err := f.file("openapi.path", p); err != nil {
			return err
		}
	}
	for i, g := range k.ConfigMapGenerator {
		if err := f.kvSources(fmt.Sprintf("configMapGenerator[%d]", i), g.KvPairSources); err != nil {
			return err
		}
	}
	for i, g := range k.SecretGenerator {
		if err := f.kvSources(fmt.Sprintf("secretGenerator[%d]", i), g.KvPairSources); err != nil {
			return err
		}
	}
	for _, l := range []struct {
		field   string
		patches []kustypes.Patch
	}{{"patches", k.Patches}, {"patchesJson6902", k.PatchesJson6902}} {
		for i, p := range l.patches {
			if p.Path != "" {
				if err := f.file(fmt.Sprintf("%s[%d].path", l.field, i), p.Path); err != nil {
					return err
				}
			}
		}
	}
	if err := f.smPatches("patchesStrategicMerge", k.PatchesStrategicMerge); err != nil {
		return err
	}
	if err := f.replacements("replacements", k.Replacements); err != nil {
		return err
	}
	switch {
	case len(k.HelmCharts) > 0:
		return fmt.Errorf("%s: helmCharts: %s", f.name, reasonHelm)
	case len(k.HelmChartInflationGenerator) > 0:
		return fmt.Errorf("%s: helmChartInflationGenerator: %s", f.name, reasonHelm)
	case k.HelmGlobals != nil:
		return fmt.Errorf("%s: helmGlobals: %s", f.name, reasonHelm)
	}
	for _, l := range []struct {
		field   string
		entries []string
	}{{"generators", k.Generators}, {"transformers", k.Transformers}, {"validators", k.Validators}} {
		if err := f.plugins(l.field, l.entries); err != nil {
			return err
		}
	}
	return nil
}

// resolve is the path in the repository of name, relative to the kustomization (kustomize
// reads an absolute name from the root of the file system it is given: the repository).
func (f *kustCheck) resolve(name string) string {
	if path.IsAbs(name) {
		return path.Clean(name)
	}
	return path.Join(f.dir, name)
}

// base checks a resource, base or component: a file, or a directory holding a kustomization
// (checked in turn). kustomize loads a name it cannot read as a file as a base, and clones a
// base that reads as a git URL even when the repository has a directory of that name.
func (f *kustCheck) base(field, name string) error {
	if isURL(name) {
		return f.fail(field, name, reasonBaseURL)
	}
	if isGitURL(name) {
		return f.gitURL(field, name)
	}
	p := f.resolve(name)
	if !f.mem.Exists(p) {
		return f.fail(field, name, reasonBaseMissing)
	}
	if f.mem.IsDir(p) {
		return f.kustomization(p)
	}
	return nil
}

// file checks a name kustomize reads as a file.
func (f *kustCheck) file(field, name string) error {
	if isURL(name) {
		return f.fail(field, name, reasonURL)
	}
	if p := f.resolve(name); !f.mem.Exists(p) || f.mem.IsDir(p) {
		return f.fail(field, name, reasonFileMissing)
	}
	return nil
}

// kvSources checks the files of a ConfigMap or Secret generator.
func (f *kustCheck) kvSources(field string, s kustypes.KvPairSources) error {
	for i, src := range s.FileSources {
		// As kustomize splits "key=path"; one it cannot split fails the build unread.
		if p, ok := fileSourcePath(src); ok {
			if err := f.file(fmt.Sprintf("%s.files[%d]", field, i), p); err != nil {
				return err
			}
		}
	}
	for i, p := range s.EnvSources {
		if err := f.file(fmt.Sprintf("%s.envs[%d]", field, i), p); err != nil {
			return err
		}
	}
	if s.EnvSource != "" {
		return f.file(field+".env", s.EnvSource)
	}
	return nil
}

// fileSourcePath is the file of a generator's files entry ("path" or "key=path"), as
// kustomize's ParseFileSource reads it; false when kustomize refuses the entry.
func fileSourcePath(src string) (string, bool) {
	switch n := strings.Count(src, "="); {
	case n == 0:
		return src, true
	case n == 1 && !strings.HasPrefix(src, "=") && !strings.HasSuffix(src, "="):
		_, p, _ := strings.Cut(src, "=")
		return p, true
	}
	return "", false
}

// smPatches checks strategic merge patches: each is the patch itself when it parses as
// one (as kustomize tries first), else the name of a file.
func (f *kustCheck) smPatches(field string, patches []kustypes.PatchStrategicMerge) error {
	for i, p := range patches {
		if _, err := f.rf.SliceFromBytes([]byte(p)); err == nil {
			continue
		}
		if err := f.file(fmt.Sprintf("%s[%d]", field, i), string(p)); err != nil {
			return err
		}
	}
	return nil
}

func (f *kustCheck) replacements(field string, rs []kustypes.ReplacementField) error {
	for i, r := range rs {
		if r.Path != "" {
			if err := f.file(fmt.Sprintf("%s[%d].path", field, i), r.Path); err != nil {
				return err
			}
		}
	}
	return nil
}

// plugins checks the entries of generators, transformers or validators: each is either
// inline plugin configurations (when it parses as objects, as kustomize tries first) or the
// name of a file holding them. kustomize would also accept a directory whose kustomization
// builds the configurations, but what that build makes of them can only be known by
// running it, so it is refused.
func (f *kustCheck) plugins(list string, entries []string) error {
	for i, e := range entries {
		field := fmt.Sprintf("%s[%d]", list, i)
		if rm, err := f.rmf.NewResMapFromBytes([]byte(e)); err == nil {
			for _, r := range rm.Resources() {
				if err := f.pluginConfig(field, "", r); err != nil {
					return err
				}
			}
			continue
		}
		if isURL(e) {
			return f.fail(field, e, reasonURL)
		}
		if isGitURL(e) {
			return f.gitURL(field, e)
		}
		p := f.resolve(e)
		if !f.mem.Exists(p) {
			return f.fail(field, e, reasonFileMissing)
		}
		if f.mem.IsDir(p) {
			return f.fail(field, e, reasonPluginDir)
		}
		b, err := f.mem.ReadFile(p)
		if err != nil {
			return err
		}
		rm, err := f.rmf.NewResMapFromBytes(b)
		if err != nil {
			return fmt.Errorf("%s: %s %q: %w", f.name, field, e, err)
		}
		for _, r := range rm.Resources() {
			if err := f.pluginConfig(field, strings.TrimPrefix(p, "/"), r); err != nil {
				return err
			}
		}
	}
	return nil
}

// pluginConfig checks the configuration r of a plugin, listed by field (from file, or
// inline when file is ""): only builtin plugins, and the files they read (relative to the
// kustomization) must be files of the repository.
func (f *kustCheck) pluginConfig(field, file string, r *resource.Resource) error {
	gvk := r.GetGvk()
	what := gvk.Kind + " " + r.GetName()
	if file != "" {
		what = file + ": " + what
	}
	field = fmt.Sprintf("%s (%s)", field, what)
	// As kustomize tells a builtin plugin from the others.
	if gvk.Group != "" || gvk.Version != konfig.BuiltinPluginApiVersion {
		return fmt.Errorf("%s: %s: apiVersion %q: %s", f.name, field, gvk.ApiVersion(), reasonNotBuiltin)
	}
	y, err := r.AsYAML()
	if err != nil {
		return fmt.Errorf("%s: %s: %w", f.name, field, err)
	}
	// Each builtin decodes its configuration with sigs.k8s.io/yaml into its own struct;
	// these are the fields of those structs that name files.
	decode := func(v any) error {
		if err := yaml.Unmarshal(y, v); err != nil {
			return fmt.Errorf("%s: %s: %w", f.name, field, err)
		}
		return nil
	}
	switch gvk.Kind {
	case "ConfigMapGenerator":
		var c kustypes.ConfigMapArgs
		if err := decode(&c); err != nil {
			return err
		}
		return f.kvSources(field, c.KvPairSources)
	case "SecretGenerator":
		var c kustypes.SecretArgs
		if err := decode(&c); err != nil {
			return err
		}
		return f.kvSources(field, c.KvPairSources)
	case "PatchTransformer", "PatchJson6902Transformer":
		var c struct {
			Path string `json:"path,omitempty"`
		}
		if err := decode(&c); err != nil {
			return err
		}
		if c.Path != "" {
			return f.file(field+".path", c.Path)
		}
	case "PatchStrategicMergeTransformer":
		var c struct {
			Paths []kustypes.PatchStrategicMerge `json:"paths,omitempty"`
		}
		if err := decode(&c); err != nil {
			return err
		}
		return f.smPatches(field+".paths", c.Paths)
	case "ReplacementTransformer":
		var c struct {
			Replacements []kustypes.ReplacementField `json:"replacements,omitempty"`
		}
		if err := decode(&c); err != nil {
			return err
		}
		return f.replacements(field+".replacements", c.Replacements)
	case "ValueAddTransformer":
		var c struct {
			TargetFilePath string `json:"targetFilePath,omitempty"`
		}
		if err := decode(&c); err != nil {
			return err
		}
		if c.TargetFilePath != "" {
			return f.file(field+".targetFilePath", c.TargetFilePath)
		}
	case "HelmChartInflationGenerator":
		return fmt.Errorf("%s: %s: %s", f.name, field, reasonHelm)
	}
	return nil
}

// isURL reports whether kustomize could read name over the network: it fetches any name
// whose scheme is http or https; anything else with "://" is refused as well.
func isURL(name string) bool {
	if strings.Contains(name, "://") {
		return true
	}
	u, err := url.Parse(name)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https")
}

// gitUserPrefix is the "user@" of an scp-like git URL (user@host:org/repo), as kustomize
// matches it.
var gitUserPrefix = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)

// isGitURL reports whether kustomize could take name (a base) for a git repository to clone:
// a superset of what its RepoSpec parser accepts without a scheme (a name with a scheme is a
// URL, see isURL): the go-getter prefix git::, an scp-like user@host:path, or github.com/...
// and github.com:... . A directory of the repository with such a name is read as
// ./github.com/... .
func isGitURL(name string) bool {
	l := strings.ToLower(name)
	return strings.HasPrefix(l, "git::") || strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "github.com:") ||
		gitUserPrefix.MatchString(name)
}
