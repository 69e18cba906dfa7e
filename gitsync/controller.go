package gitsync

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/internal/gitremote"
	"github.com/flotilla-dev/flotilla/internal/kubeclient"
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
	// ReasonVerificationFailed: the commit is not signed by a trusted key (or the keys are unusable).
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonDependencyNotReady: a GitSource in spec.dependsOn is not Ready and Healthy yet.
	ReasonDependencyNotReady = "DependencyNotReady"
	// ReasonInvalidSpec: the GitSource itself asks for something impossible.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonInsecureTransport is the reason of ConditionWarning while spec.insecure lets the
	// source fetch over http:// or git://.
	ReasonInsecureTransport = "InsecureTransport"
	// ReasonAPIWarnings is the reason of ConditionWarning while the applied revision drew
	// warnings from the API (a ValidatingAdmissionPolicy's Warn action, Pod Security
	// Admission about a workload's pods, a deprecated API...).
	ReasonAPIWarnings = "APIWarnings"
	// ReasonServiceAccountRequired: the GitSource has no spec.serviceAccountName and is not
	// kube-system/root, the only source gitsync applies with its own identity.
	ReasonServiceAccountRequired = "ServiceAccountRequired"
	// ReasonForbidden: the API answered 403 to the dry-run of an object of the revision for
	// the source's ServiceAccount; nothing of the revision was applied.
	ReasonForbidden = "Forbidden"
	// ReasonHealthy / ReasonProgressing / ReasonDegraded are the reasons of ConditionHealthy.
	ReasonHealthy  = "Healthy"
	ReasonDegraded = "Degraded"
)

// Event reasons (in addition to the failure reasons above, recorded as Warnings).
const (
	EventFetched = "Fetched"
	EventApplied = "Applied"
	EventPruned  = "Pruned"
	// EventAPIWarning (a Warning) is a warning the API answered to the apply of an object,
	// "Kind namespace/name: warning", recorded once per revision.
	EventAPIWarning = "APIWarning"
)

// healthPoll is how often the health of progressing objects (and of dependencies that are
// not ready) is checked again, between full reconciliations.
const healthPoll = 3 * time.Second

// Config tunes the controller.
type Config struct {
	// CacheDir holds one git work tree per source (<CacheDir>/<namespace>/<name>).
	CacheDir string
	// Limits bound each source's fetch and render (zero fields: the defaults).
	Limits Limits
}

// DefaultConfig caches clones under the system temporary directory.
func DefaultConfig() Config {
	return Config{CacheDir: filepath.Join(os.TempDir(), "flotilla-gitsync"), Limits: DefaultLimits()}
}

// Controller reconciles GitSources: fetch, verify, render, validate, apply, prune, every
// interval, at once on a spec change or a webhook's RequestedAtAnnotation, and re-checks the
// health of what still progresses every few seconds in between.
type Controller struct {
	cfg    Config
	dyn    dynamic.Interface
	client kubernetes.Interface
	// applier acts as gitsync itself: only for kube-system/root without a ServiceAccount.
	applier *Applier
	// bulk is the configuration of applier's client, from which the clients that
	// impersonate a source's ServiceAccount are built (nil: none can be).
	bulk     *rest.Config
	factory  dynamicinformer.DynamicSharedInformerFactory
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *logrus.Entry

	// secrets is a metadata informer of the Secrets (a changed credential, CA bundle or
	// verify key fetches again at once), started with the shared metadata informers.
	secrets       cache.SharedIndexInformer
	startMetadata func(stop <-chan struct{})
	mu            sync.Mutex
	state         map[string]*sourceState
	// secretChanged are the sources a Secret they read changed for since their last sync.
	secretChanged map[string]bool
	// impersonating are the Appliers acting as a ServiceAccount, by "namespace/name".
	impersonating map[string]*Applier
}

// secretRefIndex indexes GitSources by "namespace/name" of the Secrets a fetch reads:
// spec.secretRef and spec.verify.secretRef.
const secretRefIndex = "secretRef"

func indexSecretRefs(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, path := range [][]string{{"spec", "secretRef", "name"}, {"spec", "verify", "secretRef", "name"}} {
		if name, _, _ := unstructured.NestedString(u.Object, path...); name != "" {
			out = append(out, u.GetNamespace()+"/"+name)
		}
	}
	return out, nil
}

