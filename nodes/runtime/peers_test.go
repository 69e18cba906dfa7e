package runtime

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// countingRegistry is an in-process registry that counts the blob and manifest requests it
// answers, by method and path.
type countingRegistry struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
	// blobDelay delays every blob GET (a slow uplink), so that pulls overlap.
	blobDelay time.Duration
}

func newCountingRegistry(t *testing.T) *countingRegistry {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	c := &countingRegistry{hits: map[string]int{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") || strings.Contains(r.URL.Path, "/manifests/") {
			c.mu.Lock()
			c.hits[r.Method+" "+r.URL.Path]++
			delay := c.blobDelay
			c.mu.Unlock()
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				time.Sleep(delay)
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(c.Close)
	return c
}

// blobGets counts the GETs of blobs.
func (c *countingRegistry) blobGets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.hits {
		if strings.HasPrefix(k, "GET ") && strings.Contains(k, "/blobs/") {
			n += v
		}
	}
	return n
}

func (c *countingRegistry) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.hits {
		n += v
	}
	return n
}

// testHost is one host's content store and image names, served as a peer.
type testHost struct {
	store  content.Store
	mu     sync.Mutex
	names  map[string]ocispec.Descriptor
	server *httptest.Server
	source *contentSource
	// peers, when set, wraps pull's handlers as containerd's pull options do.
	peers *Peers
	// fetchDelay holds every fetch of a config or layer back, as a loaded host is slow to
	// reach them.
	fetchDelay time.Duration
}

func newTestHost(t *testing.T) *testHost {
	store, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := &testHost{store: store, names: map[string]ocispec.Descriptor{}}
	h.source = &contentSource{store: store, images: h.image,
		ctx: func(c context.Context) context.Context { return c }}
	h.server = httptest.NewServer(h.source)
	t.Cleanup(h.server.Close)
	return h
}

func (h *testHost) image(_ context.Context, name string) (ocispec.Descriptor, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.names[name]
	if !ok {
		return d, fmt.Errorf("image %s: %w", name, errdefs.ErrNotFound)
	}
	return d, nil
}

// pull fetches ref (manifests, config, layers) into the host's store as containerd's pull
// does, through hosts, and names the image.
func (h *testHost) pull(ctx context.Context, ref string, hosts docker.RegistryHosts) error {
	var wrap func(images.Handler) images.Handler
	if h.peers != nil {
		var end func()
		wrap, end = h.peers.beginPull()
		defer end()
	}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hosts})
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return err
	}
	delay := images.HandlerFunc(func(_ context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if !images.IsManifestType(desc.MediaType) && !images.IsIndexType(desc.MediaType) {
			time.Sleep(h.fetchDelay)
		}
		return nil, nil
	})
	var handler images.Handler = images.Handlers(delay, remotes.FetchHandler(h.store, fetcher), images.ChildrenHandler(h.store))
	if wrap != nil {
		handler = wrap(handler)
	}
	if err := images.Dispatch(ctx, handler, nil, desc); err != nil {
		return err
	}
	h.mu.Lock()
	h.names[name] = desc
	h.mu.Unlock()
	return nil
}

