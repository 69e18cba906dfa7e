package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// A GitSource as the server stores it: defaulted (interval, ref, prune).
const gitSourceYAML = `
apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata:
  name: apps
  namespace: flotilla-system
spec:
  url: https://git.example.com/site/apps.git
  ref:
    branch: main
  path: clusters/edge
  interval: 1m
  prune: true
`

func gitSource(t *testing.T) *flotillav1alpha1.GitSource {
	return fixture[flotillav1alpha1.GitSource](t, gitSourceYAML, true)
}

func secretRef(name string) *flotillav1alpha1.LocalObjectReference {
	return &flotillav1alpha1.LocalObjectReference{Name: name}
}

func TestValidateGitSource(t *testing.T) {
	type gs = flotillav1alpha1.GitSource
	url := func(u string) func(*gs) { return func(g *gs) { g.Spec.URL = u } }
	insecureURL := func(u string) func(*gs) { return func(g *gs) { g.Spec.URL, g.Spec.Insecure = u, true } }
	ref := func(r flotillav1alpha1.GitRef) func(*gs) { return func(g *gs) { g.Spec.Ref = &r } }
	branch := func(b string) func(*gs) { return ref(flotillav1alpha1.GitRef{Branch: b}) }
	tag := func(b string) func(*gs) { return ref(flotillav1alpha1.GitRef{Tag: b}) }
	path := func(p string) func(*gs) { return func(g *gs) { g.Spec.Path = p } }
	interval := func(d time.Duration) func(*gs) { return func(g *gs) { g.Spec.Interval.Duration = d } }
	dependsOn := func(refs ...flotillav1alpha1.NamespacedObjectReference) func(*gs) {
		return func(g *gs) { g.Spec.DependsOn = refs }
	}
	sa := func(name string) func(*gs) { return func(g *gs) { g.Spec.ServiceAccountName = name } }
	rollback := func(d time.Duration) func(*gs) {
		return func(g *gs) {
			g.Spec.Wait = true
			g.Spec.Rollback = &flotillav1alpha1.GitRollback{Enabled: true, HealthTimeout: &metav1.Duration{Duration: d}}
		}
	}
	verify := func(mode flotillav1alpha1.VerifyMode, secret string) func(*gs) {
		return func(g *gs) {
			g.Spec.Verify = &flotillav1alpha1.GitVerification{Mode: mode}
			if secret != "" {
				g.Spec.Verify.SecretRef = secretRef(secret)
			}
		}
	}

	cases := []struct {
		name   string
		mutate func(*gs)
		want   []string
		// detail, when set, must be part of the first error's message.
		detail string
	}{
		{"defaulted source", func(*gs) {}, none(), ""},
		{"everything set", func(g *gs) {
			g.Spec.URL = "ssh://git@git.example.com:2222/site/apps.git"
			g.Spec.Ref = &flotillav1alpha1.GitRef{Semver: ">=1.2.0 <2.0.0"}
			g.Spec.Timeout = &metav1.Duration{Duration: 30 * time.Second}
			g.Spec.SecretRef = secretRef("deploy-key")
			g.Spec.WebhookSecretRef = secretRef("webhook")
			g.Spec.Verify = &flotillav1alpha1.GitVerification{Mode: flotillav1alpha1.VerifyModeHead, SecretRef: secretRef("keys")}
			g.Spec.DependsOn = []flotillav1alpha1.NamespacedObjectReference{{Name: "base"}, {Namespace: "kube-system", Name: "root"}}
			g.Spec.Suspend = true
		}, none(), ""},

		// spec.url
		{"url missing", url(""), errs(req("spec.url")), "https://"},
		{"scp-like url", url("git@github.com:flotilla-dev/site.git"), none(), ""},
		{"scp-like url, IPv6 host", url("git@[fd00::1]:site.git"), none(), ""},
		{"scp-like url without user", url("github.com:flotilla-dev/site.git"), errs(inv("spec.url")), "user@host:path"},
		{"scp-like url with a password", url("git:hunter2@github.com:site.git"), errs(forb("spec.url")), "spec.secretRef"},
		{"scp-like url without path", url("git@github.com:"), errs(inv("spec.url")), "names no repository"},
		{"scp-like url, option as host", url("git@-oProxyCommand=x:site.git"), errs(inv("spec.url")), `"-"`},
		{"ssh url with user", url("ssh://git@github.com/site.git"), none(), ""},
		{"ssh url with password", url("ssh://git:hunter2@github.com/site.git"), errs(forb("spec.url")), "spec.secretRef"},
		{"ssh url, option as host", url("ssh://-oProxyCommand=x/site.git"), errs(inv("spec.url")), `"-"`},
		{"file url", url("file:///srv/site.git"), none(), ""},
		{"file url with a host", url("file://srv/site.git"), errs(inv("spec.url")), "absolute path"},
		{"file url, relative", url("file://./site.git"), errs(inv("spec.url")), "absolute path"},
		{"local path", url("/srv/site.git"), errs(inv("spec.url")), "file:///srv/site.git"},
		{"relative path", url("site.git"), errs(inv("spec.url")), "https://"},
		{"https url without host", url("https:///site.git"), errs(inv("spec.url")), "names no host"},
		{"https url without path", url("https://github.com"), errs(inv("spec.url")), "names no repository"},
		{"https url with credentials", url("https://me:hunter2@github.com/site.git"), errs(forb("spec.url")),
			"put credentials in the Secret named by spec.secretRef"},
		{"https url with a token as user", url("https://ghp_token@github.com/site.git"), errs(forb("spec.url")), "spec.secretRef"},
		{"ftp url", url("ftp://example.com/site.git"), errs(inv("spec.url")), "https://, ssh://, user@host:path or file://"},
		{"url with trailing space", url("https://github.com/site.git "), errs(inv("spec.url")), "white space"},
		{"url with a newline", url("https://github.com/site.git\n"), errs(inv("spec.url")), ""},
		{"http url", url("http://git.example.com/site.git"), errs(inv("spec.url")),
			"http:// sends the repository (and any credentials) in the clear: use https://, or set spec.insecure: true to accept it"},
		{"git url", url("git://git.example.com/site.git"), errs(inv("spec.url")), "git:// sends the repository"},
		{"http url, insecure", insecureURL("http://git.example.com/site.git"), none(), ""},
		{"git url, insecure", insecureURL("git://git.example.com/site.git"), none(), ""},
		{"http url, insecure, with credentials", insecureURL("http://me:pw@git.example.com/site.git"), errs(forb("spec.url")), ""},
		{"http url, insecure, with secretRef", func(g *gs) {
			insecureURL("http://git.example.com/site.git")(g)
			g.Spec.SecretRef = secretRef("creds")
		}, errs(forb("spec.secretRef")), "credentials are never sent over http://"},
		{"http url with secretRef", func(g *gs) {
			url("http://git.example.com/site.git")(g)
			g.Spec.SecretRef = secretRef("creds")
		}, errs(inv("spec.url"), forb("spec.secretRef")), ""},
		{"insecure with https url", insecureURL("https://github.com/site.git"), none(), ""},

		// spec.interval, spec.timeout
		{"interval 10s", interval(10 * time.Second), none(), ""},
		{"rollback with health timeout 10s", rollback(10 * time.Second), none(), ""},
		{"rollback with health timeout 5s", rollback(5 * time.Second), errs(inv("spec.rollback.healthTimeout")), "at least 10s"},
		{"interval 5s", interval(5 * time.Second), errs(inv("spec.interval")), "at least 10s"},

		// spec.rollout, spec.statusPush
		{"rollout after canaries", func(g *gs) {
			g.Spec.Rollout = &flotillav1alpha1.GitRollout{After: flotillav1alpha1.RolloutAfter{Selector: "tier in (canary,early)", Sites: []string{"paris"}}}
		}, none(), ""},
		{"rollout after nothing", func(g *gs) { g.Spec.Rollout = &flotillav1alpha1.GitRollout{} }, errs(req("spec.rollout.after")), "set after.sites"},
		{"rollout after a bad selector", func(g *gs) {
			g.Spec.Rollout = &flotillav1alpha1.GitRollout{After: flotillav1alpha1.RolloutAfter{Selector: "tier in canary"}}
		}, errs(inv("spec.rollout.after.selector")), "kubectl -l"},
		{"rollout after a site name that is no DNS label", func(g *gs) {
			g.Spec.Rollout = &flotillav1alpha1.GitRollout{After: flotillav1alpha1.RolloutAfter{Sites: []string{"Paris_1"}}}
		}, errs(inv("spec.rollout.after.sites[0]")), "DNS label"},
		{"rollout after a site twice", func(g *gs) {
			g.Spec.Rollout = &flotillav1alpha1.GitRollout{After: flotillav1alpha1.RolloutAfter{Sites: []string{"paris", "paris"}}}
		}, errs(dup("spec.rollout.after.sites[1]")), ""},
		{"rollout with a negative soak", func(g *gs) {
			g.Spec.Rollout = &flotillav1alpha1.GitRollout{After: flotillav1alpha1.RolloutAfter{Sites: []string{"paris"}}, Soak: &metav1.Duration{Duration: -time.Minute}}
		}, errs(inv("spec.rollout.soak")), "must not be negative"},
		{"status push every 5s", func(g *gs) {
			g.Spec.StatusPush = &flotillav1alpha1.GitStatusPush{Interval: &metav1.Duration{Duration: 5 * time.Second}}
		}, errs(inv("spec.statusPush.interval")), "at least 10s"},
		{"status push with credentials over http", func(g *gs) {
			insecureURL("http://git.example.com/site.git")(g)
			g.Spec.StatusPush = &flotillav1alpha1.GitStatusPush{SecretRef: secretRef("push")}
		}, errs(forb("spec.statusPush.secretRef")), "credentials are never sent over http://"},
		{"interval negative", interval(-time.Minute), errs(inv("spec.interval")), "at least 10s"},
		{"interval unset, not defaulted", interval(0), none(), ""},
		{"timeout zero", func(g *gs) { g.Spec.Timeout = &metav1.Duration{} }, errs(inv("spec.timeout")), "greater than zero"},
		{"timeout negative", func(g *gs) { g.Spec.Timeout = &metav1.Duration{Duration: -time.Second} }, errs(inv("spec.timeout")), ""},

		// spec.ref
		{"tag", tag("v1.2.3"), none(), ""},
		{"nested branch", branch("release/1.x"), none(), ""},
		{"commit", ref(flotillav1alpha1.GitRef{Commit: "0123456789abcdef0123456789abcdef01234567"}), none(), ""},
		{"commit too short", ref(flotillav1alpha1.GitRef{Commit: "0123456"}), errs(inv("spec.ref.commit")), "40 lower-case hex"},
		{"commit upper case", ref(flotillav1alpha1.GitRef{Commit: "0123456789ABCDEF0123456789ABCDEF01234567"}), errs(inv("spec.ref.commit")), ""},
		{"branch and tag", ref(flotillav1alpha1.GitRef{Branch: "main", Tag: "v1"}), errs(forb("spec.ref")), "exactly one"},
		{"semver and commit", ref(flotillav1alpha1.GitRef{Semver: "~1.4", Commit: "0123456789abcdef0123456789abcdef01234567"}), errs(forb("spec.ref")), ""},
		{"empty ref, not defaulted", ref(flotillav1alpha1.GitRef{}), errs(req("spec.ref")), ""},
		{"semver caret", ref(flotillav1alpha1.GitRef{Semver: "^1.2"}), none(), ""},
		{"semver exact", ref(flotillav1alpha1.GitRef{Semver: "1.2.3"}), none(), ""},
		{"semver not a range", ref(flotillav1alpha1.GitRef{Semver: ">= one"}), errs(inv("spec.ref.semver")), "version range"},
		{"branch with ..", branch("a..b"), errs(inv("spec.ref.branch")), `".."`},
		{"branch with space", branch("my branch"), errs(inv("spec.ref.branch")), "spaces"},
		{"branch with control character", branch("a\tb"), errs(inv("spec.ref.branch")), "control"},
		{"branch with ~", branch("main~1"), errs(inv("spec.ref.branch")), "~"},
		{"branch with ^", branch("main^"), errs(inv("spec.ref.branch")), ""},
		{"branch with :", branch("a:b"), errs(inv("spec.ref.branch")), ""},
		{"branch with ?", branch("a?"), errs(inv("spec.ref.branch")), ""},
		{"branch with *", branch("feature/*"), errs(inv("spec.ref.branch")), ""},
		{"branch with [", branch("a[1]"), errs(inv("spec.ref.branch")), ""},
		{"branch with backslash", branch(`a\b`), errs(inv("spec.ref.branch")), ""},
		{"branch starting with -", branch("-f"), errs(inv("spec.ref.branch")), `"-"`},
		{"branch starting with /", branch("/main"), errs(inv("spec.ref.branch")), ""},
		{"branch ending with /", branch("main/"), errs(inv("spec.ref.branch")), ""},
		{"branch with //", branch("a//b"), errs(inv("spec.ref.branch")), ""},
		{"branch ending with .lock", branch("main.lock"), errs(inv("spec.ref.branch")), ".lock"},
		{"branch part ending with .lock", branch("a.lock/b"), errs(inv("spec.ref.branch")), ".lock"},
		{"branch part starting with .", branch("a/.b"), errs(inv("spec.ref.branch")), `"."`},
		{"branch ending with .", branch("a."), errs(inv("spec.ref.branch")), ""},
		{"branch with @{", branch("a@{1}"), errs(inv("spec.ref.branch")), ""},
		{"branch @", branch("@"), errs(inv("spec.ref.branch")), ""},
		{"branch HEAD", branch("HEAD"), errs(inv("spec.ref.branch")), ""},
		{"branch as full ref", branch("refs/heads/main"), errs(inv("spec.ref.branch")), `"main"`},
		{"tag as full ref", tag("refs/tags/v1"), errs(inv("spec.ref.tag")), `"v1"`},
		{"tag with space", tag("v 1"), errs(inv("spec.ref.tag")), "tag name"},

		// spec.path
		{"path empty", path(""), none(), ""},
		{"path dot", path("."), none(), ""},
		{"path dot-slash", path("./clusters/edge"), none(), ""},
		{"path with dots in names", path("a..b/.config"), none(), ""},
		{"path absolute", path("/clusters"), errs(inv("spec.path")), "relative"},
		{"path up", path("../other"), errs(inv("spec.path")), `".."`},
		{"path up inside", path("a/../../b"), errs(inv("spec.path")), ""},
		{"path backslash", path(`a\b`), errs(inv("spec.path")), ""},
		{"path NUL", path("a\x00b"), errs(inv("spec.path")), ""},

		// Secret references
		{"secretRef without name", func(g *gs) { g.Spec.SecretRef = secretRef("") }, errs(req("spec.secretRef.name")), ""},
		{"secretRef bad name", func(g *gs) { g.Spec.SecretRef = secretRef("Deploy_Key") }, errs(inv("spec.secretRef.name")), ""},
		{"webhookSecretRef bad name", func(g *gs) { g.Spec.WebhookSecretRef = secretRef("a/b") }, errs(inv("spec.webhookSecretRef.name")), ""},
		{"verify none", verify(flotillav1alpha1.VerifyModeNone, ""), none(), ""},
		{"verify head without keys", verify(flotillav1alpha1.VerifyModeHead, ""), errs(req("spec.verify.secretRef")), ""},
		{"verify head, bad secret name", verify(flotillav1alpha1.VerifyModeHead, "Keys"), errs(inv("spec.verify.secretRef.name")), ""},
		{"verify unknown mode", verify("all", "keys"), errs(nsup("spec.verify.mode")), ""},
		{"verify without mode", verify("", "keys"), errs(req("spec.verify.mode")), ""},

		// spec.dependsOn
		{"dependsOn itself", dependsOn(flotillav1alpha1.NamespacedObjectReference{Name: "apps"}), errs(inv("spec.dependsOn[0]")), "itself"},
		{"dependsOn itself by namespace", dependsOn(flotillav1alpha1.NamespacedObjectReference{Namespace: "flotilla-system", Name: "apps"}),
			errs(inv("spec.dependsOn[0]")), ""},
		{"dependsOn same name elsewhere", dependsOn(flotillav1alpha1.NamespacedObjectReference{Namespace: "other", Name: "apps"}), none(), ""},
		{"dependsOn without name", dependsOn(flotillav1alpha1.NamespacedObjectReference{Namespace: "other"}), errs(req("spec.dependsOn[0].name")), ""},
		{"dependsOn bad name", dependsOn(flotillav1alpha1.NamespacedObjectReference{Name: "Base"}), errs(inv("spec.dependsOn[0].name")), ""},
		{"dependsOn bad namespace", dependsOn(flotillav1alpha1.NamespacedObjectReference{Namespace: "a.b", Name: "base"}),
			errs(inv("spec.dependsOn[0].namespace")), ""},
		{"dependsOn twice", dependsOn(flotillav1alpha1.NamespacedObjectReference{Name: "base"},
			flotillav1alpha1.NamespacedObjectReference{Namespace: "flotilla-system", Name: "base"}), errs(dup("spec.dependsOn[1]")), ""},

		// spec.serviceAccountName
		{"serviceAccountName", sa("web-deployer"), none(), ""},
		{"serviceAccountName with dots", sa("deploy.web"), none(), ""},
		{"serviceAccountName upper case", sa("Deployer"), errs(inv("spec.serviceAccountName")), "RFC 1123 subdomain"},
		{"serviceAccountName with a slash", sa("web/deployer"), errs(inv("spec.serviceAccountName")), ""},
		{"serviceAccountName as a user name", sa("system:serviceaccount:web:deployer"), errs(inv("spec.serviceAccountName")), ""},

		// metadata
		{"bad name", func(g *gs) { g.Name = "Apps" }, errs(inv("metadata.name")), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := gitSource(t)
			c.mutate(g)
			got := ValidateGitSource(g)
			checkErrs(t, got, c.want)
			if c.detail != "" && (len(got) == 0 || !strings.Contains(got[0].Error(), c.detail)) {
				t.Errorf("first error does not say %q: %v", c.detail, got.ToAggregate())
			}
			old := gitSource(t)
			checkErrs(t, ValidateGitSourceUpdate(g, old), c.want)
		})
	}
}

