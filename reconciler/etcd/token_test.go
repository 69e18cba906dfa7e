package etcd

import (
	"context"
	"strings"
	"testing"
)

func TestParseTokenRefusesWeakSecrets(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		token string
		ok    bool
	}{
		{"FLO1:" + pin + ":" + "3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5", true}, // what the first host writes: 192 bits
		{"9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1", true},                                       // 32 hex characters: 128 bits
		{"Xk9vQ2mR7tLp4wZs8nBc3yHd", true},                                               // 24 alphanumerics: 142 bits
		{"FLO1:" + pin + ":not-the-secret", false},
		{"9c1a7e5b2d4086c1e8f2a9b7d3c5e4a", false}, // 124 bits
		{"secret", false},
		{strings.Repeat("a", 200), false},
		{strings.Repeat("ab", 100), false},
		{"correcthorsebatterystaple", false}, // 25 lowercase letters: 117 bits
	} {
		_, err := ParseToken(tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("ParseToken(%q): %v, want ok=%v", tc.token, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "bits of entropy") {
			t.Errorf("ParseToken(%q): %v, want a message about its entropy", tc.token, err)
		}
	}
	tok, err := ParseToken("FLO1:" + pin + ":" + "3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5")
	if err != nil || tok.CAPin != pin || tok.Secret != "3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5" {
		t.Errorf("pinned token parsed as %+v, %v", tok, err)
	}
}

func TestRequestJoinNeedsAPinUnlessSkipped(t *testing.T) {
	tok, err := ParseToken("3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on port 1: the refusal must come before any connection.
	_, err = RequestJoin(context.Background(), "https://127.0.0.1:1", tok, JoinRequest{Name: "h"})
	if err == nil || !strings.Contains(err.Error(), "--insecure-skip-ca-pin") {
		t.Fatalf("join with an unpinned token: %v, want a refusal naming --insecure-skip-ca-pin", err)
	}
	tok.SkipCAPin = true
	_, err = RequestJoin(context.Background(), "https://127.0.0.1:1", tok, JoinRequest{Name: "h"})
	if err == nil || strings.Contains(err.Error(), "--insecure-skip-ca-pin") || !strings.Contains(err.Error(), "fetch the site CA") {
		t.Fatalf("join with an unpinned token and --insecure-skip-ca-pin: %v, want it to try the site", err)
	}
}

// TestRotatedTokenCarriesTheGossipKey: flotilla token rotate prints FLO2 tokens, which carry
// the site's gossip key next to the new secret; they round-trip, and malformed ones are
// refused with a message.
func TestRotatedTokenCarriesTheGossipKey(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ab", 32)
	key := strings.Repeat("0f", 32)
	secret := "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071"
	s := "FLO2:" + pin + ":" + key + ":" + secret
	tok, err := ParseToken(s)
	if err != nil {
		t.Fatal(err)
	}
	if tok.CAPin != pin || tok.Secret != secret || len(tok.GossipKey) != 32 || tok.GossipKey[0] != 0x0f {
		t.Errorf("parsed as %+v", tok)
	}
	if tok.String() != s {
		t.Errorf("String() = %q, want %q", tok.String(), s)
	}
	for _, bad := range []string{
		"FLO2:" + pin + ":" + secret,                    // no key
		"FLO2:" + pin + ":" + key[:10] + ":" + secret,   // short key
		"FLO2:md5:" + key + ":" + key + ":" + secret,    // not a sha256 pin
		"FLO2:" + pin + ":" + key + ":" + "weak-secret", // weak secret
	} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}
