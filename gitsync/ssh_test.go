package gitsync

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// sshGitServer serves `git upload-pack` over SSH on loopback to one client key.
type sshGitServer struct {
	addr    string
	hostKey ssh.PublicKey
	wg      sync.WaitGroup
}

func newSigner(t *testing.T) (ssh.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

func startSSHGitServer(t *testing.T, client ssh.PublicKey) *sshGitServer {
	t.Helper()
	host, _ := newSigner(t)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(client.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("unknown client key")
	}}
	cfg.AddHostKey(host)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sshGitServer{addr: l.Addr().String(), hostKey: host.PublicKey()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c, cfg) }()
		}
	}()
	t.Cleanup(func() { l.Close(); s.wg.Wait() })
	return s
}

func (s *sshGitServer) serve(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			defer ch.Close()
			for req := range creqs {
				if req.Type != "exec" {
					_ = req.Reply(false, nil)
					continue
				}
				var payload struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
					_ = req.Reply(false, nil)
					return
				}
				cmd, path, _ := strings.Cut(payload.Command, " ")
				if cmd != "git-upload-pack" {
					_ = req.Reply(false, nil)
					return
				}
				_ = req.Reply(true, nil)
				run := exec.Command("git", "upload-pack", strings.Trim(path, "'"))
				run.Stdin, run.Stdout, run.Stderr = ch, ch, ch.Stderr()
				status := uint32(0)
				if err := run.Run(); err != nil {
					status = 1
				}
				_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
				return
			}
		}()
	}
}

func (s *sshGitServer) knownHosts(key ssh.PublicKey) string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.addr)}, key) + "\n"
}

// TestSSHFetch: an ssh:// source authenticates with the identity of its Secret and trusts only
// the host keys of its known_hosts; a missing secretRef or a host key mismatch is reported.
func TestSSHFetch(t *testing.T) {
	clientSigner, clientPriv := newSigner(t)
	srv := startSSHGitServer(t, clientSigner.PublicKey())
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	identity := pem.EncodeToMemory(block)
	other, _ := newSigner(t)

	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML, "cm.yaml": newCMYAML})
	e := start(t)
	ctx := context.Background()
	secrets := e.client.CoreV1().Secrets("default")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ssh"}, Data: map[string][]byte{
		"identity": identity, "known_hosts": []byte(srv.knownHosts(other.PublicKey()))}}
	if sec, err = secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("ssh://git@%s%s", srv.addr, r.dir)
	res := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default")
	for name, spec := range map[string]map[string]any{
		"apps":      {"url": url, "interval": "1s", "secretRef": map[string]any{"name": "ssh"}, "serviceAccountName": testSA},
		"no-secret": {"url": url, "interval": "1m", "serviceAccountName": testSA},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
			"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": spec}}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("no-secret stalled", func() bool {
		u, err := res.Get(ctx, "no-secret", metav1.GetOptions{})
		if err != nil {
			return false
		}
		var gs v1alpha1.GitSource
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs)
		c := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionStalled)
		return c != nil && strings.Contains(c.Message, "is an SSH URL: set spec.secretRef")
	})
	e.waitFor("host key mismatch reported", func() bool {
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonFetchFailed && strings.Contains(c.Message, "is not the one in known_hosts of Secret default/ssh")
	})
	t.Logf("wrong known_hosts: %s", apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady).Message)
	if e.source().Status.LastAttemptedRevision != "" {
		t.Fatal("fetched from a host whose key is not in known_hosts")
	}

	sec.Data["known_hosts"] = []byte(srv.knownHosts(srv.hostKey))
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("applied over ssh", e.readyAt(head))
	head = r.commit(map[string]string{"cm.yaml": ""})
	e.waitFor("next commit applied over ssh", e.readyAt(head))
	_, err = e.client.CoreV1().ConfigMaps("demo").Get(ctx, "fresh", metav1.GetOptions{})
	if err == nil {
		t.Error("ConfigMap removed from git was not pruned")
	}
}
