package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sirupsen/logrus"
)

// Peer image sharing: every host serves the image content it holds (manifests and blobs, by
// digest; image names by tag) to the other hosts of its site, read-only, in the registry API's
// shape (GET/HEAD /v2/<name>/{manifests,blobs}/<reference>?ns=<registry>), on the node agent's
// endpoint behind mutual TLS. A host that pulls asks its peers first: all of them at once, the
// first that has the content serves it, and containerd checks every byte against the digest
// it asked for before the content is committed. Only when no peer has it does the pull go to
// the registry (or its mirrors). A peer that is itself fetching the blob asked for answers once
// it has it, so hosts that start the same image one after another fetch each layer from the
// registry once per site.
//
// Hosts that start the same image at the same moment (a Deployment's replicas on several
// hosts) all find that no peer has a blob yet. Each blob then has one designated host among
// the site's hosts, the same for all of them (rendezvous hashing of the digest with the hosts'
// endpoints): it fetches the blob from the registry at once, and the others ask it again,
// waiting for its fetch to start and then for the blob, before they go to the registry
// themselves. The designated host knows whether it will fetch the blob: it keeps them waiting
// while one of its pulls lists the blob (up to peerAwaitExpected, however loaded the host is)
// or has not read its image's manifest yet (up to peerAwaitStart), and answers at once
// otherwise. A host that is still asking its peers for a blob says it does not have it, even
// though containerd has already opened its ingest (at offset 0), so that hosts asking one
// another do not wait on each other. A host that pulls an image no other host is pulling
// therefore goes to the registry at once, unless the designated host is itself starting a
// pull.

// PeerHostName is the name of the peers' pseudo-endpoint in pulls (never resolved: the
// peer transport sends its requests to the peers themselves).
const PeerHostName = "flotilla-peers.invalid"

// Peers is how this host reaches the other hosts of its site for image content.
type Peers struct {
	// List returns the base URLs (https://address:port) of the other hosts' content
	// endpoints, at the time of the call.
	List func() []string
	// TLS is the client configuration: the host's own certificate and the site's CA.
	TLS *tls.Config
	// Self returns this host's own base URL, in the form List gives the others' ("" when
	// not known yet): with it, the hosts agree on which of them fetches a blob none has.
	Self func() string
	// Log receives which peer served what.
	Log *logrus.Entry

	// pending counts, by digest, this host's fetches of a blob that have not reached a
	// source yet (containerd's ingest is open, the peers are being asked); fetching marks
	// those whose lookup has ended (the bytes come from a peer or the registry).
	lookMu   sync.Mutex
	pending  map[digest.Digest]int
	fetching map[digest.Digest]bool
	// pulls are the pulls in progress; expected counts, by digest, the pulls whose manifests
	// list the blob (it will be fetched unless it is here already).
	pulls    map[*pullState]bool
	expected map[digest.Digest]int

	once   sync.Once
	client *http.Client
	// served counts the bytes peers sent this host (for tests and figures).
	served atomic.Int64
}

// peerLookupTimeout bounds the wait for the peers' answers to a lookup. A peer without the
// content answers at once; one fetching it answers when it has it (see peerIngestWait).
const peerLookupTimeout = 5 * time.Minute

// peerAwaitStart is how long the designated host of a blob, asked by a host that found it on no
// peer, waits while one of its own pulls has not read its manifest yet (and may list the blob)
// before it answers that it does not have the blob.
var peerAwaitStart = 5 * time.Second

// peerAwaitExpected is how long the designated host waits for its own fetch of a blob that one
// of its pulls lists to start: only a host too loaded to reach the blob takes that long.
var peerAwaitExpected = 30 * time.Second

// peerAwaitHeader marks a request to the designated host of a blob (see peerAwaitStart).
const peerAwaitHeader = "Flotilla-Await-Fetch"

// peerIngestStall is how long a peer waits for a fetch of a blob in progress on it that makes
// no progress before answering that it does not have the blob.
var peerIngestStall = 10 * time.Second

func (p *Peers) httpClient() *http.Client {
	p.once.Do(func() {
		tr := &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       p.TLS,
			TLSHandshakeTimeout:   5 * time.Second,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: peerLookupTimeout,
		}
		p.client = &http.Client{Transport: tr}
	})
	return p.client
}

// BytesServed returns how many bytes of content this host received from its peers.
func (p *Peers) BytesServed() int64 { return p.served.Load() }

// SetPeers makes pulls ask the site's other hosts first (nil: never).
func (r *Runtime) SetPeers(p *Peers) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers = p
}

