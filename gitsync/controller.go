package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/sirupsen/logrus"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

// GitSourceResource is the API resource of GitSources.
var GitSourceResource = v1alpha1.SchemeGroupVersion.WithResource("gitsources")

// Condition reasons.
const (
	ReasonSucceeded        = "ReconciliationSucceeded"
	ReasonProgressing      = "Progressing"
	ReasonFetchFailed      = "GitOperationFailed"
	ReasonBuildFailed      = "BuildFailed"
	ReasonValidationFailed = "ValidationFailed"
	ReasonApplyFailed      = "ReconciliationFailed"
)

// Config tunes the controller.
type Config struct {
	// CacheDir holds one git work tree per source (<CacheDir>/<namespace>/<name>).
	CacheDir string
}

// DefaultConfig caches clones under the system temporary directory.
func DefaultConfig() Config {
	return Config{CacheDir: filepath.Join(os.TempDir(), "flotilla-gitsync")}
}

// Controller reconciles GitSources: fetch, render, validate, apply, prune, every interval.
type Controller struct {
	cfg      Config
	dyn      dynamic.Interface
	client   kubernetes.Interface
	applier  *Applier
	factory  dynamicinformer.DynamicSharedInformerFactory
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *logrus.Entry
}

// New builds the controller with DefaultConfig.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewWithConfig(cctx, DefaultConfig())
}

// NewWithConfig builds the controller and registers its GitSource informer (started by Run).
func NewWithConfig(cctx *controllers.Context, cfg Config) (*Controller, error) {
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultConfig().CacheDir
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(cctx.Dynamic, 0)
	inf := factory.ForResource(GitSourceResource).Informer()
	c := &Controller{
		cfg: cfg, dyn: cctx.Dynamic, client: cctx.Client,
		applier: &Applier{Dynamic: cctx.Dynamic, Mapper: cctx.RESTMapper},
		factory: factory, informer: inf,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gitsync"}),
		log: logrus.WithField("controller", "gitsync"),
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		// Status writes do not change the generation; only spec changes need a sync now
		// (the interval requeue covers the rest).
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*unstructured.Unstructured)
			n, ok2 := cur.(*unstructured.Unstructured)
			if !ok1 || !ok2 || o.GetGeneration() != n.GetGeneration() {
				enqueue(cur)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("gitsource handler: %w", err)
	}
	return c, nil
}

// Run processes GitSources until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("gitsync: caches did not sync")
	}
	c.log.Info("started")
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.processNext(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		utilruntime.HandleError(fmt.Errorf("sync gitsync %s: %w", key, err))
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) sync(ctx context.Context, key string) error {
	obj, exists, err := c.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).UnstructuredContent(), &gs); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if gs.Spec.Suspend {
		return nil
	}
	interval := gs.Spec.Interval.Duration
	if interval <= 0 {
		interval = v1alpha1.DefaultInterval
	}
	// Every interval: fetch again and re-apply (which reverts drift).
	defer c.queue.AddAfter(key, interval)
	timeout := interval
	if gs.Spec.Timeout != nil && gs.Spec.Timeout.Duration > 0 {
		timeout = gs.Spec.Timeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, max(timeout, 30*time.Second))
	defer cancel()

	st := gs.Status.DeepCopy()
	err = c.reconcile(ctx, &gs, st)
	st.ObservedGeneration = gs.Generation
	if werr := c.writeStatus(ctx, &gs, st); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// reconcile does one round and records its outcome in st. It returns an error only for
