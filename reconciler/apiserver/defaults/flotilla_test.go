package defaults

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func TestGitSourceDefaults(t *testing.T) {
	gs := func(manifest string) *flotillav1alpha1.GitSource {
		return fromYAML(t, manifest, &flotillav1alpha1.GitSource{})
	}
	const defaulted = `
metadata: {name: apps, namespace: default}
spec: {url: "https://git.example.com/apps.git", interval: 1m0s, ref: {branch: main}, prune: true}
`
	cases := []defaultCase{
		{
			name: "nothing set",
			in:   gs(`{metadata: {name: apps, namespace: default}, spec: {url: "https://git.example.com/apps.git"}}`),
			want: gs(defaulted),
		},
		{
			name: "zero interval, empty ref",
			in:   gs(`{metadata: {name: apps, namespace: default}, spec: {url: "https://git.example.com/apps.git", interval: 0s, ref: {}}}`),
			want: gs(defaulted),
		},
		{
			name: "timeout kept unset, suspend and path untouched",
			in:   gs(`{spec: {url: "file:///srv/site.git", path: ./clusters/edge, suspend: true}}`),
			want: gs(`{spec: {url: "file:///srv/site.git", path: ./clusters/edge, suspend: true, interval: 1m0s, ref: {branch: main}, prune: true}}`),
		},
		{
			name: "rollback without a health timeout",
			in:   gs(`{spec: {url: "file:///srv/site.git", wait: true, rollback: {enabled: true}}}`),
			want: gs(`{spec: {url: "file:///srv/site.git", wait: true, rollback: {enabled: true, healthTimeout: 5m0s}, interval: 1m0s, ref: {branch: main}, prune: true}}`),
		},
		{
			name: "rollout and status push without soak and interval",
			in:   gs(`{spec: {url: "file:///srv/site.git", rollout: {after: {selector: tier=canary}}, statusPush: {branch: true}}}`),
			want: gs(`{spec: {url: "file:///srv/site.git", rollout: {after: {selector: tier=canary}, soak: 10m0s}, statusPush: {branch: true, interval: 10m0s}, interval: 1m0s, ref: {branch: main}, prune: true}}`),
		},
		{
			name: "only semver set",
			in:   gs(`{spec: {url: "https://git.example.com/apps.git", ref: {semver: "~1.4"}, interval: 5m}}`),
			want: gs(`{spec: {url: "https://git.example.com/apps.git", ref: {semver: "~1.4"}, interval: 5m0s, prune: true}}`),
		},
		{
			name: "list items",
			in: fromYAML(t, `{items: [{spec: {url: "https://a.example/r.git"}}, {spec: {url: "https://b.example/r.git", prune: false}}]}`,
				&flotillav1alpha1.GitSourceList{}),
			want: fromYAML(t, `{items: [
  {spec: {url: "https://a.example/r.git", interval: 1m0s, ref: {branch: main}, prune: true}},
  {spec: {url: "https://b.example/r.git", interval: 1m0s, ref: {branch: main}, prune: false}}]}`,
				&flotillav1alpha1.GitSourceList{}),
		},
	}
	checkDefaults(t, cases)
}

// TestGitSourceExplicitValuesKept defaults sources that set every defaulted field to a value
// other than the default (a negative interval included: validation refuses it, defaulting
// must not hide it) and expects no change.
func TestGitSourceExplicitValuesKept(t *testing.T) {
	objs := []runtime.Object{
		fromYAML(t, `{spec: {url: "https://git.example.com/apps.git", interval: 10m, timeout: 30s, ref: {tag: v1.2.0}, prune: false, rollback: {enabled: true, healthTimeout: 2m}}}`,
			&flotillav1alpha1.GitSource{}),
		fromYAML(t, `{spec: {url: "https://git.example.com/apps.git", interval: -1m, ref: {commit: 0123456789abcdef0123456789abcdef01234567}, prune: true}}`,
			&flotillav1alpha1.GitSource{}),
		fromYAML(t, `{spec: {url: "https://git.example.com/apps.git", interval: 5s, ref: {branch: main, tag: v1}, prune: false}}`,
			&flotillav1alpha1.GitSource{}),
	}
	checkExplicitValuesKept(t, objs)
}

// TestGitSourceDefaultsOnDecode checks that a GitSource decoded by a codec of the scheme (a
// request body, a patch, a read from etcd) comes out defaulted.
func TestGitSourceDefaultsOnDecode(t *testing.T) {
	s := newScheme(t)
	if err := flotillav1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	manifest := []byte(`{"apiVersion":"flotilla.dev/v1alpha1","kind":"GitSource","metadata":{"name":"apps"},
"spec":{"url":"https://git.example.com/apps.git"}}`)
	obj, _, err := serializer.NewCodecFactory(s).UniversalDecoder(flotillav1alpha1.SchemeGroupVersion).Decode(manifest, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	g := obj.(*flotillav1alpha1.GitSource)
	if g.Spec.Interval.Duration != flotillav1alpha1.DefaultInterval || g.Spec.Ref == nil ||
		g.Spec.Ref.Branch != flotillav1alpha1.DefaultBranch || g.Spec.Prune == nil || !*g.Spec.Prune || g.Spec.Timeout != nil {
		t.Errorf("decoded spec not defaulted: %+v", g.Spec)
	}
}
