package host

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/component-base/version"

	"github.com/flotilla-dev/flotilla/reconciler/etcd"
)

// Version is this binary's flotilla version, set by cmd/flotilla from its build stamp.
var Version = "dev"

// NodeVersion is the Node's status.nodeInfo.kubeletVersion, which `kubectl get nodes` shows:
// the Kubernetes version the agent implements with flotilla's version as build metadata, as
// k3s does ("v1.37.2+flotilla.v0.4.0"). Characters semver does not allow there become '-'.
func NodeVersion(kubernetes, flotilla string) string {
	if i := strings.IndexByte(kubernetes, '+'); i >= 0 {
		kubernetes = kubernetes[:i]
	}
	meta := []byte(flotilla)
	for i, c := range meta {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.') {
			meta[i] = '-'
		}
	}
	return kubernetes + "+flotilla." + string(meta)
}

// FlotillaVersionOf is the flotilla version in a Node's kubeletVersion (NodeVersion), or ""
// for a node that does not report one.
func FlotillaVersionOf(kubeletVersion string) string {
	_, v, ok := strings.Cut(kubeletVersion, "+flotilla.")
	if !ok {
		return ""
	}
	return v
}

func nodeVersion() string { return NodeVersion(version.Get().GitVersion, Version) }

// checkStorageFormat refuses to serve a site whose data this binary cannot read (etcd's
// StorageFormatKey), before the API starts on it. It waits for etcd as long as the host runs:
// a host back from a power loss waits for a quorum here as the member does.
func (h *Host) checkStorageFormat() error {
	for {
		ctx, cancel := context.WithTimeout(h.runCtx, 10*time.Second)
		rec, err := etcd.CheckStorageFormat(ctx, h.etcdClient, Version)
		cancel()
		switch {
		case err == nil:
			h.log.WithFields(logrus.Fields{"format": rec.Format, "recordedBy": rec.WrittenBy}).Debug("site storage format")
			return nil
		case errors.Is(err, etcd.ErrStorageFormat):
			return err
		case h.runCtx.Err() != nil:
			return h.runCtx.Err()
		}
		h.log.WithError(err).Info("waiting for etcd to read the site's storage format")
		select {
		case <-h.runCtx.Done():
		case <-time.After(time.Second):
		}
	}
}
