package unenforced_test

import (
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/reconciler/unenforced"
)

func TestUnenforcedKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range unenforced.Kinds {
		if k.Kind == "" || k.Version == "" || k.Effect == "" || k.Resource.Resource == "" || seen[k.Kind] {
			t.Errorf("incomplete or repeated entry %+v", k)
		}
		seen[k.Kind] = true
		if m := unenforced.Message(k); !strings.HasPrefix(m, k.Kind+" is stored but not enforced by flotilla: ") {
			t.Errorf("%s: message %q", k.Kind, m)
		}
	}
}