// TestGitSourceErrorsHideCredentials checks that a refused URL is not repeated with its
// password or token.
func TestGitSourceErrorsHideCredentials(t *testing.T) {
	for _, u := range []string{
		"http://me:hunter2@git.example.com/site.git",
		"https://hunter2@git.example.com/site.git",
		"ssh://git:hunter2@-host/site.git",
		"git:hunter2@github.com:site.git",
		"gopher://me:hunter2@git.example.com/site.git",
	} {
		g := gitSource(t)
		g.Spec.URL = u
		got := ValidateGitSource(g)
		if len(got) == 0 {
			t.Errorf("%s: accepted", u)
		}
		if msg := got.ToAggregate().Error(); strings.Contains(msg, "hunter2") {
			t.Errorf("%s: the error repeats the credentials: %s", u, msg)
		}
	}
}

func TestValidateGitSourceStatusUpdate(t *testing.T) {
	f, ok := For(flotillav1alpha1.Kind("GitSource"), DefaultOptions())
	if !ok || f.Create == nil || f.Update == nil || f.StatusUpdate == nil || f.Warnings == nil {
		t.Fatalf("GitSource: validation not registered: %+v", f)
	}
	// A stored source the rules now refuse: its status can still be written.
	old := gitSource(t)
	old.Spec.Interval.Duration = time.Second
	obj := old.DeepCopy()
	obj.Status.LastFetchedRevision = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	checkErrs(t, f.StatusUpdate(obj, old), none())
	checkErrs(t, f.Update(obj, old), errs(inv("spec.interval")))

	renamed := obj.DeepCopy()
	renamed.Name = "other"
	checkErrs(t, f.StatusUpdate(renamed, old), errs(inv("metadata.name")))
}

