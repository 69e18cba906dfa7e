package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/errdefs"
	"github.com/sirupsen/logrus"
)

// What the node agent's image garbage collection (nodes/agent/imagegc.go) needs of the runtime:
// where the images live, which images are side-loaded, and removing an image for good.

// labelSideLoadedFrom, on an image, is the tarball of an image directory (WatchImageDir) it was
// last imported from.
const labelSideLoadedFrom = labelPrefix + "side-loaded-from"

// ErrImageInUse is returned (wrapped) by RemoveImage for an image a container uses.
var ErrImageInUse = errors.New("image is in use by a container")

// RemoveImage removes an image, ref being an image ID (sha256:..., the config digest) or a
// reference: every name of that image, then, with containerd's synchronous garbage
// collection, the content and the unpacked snapshots no other image or container holds, so the
// space is free when it returns. An image that a container (running or not, until it is
// removed) was created from is refused with ErrImageInUse. A missing image is ErrNotFound.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	ctx = r.ns(ctx)
	im, err := r.resolveImage(ctx, ref)
	if err != nil {
		return fmt.Errorf("remove image: %w", err)
	}
	id, _, err := r.imageID(ctx, im)
	if err != nil {
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	conts, err := r.ListContainers(ctx)
	if err != nil {
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	for _, c := range conts {
		if c.ImageID == id {
			return fmt.Errorf("remove image %s: %w: %s", ref, ErrImageInUse, c.ID)
		}
	}
	all, err := r.client.ImageService().List(ctx)
	if err != nil {
		return fmt.Errorf("remove image %s: list images: %w", ref, err)
	}
	var names []string
	for _, i := range all {
		if i.Name == im.Name {
			continue
		}
		if iid, _, err := r.imageID(ctx, i); err == nil && iid == id {
			names = append(names, i.Name)
		}
	}
	// The name we resolved goes last, with the synchronous collection of what all of them held.
	names = append(names, im.Name)
	for n, name := range names {
		var opts []images.DeleteOpt
		if n == len(names)-1 {
			opts = append(opts, images.SynchronousDelete())
		}
		if err := r.client.ImageService().Delete(ctx, name, opts...); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove image %s (%s): %w", ref, name, err)
		}
	}
	r.log.WithFields(logrus.Fields{"image": id, "names": names}).Info("image removed")
	return nil
}

// ImageFSPath returns a directory on the filesystem that holds the images: the root of
// containerd's overlayfs snapshotter (the unpacked layers) as containerd reports it, else its
// content store's; with our own containerd both are below <Config.Dir>/root.
func (r *Runtime) ImageFSPath(ctx context.Context) (string, error) {
	resp, err := r.client.IntrospectionService().Plugins(ctx,
		`type=="`+string(plugins.SnapshotPlugin)+`",id=="overlayfs"`,
		`type=="`+string(plugins.ContentPlugin)+`"`)
	if err == nil {
		// The snapshotter's root first: the unpacked layers are the larger part.
		for _, typ := range []string{string(plugins.SnapshotPlugin), string(plugins.ContentPlugin)} {
			for _, p := range resp.Plugins {
				if root := p.Exports[plugins.SnapshotterRootDir]; p.Type == typ && root != "" {
					return root, nil
				}
			}
		}
	}
	if r.cfg.Socket == "" && r.cfg.Dir != "" {
		return filepath.Join(r.cfg.Dir, "root"), nil
	}
	if err == nil {
		err = errors.New("containerd reports no root of its overlayfs snapshotter or content store")
	}
	return "", fmt.Errorf("image filesystem: %w", err)
}

// SideLoadedImages returns the images (by ID) imported from a tarball of an image directory
// (WatchImageDir) that is still there, with the tarball's path. Such an image is imported again
// at every start of the agent: garbage collection leaves it alone until its tarball is deleted.
func (r *Runtime) SideLoadedImages(ctx context.Context) (map[string]string, error) {
	ctx = r.ns(ctx)
	ims, err := r.client.ImageService().List(ctx, `labels."`+labelSideLoadedFrom+`"`)
	if err != nil {
		return nil, fmt.Errorf("list side-loaded images: %w", err)
	}
	out := map[string]string{}
	for _, im := range ims {
		p := im.Labels[labelSideLoadedFrom]
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if id, _, err := r.imageID(ctx, im); err == nil {
			out[id] = p
		}
	}
	return out, nil
}

// markSideLoaded labels the images just imported from tarPath with it, and takes the label off
// the images that tarball named before but names no more.
func (r *Runtime) markSideLoaded(ctx context.Context, tarPath string, names []string) {
	ctx = r.ns(ctx)
	is := r.client.ImageService()
	now := map[string]bool{}
	for _, n := range names {
		now[n] = true
		_, err := is.Update(ctx, images.Image{Name: n, Labels: map[string]string{labelSideLoadedFrom: tarPath}}, "labels."+labelSideLoadedFrom)
		if err != nil {
			r.log.WithError(err).WithField("image", n).Warn("label a side-loaded image: garbage collection may remove it")
		}
	}
	before, err := is.List(ctx, `labels."`+labelSideLoadedFrom+`"==`+strconv.Quote(tarPath))
	if err != nil {
		return
	}
	for _, im := range before {
		if !now[im.Name] {
			_, _ = is.Update(ctx, images.Image{Name: im.Name}, "labels."+labelSideLoadedFrom)
		}
	}
}