func (r *Runtime) peerSet() *Peers {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peers
}

// peerRegistryHost is the endpoint a pull puts first: its transport asks the peers. With
// resolve, image tags are also resolved by the peers (else only content by digest is asked
// of them, the registry resolving tags).
func (p *Peers) registryHost(resolve bool) docker.RegistryHost {
	caps := docker.HostCapabilityPull
	if resolve {
		caps |= docker.HostCapabilityResolve
	}
	return docker.RegistryHost{
		Client: &http.Client{Transport: &peerTransport{peers: p, resolveTags: resolve}},
		Host:   PeerHostName, Scheme: "https", Path: "/v2", Capabilities: caps,
	}
}

// peerTransport answers containerd's registry requests for the peers pseudo-endpoint: from
// the first peer that has the content, or 404 so that containerd goes on to the registry.
type peerTransport struct {
	peers       *Peers
	resolveTags bool
}

func (t *peerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	kind, ref, ok := parseContentPath(req.URL.Path)
	if !ok || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		return notFoundResponse(req), nil
	}
	if _, err := digest.Parse(ref); err != nil && (kind != "manifests" || !t.resolveTags) {
		return notFoundResponse(req), nil
	}
	var peer string
	if dgst, err := digest.Parse(ref); err == nil && kind == "blobs" {
		// Until this returns, containerd's ingest of the blob is open and idle: peers asking
		// this host are told it does not have the blob.
		done := t.peers.lookFor(dgst)
		peer = t.peers.find(req.Context(), req.URL.Path, req.URL.RawQuery, req.Header.Get("Accept"))
		if peer == "" {
			peer = t.peers.askDesignated(req.Context(), dgst, req.URL.Path, req.URL.RawQuery, req.Header.Get("Accept"))
		}
		done()
	} else {
		peer = t.peers.find(req.Context(), req.URL.Path, req.URL.RawQuery, req.Header.Get("Accept"))
	}
	if peer == "" {
		return notFoundResponse(req), nil
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, peer+req.URL.Path+"?"+req.URL.RawQuery, nil)
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Accept", "Range", "User-Agent"} {
		if v := req.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	resp, err := t.peers.httpClient().Do(out)
	if err != nil {
		t.peers.logf(logrus.Fields{"peer": peer, "path": req.URL.Path}, err, "image content from a peer")
		return notFoundResponse(req), nil
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		_ = resp.Body.Close()
		return notFoundResponse(req), nil
	}
	t.peers.logf(logrus.Fields{"peer": peer, "path": req.URL.Path, "method": req.Method}, nil, "image content from a peer")
	if req.Method == http.MethodGet {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.peers.served}
	}
	return resp, nil
}

func (p *Peers) logf(f logrus.Fields, err error, msg string) {
	if p.Log == nil {
		return
	}
	if err != nil {
		p.Log.WithFields(f).WithError(err).Debug(msg)
		return
	}
	p.Log.WithFields(f).Debug(msg)
}

// hold records a fetch of dgst that has not reached a source, until the returned func is
// called (with fetching: the fetch goes on, from a peer or the registry).
func (p *Peers) hold(dgst digest.Digest) func(fetching bool) {
	p.lookMu.Lock()
	defer p.lookMu.Unlock()
	if p.pending == nil {
		p.pending, p.fetching = map[digest.Digest]int{}, map[digest.Digest]bool{}
	}
	p.pending[dgst]++
	return func(fetching bool) {
		p.lookMu.Lock()
		defer p.lookMu.Unlock()
		if fetching {
			p.fetching[dgst] = true
		}
		if p.pending[dgst]--; p.pending[dgst] <= 0 {
			delete(p.pending, dgst)
			delete(p.fetching, dgst)
		}
	}
}

// lookFor records a lookup of dgst among the peers until the returned func is called.
func (p *Peers) lookFor(dgst digest.Digest) func() {
	done := p.hold(dgst)
	return func() { done(true) }
}

// isLooking says whether this host has an ingest of dgst open without fetching it yet.
func (p *Peers) isLooking(dgst digest.Digest) bool {
	p.lookMu.Lock()
	defer p.lookMu.Unlock()
	return p.pending[dgst] > 0 && !p.fetching[dgst]
}

// pullState is one pull in progress on this host.
type pullState struct {
	// resolved is set once a manifest of the pull listed its config and layers.
	resolved bool
	expected []digest.Digest
}