func TestGitSourceWarnings(t *testing.T) {
	const plain = "spec.insecure: the repository is fetched over %s without TLS: a network attacker can change what is applied; set spec.verify to require signed commits"
	cases := []struct {
		name     string
		url      string
		insecure bool
		verify   bool
		want     string
	}{
		{"https", "https://github.com/site.git", false, false, ""},
		{"http, insecure", "http://git.example.com/site.git", true, false,
			strings.ReplaceAll(plain, "%s", "http://")},
		{"git, insecure", "git://git.example.com/site.git", true, false,
			strings.ReplaceAll(plain, "%s", "git://")},
		{"http, insecure, verified", "http://git.example.com/site.git", true, true, "spec.verify refuses unsigned commits"},
		{"https, insecure", "https://github.com/site.git", true, false, "spec.insecure has no effect: https:// URLs are fetched over TLS; remove it"},
		{"ssh, insecure", "git@github.com:site.git", true, false, "spec.insecure has no effect: ssh (user@host:path) URLs are fetched over SSH"},
		{"file, insecure", "file:///srv/site.git", true, false, "spec.insecure has no effect: file:// URLs are fetched from the host's disk"},
		{"invalid url, insecure", "ftp://example.com/site.git", true, false, ""},
	}
	f, _ := For(flotillav1alpha1.Kind("GitSource"), DefaultOptions())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := gitSource(t)
			g.Spec.URL, g.Spec.Insecure = c.url, c.insecure
			if c.verify {
				g.Spec.Verify = &flotillav1alpha1.GitVerification{Mode: flotillav1alpha1.VerifyModeHead, SecretRef: secretRef("keys")}
			}
			got := f.Warnings(g, nil)
			switch {
			case c.want == "" && len(got) != 0:
				t.Errorf("warnings %q, want none", got)
			case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
				t.Errorf("warnings %q, want one with %q", got, c.want)
			}

			// An update warns when it changes the spec, not when it re-applies it.
			labelled := g.DeepCopy()
			labelled.Labels = map[string]string{"team": "edge"}
			if w := f.Warnings(labelled, g); len(w) != 0 {
				t.Errorf("update that keeps the spec: warnings %q, want none", w)
			}
			if c.want != "" {
				old := gitSource(t)
				if w := f.Warnings(g, old); len(w) != 1 {
					t.Errorf("update that sets the URL: warnings %q, want one", w)
				}
			}
		})
	}
	if w := f.Warnings(runtime.Object(&metav1.Status{}), nil); w != nil {
		t.Errorf("another type: warnings %q", w)
	}
}
