package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/nodes/refcache"
	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// Runtime is what the pod workers need of the container runtime (nodes/runtime).
type Runtime interface {
	execer
	ImageLister
	ImageStatus(ctx context.Context, ref string) (*rt.Image, error)
	PullImage(ctx context.Context, ref string, opts rt.PullOptions) (*rt.Image, error)
	CreateContainer(ctx context.Context, c rt.ContainerConfig) error
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ListContainers(ctx context.Context) ([]rt.ContainerStatus, error)
}

// Network is what the pod workers need of the pod network (nodes/network).
type Network interface {
	SetupPod(ctx context.Context, uid, namespace, name string) (network.PodNetwork, error)
	TeardownPod(ctx context.Context, uid string) error
	Pods() ([]string, error)
}

// PodConfig configures the pod workers of a host.
type PodConfig struct {
	NodeName      string
	DataDir       string // pods live in DataDir/pods/<uid>
	HostIP        string
	ClusterDNS    string // 10.96.0.10
	ClusterDomain string // cluster.local
	Runtime       Runtime
	Network       Network
	// HostPorts maps the pods' host ports; nil leaves them unmapped.
	HostPorts HostPorts
	// ResyncInterval is how often each pod is checked without an event (2 s).
	ResyncInterval time.Duration
	// HostResolvConf is the host's resolver file (/etc/resolv.conf).
	HostResolvConf string
	// DeclaredFeatures are the host's Node status.declaredFeatures; a pod needing another
	// feature is rejected (phase Failed) before it runs. AgentVersion is the version they are
	// inferred for.
	DeclaredFeatures []string
	AgentVersion     string
	// SeccompDefault is the seccomp profile of containers whose pod sets none: RuntimeDefault
	// (the default) or Unconfined. Localhost profiles are files below DataDir/seccomp.
	SeccompDefault string
	// ImageGC, when set, collects unused images (imagegc.go); the Runtime must then be an
	// ImageGCRuntime too.
	ImageGC *ImageGCConfig
	// Informers is the host's shared factory; nil makes one of its own. It must be unfiltered:
	// the Services of every namespace make the containers' Service environment.
	Informers informers.SharedInformerFactory
	// Objects reads the ConfigMaps, Secrets, PersistentVolumeClaims and PersistentVolumes the
	// pods use, each by name with a watch of its own (nodes/refcache), which is all the Node
	// authorizer lets a host read of them; the host shares it with the Ingress proxy and
	// checkpoints it. Nil makes one of its own, kept in memory only, when Run starts.
	Objects *refcache.Objects
	// PodInformers is the host's shared factory for the pods of this node, filtered by
	// spec.nodeName (NodePodInformerFactory makes one); nil makes one of its own.
	//
	// Run starts the informers it registered on either factory with its ctx (an informer stops
	// with the context of whoever started it first, so give every user of a factory the host's
	// context) and never shuts a given factory down.
	PodInformers informers.SharedInformerFactory
}

// PodManager runs the pods bound to this host: one worker per pod, driven by the API
// (informers) and by what the runtime reports.
type PodManager struct {
	cfg    PodConfig
	client kubernetes.Interface
	log    *logrus.Entry

	pods       corelisters.PodLister
	services   corelisters.ServiceLister
	objects    *refcache.Objects // set by Run when cfg.Objects is nil
	synced     []cache.InformerSynced
	podFactory informers.SharedInformerFactory
	factory    informers.SharedInformerFactory
	// owned are the factories made here rather than given: only these may be shut down.
	owned      []informers.SharedInformerFactory
	podHandler cache.ResourceEventHandlerRegistration
	recorder   record.EventRecorder

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	// diskReclaimed is when disk pressure last had unused images collected (EvictForPressure).
	diskReclaimed time.Time
	keys          map[types.UID]string // uid -> namespace/name

	snapMu   sync.Mutex
	snap     map[string][]rt.ContainerStatus // pod uid -> containers
	snapTime time.Time

	stats *statsCollector
	// tokens are the projected service account tokens of the pods.
	tokens *serviceAccountTokens
	// images collects unused images; nil without PodConfig.ImageGC.
	images *imageGC
	// localVolumes removes the directories of this host's deleted local volumes.
	localVolumes *localVolumes
	// servicesSynced tells whether the Services were listed once, which the environment of a
	// container needs.
	servicesSynced cache.InformerSynced
}