// sourceState is what the controller remembers of a source between syncs (lost with
// leadership, which only means the next sync is a full one).
type sourceState struct {
	generation  int64
	requestedAt string
	lastFull    time.Time
	// unhealthy are the applied objects whose health is re-checked every healthPoll.
	unhealthy []*unstructured.Unstructured
	healthy   map[string]HealthResult
	// warned are the API warnings already reported for warnedRevision.
	warnedRevision string
	warned         map[string]bool
	// Status publication (spec.statusPush): what was published last and when, and the
	// last attempt when it failed.
	publishedKey              string
	publishedAt, publishTried time.Time
	publishFailed             bool
	// recheckAt is when a revision held by spec.rollout is looked at again (its soak ends),
	// when sooner than the interval.
	recheckAt time.Time
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
	cfg.Limits = cfg.Limits.WithDefaults()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(cctx.Dynamic, 0)
	inf := factory.ForResource(GitSourceResource).Informer()
	// A revision is applied in bursts of thousands of requests to the local API: the shared
	// controller client's rate limit would make a large repository take minutes.
	bulk := cctx.Dynamic
	var bulkConfig *rest.Config
	if cctx.Config != nil {
		rc := rest.CopyConfig(cctx.Config)
		rc.QPS, rc.Burst = 1000, 2000
		CollectWarnings(rc)
		if d, err := dynamic.NewForConfig(rc); err == nil {
			bulk, bulkConfig = d, rc
		}
	}
	c := &Controller{
		cfg: cfg, dyn: cctx.Dynamic, client: cctx.Client,
		applier: &Applier{Dynamic: bulk, Mapper: cctx.RESTMapper}, bulk: bulkConfig,
		impersonating: map[string]*Applier{},
		factory:       factory, informer: inf,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gitsync"}),
		log:   logrus.WithField("controller", "gitsync"),
		state: map[string]*sourceState{}, secretChanged: map[string]bool{},
	}
	if err := inf.AddIndexers(cache.Indexers{secretRefIndex: indexSecretRefs}); err != nil {
		return nil, fmt.Errorf("gitsource index: %w", err)
	}
	if cctx.MetadataInformers != nil {
		c.secrets = cctx.MetadataInformers.ForResource(corev1.SchemeGroupVersion.WithResource("secrets")).Informer()
		c.startMetadata = cctx.MetadataInformers.Start
		secretChanged := func(obj any) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				return
			}
			users, _ := c.informer.GetIndexer().ByIndex(secretRefIndex, key)
			for _, u := range users {
				if k, err := cache.MetaNamespaceKeyFunc(u); err == nil {
					c.mu.Lock()
					c.secretChanged[k] = true
					c.mu.Unlock()
					c.queue.Add(k)
				}
			}
		}
		if _, err := c.secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: secretChanged,
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(metav1.Object)
				n, ok2 := cur.(metav1.Object)
				if !ok1 || !ok2 || o.GetResourceVersion() != n.GetResourceVersion() {
					secretChanged(cur)
				}
			},
			DeleteFunc: secretChanged,
		}); err != nil {
			return nil, fmt.Errorf("secret handler: %w", err)
		}
	}
	if cctx.Recorder != nil {
		c.recorder = cctx.Recorder("gitsync")
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		// Status writes do not change the generation; only spec changes and fetch requests
		// (the webhook's annotation) need a sync now (the interval requeue covers the rest).
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*unstructured.Unstructured)
			n, ok2 := cur.(*unstructured.Unstructured)
			if !ok1 || !ok2 || o.GetGeneration() != n.GetGeneration() ||
				o.GetAnnotations()[RequestedAtAnnotation] != n.GetAnnotations()[RequestedAtAnnotation] {
				enqueue(cur)
			}
		},
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.mu.Lock()
				delete(c.state, key)
				c.mu.Unlock()
				forgetSource(key)
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
	defer forgetApplied()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	synced := []cache.InformerSynced{c.informer.HasSynced}
	if c.secrets != nil {
		// Starting the shared factory again only starts what is not running yet.
		c.startMetadata(ctx.Done())
		synced = append(synced, c.secrets.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
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
	timeout := interval
	if gs.Spec.Timeout != nil && gs.Spec.Timeout.Duration > 0 {
		timeout = gs.Spec.Timeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, max(timeout, 30*time.Second))
	defer cancel()

	c.mu.Lock()
	ss := c.state[key]
	if ss == nil {
		ss = &sourceState{}
		c.state[key] = ss
	}
	c.mu.Unlock()
	requested := gs.Annotations[RequestedAtAnnotation]
	c.mu.Lock()
	secretChanged := c.secretChanged[key]
	delete(c.secretChanged, key)
	c.mu.Unlock()
	now := time.Now()
	// A full round (fetch, apply, prune) every interval, on a spec change and on a webhook's
	// request; in between only the health of what is still progressing is looked at again.
	st := gs.Status.DeepCopy()
	// A revision past its health timeout with a rollback due is rolled back at once.
	full := ss.lastFull.IsZero() || ss.generation != gs.Generation || ss.requestedAt != requested || secretChanged ||
		now.Sub(ss.lastFull) >= interval-50*time.Millisecond || rollbackDue(&gs, st, ss, now) ||
		(!ss.recheckAt.IsZero() && !now.Before(ss.recheckAt))
	var retry bool
	if full {
		var done bool
		done, err = c.reconcile(ctx, &gs, st, ss)
		if done {
			ss.lastFull, ss.generation, ss.requestedAt = now, gs.Generation, requested
		}
		retry = !done
	} else {
		c.checkHealth(ctx, &gs, st, ss)
	}
	rollbackNow := c.settleHealth(&gs, st, ss, time.Now())
	st.ObservedGeneration = gs.Generation
	publishNext := c.publish(ctx, &gs, st, ss, time.Now())
	next := interval
	if !full {
		next = max(interval-time.Since(ss.lastFull), 0)
	}
	if publishNext > 0 {
		next = min(next, publishNext)
	}
	if !ss.recheckAt.IsZero() {
		next = min(next, max(time.Until(ss.recheckAt), 0))
	}
	if retry || len(ss.unhealthy) > 0 {
		next = min(next, healthPoll)
	}
	if rollbackNow {
		next = 0
	}
	// Every interval: fetch again and re-apply (which reverts drift).
	defer c.queue.AddAfter(key, next)
	if werr := c.writeStatus(ctx, &gs, st); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// event records an event on the GitSource (when the controller has a recorder).
func (c *Controller) event(gs *v1alpha1.GitSource, typ, reason, format string, args ...any) {
	if c.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "GitSource", APIVersion: v1alpha1.SchemeGroupVersion.String(),
		Namespace: gs.Namespace, Name: gs.Name, UID: gs.UID, ResourceVersion: gs.ResourceVersion}
	c.recorder.Eventf(ref, typ, reason, format, args...)
}

// The GitSource the host creates (EnsureRootSource): the only one applied with gitsync's own
// identity, when it names no ServiceAccount.
const (
	RootNamespace = "kube-system"
	RootName      = "root"
)

// Impersonation is how gitsync acts as ServiceAccount name of namespace ns for a
// GitSource's spec.serviceAccountName: the user and groups the API gives the ServiceAccount's
// own tokens (system:serviceaccount:<ns>:<name>; system:serviceaccounts,
// system:serviceaccounts:<ns>, system:authenticated), as Flux's kustomize-controller does.
// The API checks that gitsync may impersonate the ServiceAccount and each group.
func Impersonation(ns, name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(ns, name),
		Groups:   append(serviceaccount.MakeGroupNames(ns), user.AllAuthenticated),
	}
}

