package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/test/e2e/harness"
)

// devWebhookSecret is the Secret (kube-system) holding the dev site's push-webhook token.
const devWebhookSecret = "git-webhook"

func (o *devOptions) tokenPath() string { return filepath.Join(o.dir, "webhook-token") }

// installPushHook makes a push to the dev site's repository deploy at once: the root
// GitSource gets a webhook secret, and the bare repository a post-receive hook that runs
// `flotilla dev notify`, which signs and sends the push event as a git server would.
func installPushHook(ctx context.Context, cfg *rest.Config, o *devOptions, bare string) error {
	token, err := randomHex(16)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: devWebhookSecret, Namespace: "kube-system"},
		Data: map[string][]byte{gitsync.WebhookTokenKey: []byte(token)}}
	if _, err := client.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret kube-system/%s: %w", devWebhookSecret, err)
	}
	patch := fmt.Appendf(nil, `{"spec":{"webhookSecretRef":{"name":%q}}}`, devWebhookSecret)
	if _, err := dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system").Patch(ctx, "root", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("give GitSource kube-system/root the webhook secret: %w", err)
	}
	if err := os.WriteFile(o.tokenPath(), []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	hook := fmt.Sprintf(`#!/bin/sh
# Written by 'flotilla dev up': tell the site about the push (its GitSource's push webhook),
# so that it deploys now rather than at the next poll. A failure never fails the push.
%q dev notify --dir %q >/dev/null 2>&1 || true
`, self, o.dir)
	return os.WriteFile(filepath.Join(bare, "hooks", "post-receive"), []byte(hook), 0o755)
}

func newDevNotifyCommand(o *devOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "notify",
		Short: "Send the dev site a signed git push event (what the repository's post-receive hook runs)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return devNotify(cmd.Context(), o) },
	}
}

// devNotify posts a GitHub-style push event for kube-system/root to the first host's API.
func devNotify(ctx context.Context, o *devOptions) error {
	site, err := harness.Load(o.statePath(), harness.Options{})
	if err != nil {
		return fmt.Errorf("dev site in %s: %w", o.dir, err)
	}
	if len(site.Hosts) == 0 {
		return fmt.Errorf("dev site in %s has no hosts", o.dir)
	}
	b, err := os.ReadFile(o.tokenPath())
	if err != nil {
		return fmt.Errorf("webhook token: %w (was the site started with --app?)", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", site.Hosts[0].Kubeconfig())
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return gitsync.SendPushEvent(rctx, hc, cfg.Host, "kube-system", "root", "main", []byte(strings.TrimSpace(string(b))))
}