// pushRandomImage pushes an image of two random 64 KiB layers to the registry.
func pushRandomImage(t *testing.T, reg *countingRegistry, repo string) string {
	img, err := random.Image(64<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	framework.PushImage(t, nil, reg.URL, repo, "v1", img, "")
	return strings.TrimPrefix(reg.URL, "http://") + "/" + repo + ":v1"
}

func upstreamHosts(t *testing.T, reg *countingRegistry) docker.RegistryHosts {
	host := strings.TrimPrefix(reg.URL, "http://")
	c, err := ParseRegistryConfig(fmt.Appendf(nil, "mirrors:\n  %q:\n    endpoint: [%q]\n", host, reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	return c.registryHosts(nil)
}

func TestPeersServeWhatTheyHold(t *testing.T) {
	ctx := context.Background()
	reg := newCountingRegistry(t)
	ref := pushRandomImage(t, reg, "team/app")
	upstream := upstreamHosts(t, reg)

	// Host 1 pulls from the registry: its peer (host 2) has nothing yet.
	h1, h2, h3 := newTestHost(t), newTestHost(t), newTestHost(t)
	peersOf := func(hs ...*testHost) *Peers {
		return &Peers{List: func() []string {
			var out []string
			for _, h := range hs {
				out = append(out, h.server.URL)
			}
			return out
		}}
	}
	p1 := peersOf(h2)
	if err := h1.pull(ctx, ref, withPeers(upstream, p1.registryHost(true))); err != nil {
		t.Fatal(err)
	}
	fetched := reg.blobGets()
	if fetched != 3 { // config and two layers
		t.Fatalf("host 1 fetched %d blobs from the registry, want 3 (config and two layers)", fetched)
	}
	if p1.BytesServed() != 0 {
		t.Fatalf("host 1 got %d bytes from a peer that had nothing", p1.BytesServed())
	}

	// Host 2 resolves the tag and fetches everything from its peers (host 3 has nothing,
	// host 1 has it): the registry is not asked at all.
	before := reg.requests()
	p2 := peersOf(h3, h1)
	if err := h2.pull(ctx, ref, withPeers(upstream, p2.registryHost(true))); err != nil {
		t.Fatal(err)
	}
	if n := reg.requests() - before; n != 0 {
		t.Fatalf("host 2 made %d requests to the registry although host 1 had the image: %v", n, reg.hits)
	}
	if p2.BytesServed() == 0 {
		t.Fatal("host 2 got no bytes from its peers")
	}
	if h2.names[ref].Digest != h1.names[ref].Digest {
		t.Fatalf("host 2 resolved %s to %s, host 1 to %s", ref, h2.names[ref].Digest, h1.names[ref].Digest)
	}

	// Without peer tags (imagePullPolicy Always) the registry resolves the tag, but the
	// content still comes from a peer.
	before, blobs := reg.requests(), reg.blobGets()
	p3 := peersOf(h1)
	if err := h3.pull(ctx, ref, withPeers(upstream, p3.registryHost(false))); err != nil {
		t.Fatal(err)
	}
	if reg.requests() == before {
		t.Fatal("with registry tags, the registry was not asked what the tag names")
	}
	if n := reg.blobGets() - blobs; n != 0 {
		t.Fatalf("host 3 fetched %d blobs from the registry although host 1 had them", n)
	}

	// The registry gone, a peers-only pull of a name nobody has fails with NotFound; one
	// that host 1 has works.
	reg.Close()
	h4 := newTestHost(t)
	p4 := peersOf(h1, h2)
	if err := h4.pull(ctx, strings.Replace(ref, "team/app", "team/other", 1), p4.peersOnlyHosts()); !errdefs.IsNotFound(err) {
		t.Fatalf("peers-only pull of an image no peer has: %v, want not found", err)
	}
	if err := h4.pull(ctx, ref, p4.peersOnlyHosts()); err != nil {
		t.Fatalf("peers-only pull with the registry gone: %v", err)
	}
}

// A peer that returns bytes that do not match the digest is not trusted: the pull fails
// rather than store them.
func TestPeerContentIsVerified(t *testing.T) {
	ctx := context.Background()
	reg := newCountingRegistry(t)
	ref := pushRandomImage(t, reg, "team/app")
	good := newTestHost(t)
	if err := good.pull(ctx, ref, upstreamHosts(t, reg)); err != nil {
		t.Fatal(err)
	}
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		good.server.Config.Handler.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		body := rec.Body.Bytes()
		if strings.Contains(r.URL.Path, "/blobs/") && len(body) > 0 {
			body = bytes.Clone(body)
			body[len(body)/2] ^= 0xff
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}))
	defer liar.Close()
	reg.Close()
	h := newTestHost(t)
	p := &Peers{List: func() []string { return []string{liar.URL} }}
	err := h.pull(ctx, ref, p.peersOnlyHosts())
	if err == nil || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("pull from a peer sending altered bytes: %v, want a digest mismatch", err)
	}
}