// serviceAccountRequired is why a GitSource without spec.serviceAccountName is not applied.
func serviceAccountRequired(gs *v1alpha1.GitSource) string {
	return fmt.Sprintf("spec.serviceAccountName is not set, and only GitSource %s/%s applies with gitsync's own identity: "+
		"set spec.serviceAccountName to a ServiceAccount of namespace %s that may change this source's objects "+
		"(bound to ClusterRole edit in the namespaces it deploys to, for instance); until then nothing is applied or pruned",
		RootNamespace, RootName, gs.Namespace)
}

// applierFor returns the Applier that acts for gs: one that impersonates its
// spec.serviceAccountName (see Impersonation), or gitsync's own for kube-system/root without
// one. refusal, when not empty, says why gs may not be applied at all: it names no
// ServiceAccount.
func (c *Controller) applierFor(gs *v1alpha1.GitSource) (a *Applier, refusal string, err error) {
	sa := gs.Spec.ServiceAccountName
	if sa == "" {
		if gs.Namespace == RootNamespace && gs.Name == RootName {
			return c.applier, "", nil
		}
		return nil, serviceAccountRequired(gs), nil
	}
	key := gs.Namespace + "/" + sa
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.impersonating[key]; a != nil {
		return a, "", nil
	}
	if c.bulk == nil {
		return nil, "", fmt.Errorf("cannot act as ServiceAccount %s: the controller has no client configuration to impersonate it with", key)
	}
	rc := rest.CopyConfig(c.bulk)
	rc.Impersonate = Impersonation(gs.Namespace, sa)
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("client for ServiceAccount %s: %w", key, err)
	}
	kube, err := kubeclient.New(rc)
	if err != nil {
		return nil, "", fmt.Errorf("client for ServiceAccount %s: %w", key, err)
	}
	a = &Applier{Dynamic: dyn, Mapper: c.applier.Mapper, EstablishTimeout: c.applier.EstablishTimeout,
		Access: kube.AuthorizationV1().SelfSubjectAccessReviews(), User: rc.Impersonate.UserName}
	c.impersonating[key] = a
	return a, "", nil
}

// identity names who acts for gs in messages.
func identity(gs *v1alpha1.GitSource) string {
	if gs.Spec.ServiceAccountName == "" {
		return "gitsync's own identity"
	}
	return "ServiceAccount " + gs.Namespace + "/" + gs.Spec.ServiceAccountName
}

