package etcd

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
)

// TestJoinServerPolicy: with a Policy, the join endpoint answers a rotated-out token with 401
// and a removed host with 403 naming flotilla token rotate, before it touches etcd.
func TestJoinServerPolicy(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	const first, second = "3f9c1a7e5b2d4086c1e8f2a9b7d3c5e4a1f6b8d2c9e7a3b5", "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071"
	srv := httptest.NewServer(&JoinServer{Policy: &hostaccess.Policy{Client: c, Initial: first}})
	defer srv.Close()
	post := func(secret, name string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+JoinPath, strings.NewReader(`{"name":"`+name+`","worker":true}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if _, err := hostaccess.RotateToken(ctx, c, second); err != nil {
		t.Fatal(err)
	}
	if code, body := post(first, "h4"); code != http.StatusUnauthorized || !strings.Contains(body, "token rotate") {
		t.Errorf("the rotated-out token: %d %s, want 401 naming the rotation", code, body)
	}
	if _, err := hostaccess.Revoke(ctx, c, "h4", time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, body := post(second, "h4"); code != http.StatusForbidden || !strings.Contains(body, "flotilla token rotate") {
		t.Errorf("the removed host: %d %s, want 403 naming flotilla token rotate", code, body)
	}
	// Another host passes the policy and reaches the worker path (no signer here: 501).
	if code, body := post(second, "h5"); code != http.StatusNotImplemented {
		t.Errorf("another host with the current token: %d %s, want the worker path's 501", code, body)
	}
}
