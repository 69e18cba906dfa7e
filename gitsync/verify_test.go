package gitsync

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func newKey(t *testing.T, name string) (*openpgp.Entity, string) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "test", name+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return e, buf.String()
}

// signedCommit writes files and commits them with go-git, signed by key.
func (r *repo) signedCommit(files map[string]string, key *openpgp.Entity) string {
	r.t.Helper()
	g, err := git.PlainOpen(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	wt, err := g.Worktree()
	if err != nil {
		r.t.Fatal(err)
	}
	for name, content := range files {
		write(r.t, r.dir, name, content)
		if _, err := wt.Add(name); err != nil {
			r.t.Fatal(err)
		}
	}
	sig := &object.Signature{Name: "test", Email: "test@example.com", When: time.Now()}
	h, err := wt.Commit("signed change", &git.CommitOptions{Author: sig, Committer: sig, SignKey: key})
	if err != nil {
		r.t.Fatal(err)
	}
	return h.String()
}

func TestParseKeyRing(t *testing.T) {
	_, a := newKey(t, "a")
	_, b := newKey(t, "b")
	tests := []struct {
		name string
		data map[string][]byte
		keys int
		err  string
	}{
		{"one", map[string][]byte{"a.asc": []byte(a)}, 1, ""},
		{"two in one value", map[string][]byte{"keys": []byte(a + "\n" + b)}, 2, ""},
		{"two values", map[string][]byte{"a": []byte(a), "b": []byte(b)}, 2, ""},
		{"not a key", map[string][]byte{"a": []byte(a), "oops": []byte("ssh-ed25519 AAAA")}, 0, `key "oops": no`},
		{"broken armor", map[string][]byte{"bad": []byte(armoredKeyHeader + "\n\nxx\n")}, 0, `key "bad": not an ASCII-armored`},
		{"empty", map[string][]byte{}, 0, "no OpenPGP public keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ring, err := ParseKeyRing(tt.data)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || len(ring) != tt.keys {
				t.Errorf("ParseKeyRing = %d keys, %v; want %d", len(ring), err, tt.keys)
			}
		})
	}
}

// TestVerifyHead: with verify: head, unsigned commits and commits signed by an unknown key are
// not applied (Stalled, naming the commit and why); a commit signed by the trusted key is.
func TestVerifyHead(t *testing.T) {
	trusted, trustedPub := newKey(t, "trusted")
	stranger, _ := newKey(t, "stranger")
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	e := start(t)
	ctx := context.Background()
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
		"metadata": map[string]any{"name": "apps", "namespace": "default"},
		"spec": map[string]any{"url": "file://" + r.dir, "interval": "1s", "serviceAccountName": testSA,
			"verify": map[string]any{"mode": "head", "secretRef": map[string]any{"name": "trusted-keys"}}},
	}}
	if _, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Create(ctx, gs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stalledWith := func(what, rev string, parts ...string) {
		t.Helper()
		e.waitFor(what, func() bool {
			st := e.source().Status
			c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonVerificationFailed || st.LastAttemptedRevision != "main@sha1:"+rev {
				return false
			}
			for _, p := range parts {
				if !strings.Contains(c.Message, p) {
					return false
				}
			}
			return true
		})
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
		t.Logf("%s: Ready=%s %s: %s", what, c.Status, c.Reason, c.Message)
	}
	nsExists := func() bool {
		return e.exists(func() (metav1.Object, error) {
			return e.client.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{})
		})
	}

	stalledWith("missing key Secret", head, "Secret default/trusted-keys named by spec.verify.secretRef does not exist")
	if _, err := e.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "trusted-keys"}, Data: map[string][]byte{"trusted.asc": []byte(trustedPub)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stalledWith("unsigned commit", head, "commit "+head+" is not signed")
	if nsExists() || e.source().Status.LastAppliedRevision != "" {
		t.Fatal("unsigned commit applied")
	}

	head = r.signedCommit(map[string]string{"cm.yaml": newCMYAML}, stranger)
	stalledWith("commit by an unknown key", head, "commit "+head+" is signed by key", "which is not a trusted key",
		fmt.Sprintf("%X", stranger.PrimaryKey.Fingerprint))
	if nsExists() {
		t.Fatal("commit signed by an unknown key applied")
	}

	head = r.signedCommit(map[string]string{"cm2.yaml": strings.ReplaceAll(newCMYAML, "fresh", "fresh2")}, trusted)
	e.waitFor("signed commit applied", e.readyAt(head))
	if !nsExists() {
		t.Fatal("namespace of the signed commit missing")
	}
	if st := e.source().Status; st.LastFetchedRevision != "main@sha1:"+head ||
		apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled) != nil {
		t.Errorf("status after signed commit: %+v", st)
	}
}