// setHealth records the health of the applied objects in st from ss.
func setHealth(st *v1alpha1.GitSourceStatus, ss *sourceState, gen int64) {
	summary, lines := SummarizeHealth(ss.healthy)
	st.Health, st.Progressing = summary, lines
	cond := metav1.Condition{Type: v1alpha1.ConditionHealthy, ObservedGeneration: gen}
	switch summary {
	case v1alpha1.HealthHealthy:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonHealthy, fmt.Sprintf("All %d applied objects are healthy", len(ss.healthy))
	case v1alpha1.HealthDegraded:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonDegraded
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonProgressing
	}
	if cond.Message == "" {
		cond.Message = truncate(fmt.Sprintf("%d object(s) not healthy yet:\n%s", len(lines), strings.Join(lines, "\n")))
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
}

// healthKey names an object in status.progressing: "Kind namespace/name".
func healthKey(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// recordHealth judges the applied objects (as the API returned them) and remembers the
// unhealthy ones for checkHealth.
func recordHealth(ss *sourceState, applied []*unstructured.Unstructured, now time.Time) {
	ss.healthy = make(map[string]HealthResult, len(applied))
	ss.unhealthy = nil
	for _, u := range applied {
		r := ObjectHealth(u, now)
		ss.healthy[healthKey(u)] = r
		if r.Status != v1alpha1.HealthHealthy {
			ss.unhealthy = append(ss.unhealthy, u)
		}
	}
}

// checkHealth reads the objects that were not healthy again and updates the health status.
func (c *Controller) checkHealth(ctx context.Context, gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState) {
	if len(ss.unhealthy) == 0 {
		return
	}
	// The objects are read with the identity they were applied with; a source that may not
	// apply (it lost its ServiceAccount) keeps the health it had.
	ap, refusal, err := c.applierFor(gs)
	if refusal != "" {
		ss.unhealthy = nil
		return
	}
	if err != nil {
		return
	}
	var still []*unstructured.Unstructured
	now := time.Now()
	for _, u := range ss.unhealthy {
		m, err := ap.mapping(u.GroupVersionKind())
		if err != nil {
			ss.healthy[healthKey(u)] = HealthResult{Status: v1alpha1.HealthUnknown, Message: err.Error()}
			still = append(still, u)
			continue
		}
		res := ap.Dynamic.Resource(m.Resource)
		var live *unstructured.Unstructured
		if m.Scope.Name() == apimeta.RESTScopeNameNamespace {
			live, err = res.Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		} else {
			live, err = res.Get(ctx, u.GetName(), metav1.GetOptions{})
		}
		r := HealthResult{Status: v1alpha1.HealthUnknown}
		switch {
		case apierrors.IsNotFound(err):
			r.Message = "not found (deleted since it was applied)"
		case err != nil:
			r.Message = "read: " + err.Error()
		default:
			r = ObjectHealth(live, now)
			u = live
		}
		ss.healthy[healthKey(u)] = r
		if r.Status != v1alpha1.HealthHealthy {
			still = append(still, u)
		}
	}
	ss.unhealthy = still
	c.inspectPods(ctx, ap, ss)
	before := st.Health
	setHealth(st, ss, gs.Generation)
	if st.Health != before {
		c.log.WithFields(logrus.Fields{"source": gs.Namespace + "." + gs.Name, "revision": st.LastAppliedRevision, "health": st.Health}).Info("health changed")
	}
}

// dependencyCycle follows spec.dependsOn from gs (reading the sources it names) and returns
// the first cycle through gs, as "a/x -> b/y -> a/x", or "".
func (c *Controller) dependencyCycle(ctx context.Context, gs *v1alpha1.GitSource) string {
	start := gs.Namespace + "/" + gs.Name
	seen := map[string]bool{}
	var walk func(key string, deps []v1alpha1.NamespacedObjectReference, defNS string, path []string) string
	walk = func(key string, deps []v1alpha1.NamespacedObjectReference, defNS string, path []string) string {
		path = append(path, key)
		for _, d := range deps {
			ns := d.Namespace
			if ns == "" {
				ns = defNS
			}
			next := ns + "/" + d.Name
			if next == start {
				return strings.Join(append(path, next), " -> ")
			}
			if seen[next] {
				continue
			}
			seen[next] = true
			u, err := c.dyn.Resource(GitSourceResource).Namespace(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			var dep v1alpha1.GitSource
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &dep) != nil {
				continue
			}
			if cyc := walk(next, dep.Spec.DependsOn, ns, path); cyc != "" {
				return cyc
			}
		}
		return ""
	}
	return walk(start, gs.Spec.DependsOn, gs.Namespace, nil)
}

// dependencies returns why the source must wait for its dependsOn, or "" when it need not;
// an error when it can never proceed as written.
func (c *Controller) dependencies(ctx context.Context, gs *v1alpha1.GitSource) (string, error) {
	if len(gs.Spec.DependsOn) == 0 {
		return "", nil
	}
	if cyc := c.dependencyCycle(ctx, gs); cyc != "" {
		return "", fmt.Errorf("spec.dependsOn forms a cycle (%s): remove one of these dependencies", cyc)
	}
	for _, d := range gs.Spec.DependsOn {
		ns := d.Namespace
		if ns == "" {
			ns = gs.Namespace
		}
		u, err := c.dyn.Resource(GitSourceResource).Namespace(ns).Get(ctx, d.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("dependency GitSource %s/%s does not exist", ns, d.Name), nil
		}
		if err != nil {
			return fmt.Sprintf("dependency GitSource %s/%s: %v", ns, d.Name, err), nil
		}
		var dep v1alpha1.GitSource
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &dep); err != nil {
			return "", err
		}
		ready := apimeta.FindStatusCondition(dep.Status.Conditions, v1alpha1.ConditionReady)
		healthy := apimeta.FindStatusCondition(dep.Status.Conditions, v1alpha1.ConditionHealthy)
		switch {
		case dep.Status.ObservedGeneration != dep.Generation:
			return fmt.Sprintf("dependency GitSource %s/%s has not reconciled its latest spec yet", ns, d.Name), nil
		case ready == nil || ready.Status != metav1.ConditionTrue:
			msg := "not reconciled yet"
			if ready != nil {
				msg = ready.Message
			}
			return fmt.Sprintf("dependency GitSource %s/%s is not Ready: %s", ns, d.Name, msg), nil
		case healthy == nil || healthy.Status != metav1.ConditionTrue:
			msg := "health not known yet"
			if healthy != nil {
				msg = healthy.Message
			}
			return fmt.Sprintf("dependency GitSource %s/%s is not Healthy: %s", ns, d.Name, msg), nil
		}
	}
	return "", nil
}

// reconcile does one full round and records its outcome in st. It returns done when the
// round reached an outcome (applied, or stalled on something a human must fix), and an error
// only for failures worth a quick retry.
func (c *Controller) reconcile(ctx context.Context, gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState) (bool, error) {
	source := gs.Namespace + "." + gs.Name
	msource := metricsSource(gs.Namespace, gs.Name)
	log := c.log.WithField("source", source)
	gen := gs.Generation
	prevReady := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	var prevWarning *metav1.Condition
	if w := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionWarning); w != nil {
		prevWarning = w.DeepCopy()
	}
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	fail := func(reason, msg string, stalled bool) {
		if stage := failureStage(reason); stage != "" {
			countFailure(msource, stage)
		}
		msg = truncate(msg)
		// One event per distinct failure: the interval retries repeat it otherwise.
		if prevReady == nil || prevReady.Message != msg || prevReady.Reason != reason {
			c.event(gs, corev1.EventTypeWarning, reason, "%s", msg)
			if stalled {
				log.WithFields(logrus.Fields{"reason": reason, "message": msg}).Warn("GitSource stalled: it retries, but only a change to the source or the repository can fix this")
			}
		}
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionReconciling)
		if stalled {
			set(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		} else {
			apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStalled)
		}
	}

	wait, err := c.dependencies(ctx, gs)
	if err != nil {
		fail(ReasonInvalidSpec, err.Error(), true)
		return true, nil
	}
	if wait != "" && !rollbackDue(gs, st, ss, time.Now()) {
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonDependencyNotReady, "Waiting: "+wait)
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, ReasonDependencyNotReady, "Waiting: "+wait)
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStalled)
		if prevReady == nil || prevReady.Reason != ReasonDependencyNotReady {
			c.event(gs, corev1.EventTypeNormal, ReasonDependencyNotReady, "Waiting: %s", wait)
		}
		log.WithField("waiting", wait).Debug("dependency not ready")
		return false, nil
	}

	remote, err := remoteFor(ctx, c.client, gs)
	if err != nil {
		fail(ReasonFetchFailed, err.Error(), true)
		return true, nil
	}
	if scheme := gitremote.InsecureTransport(gs.Spec.URL); scheme != "" {
		msg := fmt.Sprintf("spec.insecure: fetched over %s:// without TLS, so a network attacker can change what is applied: use https:// or ssh://, or set spec.verify to require signed commits", scheme)
		if w := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionWarning); w == nil || !strings.HasPrefix(w.Message, msg) {
			c.event(gs, corev1.EventTypeWarning, ReasonInsecureTransport, "%s", msg)
		}
		set(v1alpha1.ConditionWarning, metav1.ConditionTrue, ReasonInsecureTransport, msg)
	} else {
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionWarning)
	}
	fetchStart := time.Now()
	co, err := Fetch(ctx, filepath.Join(c.cfg.CacheDir, gs.Namespace, gs.Name), remote, c.cfg.Limits)
	observeSince(fetchDuration, msource, fetchStart)
	var limit *LimitError
	if errors.As(err, &limit) {
		// Retrying fetches the same oversized repository again: only a push (which the
		// interval picks up) or a higher limit can fix it.
		fail(ReasonFetchFailed, fmt.Sprintf("Nothing fetched, the objects applied stay as they are: %v", limit), true)
		log.WithError(limit).Warn("fetch over a limit; nothing applied")
		return true, nil
	}
	if err != nil {
		if hint := fetchHint(gs, err); hint != "" {
			// Retrying cannot help until someone changes the Secret.
			fail(ReasonFetchFailed, err.Error()+": "+hint, true)
			log.WithError(err).Warn("fetch refused")
			return true, nil
		}
		fail(ReasonFetchFailed, err.Error(), false)
		log.WithError(err).Warn("fetch failed")
		return false, err
	}
	log = log.WithField("revision", co.Revision)
	if co.Revision != st.LastAttemptedRevision {
		c.event(gs, corev1.EventTypeNormal, EventFetched, "Fetched revision %s", co.Revision)
		log.Info("fetched")
	}
	if co.Revision != st.LastAppliedRevision {
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, ReasonProgressing, "Reconciling revision: "+co.Revision)
	}
	st.LastAttemptedRevision = co.Revision

	if msg, stalled, err := c.verify(ctx, gs, co); msg != "" {
		fail(ReasonVerificationFailed, fmt.Sprintf("Revision %s not applied: %s", co.Revision, msg), stalled)
		log.WithField("reason", msg).Warn("verification failed; nothing applied")
		return stalled, err
	}
	st.LastFetchedRevision = co.Revision

	// What is applied: the fetched revision, or while it is rolled back the last healthy one.
	commit, revision, rollingBack := co.Commit, co.Revision, false
	if rb := st.RolledBack; rb != nil && (!rollbackEnabled(gs) || rb.Revision != co.Revision) {
		log.WithField("rolledBack", rb.Revision).Info("a new commit (or spec.rollback off) ends the rollback")
		st.RolledBack = nil
	}
	if st.RolledBack == nil && co.Revision == st.LastAppliedRevision && rollbackDue(gs, st, ss, time.Now()) {
		st.RolledBack = &v1alpha1.GitSourceRollback{Revision: co.Revision, To: st.LastHealthyRevision,
			Reason: firstUnhealthy(ss.healthy), Time: metav1.Now()}
		c.event(gs, corev1.EventTypeWarning, ReasonRolledBack, "Revision %s not healthy within %s (%s): re-applying %s",
			co.Revision, healthTimeout(gs), st.RolledBack.Reason, st.RolledBack.To)
		log.WithFields(logrus.Fields{"to": st.RolledBack.To, "reason": st.RolledBack.Reason}).Warn("revision not healthy in time: rolling back")
	}
	ss.recheckAt = time.Time{}
	if gs.Spec.Rollout == nil {
		st.HeldRevision = ""
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionRollout)
	} else if st.RolledBack == nil {
		g := gate{open: true, message: "Revision " + co.Revision + " applied"}
		if co.Revision != st.LastAppliedRevision {
			g = c.rollout(ctx, gs, remote, co.Revision)
		}
		prev := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRollout)
		if g.open {
			st.HeldRevision = ""
			// A revision the gate released (not the one applied, re-applied every round).
			if released := co.Revision != st.LastAppliedRevision; released || prev == nil || prev.Status != metav1.ConditionTrue {
				if released {
					c.event(gs, corev1.EventTypeNormal, ReasonRolloutReleased, "%s", g.message)
				}
				set(v1alpha1.ConditionRollout, metav1.ConditionTrue, ReasonRolloutReleased, g.message)
			}
		} else {
			st.HeldRevision = co.Revision
			if prev == nil || prev.Reason != g.reason || (g.reason == ReasonRolloutHeld && prev.Message != g.message) {
				typ := corev1.EventTypeNormal
				if g.reason == ReasonRolloutHeld {
					typ = corev1.EventTypeWarning
				}
				c.event(gs, typ, g.reason, "%s", truncate(g.message))
				log.WithField("reason", g.message).Info("revision held by spec.rollout")
			}
			set(v1alpha1.ConditionRollout, metav1.ConditionFalse, g.reason, truncate(g.message))
			apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionReconciling)
			if g.recheck > 0 {
				ss.recheckAt = time.Now().Add(g.recheck + time.Second)
			}
			if st.LastAppliedRevision == "" {
				// Nothing applied yet: nothing to keep running.
				set(v1alpha1.ConditionReady, metav1.ConditionFalse, g.reason, g.message)
				return true, nil
			}
			// Keep the revision running (re-applied every interval, which reverts drift).
			if commit, err = ensureCommit(ctx, co.Dir, remote, c.cfg.Limits, st.LastAppliedRevision); err != nil {
				fail(ReasonFetchFailed, fmt.Sprintf("Holding revision %s: %v", co.Revision, err), false)
				return false, err
			}
			revision = st.LastAppliedRevision
		}
	}
	if rb := st.RolledBack; rb != nil {
		commit, err = ensureCommit(ctx, co.Dir, remote, c.cfg.Limits, rb.To)
		if err != nil {
			fail(ReasonFetchFailed, fmt.Sprintf("Rolling back revision %s: %v", rb.Revision, err), false)
			return false, err
		}
		revision, rollingBack = rb.To, true
	}

	renderStart := time.Now()
	objs, err := RenderCommit(ctx, co.Dir, commit, gs.Spec.Path, c.cfg.Limits)
	observeSince(renderDuration, msource, renderStart)
	if err != nil {
		fail(ReasonBuildFailed, fmt.Sprintf("Revision %s: %v", revision, err), true)
		log.WithError(err).Warn("render failed")
		return true, nil
	}
	// Everything done to the source's objects from here on (dry-run, apply, prune, and the
	// health reads of checkHealth) is done as its ServiceAccount; the GitSource itself, its
	// status and events, as gitsync.
	ap, refusal, err := c.applierFor(gs)
	if refusal != "" {
		fail(ReasonServiceAccountRequired, fmt.Sprintf("Revision %s not applied: %s", revision, refusal), true)
		log.Warn("no spec.serviceAccountName; nothing applied")
		return true, nil
	}
	if err != nil {
		fail(ReasonApplyFailed, fmt.Sprintf("Revision %s not applied: %v", revision, err), true)
		return true, nil
	}
	began := time.Now()
	objs, fails := ap.Prepare(objs, source)
	vfails, forbidden := ap.validate(ctx, objs)
	fails = append(fails, vfails...)
	validated := time.Since(began)
	if len(fails) > 0 {
		reason := ReasonValidationFailed
		msg := fmt.Sprintf("Revision %s not applied: %d object(s) failed validation:\n%s", revision, len(fails), strings.Join(fails, "\n"))
		if forbidden > 0 {
			reason = ReasonForbidden
			msg = fmt.Sprintf("Revision %s not applied: %s may not change %d of its objects (the API answered 403 Forbidden to their dry-run): "+
				"grant it access to them, or remove them from the repository%s; %d object(s) failed validation:\n%s",
				revision, identity(gs), forbidden, c.missingServiceAccount(ctx, gs), len(fails), strings.Join(fails, "\n"))
		}
		fail(reason, msg, true)
		log.WithFields(logrus.Fields{"failures": len(fails), "forbidden": forbidden}).Warn("validation failed; nothing applied")
		return true, nil
	}
	applyStart := time.Now()
	applied, warnings, err := ap.ApplyObjects(ctx, objs, source)
	c.reportWarnings(gs, ss, revision, warnings, log)
	setAPIWarnings(st, prevWarning, revision, warnings, gen)
	if err != nil {
		observeSince(applyDuration, msource, applyStart)
		fail(ReasonApplyFailed, fmt.Sprintf("Revision %s: apply: %v", revision, err), false)
		return false, err
	}
	recordHealth(ss, applied, time.Now())
	c.inspectPods(ctx, ap, ss)
	setHealth(st, ss, gen)
	inv := Inventory(objs)
	var old []v1alpha1.ResourceRef
	if st.Inventory != nil {
		old = st.Inventory.Entries
	}
	if gs.Spec.Prune == nil || *gs.Spec.Prune {
		var keep func(*unstructured.Unstructured) string
		if rollingBack {
			keep = rollbackKeep
		}
		deleted, kept, err := ap.PruneWith(ctx, Stale(old, inv), source, keep)
		if rollingBack {
			// What the rollback kept stays the source's: a later revision without it prunes it.
			inv = append(inv, entriesOf(Stale(old, inv), kept)...)
		}
		if len(deleted) > 0 {
			log.WithField("pruned", deleted).Info("pruned")
			c.event(gs, corev1.EventTypeNormal, EventPruned, "Pruned %d object(s) of revision %s: %s", len(deleted), revision, strings.Join(deleted, ", "))
		}
		if err != nil {
			// Keep the failed entries in the inventory so the next round tries again.
			inv = append(inv, Stale(Stale(old, inv), refs(deleted))...)
			st.Inventory = &v1alpha1.ResourceInventory{Entries: inv}
			observeSince(applyDuration, msource, applyStart)
			fail(ReasonApplyFailed, fmt.Sprintf("Revision %s: prune: %v", revision, err), false)
			return false, err
		}
	}
	observeSince(applyDuration, msource, applyStart)
	recordApplied(msource, revision, time.Now())
	if revision != st.LastAppliedRevision {
		log.WithFields(logrus.Fields{"objects": len(objs), "health": st.Health,
			"validate": validated.Round(time.Millisecond), "apply": (time.Since(began) - validated).Round(time.Millisecond)}).Info("applied")
		c.event(gs, corev1.EventTypeNormal, EventApplied, "Applied revision %s: %d object(s)", revision, len(objs))
	}
	st.Inventory = &v1alpha1.ResourceInventory{Entries: inv}
	if revision != st.LastAppliedRevision || st.LastAppliedTime == nil {
		st.LastAppliedTime = &metav1.Time{Time: time.Now()}
	}
	st.LastAppliedRevision = revision
	set(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonSucceeded, "Applied revision: "+revision)
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionReconciling)
	apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionStalled)
	return true, nil
}

