package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	clog "github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sirupsen/logrus"
)

// Image is an image in the host's containerd.
type Image struct {
	// Names are the references that point at the image (normalized, e.g. docker.io/library/nginx:latest).
	Names []string
	// ID is the digest of the image config (sha256:...), the same for every name.
	ID string
	// Size is the unpacked size of the image's layers for this platform, in bytes.
	Size int64
	// SideLoaded (ImageStatus only): the name asked for was imported from a tarball or is under
	// flotilla.local/; such images are never pulled.
	SideLoaded bool
}

// SideLoadedRegistry is the registry name of images that only come from tarballs
// (DIR/images/*.tar, flotilla image import): there is no such registry to pull from.
const SideLoadedRegistry = "flotilla.local"

// labelImported marks the image records ImportImage writes; a pull of the same name replaces
// the record and so drops it.
const labelImported = labelPrefix + "imported"

// IsSideLoadedName says whether ref names an image of SideLoadedRegistry.
func IsSideLoadedName(ref string) bool {
	h, err := RegistryHost(ref)
	return err == nil && h == SideLoadedRegistry
}

// NormalizeRef turns a user's image reference into the full form containerd stores:
// "nginx" -> "docker.io/library/nginx:latest". Digest references keep their digest.
func NormalizeRef(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// ImportImage imports an OCI-layout or docker-save tarball, unpacks it and returns its image names.
func (r *Runtime) ImportImage(ctx context.Context, tarPath string) ([]string, error) {
	ctx = r.ns(ctx)
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, fmt.Errorf("import image: %w", err)
	}
	defer f.Close()
	imgs, err := r.client.Import(ctx, f,
		containerd.WithImportPlatform(platforms.DefaultStrict()),
		containerd.WithImageRefTranslator(ociRefName))
	if err != nil {
		return nil, fmt.Errorf("import image tarball %s (an OCI layout or `docker save` tar is expected): %w", tarPath, err)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("import image tarball %s: it names no image (docker-save RepoTags or an OCI %q annotation with a full reference are needed)",
			tarPath, "org.opencontainers.image.ref.name")
	}
	var names []string
	for _, im := range imgs {
		img := containerd.NewImageWithPlatform(r.client, im, platforms.DefaultStrict())
		if err := img.Unpack(ctx, ""); err != nil {
			return nil, fmt.Errorf("unpack image %s from %s: %w", im.Name, tarPath, err)
		}
		names = append(names, im.Name)
		if _, err := r.client.ImageService().Update(ctx, images.Image{Name: im.Name, Labels: map[string]string{labelImported: "true"}},
			"labels."+labelImported); err != nil {
			return nil, fmt.Errorf("label image %s imported from %s: %w", im.Name, tarPath, err)
		}
	}
	return names, nil
}

// ociRefName turns an OCI layout's ref.name annotation into an image name when it is a full
// reference; a bare tag ("latest") names nothing.
func ociRefName(s string) string {
	if !strings.ContainsAny(s, "/:@") {
		return ""
	}
	n, err := NormalizeRef(s)
	if err != nil {
		return ""
	}
	return n
}

// WatchImageDir imports every *.tar in dir now and whenever one appears or changes (polled every
// 2 s) until ctx ends. Failures are logged, and retried when the file changes.
func (r *Runtime) WatchImageDir(ctx context.Context, dir string) {
	seen := map[string]time.Time{}
	log := r.log.WithField("dir", dir)
	for {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.WithError(err).Warn("read image directory")
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".tar") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			info, err := e.Info()
			if err != nil {
				continue
			}
			// Skip files still being written (changed in the last second).
			if time.Since(info.ModTime()) < time.Second || seen[p].Equal(info.ModTime()) {
				continue
			}
			seen[p] = info.ModTime()
			names, err := r.ImportImage(ctx, p)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.WithError(err).WithField("file", e.Name()).Error("import image tarball")
				continue
			}
			r.markSideLoaded(ctx, p, names)
			log.WithFields(logrus.Fields{"file": e.Name(), "images": names}).Info("image imported")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// ImageStatus returns the image that ref (a reference or an image ID sha256:...) names, or ErrNotFound.
