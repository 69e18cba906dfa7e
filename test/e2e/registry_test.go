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
	v1 "github.com/google/go-containerregistry/pkg/v1"
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
// registry once per blob, and so is an image the 3 hosts start at once; with the registry gone
// host 3 still starts the first from its peers, and an image side-loaded as a tarball on host 1
// only runs on host 3. With the registry gone, imagePullPolicy Always fails the start although
// the image is on the host.
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
	// The 3 hosts' GETs of the wide image's manifest are held until all 3 are in (or 30 s
	// have passed), so that the hosts then look for its blobs at the same instant.
	var wideGets int
	wideTogether := make(chan struct{})
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
		if strings.HasPrefix(r.URL.Path, "/v2/private/wide/manifests/sha256:") && r.Method == http.MethodGet {
			mu.Lock()
			if wideGets++; wideGets == 3 {
				close(wideTogether)
			}
			mu.Unlock()
			select {
			case <-wideTogether:
			case <-time.After(30 * time.Second):
			}
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
	// pushLayered pushes hello with one more random layer of size bytes as repo:v1.
	pushLayered := func(repo string, size int64) (v1.Image, string) {
		layer, err := random.Layer(size, types.DockerLayer)
		if err != nil {
			t.Fatal(err)
		}
		im, err := mutate.AppendLayers(img, layer)
		if err != nil {
			t.Fatal(err)
		}
		framework.PushImage(t, nil, push.URL, repo, "v1", im, "")
		return im, regHost + "/" + repo + ":v1"
	}
	big, bigImage := pushLayered("private/big", 50<<20)
	wide, wideImage := pushLayered("private/wide", 20<<20)

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
	// newBlobs are the config and the last layer of an image (the others are hello's).
	newBlobs := func(im interface{ Manifest() (*v1.Manifest, error) }) []string {
		m, err := im.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		return []string{m.Config.Digest.String(), m.Layers[len(m.Layers)-1].Digest.String()}
	}
	var wanted []string // blobs the registry must have answered once each
	fetchedOnce := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, d := range wanted {
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
	wanted = newBlobs(big)
	create(t, c, podOn(s.Hosts[0].Name, "big-1", bigImage, "regcred", corev1.PullIfNotPresent))
	waitPod(t, c, "big-1", 3*time.Minute, "Running on "+s.Hosts[0].Name, running)
	fetchedOnce("after host 1 started the image")
	create(t, c, podOn(s.Hosts[1].Name, "big-2", bigImage, "regcred", corev1.PullIfNotPresent))
	waitPod(t, c, "big-2", 3*time.Minute, "Running on "+s.Hosts[1].Name, running)
	fetchedOnce("after host 2 started the image")

	// The 3 hosts start another image at the same moment (a Deployment's replicas do), and
	// the registry holds their manifest GETs until all 3 are in: each blob's designated host
	// fetches it, the two others get it from there.
	wanted = append(wanted, newBlobs(wide)...)
	for i, host := range s.Hosts {
		create(t, c, podOn(host.Name, fmt.Sprintf("wide-%d", i+1), wideImage, "regcred", corev1.PullIfNotPresent))
	}
	for i, host := range s.Hosts {
		waitPod(t, c, fmt.Sprintf("wide-%d", i+1), 3*time.Minute, "Running on "+host.Name, running)
	}
	mu.Lock()
	together := wideGets
	mu.Unlock()
	if together != 3 {
		t.Fatalf("the registry answered %d GETs of the wide image's manifest, want 3 (one per host)", together)
	}
	fetchedOnce("after the 3 hosts started an image at once")

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