// beginPull records a pull in progress until end is called, and returns the wrapper of its
// image handlers: from the moment containerd opens the ingest of a blob (before the peers are
// asked) until the blob is fetched, peers asking this host for it are answered according to
// isLooking, not kept waiting on an ingest that has not started; and the blobs its manifests
// list are expected (see plans).
func (p *Peers) beginPull() (wrap func(images.Handler) images.Handler, end func()) {
	ps := &pullState{}
	p.lookMu.Lock()
	if p.pulls == nil {
		p.pulls, p.expected = map[*pullState]bool{}, map[digest.Digest]int{}
	}
	p.pulls[ps] = true
	p.lookMu.Unlock()
	wrap = func(h images.Handler) images.Handler {
		return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
			done := p.hold(desc.Digest)
			defer done(false)
			children, err := h.Handle(ctx, desc)
			if err == nil && len(children) > 0 {
				p.lookMu.Lock()
				for _, c := range children {
					ps.expected = append(ps.expected, c.Digest)
					p.expected[c.Digest]++
					if !images.IsManifestType(c.MediaType) && !images.IsIndexType(c.MediaType) {
						ps.resolved = true
					}
				}
				p.lookMu.Unlock()
			}
			return children, err
		})
	}
	end = func() {
		p.lookMu.Lock()
		defer p.lookMu.Unlock()
		delete(p.pulls, ps)
		for _, d := range ps.expected {
			if p.expected[d]--; p.expected[d] <= 0 {
				delete(p.expected, d)
			}
		}
	}
	return wrap, end
}

// plans says whether one of this host's pulls lists dgst (expected), and whether one has not
// read its manifest yet (resolving: it may list dgst).
func (p *Peers) plans(dgst digest.Digest) (expected, resolving bool) {
	p.lookMu.Lock()
	defer p.lookMu.Unlock()
	for ps := range p.pulls {
		if !ps.resolved {
			resolving = true
		}
	}
	return p.expected[dgst] > 0, resolving
}

// designated is the host of bases that fetches dgst from the registry when no host has it:
// the one whose endpoint hashes highest with the digest (rendezvous hashing), so that every
// host with the same list picks the same one, and a host joining or leaving moves only the
// blobs it is picked for.
func designated(dgst digest.Digest, bases []string) string {
	var best string
	var bestSum [sha256.Size]byte
	for _, b := range bases {
		sum := sha256.Sum256([]byte(dgst.String() + "\x00" + b))
		if best == "" || bytes.Compare(sum[:], bestSum[:]) > 0 {
			best, bestSum = b, sum
		}
	}
	return best
}

// askDesignated asks the designated host of dgst for it, when that is not this host, and
// returns its base URL when it has the blob, "" to go to the registry.
func (p *Peers) askDesignated(ctx context.Context, dgst digest.Digest, path, query, accept string) string {
	if p.Self == nil || p.List == nil {
		return ""
	}
	self, bases := p.Self(), p.List()
	if self == "" || len(bases) == 0 {
		return ""
	}
	d := designated(dgst, append(bases, self))
	if d == self {
		return ""
	}
	return p.ask(ctx, []string{d}, path, query, accept, "1")
}

// find asks every peer at once (HEAD) for path and returns the base URL of the first that
// has it, or "".
func (p *Peers) find(ctx context.Context, path, query, accept string) string {
	if p.List == nil {
		return ""
	}
	return p.ask(ctx, p.List(), path, query, accept, "")
}

// ask asks bases at once (HEAD) for path and returns the first that has it, or "". await is
// the value of peerAwaitHeader ("": none).
func (p *Peers) ask(ctx context.Context, bases []string, path, query, accept, await string) string {
	if len(bases) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, peerLookupTimeout)
	defer cancel()
	found := make(chan string, len(bases))
	for _, base := range bases {
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodHead, base+path+"?"+query, nil)
			if err != nil {
				found <- ""
				return
			}
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			if await != "" {
				req.Header.Set(peerAwaitHeader, await)
			}
			resp, err := p.httpClient().Do(req)
			if err != nil {
				if ctx.Err() == nil {
					p.logf(logrus.Fields{"peer": base, "path": path}, err, "peer lookup")
				}
				found <- ""
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				found <- base
				return
			}
			found <- ""
		}()
	}
	for range bases {
		if b := <-found; b != "" {
			return b
		}
	}
	return ""
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func notFoundResponse(req *http.Request) *http.Response {
	body := `{"errors":[{"code":"NOT_FOUND","message":"no peer has it"}]}`
	return &http.Response{
		Status: "404 Not Found", StatusCode: http.StatusNotFound,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}
}