// failures worth a quick retry; those a human must fix are recorded as Stalled.
func (c *Controller) reconcile(ctx context.Context, gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus) error {
	source := gs.Namespace + "." + gs.Name
	log := c.log.WithField("source", source)
	gen := gs.Generation
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	fail := func(reason, msg string, stalled bool) {
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionReconciling)
		if stalled {
			set(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		} else {
			apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStalled)
		}
	}

	auth, err := c.auth(ctx, gs)
	if err != nil {
		fail(ReasonFetchFailed, err.Error(), true)
		return nil
	}
	co, err := Fetch(ctx, filepath.Join(c.cfg.CacheDir, gs.Namespace, gs.Name), gs.Spec.URL, gs.Spec.Ref, auth)
	if err != nil {
		fail(ReasonFetchFailed, err.Error(), false)
		log.WithError(err).Warn("fetch failed")
		return err
	}
	st.LastFetchedRevision = co.Revision
	log = log.WithField("revision", co.Revision)
	if co.Revision != st.LastAppliedRevision {
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, ReasonProgressing, "Reconciling revision: "+co.Revision)
	}
	st.LastAttemptedRevision = co.Revision

	objs, err := Render(co.Dir, gs.Spec.Path)
	if err != nil {
		msg := fmt.Sprintf("Revision %s: %v", co.Revision, err)
		fail(ReasonBuildFailed, msg, true)
		log.WithError(err).Warn("render failed")
		return nil
	}
	objs, fails := c.applier.Prepare(objs, source)
	fails = append(fails, c.applier.Validate(ctx, objs)...)
	if len(fails) > 0 {
		msg := fmt.Sprintf("Revision %s not applied: %d object(s) failed validation:\n%s", co.Revision, len(fails), strings.Join(fails, "\n"))
		fail(ReasonValidationFailed, truncate(msg), true)
		log.WithField("failures", len(fails)).Warn("validation failed; nothing applied")
		return nil
	}
	if err := c.applier.Apply(ctx, objs, source); err != nil {
		fail(ReasonApplyFailed, truncate(fmt.Sprintf("Revision %s: apply: %v", co.Revision, err)), false)
		return err
	}
	inv := Inventory(objs)
	var old []v1alpha1.ResourceRef
	if st.Inventory != nil {
		old = st.Inventory.Entries
	}
	if gs.Spec.Prune == nil || *gs.Spec.Prune {
		deleted, _, err := c.applier.Prune(ctx, Stale(old, inv), source)
		if len(deleted) > 0 {
			log.WithField("pruned", deleted).Info("pruned")
		}
		if err != nil {
			// Keep the failed entries in the inventory so the next round tries again.
			inv = append(inv, Stale(Stale(old, inv), refs(deleted))...)
			st.Inventory = &v1alpha1.ResourceInventory{Entries: inv}
			fail(ReasonApplyFailed, truncate(fmt.Sprintf("Revision %s: prune: %v", co.Revision, err)), false)
			return err
		}
	}
	if co.Revision != st.LastAppliedRevision {
		log.WithField("objects", len(objs)).Info("applied")
	}
	st.Inventory = &v1alpha1.ResourceInventory{Entries: inv}
	st.LastAppliedRevision = co.Revision
	set(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonSucceeded, "Applied revision: "+co.Revision)
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionReconciling)
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStalled)
	return nil
}

func refs(ids []string) []v1alpha1.ResourceRef {
	out := make([]v1alpha1.ResourceRef, 0, len(ids))
	for _, id := range ids {
		out = append(out, v1alpha1.ResourceRef{ID: id})
	}
	return out
}

// truncate keeps a condition message under the API's 32 KiB limit.
func truncate(s string) string {
	const limit = 32000
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// auth reads spec.secretRef: "username"/"password" for HTTPS. SSH is not supported yet.
func (c *Controller) auth(ctx context.Context, gs *v1alpha1.GitSource) (transport.AuthMethod, error) {
	if gs.Spec.SecretRef == nil {
		return nil, nil
	}
	if !strings.HasPrefix(gs.Spec.URL, "https://") && !strings.HasPrefix(gs.Spec.URL, "http://") {
		return nil, fmt.Errorf("secretRef %s: only HTTPS credentials are supported for now", gs.Spec.SecretRef.Name)
	}
	sec, err := c.client.CoreV1().Secrets(gs.Namespace).Get(ctx, gs.Spec.SecretRef.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("secretRef %s: %w", gs.Spec.SecretRef.Name, err)
	}
	user := string(sec.Data["username"])
	if user == "" {
		user = "git" // token-only: any non-empty user name works with GitHub/GitLab/Gitea
	}
	return &githttp.BasicAuth{Username: user, Password: string(sec.Data["password"])}, nil
}

// writeStatus writes st through the status subresource when it changed.
func (c *Controller) writeStatus(ctx context.Context, gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus) error {
	if apiequality.Semantic.DeepEqual(&gs.Status, st) {
		return nil
	}
	cp := gs.DeepCopy()
	cp.Status = *st
	cp.APIVersion, cp.Kind = v1alpha1.SchemeGroupVersion.String(), "GitSource"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(GitSourceResource).Namespace(gs.Namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: m}, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of %s/%s: %w", gs.Namespace, gs.Name, err)
	}
	return nil
}

// EnsureRootSource creates or updates GitSource kube-system/root to follow url at ref (a
// branch, "tags/<tag>", or a 40-digit commit; empty: main) and path.
func EnsureRootSource(ctx context.Context, client dynamic.Interface, url, ref, path string) error {
	spec := v1alpha1.GitSourceSpec{URL: url, Path: path, Ref: parseRef(ref)}
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
	if gs.Spec.URL == spec.URL && gs.Spec.Path == spec.Path && apiequality.Semantic.DeepEqual(gs.Spec.Ref, spec.Ref) {
		return nil
	}
	gs.Spec.URL, gs.Spec.Path, gs.Spec.Ref = spec.URL, spec.Path, spec.Ref
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&gs)
	if err != nil {
		return err
	}
	if _, err := res.Update(ctx, &unstructured.Unstructured{Object: m}, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update GitSource kube-system/root: %w", err)
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