func TestPeerHandler(t *testing.T) {
	ctx := context.Background()
	h := newTestHost(t)
	blob := bytes.Repeat([]byte("layer"), 1000)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	if err := content.WriteBlob(ctx, h.store, "b", bytes.NewReader(blob), desc); err != nil {
		t.Fatal(err)
	}
	manifest := []byte(`{"schemaVersion":2,"config":{},"layers":[]}`)
	mdesc := ocispec.Descriptor{Digest: digest.FromBytes(manifest), Size: int64(len(manifest))}
	if err := content.WriteBlob(ctx, h.store, "m", bytes.NewReader(manifest), mdesc); err != nil {
		t.Fatal(err)
	}
	h.names["registry.example:5000/team/app:v1"] = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: mdesc.Digest, Size: mdesc.Size}

	do := func(method, path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, h.server.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		method, path string
		hdr          []string
		status       int
		digest, ct   string
		body         []byte
	}{
		{"GET", "/v2/", nil, 200, "", "application/json", []byte("{}")},
		{"GET", "/v2/team/app/blobs/" + desc.Digest.String(), nil, 200, desc.Digest.String(), "application/octet-stream", blob},
		{"GET", "/v2/team/app/blobs/" + desc.Digest.String(), []string{"Range", "bytes=5-9"}, 206, desc.Digest.String(), "", blob[5:10]},
		{"HEAD", "/v2/team/app/manifests/v1?ns=registry.example:5000", nil, 200, mdesc.Digest.String(), ocispec.MediaTypeImageIndex, nil},
		{"GET", "/v2/team/app/manifests/" + mdesc.Digest.String(), nil, 200, mdesc.Digest.String(), ocispec.MediaTypeImageManifest, manifest},
		{"HEAD", "/v2/team/app/manifests/v1?ns=other.example", nil, 404, "", "", nil},
		{"HEAD", "/v2/team/app/manifests/v2?ns=registry.example:5000", nil, 404, "", "", nil},
		{"GET", "/v2/team/app/blobs/" + digest.FromString("absent").String(), nil, 404, "", "", nil},
		{"GET", "/v2/team/app/blobs/latest", nil, 400, "", "", nil},
		{"DELETE", "/v2/team/app/blobs/" + desc.Digest.String(), nil, 405, "", "", nil},
	} {
		resp := do(tc.method, tc.path, tc.hdr...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			continue
		}
		if tc.digest != "" && resp.Header.Get("Docker-Content-Digest") != tc.digest {
			t.Errorf("%s %s: digest %q, want %q", tc.method, tc.path, resp.Header.Get("Docker-Content-Digest"), tc.digest)
		}
		if tc.ct != "" && resp.Header.Get("Content-Type") != tc.ct {
			t.Errorf("%s %s: content type %q, want %q", tc.method, tc.path, resp.Header.Get("Content-Type"), tc.ct)
		}
		if tc.body != nil {
			got, _ := io.ReadAll(resp.Body)
			if !bytes.Equal(got, tc.body) {
				t.Errorf("%s %s: body %q, want %q", tc.method, tc.path, got, tc.body)
			}
		}
	}
}

