package policies_test

import (
	"context"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

// TestLibraryFixtures runs the fixtures of every library policy: each object of allowed/ is
// admitted, each of denied/ is refused by that policy (its name is in the error) with the
// message its expect-message annotation asks for.
func TestLibraryFixtures(t *testing.T) {
	fsys := policies.LibraryFS()
	suites, err := policies.FindSuites(fsys)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range suites {
		policy, _, _ := strings.Cut(s.Dir, "/")
		names[policy] = true
		t.Run(s.Dir, func(t *testing.T) {
			var allowed, denied int
			for _, f := range s.Fixtures {
				if f.Denied {
					denied++
				} else {
					allowed++
				}
			}
			if allowed == 0 || denied == 0 {
				t.Errorf("want at least one allowed and one denied fixture, got %d and %d", allowed, denied)
			}
			err := s.Run(context.Background(), fsys, apiserver.OfflineRESTMapper(), func(r policies.FixtureResult) {
				for _, f := range r.Failures {
					t.Errorf("%s: %s", r.Name, f)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			// Denials name this policy.
			objs, err := s.Load(fsys)
			if err != nil {
				t.Fatal(err)
			}
			engine, err := policies.NewEngine(objs, apiserver.OfflineRESTMapper())
			if err != nil {
				t.Fatal(err)
			}
			defer engine.Close()
			for _, f := range s.Fixtures {
				if !f.Denied {
					continue
				}
				for _, o := range readFixture(t, f.Name) {
					res, err := engine.Evaluate(context.Background(), o)
					if err != nil {
						t.Fatal(err)
					}
					if res.Denied == nil || !strings.Contains(res.Denied.Error(), "ValidatingAdmissionPolicy 'flotilla-"+policy+"'") {
						t.Errorf("%s: want a denial by flotilla-%s, got %v", f.Name, policy, res.Denied)
					}
				}
			}
		})
	}
	for _, want := range []string{"no-privileged", "hostpath-prefixes", "no-latest-tag", "allowed-registries",
		"resources-required", "required-labels", "external-services", "critical-replicas"} {
		if !names[want] {
			t.Errorf("library policy %s has no tests", want)
		}
	}
}

func readFixture(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	data, err := fsReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := policies.DecodeYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func fsReadFile(name string) ([]byte, error) { return fs.ReadFile(policies.LibraryFS(), name) }

func TestLibrarySets(t *testing.T) {
	baseline := []string{"hostpath-prefixes", "no-latest-tag", "no-privileged"}
	restricted := append([]string{"allowed-registries", "critical-pdb", "critical-replicas", "external-services", "ingress-hosts-unique"}, baseline...)
	restricted = append(restricted, "required-labels", "resources-required")
	params := map[string]bool{"hostpath-prefixes": true, "allowed-registries": true, "required-labels": true}

	if objs, err := policies.Library(policies.SetNone); err != nil || objs != nil {
		t.Errorf("none: got %d objects, %v; want nil", len(objs), err)
	}
	if _, err := policies.Library("strict"); err == nil || !strings.Contains(err.Error(), `unknown policy set "strict": use none, baseline or restricted`) {
		t.Errorf("unknown set: got %v", err)
	}
	for set, names := range map[string][]string{policies.SetBaseline: baseline, policies.SetRestricted: restricted} {
		objs, err := policies.Library(set)
		if err != nil {
			t.Fatal(err)
		}
		// ConfigMaps, then policies, then bindings.
		var got []string
		for _, o := range objs {
			got = append(got, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
			if s := o.GetLabels()[policies.SetLabel]; s != policies.SetBaseline && (set == policies.SetBaseline || s != policies.SetRestricted) {
				t.Errorf("%s: %s %s has set label %q", set, o.GetKind(), o.GetName(), s)
			}
		}
		var want []string
		sort.Strings(names)
		for _, n := range names {
			if params[n] {
				want = append(want, "ConfigMap kube-system/flotilla-"+n)
			}
		}
		for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			for _, n := range names {
				want = append(want, kind+" /flotilla-"+n)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\ngot\n%s\nwant\n%s", set, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