func (r *Runtime) ImageStatus(ctx context.Context, ref string) (*Image, error) {
	ctx = r.ns(ctx)
	im, err := r.resolveImage(ctx, ref)
	if err != nil {
		return nil, err
	}
	id, _, err := r.imageID(ctx, im)
	if err != nil {
		return nil, err
	}
	all, err := r.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	for _, i := range all {
		if i.ID == id {
			i.SideLoaded = im.Labels[labelImported] != "" || IsSideLoadedName(im.Name)
			return &i, nil
		}
	}
	return nil, fmt.Errorf("image %s: %w", ref, ErrNotFound)
}

// resolveImage finds an image by reference (normalized) or by ID (its config digest).
func (r *Runtime) resolveImage(ctx context.Context, ref string) (images.Image, error) {
	if strings.HasPrefix(ref, "sha256:") {
		ims, err := r.client.ImageService().List(ctx)
		if err != nil {
			return images.Image{}, fmt.Errorf("list images: %w", err)
		}
		for _, im := range ims {
			if id, _, err := r.imageID(ctx, im); err == nil && id == ref {
				return im, nil
			}
		}
		return images.Image{}, fmt.Errorf("image %s: %w", ref, ErrNotFound)
	}
	name, err := NormalizeRef(ref)
	if err != nil {
		return images.Image{}, err
	}
	im, err := r.client.ImageService().Get(ctx, name)
	if err != nil {
		return images.Image{}, notFound("image "+name, err)
	}
	return im, nil
}

// imageID returns the config digest and the unpacked size of an image on our platform.
func (r *Runtime) imageID(ctx context.Context, im images.Image) (string, int64, error) {
	img := containerd.NewImageWithPlatform(r.client, im, platforms.DefaultStrict())
	cfg, err := img.Config(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("image %s config: %w", im.Name, err)
	}
	size, err := img.Size(ctx)
	if err != nil {
		size = 0
	}
	return cfg.Digest.String(), size, nil
}

// ListImages returns every image, names with the same config grouped into one Image.
func (r *Runtime) ListImages(ctx context.Context) ([]Image, error) {
	ctx = r.ns(ctx)
	ims, err := r.client.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	byID := map[string]*Image{}
	var order []string
	for _, im := range ims {
		id, size, err := r.imageID(ctx, im)
		if err != nil {
			// An image for another platform or with missing content: not usable here.
			continue
		}
		if strings.HasPrefix(im.Name, "sha256:") {
			continue
		}
		i, ok := byID[id]
		if !ok {
			i = &Image{ID: id, Size: size}
			byID[id] = i
			order = append(order, id)
		}
		i.Names = append(i.Names, im.Name)
	}
	out := make([]Image, 0, len(order))
	for _, id := range order {
		sort.Strings(byID[id].Names)
		out = append(out, *byID[id])
	}
	return out, nil
}

// PullOptions are the credentials and the progress report of one pull.
type PullOptions struct {
	// Credentials for the image's own registry (from the pod's imagePullSecrets), tried in
	// order before the registry file's (or none). Mirrors get only the registry file's.
	Credentials []Credential
	// Progress, when set, is called about every ProgressInterval while layers download, with
	// the bytes fetched so far and the size of what the image needs (known so far).
	Progress func(done, total int64)
	// PeerTags lets the site's other hosts (Runtime.SetPeers) resolve the image's tag; without
	// it the registry does (imagePullPolicy Always: the registry says what a tag is now).
	// Content by digest is asked of the peers first either way.
	PeerTags bool
	// PeersOnly pulls from the peers alone: side-loaded images, which have no registry.
	PeersOnly bool
}

// ProgressInterval is how often PullOptions.Progress is called.
var ProgressInterval = 10 * time.Second

// PullImage pulls ref from its registry, as the registry file says (mirrors, credentials, TLS;
// plain HTTP only for an endpoint written http://), and unpacks it. A registry that refuses a
// pull secret's credentials is tried with the next ones, then with the registry file's.
func (r *Runtime) PullImage(ctx context.Context, ref string, opts PullOptions) (*Image, error) {
	ctx = r.ns(ctx)
	name, err := NormalizeRef(ref)
	if err != nil {
		return nil, err
	}
	cands := make([]*Credential, 0, len(opts.Credentials)+1)
	for i := range opts.Credentials {
		cands = append(cands, &opts.Credentials[i])
	}
	cands = append(cands, nil) // the registry file's, or none
	if opts.PeersOnly {
		cands = cands[len(cands)-1:]
	}
	var errs []string
	for i, cred := range cands {
		err := r.pullOnce(ctx, name, cred, opts)
		if err == nil {
			return r.ImageStatus(ctx, name)
		}
		if ctx.Err() != nil || !isAuthError(err) || i == len(cands)-1 {
			if len(errs) > 0 {
				return nil, fmt.Errorf("pull image %s: %w (before: %s)", name, err, strings.Join(errs, "; "))
			}
			return nil, fmt.Errorf("pull image %s: %w", name, err)
		}
		which := fmt.Sprintf("pull secret credentials #%d", i+1)
		errs = append(errs, which+": "+err.Error())
	}
	return nil, fmt.Errorf("pull image %s: no credentials to try", name)
}