// parseContentPath splits /v2/<name>/{manifests,blobs}/<reference>.
func parseContentPath(p string) (kind, ref string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 3 {
		return "", "", false
	}
	kind, ref = parts[len(parts)-2], parts[len(parts)-1]
	if (kind != "manifests" && kind != "blobs") || ref == "" {
		return "", "", false
	}
	return kind, ref, true
}

// contentSource is what the peer endpoint reads: the content store and the image names.
type contentSource struct {
	store  content.Store
	images func(ctx context.Context, name string) (ocispec.Descriptor, error)
	ctx    func(context.Context) context.Context
	log    *logrus.Entry
	// looking says whether this host is asking its peers for a blob (nil: never).
	looking func(digest.Digest) bool
	// plans says whether this host's pulls list a blob, or may (nil: never).
	plans func(digest.Digest) (expected, resolving bool)
}

// PeerHandler serves this host's image content to the site's other hosts (the caller
// authenticates them): GET and HEAD of /v2/, of manifests by digest or tag and of blobs by
// digest. Only what is on this host is served; a blob being fetched is served once fetched.
func (r *Runtime) PeerHandler() http.Handler {
	return &contentSource{
		store: r.client.ContentStore(),
		images: func(ctx context.Context, name string) (ocispec.Descriptor, error) {
			im, err := r.client.ImageService().Get(ctx, name)
			return im.Target, err
		},
		ctx: r.ns, log: r.log,
		looking: func(d digest.Digest) bool {
			p := r.peerSet()
			return p != nil && p.isLooking(d)
		},
		plans: func(d digest.Digest) (bool, bool) {
			if p := r.peerSet(); p != nil {
				return p.plans(d)
			}
			return false, false
		},
	}
}

func (s *contentSource) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this endpoint is read-only")
		return
	}
	w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
	if req.URL.Path == "/v2/" || req.URL.Path == "/v2" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
		return
	}
	kind, ref, ok := parseContentPath(req.URL.Path)
	if !ok {
		registryError(w, http.StatusNotFound, "NAME_UNKNOWN", "not /v2/<name>/manifests/<reference> or /v2/<name>/blobs/<digest>")
		return
	}
	ctx := s.ctx(req.Context())
	dgst, err := digest.Parse(ref)
	mediaType := ""
	if err != nil {
		if kind != "manifests" {
			registryError(w, http.StatusBadRequest, "DIGEST_INVALID", fmt.Sprintf("blob reference %q is not a digest", ref))
			return
		}
		name := imageNameOf(req)
		desc, err := s.images(ctx, name+":"+ref)
		if err != nil {
			registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("no image %s:%s on this host", name, ref))
			return
		}
		dgst, mediaType = desc.Digest, desc.MediaType
	}
	info, err := s.store.Info(ctx, dgst)
	if errdefs.IsNotFound(err) && kind == "blobs" {
		seen := int64(-1)
		if req.Header.Get(peerAwaitHeader) != "" {
			seen = s.awaitFetch(ctx, dgst)
		}
		// An ingest this host opened while it asks its peers is not a fetch: answer now.
		if !s.isLooking(dgst) && s.waitIngest(ctx, dgst, seen) {
			info, err = s.store.Info(ctx, dgst)
		}
	}
	if err != nil {
		registryError(w, http.StatusNotFound, strings.ToUpper(strings.TrimSuffix(kind, "s"))+"_UNKNOWN", fmt.Sprintf("%s not on this host", dgst))
		return
	}
	ra, err := s.store.ReaderAt(ctx, ocispec.Descriptor{Digest: dgst, Size: info.Size})
	if err != nil {
		registryError(w, http.StatusNotFound, "BLOB_UNKNOWN", err.Error())
		return
	}
	defer ra.Close()
	if kind == "manifests" && mediaType == "" {
		mediaType = manifestMediaType(io.NewSectionReader(ra, 0, min(ra.Size(), 4<<20)))
	}
	if mediaType == "" {
		mediaType = "application/octet-stream"
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Docker-Content-Digest", dgst.String())
	w.Header().Set("Etag", `"`+dgst.String()+`"`)
	http.ServeContent(w, req, "", time.Time{}, io.NewSectionReader(ra, 0, ra.Size()))
}

