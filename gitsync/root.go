package gitsync

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// EnsureRootSource creates or updates GitSource kube-system/root to follow url at ref (a
// branch, "tags/<tag>", or a 40-digit commit; empty: main) and path.
func EnsureRootSource(ctx context.Context, client dynamic.Interface, url, ref, path string) error {
	return EnsureRootSourceWith(ctx, client, url, ref, path, RootOptions{})
}

// RootOptions are the other settings of the root source (flotilla agent --git-interval,
// --git-insecure, --git-rollback-health-timeout, --git-rollout-after, --git-rollout-soak,
// --git-status-push, --git-status-interval). A zero field leaves the
// source's field as it is, so that one set with kubectl stays.
type RootOptions struct {
	// RolloutAfter is spec.rollout.after.selector, RolloutSoak spec.rollout.soak (0: the
	// server's default, or what is set).
	RolloutAfter string
	RolloutSoak  time.Duration
	// StatusPush sets spec.statusPush, StatusInterval its interval.
	StatusPush     bool
	StatusInterval time.Duration
	// Insecure sets spec.insecure (an http:// or git:// URL).
	Insecure bool
	// RollbackHealthTimeout, when set, enables spec.rollback with this health timeout.
	RollbackHealthTimeout time.Duration
	// Interval sets spec.interval.
	Interval time.Duration
}

func (o RootOptions) apply(s *v1alpha1.GitSourceSpec) {
	if o.Insecure {
		s.Insecure = true
	}
	if o.Interval > 0 {
		s.Interval = metav1.Duration{Duration: o.Interval}
	}
	if o.RollbackHealthTimeout > 0 {
		s.Rollback = &v1alpha1.GitRollback{Enabled: true, HealthTimeout: &metav1.Duration{Duration: o.RollbackHealthTimeout}}
	}
	if o.RolloutAfter != "" {
		if s.Rollout == nil {
			s.Rollout = &v1alpha1.GitRollout{}
		}
		s.Rollout.After = v1alpha1.RolloutAfter{Selector: o.RolloutAfter}
		if o.RolloutSoak > 0 || s.Rollout.Soak == nil {
			s.Rollout.Soak = &metav1.Duration{Duration: cmp.Or(o.RolloutSoak, v1alpha1.DefaultSoak)}
		}
	}
	if o.StatusPush {
		if s.StatusPush == nil {
			s.StatusPush = &v1alpha1.GitStatusPush{}
		}
		if o.StatusInterval > 0 || s.StatusPush.Interval == nil {
			s.StatusPush.Interval = &metav1.Duration{Duration: cmp.Or(o.StatusInterval, v1alpha1.DefaultStatusInterval)}
		}
	}
}

// EnsureRootSourceWith is EnsureRootSource with the fleet settings of o.
func EnsureRootSourceWith(ctx context.Context, client dynamic.Interface, url, ref, path string, o RootOptions) error {
	spec := v1alpha1.GitSourceSpec{URL: url, Path: path, Ref: parseRef(ref)}
	o.apply(&spec)
	res := client.Resource(GitSourceResource).Namespace("kube-system")
	live, err := res.Get(ctx, "root", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		gs := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "root"}, Spec: spec}
		gs.APIVersion, gs.Kind = v1alpha1.SchemeGroupVersion.String(), "GitSource"
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gs)
		if err != nil {
			return err
		}
		if _, err := res.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create GitSource kube-system/root: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get GitSource kube-system/root: %w", err)
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, &gs); err != nil {
		return err
	}
	want := gs.Spec.DeepCopy()
	want.URL, want.Path, want.Ref = spec.URL, spec.Path, spec.Ref
	o.apply(want)
	if apiequality.Semantic.DeepEqual(&gs.Spec, want) {
		return nil
	}
	gs.Spec = *want
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&gs)
	if err != nil {
		return err
	}
	if _, err := res.Update(ctx, &unstructured.Unstructured{Object: m}, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update GitSource kube-system/root: %w", err)
	}
	return nil
}

// RootWebhookSecret is the Secret in kube-system holding the webhook token of the root source
// (--git-webhook-secret-file), under WebhookTokenKey.
const RootWebhookSecret = "root-webhook"

// EnsureRootWebhook stores token in Secret kube-system/root-webhook (RootWebhookSecret) and
// names it in spec.webhookSecretRef of GitSource kube-system/root, which must exist
// (EnsureRootSource), so that the root source takes push webhooks signed with token. A
// webhookSecretRef that names another Secret is replaced: the flag owns it.
func EnsureRootWebhook(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, token []byte) error {
	if len(token) == 0 {
		return fmt.Errorf("the webhook token of GitSource kube-system/root is empty")
	}
	secrets := kube.CoreV1().Secrets("kube-system")
	live, err := secrets.Get(ctx, RootWebhookSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: RootWebhookSecret},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{WebhookTokenKey: token}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret kube-system/%s: %w", RootWebhookSecret, err)
		}
	case err != nil:
		return fmt.Errorf("get Secret kube-system/%s: %w", RootWebhookSecret, err)
	case !bytes.Equal(live.Data[WebhookTokenKey], token):
		if live.Data == nil {
			live.Data = map[string][]byte{}
		}
		live.Data[WebhookTokenKey] = token
		if _, err := secrets.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Secret kube-system/%s: %w", RootWebhookSecret, err)
		}
	}
	res := dyn.Resource(GitSourceResource).Namespace("kube-system")
	gs, err := res.Get(ctx, "root", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get GitSource kube-system/root: %w", err)
	}
	if ref, _, _ := unstructured.NestedString(gs.Object, "spec", "webhookSecretRef", "name"); ref == RootWebhookSecret {
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"webhookSecretRef":{"name":%q}}}`, RootWebhookSecret)
	if _, err := res.Patch(ctx, "root", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set spec.webhookSecretRef of GitSource kube-system/root: %w", err)
	}
	return nil
}

func parseRef(ref string) *v1alpha1.GitRef {
	switch {
	case ref == "":
		return &v1alpha1.GitRef{Branch: v1alpha1.DefaultBranch}
	case commitRE.MatchString(ref):
		return &v1alpha1.GitRef{Commit: ref}
	case strings.HasPrefix(ref, "tags/"):
		return &v1alpha1.GitRef{Tag: strings.TrimPrefix(ref, "tags/")}
	case strings.HasPrefix(ref, "refs/tags/"):
		return &v1alpha1.GitRef{Tag: strings.TrimPrefix(ref, "refs/tags/")}
	default:
		return &v1alpha1.GitRef{Branch: strings.TrimPrefix(ref, "refs/heads/")}
	}
}
