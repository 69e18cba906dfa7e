package host

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

func TestNodeVersion(t *testing.T) {
	for _, tc := range []struct{ k8s, flotilla, want, back string }{
		{"v1.37.2", "v0.5.0", "v1.37.2+flotilla.v0.5.0", "v0.5.0"},
		{"v1.37.2", "v0.4.1-3-gabcdef-dirty", "v1.37.2+flotilla.v0.4.1-3-gabcdef-dirty", "v0.4.1-3-gabcdef-dirty"},
		// An unstamped build: the Kubernetes version's own metadata goes.
		{"v0.0.0-master+$Format:%H$", "dev", "v0.0.0-master+flotilla.dev", "dev"},
		{"v1.37.2", "feature/x y", "v1.37.2+flotilla.feature-x-y", "feature-x-y"},
	} {
		got := NodeVersion(tc.k8s, tc.flotilla)
		if got != tc.want {
			t.Errorf("NodeVersion(%q, %q) = %q, want %q", tc.k8s, tc.flotilla, got, tc.want)
		}
		if back := FlotillaVersionOf(got); back != tc.back {
			t.Errorf("FlotillaVersionOf(%q) = %q, want %q", got, back, tc.back)
		}
		// The node agent's declared features parse it as a Kubernetes version.
		if _, err := version.ParseGeneric(got); err != nil {
			t.Errorf("%q does not parse as a Kubernetes version: %v", got, err)
		}
	}
	if FlotillaVersionOf("v1.31.0") != "" {
		t.Error("a kubelet's version names no flotilla version")
	}
}
