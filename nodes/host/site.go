package host

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/flotilla-dev/flotilla/gitsync"
)

// ensureSite records the site's identity (--site, --site-labels) when this is its first
// host, or checks this host's flags against the record: a host started with another site's
// name or labels does not start (it would report and wait as that site). Then it labels this
// host's Node with the site. Until the API answers (a host restarting without a quorum) it
// keeps trying in the background, and a mismatch found then stops the host.
func (h *Host) ensureSite() error {
	labels, err := gitsync.ParseSiteLabels(h.cfg.SiteLabels)
	if err != nil {
		return err
	}
	ensure := func(ctx context.Context) (gitsync.Site, error) {
		return gitsync.EnsureSite(ctx, h.apiClient, h.cfg.Site, labels, h.cfg.SiteLabels != "", h.cfg.Name)
	}
	ctx, cancel := context.WithTimeout(h.runCtx, 20*time.Second)
	site, err := ensure(ctx)
	cancel()
	if errors.Is(err, gitsync.ErrSiteMismatch) {
		return err
	}
	if err == nil {
		h.log.WithFields(logrus.Fields{"site": site.Name, "labels": gitsync.FormatSiteLabels(site.Labels)}).Info("site")
		go h.retry("label this host's Node with its site", func(ctx context.Context) error {
			return h.labelSite(ctx, site)
		})
		return nil
	}
	h.log.WithError(err).Warn("the site's identity could not be read yet; trying again in the background")
	go h.retry("record or check the site's identity", func(ctx context.Context) error {
		site, err := ensure(ctx)
		if errors.Is(err, gitsync.ErrSiteMismatch) {
			h.fail(err)
			return nil
		}
		if err != nil {
			return err
		}
		return h.labelSite(ctx, site)
	})
	return nil
}

// labelSite sets the site's labels on Node name (those already right are left alone); a
// host without pods (--pods=false) has no Node.
func (h *Host) labelSite(ctx context.Context, site gitsync.Site) error {
	if !h.cfg.Pods {
		return nil
	}
	client, name := h.apiClient, h.cfg.Name
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	patch := map[string]string{}
	for k, v := range site.NodeLabels() {
		if n.Labels[k] != v {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}
