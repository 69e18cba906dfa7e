package e2e

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestPrivateRegistry pulls from a registry with TLS (its CA given in registries.yaml) and
// basic auth, listening in the root namespace on the site bridge's .254: a pod with the right
// imagePullSecret runs; a wrong secret is ImagePullBackOff with the registry's 401. Peer image
// sharing: an image of a 50 MiB layer started on host 1, then host 2, is fetched from the
// registry once per blob; with the registry gone host 3 still starts it from its peers, and an
// image side-loaded as a tarball on host 1 only runs on host 3. With the registry gone,
// imagePullPolicy Always fails the start although the image is on the host.
func TestPrivateRegistry(t *testing.T) {
	s := newSite(t, 3)
	sideLoad(t, s)
	ip := s.Subnet() + ".254"
	dir := t.TempDir()
	caFile, keyFile := framework.SelfSignedCert(t, dir, "e2e registry", []net.IP{net.ParseIP(ip)}, nil)

	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	push := httptest.NewServer(reg) // loopback, for pushing
	defer push.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	blobGets := map[string]int{} // digest -> GETs answered
	private := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "flo" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		if i := strings.LastIndex(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet {
			mu.Lock()
			blobGets[r.URL.Path[i+len("/blobs/"):]]++
			mu.Unlock()
		}
		reg.ServeHTTP(w, r)
	})}}
	cert, err := tls.LoadX509KeyPair(caFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	private.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	private.StartTLS()
	stopped := false
	defer func() {
		if !stopped {
			private.Close()
		}
	}()
	regHost := ln.Addr().String()

	img, err := tarball.ImageFromPath(filepath.Join(imagesDir(t), "hello.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	framework.PushImage(t, nil, push.URL, "private/hello", "v1", img, "")
	image := regHost + "/private/hello:v1"
	bigLayer, err := random.Layer(50<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	big, err := mutate.AppendLayers(img, bigLayer)
	if err != nil {
		t.Fatal(err)
	}
	framework.PushImage(t, nil, push.URL, "private/big", "v1", big, "")
	bigImage := regHost + "/private/big:v1"

	h := s.Hosts[0]
	conf := fmt.Sprintf("configs:\n  %q:\n    tls: {ca_file: %s}\n", regHost, caFile)
	for _, h := range s.Hosts {
		if err := os.WriteFile(filepath.Join(h.DataDir, "registries.yaml"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Neither disk-pressure eviction nor image garbage collection on a nearly full test disk
	// may take the pods or the pulled image away: the last step needs the image on the host.
	startSite(t, s, "--eviction-hard=", "--image-gc-high-threshold=100")
	waitFor(t, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		got, out := readyNodes(h)
		return got == 3, out
	})
	c := clientOf(t, h)
	ctx := context.Background()
	for sname, pass := range map[string]string{"regcred": "s3cret", "badcred": "wrong"} {
		auth := base64.StdEncoding.EncodeToString([]byte("flo:" + pass))
		doc := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, regHost, auth)
		if _, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sname},
			Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(doc)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podOn := func(node, podName, image, secret string, policy corev1.PullPolicy) *corev1.Pod {
		p := newPod(podName, node, corev1.RestartPolicyAlways, corev1.Container{Name: "hello", Image: image, ImagePullPolicy: policy})
		if secret != "" {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
		}
		return p
	}
	pod := func(podName, secret string, policy corev1.PullPolicy) *corev1.Pod {
		return podOn(h.Name, podName, image, secret, policy)
	}
	running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
	waiting := func(p *corev1.Pod) (string, string) {
		if cs := statusOf(p, "hello"); cs != nil && cs.State.Waiting != nil {
			return cs.State.Waiting.Reason, cs.State.Waiting.Message
		}
		return "", ""
	}

	create(t, c, pod("private", "regcred", corev1.PullIfNotPresent))
	waitPod(t, c, "private", 90*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	create(t, c, pod("badsecret", "badcred", corev1.PullAlways))
	p := waitPod(t, c, "badsecret", 90*time.Second, "ImagePullBackOff", func(p *corev1.Pod) bool {
		r, _ := waiting(p)
		return r == "ImagePullBackOff"
	})
	if _, msg := waiting(p); !strings.Contains(msg, "401") {
		t.Fatalf("ImagePullBackOff message %q, want the registry's 401", msg)
	}

	// Peer image sharing: host 1 pulls the big image from the registry, host 2 from host 1.
	// The hello image's layer is side-loaded on every host already: only the config and the
	// 50 MiB layer are new.
	m, err := big.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	bigBlobs := []string{m.Config.Digest.String(), m.Layers[len(m.Layers)-1].Digest.String()}
	fetchedOnce := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, d := range bigBlobs {
			if blobGets[d] != 1 {
				t.Fatalf("%s: the registry answered %d GETs of blob %s, want 1 for the whole site (all: %v)", when, blobGets[d], d, blobGets)
			}
		}
		for d, n := range blobGets {
			if n > 1 {
				t.Fatalf("%s: the registry answered %d GETs of blob %s", when, n, d)
			}
		}
	}
	create(t, c, podOn(s.Hosts[0].Name, "big-1", bigImage, "regcred", corev1.PullIfNotPresent))
	waitPod(t, c, "big-1", 3*time.Minute, "Running on "+s.Hosts[0].Name, running)
	fetchedOnce("after host 1 started the image")
	create(t, c, podOn(s.Hosts[1].Name, "big-2", bigImage, "regcred", corev1.PullIfNotPresent))
	waitPod(t, c, "big-2", 3*time.Minute, "Running on "+s.Hosts[1].Name, running)
	fetchedOnce("after host 2 started the image")

	private.Close()
	stopped = true
	create(t, c, podOn(s.Hosts[2].Name, "big-3", bigImage, "regcred", corev1.PullIfNotPresent))
	waitPod(t, c, "big-3", 3*time.Minute, "Running on "+s.Hosts[2].Name+" with the registry gone", running)

	// An image side-loaded on host 1 only (a tarball in its DIR/images) runs on host 3.
	tarPath := filepath.Join(t.TempDir(), "peer-only.tar")
	sideRef, err := name.ParseReference("flotilla.local/peer-only:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(tarPath, sideRef, img); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Hosts[0].DataDir, "images", "peer-only.tar"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	create(t, c, podOn(s.Hosts[2].Name, "side-3", "flotilla.local/peer-only:v1", "", corev1.PullIfNotPresent))
	waitPod(t, c, "side-3", 3*time.Minute, "Running on "+s.Hosts[2].Name+" from host 1's tarball", running)
	if _, err := os.Stat(filepath.Join(s.Hosts[2].DataDir, "images", "peer-only.tar")); err == nil {
		t.Fatal("the tarball was copied to host 3")
	}

	create(t, c, pod("always", "regcred", corev1.PullAlways))
	p = waitPod(t, c, "always", 90*time.Second, "ErrImagePull or ImagePullBackOff", func(p *corev1.Pod) bool {
		r, _ := waiting(p)
		return r == "ErrImagePull" || r == "ImagePullBackOff"
	})
	if _, msg := waiting(p); !strings.Contains(msg, regHost) {
		t.Fatalf("pull failure message %q does not name the registry", msg)
	}
	time.Sleep(3 * time.Second)
	if p, err := getPod(c, "always"); err != nil || p.Status.Phase == corev1.PodRunning || statusOf(p, "hello") == nil || statusOf(p, "hello").State.Running != nil {
		t.Fatalf("Always with the registry down ran the image on the host: %s, %v", describe(p), err)
	}
}
