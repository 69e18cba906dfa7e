package hostaccess

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

const (
	first  = "3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5"
	second = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071"
	third  = "ffeeddccbbaa99887766554433221100ffeeddccbbaa9988"
)

// TestPolicy walks a site through its token's life: the first token admits until it is
// rotated; a removed host is refused with the token of its removal and readmitted with a
// newer one.
func TestPolicy(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	p := &Policy{Client: c, Initial: first}
	var removed *RemovedError

	if err := p.Admit(ctx, first, "h4"); err != nil {
		t.Fatalf("the first token before any rotation: %v", err)
	}
	if err := p.Admit(ctx, second, "h4"); !errors.Is(err, ErrWrongToken) {
		t.Fatalf("a wrong token: %v, want ErrWrongToken", err)
	}
	gen, err := RotateToken(ctx, c, second)
	if err != nil || gen != 1 {
		t.Fatalf("rotate: generation %d, %v", gen, err)
	}
	if err := p.Admit(ctx, first, "h4"); !errors.Is(err, ErrWrongToken) {
		t.Errorf("the first token after a rotation: %v, want ErrWrongToken", err)
	}
	if err := p.Admit(ctx, second, "h4"); err != nil {
		t.Errorf("the rotated token: %v", err)
	}

	rev, err := Revoke(ctx, c, "h4", time.Now())
	if err != nil || rev.TokenGeneration != 1 {
		t.Fatalf("revoke: %+v, %v", rev, err)
	}
	if err := p.Admit(ctx, second, "h4"); !errors.As(err, &removed) || removed.Name != "h4" {
		t.Errorf("the removed host with the token of its removal: %v, want a RemovedError", err)
	}
	if err := p.Admit(ctx, second, "h5"); err != nil {
		t.Errorf("another host: %v", err)
	}
	if gen, err = RotateToken(ctx, c, third); err != nil || gen != 2 {
		t.Fatalf("rotate again: generation %d, %v", gen, err)
	}
	if err := p.Admit(ctx, third, "h4"); err != nil {
		t.Errorf("the removed host with a newer token: %v", err)
	}
	if err := p.Admitted(ctx, "h4"); err != nil {
		t.Fatal(err)
	}
	cm, err := c.CoreV1().ConfigMaps(Namespace).Get(ctx, RevokedHostsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revs, err := ParseRevocations(cm)
	if err != nil || !revs["h4"].Readmitted || !revs["h4"].RevokedAt.Equal(rev.RevokedAt) {
		t.Errorf("after readmission: %+v, %v; want readmitted, revoked at %s", revs["h4"], err, rev.RevokedAt)
	}
}

func TestCertRevoked(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	revs := map[string]Revocation{"h4": {RevokedAt: at}}
	backdate := 5 * time.Minute
	for _, tc := range []struct {
		user      string
		notBefore time.Time
		want      bool
	}{
		{"system:node:h4", at.Add(-backdate - time.Hour), true},    // issued an hour before
		{"system:node:h4", at.Add(-backdate), true},                // issued at the removal
		{"system:node:h4", at.Add(-backdate + time.Second), false}, // issued after: a readmission
		{"system:node:h5", at.Add(-time.Hour), false},
		{"h4", at.Add(-time.Hour), false},
		{"system:node:", at.Add(-time.Hour), false},
	} {
		if got := CertRevoked(revs, tc.user, tc.notBefore, backdate); got != tc.want {
			t.Errorf("CertRevoked(%s, notBefore %s) = %v, want %v", tc.user, tc.notBefore, got, tc.want)
		}
	}
}

func TestMalformedRevocationsFailClosed(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{"h4": "yes", "h5": `{"revokedAt":"2026-12-02T07:00:00Z"}`}}
	revs, err := ParseRevocations(cm)
	if err == nil {
		t.Error("a malformed entry gave no error")
	}
	if !CertRevoked(revs, "system:node:h4", time.Now().Add(-10*time.Minute), 5*time.Minute) {
		t.Error("a malformed entry does not revoke its host's certificates")
	}
	if _, ok := revs["h5"]; !ok {
		t.Error("the well-formed entry is lost")
	}
}

// TestRevocationsFollowTheConfigMap: a removal recorded after the watch started bans the
// host and revokes its certificates.
func TestRevocationsFollowTheConfigMap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientset()
	r := NewRevocations(c, 5*time.Minute)
	changed := make(chan map[string]Revocation, 4)
	r.OnChange(func(m map[string]Revocation) { changed <- m })
	go r.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.HasSynced) {
		t.Fatal("not synced")
	}
	issued := time.Now().Add(-time.Minute - 5*time.Minute) // the notBefore of a certificate signed a minute ago
	if r.Banned("h4") || r.CertRevoked("system:node:h4", issued) {
		t.Fatal("h4 revoked before its removal")
	}
	if _, err := Revoke(ctx, c, "h4", time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the removal never reached the watch")
	}
	if !r.Banned("h4") || !r.CertRevoked("system:node:h4", issued) {
		t.Errorf("after the removal: banned %v, certificate revoked %v", r.Banned("h4"), r.CertRevoked("system:node:h4", issued))
	}
	if r.Banned("h5") {
		t.Error("h5 banned")
	}
}