// NewPodManager builds the workers' informers (started by Run).
func NewPodManager(client kubernetes.Interface, cfg PodConfig) *PodManager {
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = 2 * time.Second
	}
	if cfg.ClusterDNS == "" {
		cfg.ClusterDNS = "10.96.0.10"
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.HostResolvConf == "" {
		cfg.HostResolvConf = "/etc/resolv.conf"
	}
	m := &PodManager{cfg: cfg, client: client, log: logrus.WithField("node", cfg.NodeName),
		workers: map[types.UID]*podWorker{}, keys: map[types.UID]string{}}
	m.podFactory, m.factory = cfg.PodInformers, cfg.Informers
	if m.podFactory == nil {
		m.podFactory = NodePodInformerFactory(client, cfg.NodeName)
		m.owned = append(m.owned, m.podFactory)
	}
	if m.factory == nil {
		m.factory = informers.NewSharedInformerFactory(client, 0)
		m.owned = append(m.owned, m.factory)
	}
	podInf := m.podFactory.Core().V1().Pods()
	m.pods = podInf.Lister()
	m.services = m.factory.Core().V1().Services().Lister()
	m.objects = cfg.Objects
	m.servicesSynced = m.factory.Core().V1().Services().Informer().HasSynced
	m.synced = []cache.InformerSynced{podInf.Informer().HasSynced, m.factory.Core().V1().Services().Informer().HasSynced}
	m.podHandler, _ = podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.podChanged(obj) },
		UpdateFunc: func(_, obj any) { m.podChanged(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			m.podChanged(obj)
		},
	})
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	m.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: cfg.NodeName})
	m.stats = newStatsCollector(m)
	m.tokens = newServiceAccountTokens(client, m.log, m.podDir)
	m.localVolumes = newLocalVolumes(client, cfg.NodeName, m.recorder, m.log, m.localVolumeUser)
	if cfg.ImageGC != nil {
		if gcrt, ok := cfg.Runtime.(ImageGCRuntime); ok {
			m.images = newImageGC(*cfg.ImageGC, gcrt, m.recorder, cfg.NodeName, m.log)
			m.cfg.Runtime = imageUseRecorder{Runtime: cfg.Runtime, gc: m.images}
		} else {
			m.log.Warn("the runtime cannot remove images: no image garbage collection")
		}
	}
	return m
}

// Run starts the informers and the workers and garbage-collects what no pod owns until ctx ends.
func (m *PodManager) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(m.cfg.DataDir, "pods"), 0o755); err != nil {
		return err
	}
	if m.objects == nil {
		// Before the pod informer starts the workers that read it.
		m.objects = refcache.NewObjects(ctx, m.client, refcache.Config{Log: m.log.WithField("component", "objects")})
	}
	m.podFactory.Start(ctx.Done())
	m.factory.Start(ctx.Done())
	defer func() {
		// A shared pod informer outlives Run: it must not keep starting workers.
		if m.podHandler != nil {
			_ = m.podFactory.Core().V1().Pods().Informer().RemoveEventHandler(m.podHandler)
		}
		for _, f := range m.owned {
			f.Shutdown()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), m.synced...) {
		return ctx.Err()
	}
	m.log.Info("pod workers running")
	go m.watchEmptyDirs(ctx)
	go m.localVolumes.run(ctx)
	if m.images != nil {
		go m.images.run(ctx)
	}
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		m.collectGarbage(ctx)
		m.syncHostPorts(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *PodManager) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[pod.UID] = pod.Namespace + "/" + pod.Name
	w, ok := m.workers[pod.UID]
	if !ok {
		w = newPodWorker(m, pod.UID)
		m.workers[pod.UID] = w
		go w.run()
	}
	w.kick()
}