// A blob this host is fetching is served once it is complete; a fetch that stalls answers
// 404 so that the asking host goes to the registry.
func TestPeerHandlerWaitsForFetchInProgress(t *testing.T) {
	defer func(d time.Duration) { peerIngestStall = d }(peerIngestStall)
	peerIngestStall = time.Second
	ctx := context.Background()
	h := newTestHost(t)
	// Ingests named as containerd's pulls name them (remotes.MakeRefKey).
	ingest := func(blob []byte) (content.Writer, ocispec.Descriptor) {
		desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
		w, err := content.OpenWriter(ctx, h.store, content.WithRef(remotes.MakeRefKey(ctx, desc)), content.WithDescriptor(desc))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(blob[:len(blob)/2]); err != nil {
			t.Fatal(err)
		}
		return w, desc
	}
	head := func(d digest.Digest) chan int {
		ch := make(chan int, 1)
		go func() {
			resp, err := http.Head(h.server.URL + "/v2/x/blobs/" + d.String())
			if err != nil {
				ch <- 0
				return
			}
			resp.Body.Close()
			ch <- resp.StatusCode
		}()
		return ch
	}

	blob := bytes.Repeat([]byte("in progress"), 4096)
	w, desc := ingest(blob)
	got := head(desc.Digest)
	time.Sleep(300 * time.Millisecond) // the request is in before the fetch completes
	if _, err := w.Write(blob[len(blob)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, desc.Size, desc.Digest); err != nil {
		t.Fatal(err)
	}
	if code := <-got; code != http.StatusOK {
		t.Fatalf("HEAD of a blob being fetched: %d, want 200 once fetched", code)
	}

	stalled, sdesc := ingest(bytes.Repeat([]byte("stalled"), 4096))
	defer stalled.Close()
	start := time.Now()
	if code := <-head(sdesc.Digest); code != http.StatusNotFound {
		t.Fatalf("HEAD of a stalled fetch: %d, want 404", code)
	}
	if d := time.Since(start); d < peerIngestStall {
		t.Fatalf("a stalled fetch was given up after %s, before %s without progress", d, peerIngestStall)
	}
}

// commitGapStore is a content store as containerd's metadata store behaves around a commit:
// after its first listing the ingest is listed no more, and the blob is there only once the
// commit's database transaction ends, gap later.
type commitGapStore struct {
	content.Store
	commit func() // commits the ingest
	gap    time.Duration

	mu       sync.Mutex
	listings int
}

func (s *commitGapStore) ListStatuses(ctx context.Context, fs ...string) ([]content.Status, error) {
	s.mu.Lock()
	s.listings++
	n := s.listings
	s.mu.Unlock()
	switch n {
	case 1:
		return s.Store.ListStatuses(ctx, fs...)
	case 2:
		go func() {
			time.Sleep(s.gap)
			s.commit()
		}()
	}
	return nil, nil
}

// The designated host, asked for a blob it has begun to fetch, answers with the blob when the
// fetch ends while the blob is between its ingest and the content store (containerd commits
// the file, then the database transaction): the asking host does not go to the registry.
func TestDesignatedHostWaitsThroughTheCommit(t *testing.T) {
	ctx := context.Background()
	h := newTestHost(t)
	blob := bytes.Repeat([]byte("committing"), 4096)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	w, err := content.OpenWriter(ctx, h.store, content.WithRef(remotes.MakeRefKey(ctx, desc)), content.WithDescriptor(desc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(blob); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	h.source.store = &commitGapStore{Store: h.store, gap: 300 * time.Millisecond,
		commit: func() { committed <- w.Commit(ctx, desc.Size, desc.Digest) }}

	req, _ := http.NewRequest(http.MethodHead, h.server.URL+"/v2/x/blobs/"+desc.Digest.String(), nil)
	req.Header.Set(peerAwaitHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD of a blob whose fetch was committing: %d, want 200 once committed", resp.StatusCode)
	}
}

// Hosts that pull one image at the same moment fetch each blob from the registry once: the
// designated host of each blob fetches it, the others wait for it, also when every host is
// slow to reach the blobs its manifest lists (longer than peerAwaitStart, as on a loaded
// machine). A host that pulls alone gets the image from the registry without waiting for the
// designated hosts, which pull nothing.
func TestSimultaneousPullsFetchEachBlobOnce(t *testing.T) {
	defer func(d time.Duration) { peerAwaitStart = d }(peerAwaitStart)
	peerAwaitStart = time.Second
	ctx := context.Background()
	reg := newCountingRegistry(t)
	ref := pushRandomImage(t, reg, "team/app")
	reg.mu.Lock()
	reg.blobDelay = 500 * time.Millisecond
	reg.mu.Unlock()
	upstream := upstreamHosts(t, reg)

	hosts := []*testHost{newTestHost(t), newTestHost(t), newTestHost(t)}
	peers := make([]*Peers, len(hosts))
	for i, h := range hosts {
		p := &Peers{
			List: func() []string {
				var out []string
				for _, o := range hosts {
					if o != h {
						out = append(out, o.server.URL)
					}
				}
				return out
			},
			Self: func() string { return h.server.URL },
		}
		peers[i] = p
		h.source.looking, h.source.plans = p.isLooking, p.plans
		h.peers, h.fetchDelay = p, 2*peerAwaitStart
	}
	start := make(chan struct{})
	errs := make(chan error, len(hosts))
	for i, h := range hosts {
		go func() {
			<-start
			errs <- h.pull(ctx, ref, withPeers(upstream, peers[i].registryHost(false)))
		}()
	}
	began := time.Now()
	close(start)
	for range hosts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("3 hosts pulled at once in %s", time.Since(began).Round(time.Millisecond))
	if n := reg.blobGets(); n != 3 {
		t.Fatalf("3 hosts pulling at once fetched %d blobs from the registry, want 3 (config and two layers once): %v", n, reg.hits)
	}
	var fromPeers int64
	for _, p := range peers {
		fromPeers += p.BytesServed()
	}
	if fromPeers == 0 {
		t.Fatal("no host got content from a peer")
	}

	// A fourth host pulls another image alone: no peer has it or fetches it.
	other := pushRandomImage(t, reg, "team/other")
	before := reg.blobGets()
	h4 := newTestHost(t)
	p4 := &Peers{
		List: func() []string { return []string{hosts[0].server.URL, hosts[1].server.URL, hosts[2].server.URL} },
		Self: func() string { return h4.server.URL },
	}
	h4.source.looking, h4.source.plans = p4.isLooking, p4.plans
	h4.peers = p4
	began = time.Now()
	if err := h4.pull(ctx, other, withPeers(upstream, p4.registryHost(false))); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	t.Logf("a lone pull took %s", took.Round(time.Millisecond))
	if n := reg.blobGets() - before; n != 3 {
		t.Fatalf("a lone pull fetched %d blobs from the registry, want 3", n)
	}
	if took > peerAwaitStart {
		t.Fatalf("a lone pull took %s: the designated hosts, which pull nothing, kept it waiting", took)
	}
}