func (r *Runtime) pullOnce(ctx context.Context, name string, cred *Credential, opts PullOptions) error {
	hosts := r.cfg.Registries.registryHosts(cred)
	peers := r.peerSet()
	switch {
	case opts.PeersOnly && peers == nil:
		return errNoPeerHasImage
	case opts.PeersOnly:
		hosts = peers.peersOnlyHosts()
	case peers != nil:
		hosts = withPeers(hosts, peers.registryHost(opts.PeerTags))
	}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hosts})
	pullOpts := []containerd.RemoteOpt{containerd.WithPullUnpack, containerd.WithResolver(resolver),
		containerd.WithPlatformMatcher(platforms.DefaultStrict())}
	if peers != nil {
		// Every miss at a peer is an info line of containerd's ("trying next host"): keep
		// only its warnings.
		ctx = clog.WithLogger(ctx, r.quietLog())
		wrap, end := peers.beginPull()
		defer end()
		pullOpts = append(pullOpts, containerd.WithImageHandlerWrapper(wrap))
	}
	if progress := opts.Progress; progress != nil {
		p := &pullProgress{}
		pullOpts = append(pullOpts, containerd.WithImageHandler(images.HandlerFunc(p.handle)))
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go p.report(pctx, r.client.ContentStore(), progress)
	}
	_, err := r.client.Pull(ctx, name, pullOpts...)
	if err != nil && opts.PeersOnly && errdefs.IsNotFound(err) {
		return fmt.Errorf("%w (%v)", errNoPeerHasImage, err)
	}
	return err
}

// quietLog is the runtime's log at warning level and above only.
func (r *Runtime) quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(r.log.Logger.Out)
	l.SetFormatter(r.log.Logger.Formatter)
	l.SetLevel(min(logrus.WarnLevel, r.log.Logger.GetLevel()))
	return logrus.NewEntry(l).WithFields(r.log.Data)
}

// withPeers puts the peers' endpoint before a registry's own.
func withPeers(hosts docker.RegistryHosts, peer docker.RegistryHost) docker.RegistryHosts {
	return func(registry string) ([]docker.RegistryHost, error) {
		hs, err := hosts(registry)
		if err != nil {
			return nil, err
		}
		return append([]docker.RegistryHost{peer}, hs...), nil
	}
}

// isAuthError tells a registry's refusal of the credentials (401, 403, a failed token request)
// from other failures.
func isAuthError(err error) bool {
	if errors.Is(err, docker.ErrInvalidAuthorization) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"401 unauthorized", "403 forbidden", "unauthorized", "denied"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// pullProgress counts what a pull fetches: the descriptors it walks (config and layers for our
// platform) and, from the content store, how much of each is there.
type pullProgress struct {
	mu    sync.Mutex
	descs map[digest.Digest]int64
}

func (p *pullProgress) handle(_ context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	if images.IsLayerType(desc.MediaType) || images.IsKnownConfig(desc.MediaType) {
		p.mu.Lock()
		if p.descs == nil {
			p.descs = map[digest.Digest]int64{}
		}
		p.descs[desc.Digest] = desc.Size
		p.mu.Unlock()
	}
	return nil, nil
}

func (p *pullProgress) report(ctx context.Context, cs content.Store, progress func(done, total int64)) {
	t := time.NewTicker(ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		descs := make(map[digest.Digest]int64, len(p.descs))
		for d, n := range p.descs {
			descs[d] = n
		}
		p.mu.Unlock()
		active := map[digest.Digest]int64{}
		if sts, err := cs.ListStatuses(ctx); err == nil {
			for _, st := range sts {
				active[st.Expected] = st.Offset
			}
		}
		var done, total int64
		for d, n := range descs {
			total += n
			if off, ok := active[d]; ok {
				done += min(off, n)
			} else if _, err := cs.Info(ctx, d); err == nil {
				done += n
			}
		}
		if total > 0 && ctx.Err() == nil {
			progress(done, total)
		}
	}
}