// currentPod returns the pod object of uid, nil when it is gone.
func (m *PodManager) currentPod(uid types.UID) *corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.currentPodLocked(uid)
}

func (m *PodManager) workerDone(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.workers, uid)
	if m.currentPodLocked(uid) == nil {
		delete(m.keys, uid)
	}
	m.tokens.forget(uid)
}

func (m *PodManager) currentPodLocked(uid types.UID) *corev1.Pod {
	ns, name, _ := cache.SplitMetaNamespaceKey(m.keys[uid])
	pod, err := m.pods.Pods(ns).Get(name)
	if err != nil || pod.UID != uid {
		return nil
	}
	return pod
}

// containers returns the runtime's containers by pod uid, at most half a second old.
func (m *PodManager) containers(ctx context.Context, fresh bool) (map[string][]rt.ContainerStatus, error) {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	if !fresh && m.snap != nil && time.Since(m.snapTime) < 500*time.Millisecond {
		return m.snap, nil
	}
	list, err := m.cfg.Runtime.ListContainers(ctx)
	if err != nil {
		return nil, err
	}
	snap := map[string][]rt.ContainerStatus{}
	for _, c := range list {
		if uid := c.Labels[labelPodUID]; uid != "" {
			snap[uid] = append(snap[uid], c)
		}
	}
	m.snap, m.snapTime = snap, time.Now()
	return snap, nil
}

func (m *PodManager) invalidate() {
	m.snapMu.Lock()
	m.snap = nil
	m.snapMu.Unlock()
}

// collectGarbage removes containers, sandboxes and directories of pods that no longer exist
// (deleted while the agent was down, or force-deleted).
func (m *PodManager) collectGarbage(ctx context.Context) {
	// What exists is listed before what is alive: a pod whose worker starts after the alive
	// set was taken cannot have containers or a sandbox in these older lists, so it is never
	// mistaken for an orphan.
	snap, err := m.containers(ctx, true)
	if err != nil {
		m.log.WithError(err).Warn("list containers")
		return
	}
	var sandboxes []string
	if m.cfg.Network != nil {
		if sandboxes, err = m.cfg.Network.Pods(); err != nil {
			m.log.WithError(err).Warn("list pod sandboxes")
		}
	}
	entries, _ := os.ReadDir(filepath.Join(m.cfg.DataDir, "pods"))

	alive := map[string]bool{}
	pods, _ := m.pods.List(labels.Everything())
	for _, p := range pods {
		alive[string(p.UID)] = true
	}
	m.mu.Lock()
	for uid := range m.workers {
		alive[string(uid)] = true
	}
	m.mu.Unlock()
	m.tokens.prune(alive)

	for uid, cs := range snap {
		if alive[uid] {
			continue
		}
		for _, c := range cs {
			_ = m.cfg.Runtime.StopContainer(ctx, c.ID, 0)
			if err := m.cfg.Runtime.RemoveContainer(ctx, c.ID); err != nil {
				m.log.WithError(err).WithField("container", c.ID).Warn("remove orphaned container")
			}
		}
		m.log.WithField("podUID", uid).Info("removed the containers of a pod that no longer exists")
	}
	for _, uid := range sandboxes {
		if !alive[uid] {
			_ = m.cfg.Network.TeardownPod(ctx, uid)
		}
	}
	for _, e := range entries {
		if !alive[e.Name()] {
			_ = cleanupPodDir(filepath.Join(m.cfg.DataDir, "pods", e.Name()))
		}
	}
	m.invalidate()
}

// ImageLister lists a runtime's images.
type ImageLister interface {
	ListImages(ctx context.Context) ([]rt.Image, error)
}

// NodeImages reports a runtime's images for the Node's status.images.
func NodeImages(ctx context.Context, r ImageLister) []corev1.ContainerImage {
	imgs, err := r.ListImages(ctx)
	if err != nil {
		return nil
	}
	var out []corev1.ContainerImage
	for _, i := range imgs {
		names := append([]string(nil), i.Names...)
		if i.ID != "" {
			names = append(names, i.ID)
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: i.Size})
	}
	return out
}