// reportWarnings records each API warning of an apply of revision as an EventAPIWarning and
// logs it, unless it was reported for this revision already: every interval re-applies the
// revision, and the API answers the same warnings each time.
func (c *Controller) reportWarnings(gs *v1alpha1.GitSource, ss *sourceState, revision string, warnings []string, log *logrus.Entry) {
	if ss.warnedRevision != revision || ss.warned == nil {
		ss.warnedRevision, ss.warned = revision, map[string]bool{}
	}
	for _, w := range warnings {
		if ss.warned[w] {
			continue
		}
		ss.warned[w] = true
		log.WithField("warning", w).Warn("API warning")
		c.event(gs, corev1.EventTypeWarning, EventAPIWarning, "%s", truncate(w))
	}
}

// setAPIWarnings makes the Warning condition list the API warnings of the apply of revision
// (after the insecure-transport warning when there is one), or leaves it as the
// insecure-transport check set it when there are none. A condition that stays True keeps
// its lastTransitionTime (prev is the condition before this round), so re-applying a
// revision with the same warnings changes nothing in the status.
func setAPIWarnings(st *v1alpha1.GitSourceStatus, prev *metav1.Condition, revision string, warnings []string, gen int64) {
	if len(warnings) == 0 {
		return
	}
	const shown = 5
	list := warnings
	if len(list) > shown {
		list = list[:shown]
	}
	msg := fmt.Sprintf("Revision %s applied with %d API warning(s) (each also an %s event): %s", revision, len(warnings), EventAPIWarning, strings.Join(list, "; "))
	if len(warnings) > shown {
		msg += fmt.Sprintf("; and %d more", len(warnings)-shown)
	}
	reason := ReasonAPIWarnings
	if w := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionWarning); w != nil {
		reason, msg = w.Reason, w.Message+"; "+msg
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionWarning, Status: metav1.ConditionTrue, Reason: reason, Message: truncate(msg), ObservedGeneration: gen}
	if prev != nil && prev.Status == metav1.ConditionTrue {
		cond.LastTransitionTime = prev.LastTransitionTime
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
}

