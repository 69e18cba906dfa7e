package gitremote

import (
	"strings"
	"testing"
)

func TestCheckTransport(t *testing.T) {
	for _, c := range []struct {
		url                   string
		insecure, credentials bool
		want                  string // "" accepted, or part of the error
	}{
		{"https://example.invalid/r.git", false, true, ""},
		{"ssh://git@example.invalid/r.git", false, true, ""},
		{"git@example.invalid:r.git", false, true, ""},
		{"file:///srv/r.git", false, false, ""},
		{"git://example.invalid/r.git", false, false, "spec.insecure: true"},
		{"git://example.invalid/r.git", true, false, ""},
		{"http://example.invalid/r.git", true, true, "credentials are never sent"},
		{"ftp://example.invalid/r.git", false, false, "not supported"},
	} {
		err := CheckTransport(c.url, c.insecure, c.credentials)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s (insecure %v, credentials %v): %v", c.url, c.insecure, c.credentials, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s (insecure %v, credentials %v): got %v, want an error saying %q", c.url, c.insecure, c.credentials, err, c.want)
		}
	}
	if got := InsecureTransport("http://example.invalid/r.git"); got != "http" {
		t.Errorf("InsecureTransport(http://...) = %q", got)
	}
	if got := InsecureTransport("https://example.invalid/r.git"); got != "" {
		t.Errorf("InsecureTransport(https://...) = %q", got)
	}
}