// LogPath returns the log file of a container of a pod on this host (attempt -1: the latest;
// previous: the one before it).
func (m *PodManager) LogPath(ctx context.Context, namespace, name, container string, previous bool) (string, error) {
	pod, err := m.pods.Pods(namespace).Get(name)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s is not on node %s", namespace, name, m.cfg.NodeName)
	}
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			var names []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return "", fmt.Errorf("a container name must be specified for pod %s, choose one of: %v", name, names)
		}
		container = pod.Spec.Containers[0].Name
	}
	snap, err := m.containers(ctx, false)
	if err != nil {
		return "", err
	}
	latest := -1
	for _, c := range snap[string(pod.UID)] {
		if c.Labels[labelContainer] != container {
			continue
		}
		if a, _ := strconv.Atoi(c.Labels[labelAttempt]); a > latest {
			latest = a
		}
	}
	if latest < 0 {
		return "", fmt.Errorf("container %q in pod %q is waiting to start", container, name)
	}
	if previous {
		if latest == 0 {
			return "", fmt.Errorf("previous terminated container %q in pod %q not found", container, name)
		}
		latest--
	}
	return logPath(m.podDir(pod.UID), container, latest), nil
}

// ContainerID returns the runtime ID of the running container of a pod (for exec).
func (m *PodManager) ContainerID(ctx context.Context, namespace, name, container string) (string, error) {
	pod, err := m.pods.Pods(namespace).Get(name)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s is not on node %s", namespace, name, m.cfg.NodeName)
	}
	if container == "" {
		container = pod.Spec.Containers[0].Name
	}
	snap, err := m.containers(ctx, true)
	if err != nil {
		return "", err
	}
	for _, c := range snap[string(pod.UID)] {
		if c.Labels[labelContainer] == container && c.State == rt.StateRunning {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("container %q in pod %q is not running", container, name)
}

// Exec runs a command in a container of a pod on this host.
func (m *PodManager) Exec(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) (int, error) {
	return m.cfg.Runtime.Exec(ctx, id, cmd, stdin, stdout, stderr, tty)
}

func (m *PodManager) podDir(uid types.UID) string {
	return filepath.Join(m.cfg.DataDir, "pods", string(uid))
}

// configMap, secret, pvc and pv read what the pods use, by name: a NotFound error when it
// does not exist; another error (not read yet, refused because the API server has not
// seen the pod on this host yet, or the API is unreachable and the checkpoint does not
// hold it) means the next sync tries again.
func (m *PodManager) configMap(ns, name string) (*corev1.ConfigMap, error) {
	return m.objects.ConfigMaps.Get(ns, name)
}

func (m *PodManager) secret(ns, name string) (*corev1.Secret, error) {
	return m.objects.Secrets.Get(ns, name)
}

func (m *PodManager) pvc(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return m.objects.PVCs.Get(ns, name)
}

func (m *PodManager) pv(name string) (*corev1.PersistentVolume, error) {
	return m.objects.PVs.Get("", name)
}

// serviceEnvSources returns the Services whose variables the pod's containers see. Like the
// kubelet it refuses until the Services were listed once: a container started before would
// miss them for good.
func (m *PodManager) serviceEnvSources(pod *corev1.Pod) ([]*corev1.Service, error) {
	if m.servicesSynced != nil && !m.servicesSynced() {
		return nil, errors.New("services have not yet been read at least once, cannot construct envvars")
	}
	return envServices(pod, m.services)
}

// hostIPs is the host's address for pod status.
func (m *PodManager) hostIPs() []string {
	if ip := net.ParseIP(m.cfg.HostIP); ip != nil {
		return []string{ip.String()}
	}
	return nil
}

// deletePod removes the pod object once its containers are gone (grace period 0, only this
// incarnation).
func (m *PodManager) deletePod(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	err := m.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

var errStop = errors.New("stop")