// missingServiceAccount is a hint for a source whose ServiceAccount was refused: "" unless
// gitsync can tell that it does not exist.
func (c *Controller) missingServiceAccount(ctx context.Context, gs *v1alpha1.GitSource) string {
	sa := gs.Spec.ServiceAccountName
	if sa == "" || c.client == nil {
		return ""
	}
	if _, err := c.client.CoreV1().ServiceAccounts(gs.Namespace).Get(ctx, sa, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Sprintf(" (ServiceAccount %s/%s does not exist: create it and bind it to a role)", gs.Namespace, sa)
	}
	return ""
}

// verify checks the signature spec.verify asks for. It returns an empty message when the
// checkout may be applied; otherwise the message says what to change, stalled whether only
// a human can fix it, and err a transient failure to retry.
func (c *Controller) verify(ctx context.Context, gs *v1alpha1.GitSource, co *Checkout) (msg string, stalled bool, err error) {
	v := gs.Spec.Verify
	if v == nil || v.Mode == "" || v.Mode == v1alpha1.VerifyModeNone {
		return "", false, nil
	}
	if v.Mode != v1alpha1.VerifyModeHead {
		return fmt.Sprintf("spec.verify.mode %q is not supported: use %q or %q", v.Mode, v1alpha1.VerifyModeHead, v1alpha1.VerifyModeNone), true, nil
	}
	if v.SecretRef == nil || v.SecretRef.Name == "" {
		return "spec.verify.secretRef is required with mode head: name a Secret whose values are the trusted ASCII-armored OpenPGP public keys", true, nil
	}
	sec, err := c.client.CoreV1().Secrets(gs.Namespace).Get(ctx, v.SecretRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("Secret %s/%s named by spec.verify.secretRef does not exist: create it with the trusted OpenPGP public keys", gs.Namespace, v.SecretRef.Name), true, nil
	}
	if err != nil {
		return fmt.Sprintf("read Secret %s/%s: %v", gs.Namespace, v.SecretRef.Name, err), false, err
	}
	ring, err := ParseKeyRing(sec.Data)
	if err != nil {
		return fmt.Sprintf("Secret %s/%s named by spec.verify.secretRef: %v", gs.Namespace, v.SecretRef.Name, err), true, nil
	}
	signer, err := VerifyCommit(co.Dir, co.Commit, ring)
	if err != nil {
		return fmt.Sprintf("%v (trusted keys: Secret %s/%s)", err, gs.Namespace, v.SecretRef.Name), true, nil
	}
	c.log.WithFields(logrus.Fields{"source": gs.Namespace + "." + gs.Name, "revision": co.Revision, "signer": signer}).Debug("signature verified")
	return "", false, nil
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

// remoteFor reads spec.url, spec.ref, spec.insecure and spec.secretRef: "username"/
// "password" and "ca.crt" for HTTPS; "identity" (a PEM private key), "known_hosts" and
// optionally "password" (the key's passphrase) for SSH. Errors say what to change in the
// GitSource or its Secret.
func remoteFor(ctx context.Context, client kubernetes.Interface, gs *v1alpha1.GitSource) (Remote, error) {
	r := Remote{URL: gs.Spec.URL, Ref: gs.Spec.Ref, Insecure: gs.Spec.Insecure}
	ep, err := transport.NewEndpoint(gs.Spec.URL)
	if err != nil {
		return r, fmt.Errorf("spec.url %q: %w", gs.Spec.URL, err)
	}
	if err := gitremote.CheckTransport(gs.Spec.URL, gs.Spec.Insecure, gs.Spec.SecretRef != nil); err != nil {
		if gs.Spec.SecretRef != nil && gitremote.InsecureTransport(gs.Spec.URL) != "" {
			return r, fmt.Errorf("spec.secretRef %s: %w", gs.Spec.SecretRef.Name, err)
		}
		return r, err
	}
	isSSH := ep.Protocol == "ssh"
	if gs.Spec.SecretRef == nil {
		if isSSH {
			return r, fmt.Errorf("spec.url %s is an SSH URL: set spec.secretRef to a Secret with keys identity (private key) and known_hosts", gs.Spec.URL)
		}
		return r, nil
	}
	if !isSSH && ep.Protocol != "https" {
		return r, fmt.Errorf("spec.secretRef %s: credentials are used with https:// and ssh:// URLs only; remove it for %s", gs.Spec.SecretRef.Name, gs.Spec.URL)
	}
	name := gs.Namespace + "/" + gs.Spec.SecretRef.Name
	sec, err := client.CoreV1().Secrets(gs.Namespace).Get(ctx, gs.Spec.SecretRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r, fmt.Errorf("Secret %s named by spec.secretRef does not exist: create it", name)
	}
	if err != nil {
		return r, fmt.Errorf("read Secret %s named by spec.secretRef: %w", name, err)
	}
	if isSSH {
		r.Auth, err = sshAuth(ep, name, sec.Data)
		return r, err
	}
	if ca := sec.Data[CAKey]; len(ca) > 0 {
		if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(ca) {
			return r, fmt.Errorf("Secret %s key %s: no PEM certificate in it: give the CA certificates the server's certificate chains to", name, CAKey)
		}
		r.CABundle = ca
	}
	user, pass := string(sec.Data["username"]), string(sec.Data["password"])
	if user == "" && pass == "" {
		return r, nil // only a CA bundle: anonymous
	}
	if user == "" {
		user = "git" // token-only: any non-empty user name works with GitHub/GitLab/Gitea
	}
	r.Auth = &githttp.BasicAuth{Username: user, Password: pass}
	return r, nil
}

// CAKey is the key of a spec.secretRef Secret holding the CA bundle of an https server.
const CAKey = "ca.crt"

// fetchHint says what to change when a fetch failed for a reason only a human can fix.
func fetchHint(gs *v1alpha1.GitSource, err error) string {
	secret := "spec.secretRef"
	if gs.Spec.SecretRef != nil {
		secret = gs.Namespace + "/" + gs.Spec.SecretRef.Name
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "knownhosts: key mismatch"):
		return "the server's host key is not the one in known_hosts of Secret " + secret + ": check the server, then update known_hosts"
	case strings.Contains(msg, "knownhosts: key is unknown"):
		return "the server is not listed in known_hosts of Secret " + secret + ": add its host key (ssh-keyscan)"
	case strings.Contains(msg, "unable to authenticate"):
		return "the server refused the identity of Secret " + secret + ": register its public key as a deploy key"
	case strings.Contains(msg, "authentication required"), strings.Contains(msg, "authorization failed"):
		return "the server refused the credentials of " + secret + ": set username/password (a token) that can read the repository"
	case strings.Contains(msg, "couldn't find remote ref"):
		return "the ref does not exist in the repository: push it or change spec.ref"
	case strings.Contains(msg, "repository not found"):
		return "no repository at spec.url: correct spec.url"
	}
	return ""
}