// imageNameOf is the containerd image name (without tag) of a request: the registry from the
// ns query parameter containerd adds for mirrors, then the repository.
func imageNameOf(req *http.Request) string {
	repo := strings.TrimPrefix(req.URL.Path, "/v2/")
	repo = repo[:strings.LastIndex(repo, "/manifests/")]
	ns := req.URL.Query().Get("ns")
	if ns == "" {
		ns = "docker.io"
	}
	return ns + "/" + repo
}

// manifestMediaType reads the mediaType of a manifest or index, or tells them apart by
// their fields when it is missing (allowed by OCI).
func manifestMediaType(r io.Reader) string {
	var m struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
		Layers    json.RawMessage `json:"layers"`
	}
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return ""
	}
	switch {
	case m.MediaType != "":
		return m.MediaType
	case m.Manifests != nil:
		return ocispec.MediaTypeImageIndex
	case m.Layers != nil:
		return ocispec.MediaTypeImageManifest
	}
	return ""
}

func (s *contentSource) isLooking(dgst digest.Digest) bool {
	return s.looking != nil && s.looking(dgst)
}

// awaitFetch waits for this host to have dgst or to fetch it (an ingest of it, once this host
// is no longer asking its peers for it), as long as it will or may fetch it: up to
// peerAwaitExpected while a pull of this host lists it, up to peerAwaitStart while a pull has
// not read its manifest yet; not at all otherwise. It returns the offset of the ingest it saw
// (-1: none), for waitIngest to go on from.
func (s *contentSource) awaitFetch(ctx context.Context, dgst digest.Digest) int64 {
	start := time.Now()
	for {
		if _, err := s.store.Info(ctx, dgst); err == nil {
			return -1
		}
		if !s.isLooking(dgst) {
			if offset, err := s.ingesting(ctx, dgst); err == nil && offset >= 0 {
				return offset
			}
		}
		expected, resolving := false, true
		if s.plans != nil {
			expected, resolving = s.plans(dgst)
		}
		switch waited := time.Since(start); {
		case expected && waited < peerAwaitExpected:
		case resolving && waited < peerAwaitStart:
		default:
			return -1
		}
		select {
		case <-ctx.Done():
			return -1
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ingesting returns the offset of this host's ingest of dgst, -1 when there is none. The
// listing fails as a whole when one ingest's status cannot be read: that says nothing of dgst.
func (s *contentSource) ingesting(ctx context.Context, dgst digest.Digest) (int64, error) {
	sts, err := s.store.ListStatuses(ctx)
	if err != nil {
		return -1, err
	}
	for _, st := range sts {
		// containerd names a pull's ingests by remotes.MakeRefKey: "layer-sha256:...".
		if st.Expected == dgst || strings.HasSuffix(st.Ref, "-"+dgst.String()) {
			return st.Offset, nil
		}
	}
	return -1, nil
}

// peerIngestGone is how many checks in a row must miss an ingest that was seen before it
// counts as gone: the store lists an ingest only while it can read all of its status, which
// its writer rewrites on every write, and a committed blob is no longer an ingest a moment
// before its metadata lists it (containerd commits the file, then its database transaction).
const peerIngestGone = 3

// waitIngest waits while this host fetches dgst, as long as the fetch progresses, and says
// whether the blob arrived. last is the offset of the ingest the caller saw (-1: none).
func (s *contentSource) waitIngest(ctx context.Context, dgst digest.Digest, last int64) bool {
	progressed := time.Now()
	missed := 0
	for {
		if _, err := s.store.Info(ctx, dgst); err == nil {
			return true
		}
		offset, err := s.ingesting(ctx, dgst)
		switch {
		case err != nil:
			// Not a miss: look again.
		case offset >= 0 && offset != last:
			last, progressed, missed = offset, time.Now(), 0
		case offset >= 0:
			missed = 0
		default:
			missed++
		}
		// An ingest never seen is no fetch; one seen must be missing a few times in a row.
		gone := err == nil && offset < 0 && (last < 0 || missed >= peerIngestGone)
		if gone || time.Since(progressed) > peerIngestStall {
			// A fetch that just committed is no longer listed: look once more.
			_, err := s.store.Info(ctx, dgst)
			return err == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func registryError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}

// errNoPeerHasImage is the error of a peers-only pull that no peer could answer.
var errNoPeerHasImage = errors.New("no other host of the site has it")

// peersOnlyHosts are the endpoints of a pull that may only come from peers.
func (p *Peers) peersOnlyHosts() docker.RegistryHosts {
	return func(string) ([]docker.RegistryHost, error) {
		return []docker.RegistryHost{p.registryHost(true)}, nil
	}
}
