// Package gitremote holds what reading and writing a git repository share: where it is, how
// to authenticate, and which transports may carry it.
package gitremote

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Remote is a git repository and how to reach it.
type Remote struct {
	// URL of the repository.
	URL string
	// Auth authenticates to the server (nil: anonymous).
	Auth transport.AuthMethod
	// CABundle holds the PEM CA certificates an https server's certificate must chain to
	// (nil: the host's trusted roots).
	CABundle []byte
	// Insecure allows http:// and git:// URLs.
	Insecure bool
}

// Check is CheckTransport for r.
func (r Remote) Check() error { return CheckTransport(r.URL, r.Insecure, r.Auth != nil) }

// CheckTransport refuses what would fetch in the clear without spec.insecure, and
// credentials over a transport without TLS in any case. Errors say what to change.
func CheckTransport(url string, insecure, credentials bool) error {
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return fmt.Errorf("spec.url %q: %w", url, err)
	}
	switch ep.Protocol {
	case "https", "ssh", "file":
		return nil
	case "http", "git":
		if credentials {
			return fmt.Errorf("spec.url %s: credentials are never sent over %s:// (in the clear): use https:// or ssh://", url, ep.Protocol)
		}
		if !insecure {
			return fmt.Errorf("spec.url %s: %s:// fetches in the clear, so a network attacker can change what is applied: use https:// or ssh://, or set spec.insecure: true to accept it", url, ep.Protocol)
		}
		return nil
	}
	return fmt.Errorf("spec.url %s: scheme %s:// is not supported: use https://, ssh:// (or user@host:path) or file://", url, ep.Protocol)
}

// InsecureTransport returns the scheme of url when it fetches without TLS (http, git), "".
func InsecureTransport(url string) string {
	ep, err := transport.NewEndpoint(url)
	if err != nil || (ep.Protocol != "http" && ep.Protocol != "git") {
		return ""
	}
	return ep.Protocol
}
