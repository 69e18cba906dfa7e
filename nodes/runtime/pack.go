package runtime

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// PackOptions describe a one-binary image.
type PackOptions struct {
	// Binary is a static executable put at Entrypoint.
	Binary string
	// Name is the image reference, e.g. flotilla.local/hello:latest.
	Name string
	// Entrypoint is the binary's path inside the image; default "/app".
	Entrypoint string
	// Env is added to the image config after PATH.
	Env []string
}

// PackImage writes a one-layer image holding a static binary (plus an empty /tmp) as a
// `docker save`-format tarball that ImportImage and `ctr images import` read.
func PackImage(opts PackOptions, out string) error {
	if opts.Entrypoint == "" {
		opts.Entrypoint = "/app"
	}
	if !path.IsAbs(opts.Entrypoint) {
		return fmt.Errorf("pack image: entrypoint %q must be an absolute path", opts.Entrypoint)
	}
	ref, err := name.NewTag(opts.Name)
	if err != nil {
		return fmt.Errorf("pack image: name %q (want NAME:TAG, e.g. flotilla.local/hello:latest): %w", opts.Name, err)
	}
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return fmt.Errorf("pack image: %w", err)
	}
	layerTar, err := binaryLayer(bin, opts.Entrypoint)
	if err != nil {
		return fmt.Errorf("pack image: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("pack image: layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("pack image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("pack image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = goruntime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{opts.Entrypoint}
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, opts.Env...)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return fmt.Errorf("pack image: %w", err)
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("pack image: write %s: %w", out, err)
	}
	return nil
}

// binaryLayer is an uncompressed tar with the binary at entrypoint, its parent directories and /tmp.
func binaryLayer(bin []byte, entrypoint string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := []string{"tmp/"}
	p := strings.TrimPrefix(entrypoint, "/")
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		dirs = append(dirs, d+"/")
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		mode := int64(0o755)
		if dirs[i] == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dirs[i], Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: int64(len(bin)), ModTime: epoch}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
