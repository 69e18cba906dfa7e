package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// pullRuntime has some images and answers pulls with pullErr.
type pullRuntime struct {
	*tokenRuntime
	images  map[string]*rt.Image
	pullErr error
	pulls   []string
	opts    []rt.PullOptions
}

func (r *pullRuntime) ImageStatus(_ context.Context, ref string) (*rt.Image, error) {
	if im, ok := r.images[ref]; ok {
		return im, nil
	}
	return nil, rt.ErrNotFound
}

func (r *pullRuntime) PullImage(_ context.Context, ref string, opts rt.PullOptions) (*rt.Image, error) {
	r.pulls = append(r.pulls, ref)
	r.opts = append(r.opts, opts)
	if r.pullErr != nil {
		return nil, r.pullErr
	}
	if opts.Progress != nil {
		opts.Progress(3<<20, 12<<20)
	}
	im := &rt.Image{ID: "sha256:pulled", Names: []string{ref}}
	r.images[ref] = im
	return im, nil
}

func newPullWorker(r *pullRuntime) (*podWorker, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(100)
	m := &PodManager{cfg: PodConfig{Runtime: r}, recorder: rec, log: logrus.NewEntry(logrus.New())}
	return newPodWorker(m, "uid"), rec
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func pullPod(c corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

func TestEnsureImageNoFallbackUnderAlways(t *testing.T) {
	r := &pullRuntime{tokenRuntime: &tokenRuntime{}, images: map[string]*rt.Image{
		"registry.example.com/app:latest": {ID: "sha256:old"},
	}, pullErr: errors.New("pull image registry.example.com/app:latest: unexpected status from HEAD request: 401 Unauthorized")}
	w, rec := newPullWorker(r)
	c := corev1.Container{Name: "app", Image: "registry.example.com/app:latest", ImagePullPolicy: corev1.PullAlways}
	pod := pullPod(c)
	if err := w.ensureImage(context.Background(), pod, &c); err == nil {
		t.Fatal("a failed pull under Always ran the image present on the host")
	}
	if got := w.waiting["app"]; got[0] != "ErrImagePull" || !strings.Contains(got[1], "401 Unauthorized") {
		t.Errorf("waiting after the failed pull = %q, want ErrImagePull with the registry's message", got)
	}
	evs := strings.Join(drain(rec), "\n")
	if !strings.Contains(evs, "Warning Failed Failed to pull image") || strings.Contains(evs, "present") {
		t.Errorf("events: %s", evs)
	}
	// Within the back-off: ImagePullBackOff, with the message, and no pull.
	if err := w.ensureImage(context.Background(), pod, &c); err == nil {
		t.Fatal("the back-off ran the image present on the host")
	}
	if got := w.waiting["app"]; got[0] != "ImagePullBackOff" || !strings.Contains(got[1], "401 Unauthorized") {
		t.Errorf("waiting in the back-off = %q, want ImagePullBackOff with the registry's message", got)
	}
	if len(r.pulls) != 1 {
		t.Errorf("pulls = %v, want one", r.pulls)
	}
	// IfNotPresent uses the present image.
	c.ImagePullPolicy = corev1.PullIfNotPresent
	if err := w.ensureImage(context.Background(), pod, &c); err != nil {
		t.Errorf("IfNotPresent with the image present: %v", err)
	}
}

func TestEnsureImageSideLoaded(t *testing.T) {
	r := &pullRuntime{tokenRuntime: &tokenRuntime{}, images: map[string]*rt.Image{
		"flotilla.local/hello:latest":       {ID: "sha256:h", SideLoaded: true},
		"docker.io/library/imported:latest": {ID: "sha256:i", SideLoaded: true},
	}, pullErr: errors.New("no network")}
	w, rec := newPullWorker(r)
	for _, img := range []string{"flotilla.local/hello:latest", "docker.io/library/imported:latest"} {
		c := corev1.Container{Name: "c", Image: img} // :latest: Always
		if err := w.ensureImage(context.Background(), pullPod(c), &c); err != nil {
			t.Errorf("%s: %v", img, err)
		}
	}
	if len(r.pulls) != 0 {
		t.Errorf("side-loaded images pulled: %v", r.pulls)
	}
	evs := drain(rec)
	if len(evs) != 2 || !strings.HasPrefix(evs[0], "Normal Pulled") || !strings.Contains(evs[0], "side-loaded") {
		t.Errorf("events = %q, want a Normal event per side-loaded image", evs)
	}
	// A flotilla.local image that is not there is asked of the site's other hosts only; when
	// none has it, the error says it is side-loaded only.
	c := corev1.Container{Name: "c", Image: "flotilla.local/absent:v1"}
	if err := w.ensureImage(context.Background(), pullPod(c), &c); err == nil {
		t.Fatal("an absent side-loaded image")
	}
	if got := w.waiting["c"]; got[0] != "ErrImagePull" || !strings.Contains(got[1], "side-loaded only") {
		t.Errorf("waiting = %q", got)
	}
	if len(r.opts) != 1 || !r.opts[0].PeersOnly || len(r.opts[0].Credentials) != 0 {
		t.Errorf("pulls %v with %+v, want one from peers only", r.pulls, r.opts)
	}
	// Another host has it: it runs.
	r.pullErr = nil
	w.backoffs = map[string]*backoff{}
	if err := w.ensureImage(context.Background(), pullPod(c), &c); err != nil {
		t.Errorf("a side-loaded image another host has: %v", err)
	}
}

// Tags are resolved by peers unless the policy is Always: then the registry says.
func TestEnsureImagePeerTags(t *testing.T) {
	for policy, want := range map[corev1.PullPolicy]bool{corev1.PullAlways: false, corev1.PullIfNotPresent: true} {
		r := &pullRuntime{tokenRuntime: &tokenRuntime{}, images: map[string]*rt.Image{}}
		w, _ := newPullWorker(r)
		c := corev1.Container{Name: "c", Image: "registry.example.com/app:v1", ImagePullPolicy: policy}
		if err := w.ensureImage(context.Background(), pullPod(c), &c); err != nil {
			t.Fatal(err)
		}
		if len(r.opts) != 1 || r.opts[0].PeerTags != want || r.opts[0].PeersOnly {
			t.Errorf("%s: pull options %+v, want PeerTags %v", policy, r.opts, want)
		}
	}
}

func TestEnsureImagePullProgress(t *testing.T) {
	r := &pullRuntime{tokenRuntime: &tokenRuntime{}, images: map[string]*rt.Image{}}
	w, rec := newPullWorker(r)
	c := corev1.Container{Name: "c", Image: "registry.example.com/big:v1"}
	if err := w.ensureImage(context.Background(), pullPod(c), &c); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`Normal Pulling Pulling image "registry.example.com/big:v1"`,
		`Normal Pulling Pulling image "registry.example.com/big:v1": 3.0 MiB of 12.0 MiB (25%)`,
		`Normal Pulled Successfully pulled image "registry.example.com/big:v1"`,
	}
	if got := drain(rec); !reflect.DeepEqual(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

func TestPullCredentials(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	secrets := map[string]*corev1.Secret{
		"json": {Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(
			`{"auths": {"registry.example.com": {"auth": "` + b64("a:1") + `"}, "other.example.com": {"username": "o", "password": "2"}}}`)}},
		"cfg": {Type: corev1.SecretTypeDockercfg, Data: map[string][]byte{corev1.DockerConfigKey: []byte(
			`{"https://registry.example.com": {"username": "b", "password": "3"}}`)}},
		"opaque": {Type: corev1.SecretTypeOpaque},
		"broken": {Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{`)}},
	}
	get := func(ns, name string) (*corev1.Secret, error) {
		if name == "unreadable" {
			return nil, errors.New("secrets ns/unreadable: not read from the API yet")
		}
		if s, ok := secrets[name]; ok && ns == "ns" {
			return s, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	pod := pullPod(corev1.Container{Name: "c", Image: "registry.example.com/app:v1"})
	for _, n := range []string{"missing", "opaque", "json", "broken", "cfg"} {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
	}
	creds, problems, err := pullCredentials(pod, "registry.example.com/app:v1", get)
	if err != nil {
		t.Fatal(err)
	}
	if want := []rt.Credential{{Username: "a", Password: "1"}, {Username: "b", Password: "3"}}; !reflect.DeepEqual(creds, want) {
		t.Errorf("credentials = %+v, want %+v", creds, want)
	}
	if len(problems) != 3 || !strings.Contains(problems[0], `"missing" not found`) || !strings.Contains(problems[1], `"opaque" is of type`) || !strings.Contains(problems[2], `"broken"`) {
		t.Errorf("problems = %q", problems)
	}
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "unreadable"}}
	if _, _, err := pullCredentials(pod, "registry.example.com/app:v1", get); err == nil {
		t.Error("a secret the API has not answered for yet: no error to wait on")
	}
}