// sshAuth builds public key authentication that trusts only the host keys in known_hosts.
func sshAuth(ep *transport.Endpoint, secret string, data map[string][]byte) (transport.AuthMethod, error) {
	if len(data["identity"]) == 0 || len(data["known_hosts"]) == 0 {
		return nil, fmt.Errorf("Secret %s named by spec.secretRef: SSH needs keys identity (PEM private key) and known_hosts (the server's host keys, as ssh-keyscan prints them)", secret)
	}
	user := ep.User
	if user == "" {
		user = "git"
	}
	pk, err := gitssh.NewPublicKeys(user, data["identity"], string(data["password"]))
	if err != nil {
		return nil, fmt.Errorf("Secret %s key identity: not a usable private key (set password if it is encrypted): %w", secret, err)
	}
	// The known_hosts parser reads files only.
	f, err := os.CreateTemp("", "flotilla-known-hosts-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data["known_hosts"])
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	db, err := gitssh.NewKnownHostsDb(f.Name())
	if err != nil {
		return nil, fmt.Errorf("Secret %s key known_hosts: %w", secret, err)
	}
	port := ep.Port
	if port == 0 {
		port = 22
	}
	pk.HostKeyCallback = db.HostKeyCallback()
	pk.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, strconv.Itoa(port)))
	return pk, nil
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
