package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// Back-off of restarts and image pulls, as the kubelet: 10 s doubling to 5 min, forgotten
// after a container ran for 10 minutes.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 300 * time.Second
	backoffReset   = 10 * time.Minute
)

type backoff struct {
	delay time.Duration
	next  time.Time
	// msg is the failure backed off from (image pulls: the registry's message).
	msg string
}

// podWorker owns one pod: it alone creates, starts and stops that pod's containers.
type podWorker struct {
	m     *PodManager
	uid   types.UID
	kickC chan struct{}
	log   *logrus.Entry

	backoffs map[string]*backoff // container name (or "pull/"+name) -> back-off
	probes   map[string]*probeHandle
	started  time.Time
	// startLatency feeds the pod start metric, measured from the worker's creation.
	startLatency startLatency
	// sandbox is the pod's network once set up.
	podIPs    []string
	netnsPath string
	// termMessages are the termination messages of exited attempts, by container ID.
	termMessages map[string]string
	// postStartDone records containers whose postStart hook ran.
	postStartDone map[string]bool
	waiting       map[string][2]string // container -> waiting reason, message
	failed        [2]string
	// admitted: the pod's declared-feature requirements were checked against this host's.
	admitted bool
	// volumesReady: the pod's volumes were set up once on this host.
	volumesReady bool
	// lastStatus was written on top of resourceVersion lastBase.
	lastStatus *corev1.PodStatus
	lastBase   string
	// eviction is the message of the eviction decided for the pod, set once by checkEmptyDirs
	// or EvictForPressure.
	eviction atomic.Pointer[string]
	// evictGrace, when set, replaces the pod's grace period for the eviction (0 for a hard
	// node-pressure threshold).
	evictGrace atomic.Pointer[time.Duration]
}

type probeHandle struct {
	cancel context.CancelFunc
	res    *probeResults
}

func newPodWorker(m *PodManager, uid types.UID) *podWorker {
	return &podWorker{m: m, uid: uid, kickC: make(chan struct{}, 1),
		log:      m.log.WithField("podUID", uid),
		backoffs: map[string]*backoff{}, probes: map[string]*probeHandle{},
		postStartDone: map[string]bool{}, waiting: map[string][2]string{},
		startLatency: startLatency{seen: time.Now()}}
}

// The pod status and event of a pod past its spec.activeDeadlineSeconds, as the kubelet's.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

func (w *podWorker) kick() {
	select {
	case w.kickC <- struct{}{}:
	default:
	}
}

func (w *podWorker) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer w.m.workerDone(w.uid)
	t := time.NewTicker(w.m.cfg.ResyncInterval)
	defer t.Stop()
	lastErr := ""
	for {
		pod := w.m.currentPod(w.uid)
		var err error
		if pod == nil {
			err = w.cleanup(ctx, nil)
			if err == nil {
				return
			}
		} else {
			w.log = w.m.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name})
			err = w.sync(ctx, pod)
			if errors.Is(err, errStop) {
				return
			}
		}
		// A pod that cannot sync needs someone to look; the same error again at every retry
		// does not need saying again.
		switch {
		case err != nil && err.Error() != lastErr:
			w.log.WithError(err).Warn("pod sync failed")
			lastErr = err.Error()
		case err != nil:
			w.log.WithError(err).Debug("pod sync")
		default:
			lastErr = ""
		}
		select {
		case <-w.kickC:
		case <-t.C:
		}
	}
}

// attempts groups a pod's runtime containers by container name, newest attempt first.
func attempts(cs []rt.ContainerStatus) map[string][]rt.ContainerStatus {
	out := map[string][]rt.ContainerStatus{}
	for _, c := range cs {
		n := c.Labels[labelContainer]
		out[n] = append(out[n], c)
	}
	for n := range out {
		sort.Slice(out[n], func(i, j int) bool {
			a, _ := strconv.Atoi(out[n][i].Labels[labelAttempt])
			b, _ := strconv.Atoi(out[n][j].Labels[labelAttempt])
			return a > b
		})
	}
	return out
}

func attemptOf(c rt.ContainerStatus) int {
	a, _ := strconv.Atoi(c.Labels[labelAttempt])
	return a
}

// sync drives the pod one step towards its spec and reports its status.
func (w *podWorker) sync(ctx context.Context, pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil {
		if err := w.cleanup(ctx, pod); err != nil {
			return err
		}
		if err := w.m.deletePod(ctx, pod); err != nil {
			return fmt.Errorf("delete pod: %w", err)
		}
		return errStop
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// Finished: nothing runs any more; the containers stay for their logs.
		w.stopProbes("")
		if err := w.m.unmapFinishedHostPorts(pod); err != nil {
			return fmt.Errorf("unmap the pod's host ports: %w", err)
		}
		snap, err := w.m.containers(ctx, false)
		if err != nil {
			return err
		}
		for _, c := range snap[string(pod.UID)] {
			if c.State == rt.StateRunning {
				_ = w.m.cfg.Runtime.StopContainer(ctx, c.ID, gracePeriod(pod))
			}
		}
		return nil
	}
	if msg := w.eviction.Load(); msg != nil {
		return w.evict(ctx, pod, *msg)
	}
	if !w.admitted {
		// Checked once per worker, so after an agent restart with other features the
		// running pods are admitted again.
		if missing, err := MissingFeatures(pod, w.m.cfg.DeclaredFeatures, w.m.cfg.AgentVersion); err != nil {
			w.log.WithError(err).Warn("infer the pod's declared-feature requirements")
		} else if len(missing) > 0 {
			reason, msg := featureRejection(w.m.cfg.NodeName, missing)
			w.event(pod, corev1.EventTypeWarning, reason, msg)
			w.failed = [2]string{reason, msg}
			snap, err := w.m.containers(ctx, false)
			if err != nil {
				return err
			}
			// Failed is final: the next sync stops whatever still runs.
			return w.writeStatus(ctx, pod, attempts(snap[string(pod.UID)]), false)
		}
		if rejected, err := w.admitSecurityContext(ctx, pod); rejected || err != nil {
			return err
		}
		w.admitted = true
	}
	if w.started.IsZero() {
		w.started = time.Now()
		if pod.Status.StartTime != nil {
			w.started = pod.Status.StartTime.Time
		}
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil && time.Since(w.started) >= time.Duration(*d)*time.Second {
		// As the kubelet: active longer than spec.activeDeadlineSeconds since it started
		// here, the pod is stopped and fails for good.
		if w.failed[0] != reasonDeadlineExceeded {
			w.event(pod, corev1.EventTypeNormal, reasonDeadlineExceeded, messageDeadlineExceeded)
		}
		_, err := w.terminate(ctx, pod, reasonDeadlineExceeded, messageDeadlineExceeded, gracePeriod(pod))
		return err
	}
	sandboxErr := w.ensureSandbox(ctx, pod)
	var volumes map[string]string
	var volErr error
	if sandboxErr == nil {
		starting := !w.volumesReady
		if starting {
			// Containers of the pod found on this host (the agent restarted) mean it runs.
			snap, err := w.m.containers(ctx, false)
			if err != nil {
				return err
			}
			starting = len(snap[string(pod.UID)]) == 0
		}
		volumes, volErr = prepareVolumes(pod, w.m.podDir(pod.UID), volumeSources{
			Starting:  starting,
			ConfigMap: w.m.configMap, Secret: w.m.secret, PVC: w.m.pvc, PV: w.m.pv,
			ServiceAccountToken: func(pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) ([]byte, error) {
				return w.m.tokens.token(ctx, pod, p)
			},
		})
		if volErr != nil {
			w.event(pod, corev1.EventTypeWarning, "FailedMount", volErr.Error())
		} else {
			w.volumesReady = true
		}
	} else {
		w.event(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", sandboxErr.Error())
	}
	snap, err := w.m.containers(ctx, false)
	if err != nil {
		return err
	}
	byName := attempts(snap[string(pod.UID)])
	if sandboxErr == nil && volErr == nil {
		changed := w.runContainers(ctx, pod, byName, volumes)
		if changed {
			snap, err = w.m.containers(ctx, true)
			if err != nil {
				return err
			}
			byName = attempts(snap[string(pod.UID)])
		}
	}
	w.startLatency.observeStart(pod, byName, time.Now())
	w.pruneAttempts(ctx, byName)
	return w.writeStatus(ctx, pod, byName, sandboxErr == nil)
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func (w *podWorker) ensureSandbox(ctx context.Context, pod *corev1.Pod) error {
	dir := w.m.podDir(pod.UID)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	if pod.Spec.HostNetwork || w.m.cfg.Network == nil {
		w.podIPs = w.m.hostIPs()
		w.netnsPath = ""
	} else if w.netnsPath != "" {
		if _, err := os.Stat(w.netnsPath); err != nil {
			// Someone removed the sandbox (reset, a hand cleanup): set it up again rather
			// than failing every container start on the missing namespace.
			w.log.WithError(err).Warn("pod network namespace gone; setting it up again")
			w.netnsPath = ""
		}
	}
	if !pod.Spec.HostNetwork && w.m.cfg.Network != nil && w.netnsPath == "" {
		pn, err := w.m.cfg.Network.SetupPod(ctx, string(pod.UID), pod.Namespace, pod.Name)
		if err != nil {
			return fmt.Errorf("set up the pod network: %w", err)
		}
		if err := w.m.mapHostPorts(pod, pn.IPs); err != nil {
			return fmt.Errorf("map the pod's host ports: %w", err)
		}
		w.netnsPath = pn.NetNSPath
		w.podIPs = nil
		for _, ip := range pn.IPs {
			w.podIPs = append(w.podIPs, ip.String())
		}
	}
	hostname, err := containerHostname(pod, w.m.cfg.ClusterDomain)
	if err != nil {
		return err
	}
	hostText, _ := os.ReadFile(w.m.cfg.HostResolvConf)
	files := map[string]string{
		"etc-hosts":   etcHosts(pod, w.podIPs, w.m.cfg.ClusterDomain),
		"resolv.conf": resolvConf(pod, w.m.cfg.ClusterDNS, w.m.cfg.ClusterDomain, parseResolvConf(string(hostText))),
		"hostname":    hostname + "\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && string(old) == text {
			continue
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runContainers starts init containers in order, then the app containers, restarting per
// restartPolicy with back-off. It reports whether it changed anything.
func (w *podWorker) runContainers(ctx context.Context, pod *corev1.Pod, byName map[string][]rt.ContainerStatus, volumes map[string]string) bool {
	changed := false
	w.failed = [2]string{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		list := byName[c.Name]
		if len(list) > 0 {
			cur := list[0]
			if sidecar {
				ch, _ := w.keepRunning(ctx, pod, c, list, volumes, true, corev1.RestartPolicyAlways)
				changed = changed || ch
				if cur.State == rt.StateRunning {
					continue
				}
				return changed
			}
			switch {
			case cur.State == rt.StateExited && cur.ExitCode == 0:
				continue
			case cur.State == rt.StateExited && pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
				w.failed = [2]string{"InitContainerFailed", fmt.Sprintf("init container %q exited with %d", c.Name, cur.ExitCode)}
				return changed
			}
			ch, _ := w.keepRunning(ctx, pod, c, list, volumes, true, corev1.RestartPolicyOnFailure)
			return changed || ch
		}
		// The next init container waits for this one to finish (or, for a sidecar, to run).
		ch, _ := w.keepRunning(ctx, pod, c, nil, volumes, true, corev1.RestartPolicyOnFailure)
		return changed || ch
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		ch, _ := w.keepRunning(ctx, pod, c, byName[c.Name], volumes, false, pod.Spec.RestartPolicy)
		changed = changed || ch
	}
	return changed
}

// keepRunning makes one container follow its restart policy: create the first attempt,
// start a created one, restart an exited one after its back-off, kill one whose liveness
// probe failed, and run probes for the running one.
func (w *podWorker) keepRunning(ctx context.Context, pod *corev1.Pod, c *corev1.Container, list []rt.ContainerStatus, volumes map[string]string, init bool, policy corev1.RestartPolicy) (bool, error) {
	delete(w.waiting, c.Name)
	if len(list) == 0 {
		return true, w.start(ctx, pod, c, 0, volumes, init, policy)
	}
	cur := list[0]
	switch cur.State {
	case rt.StateRunning:
		w.ensureProbes(ctx, pod, c, cur.ID)
		if h := w.probes[cur.ID]; h != nil {
			if _, _, bad := h.res.get(); bad {
				h.res.mu.Lock()
				msg := h.res.lastFailure
				h.res.livenessBad = false
				h.res.mu.Unlock()
				w.event(pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s failed liveness probe, will be restarted", c.Name))
				w.log.WithFields(logrus.Fields{"container": c.Name, "reason": msg}).Info("liveness probe failed; restarting")
				w.stopContainer(ctx, pod, c, cur.ID, gracePeriod(pod))
				return true, nil
			}
		}
		return false, nil
	case rt.StateCreated:
		if err := w.m.cfg.Runtime.StartContainer(ctx, cur.ID); err != nil {
			// A start error made it exited: the next status shows it.
			return w.startFailed(pod, c, err, policy), err
		}
		return true, nil
	case rt.StateExited:
		w.stopProbes(cur.ID)
		if !restarts(policy, cur.ExitCode) {
			return false, nil
		}
		b := w.backoffs[c.Name]
		// A container that never started (a start error) ran for no time at all.
		if b == nil || (!cur.StartedAt.IsZero() && cur.FinishedAt.Sub(cur.StartedAt) > backoffReset) {
			b = &backoff{}
			w.backoffs[c.Name] = b
		}
		if b.next.IsZero() {
			// First time this exit is seen: schedule the restart.
			if b.delay == 0 {
				b.delay = backoffInitial
			} else {
				b.delay = min(b.delay*2, backoffMax)
			}
			if attemptOf(cur) == 0 && b.delay == backoffInitial {
				// The very first restart happens at once, as upstream.
				b.next = time.Now()
			} else {
				b.next = cur.FinishedAt.Add(b.delay)
			}
		}
		if time.Now().Before(b.next) {
			w.waiting[c.Name] = [2]string{"CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", b.delay, c.Name, pod.Name, pod.Namespace, pod.UID)}
			go func(d time.Duration) {
				time.Sleep(d)
				w.kick()
			}(time.Until(b.next) + 50*time.Millisecond)
			return false, nil
		}
		b.next = time.Time{}
		return true, w.start(ctx, pod, c, attemptOf(cur)+1, volumes, init, policy)
	}
	return false, nil
}

// startFailed reports a start that failed and whether the runtime recorded it as a start
// error, which made the container exited (code 128, reason StartError): when the restart
// policy starts it again it waits as RunContainerError, as upstream, and otherwise its
// terminated state says why.
func (w *podWorker) startFailed(pod *corev1.Pod, c *corev1.Container, err error, policy corev1.RestartPolicy) (exited bool) {
	w.event(pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %v", err))
	var se *rt.StartError
	exited = errors.As(err, &se)
	if !exited || restarts(policy, rt.StartErrorExitCode) {
		w.waiting[c.Name] = [2]string{"RunContainerError", err.Error()}
	}
	return exited
}

// start ensures the image, creates attempt n and starts it, then runs postStart; policy is
// the container's restart policy.
func (w *podWorker) start(ctx context.Context, pod *corev1.Pod, c *corev1.Container, n int, volumes map[string]string, init bool, policy corev1.RestartPolicy) error {
	if err := w.ensureImage(ctx, pod, c); err != nil {
		return err
	}
	services, err := w.m.serviceEnvSources(pod)
	var env []string
	if err == nil {
		env, err = containerEnv(pod, c, envSources{ConfigMap: w.m.configMap, Secret: w.m.secret, Services: services})
	}
	if err != nil {
		w.waiting[c.Name] = [2]string{"CreateContainerConfigError", err.Error()}
		w.event(pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %v", err))
		return err
	}
	cfg, err := buildContainerConfig(pod, c, containerParams{Attempt: n, Init: init, Env: env, NetNSPath: w.netnsPath,
		Volumes: volumes, PodDir: w.m.podDir(pod.UID), Domain: w.m.cfg.ClusterDomain, Security: w.m.securityParams()})
	if err != nil {
		w.waiting[c.Name] = [2]string{"CreateContainerConfigError", err.Error()}
		w.event(pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %v", err))
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.LogPath), 0o755); err != nil {
		return err
	}
	if c.TerminationMessagePath != "" {
		if err := createTerminationLog(terminationLogPath(w.m.podDir(pod.UID), c.Name, n)); err != nil {
			return err
		}
	}
	if err := w.m.cfg.Runtime.CreateContainer(ctx, cfg); err != nil {
		reason, msg := createContainerError(pod, c, err)
		w.waiting[c.Name] = [2]string{reason, msg}
		w.event(pod, corev1.EventTypeWarning, "Failed", "Error: "+msg)
		return fmt.Errorf("create container %s: %w", c.Name, err)
	}
	w.event(pod, corev1.EventTypeNormal, "Created", "Created container: "+c.Name)
	if err := w.m.cfg.Runtime.StartContainer(ctx, cfg.ID); err != nil {
		w.startFailed(pod, c, err, policy)
		return fmt.Errorf("start container %s: %w", c.Name, err)
	}
	w.event(pod, corev1.EventTypeNormal, "Started", "Started container "+c.Name)
	w.m.invalidate()
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		t := handlerTarget{rt: w.m.cfg.Runtime, containerID: cfg.ID, podIP: first(w.podIPs), container: c}
		if err := runLifecycleHandler(ctx, t, c.Lifecycle.PostStart, gracePeriod(pod)); err != nil {
			w.event(pod, corev1.EventTypeWarning, "FailedPostStartHook", err.Error())
			w.stopContainer(ctx, pod, c, cfg.ID, gracePeriod(pod))
			return fmt.Errorf("postStart hook of %s: %w", c.Name, err)
		}
	}
	return nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// ensureImage makes the container's image available per imagePullPolicy. A failed pull is
// ErrImagePull, then ImagePullBackOff until the next try: an image present on the host is
// never run in its place under Always. Side-loaded images (imported from DIR/images/*.tar,
// or named flotilla.local/...) are never pulled from a registry: Always acts as IfNotPresent
// for them, and a flotilla.local/ image missing here comes from another host of the site.
// Other pulls ask the site's other hosts for content first (by digest; by tag too unless the
// policy is Always, when the registry says what the tag names now).
func (w *podWorker) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	key := "pull/" + c.Name
	policy := c.ImagePullPolicy
	if policy == "" {
		policy = corev1.PullIfNotPresent
		if !strings.Contains(lastSegment(c.Image), ":") || strings.HasSuffix(c.Image, ":latest") {
			policy = corev1.PullAlways
		}
	}
	present, err := w.m.cfg.Runtime.ImageStatus(ctx, c.Image)
	if err != nil && !errors.Is(err, rt.ErrNotFound) {
		return err
	}
	if policy == corev1.PullNever {
		if present == nil {
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
			w.waiting[c.Name] = [2]string{"ErrImageNeverPull", msg}
			w.event(pod, corev1.EventTypeWarning, "ErrImageNeverPull", msg)
			return errors.New(msg)
		}
		return nil
	}
	if present != nil && policy == corev1.PullIfNotPresent {
		return nil
	}
	if present != nil && present.SideLoaded {
		w.event(pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q is side-loaded on this host: not pulled (imagePullPolicy Always acts as IfNotPresent for side-loaded images)", c.Image))
		delete(w.backoffs, key)
		return nil
	}
	if b := w.backoffs[key]; b != nil && time.Now().Before(b.next) {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		if b.msg != "" {
			msg += ": ErrImagePull: " + b.msg
		}
		w.waiting[c.Name] = [2]string{"ImagePullBackOff", msg}
		return fmt.Errorf("image pull back-off")
	}
	var pullErr error
	if rt.IsSideLoadedName(c.Image) {
		// No registry has it: only another host of the site that side-loaded it.
		w.event(pod, corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q from the site's other hosts", c.Image))
		if _, err := w.m.cfg.Runtime.PullImage(ctx, c.Image, rt.PullOptions{PeersOnly: true}); err != nil {
			pullErr = fmt.Errorf("%s/ images are side-loaded only (DIR/images/*.tar, flotilla image import), never pulled from a registry; neither this host nor another host of the site has one named so: %w", rt.SideLoadedRegistry, err)
		}
	} else {
		creds, problems, err := pullCredentials(pod, c.Image, w.m.secret)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			w.event(pod, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret", pullSecretsProblem(problems))
		}
		w.event(pod, corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", c.Image))
		_, pullErr = w.m.cfg.Runtime.PullImage(ctx, c.Image, rt.PullOptions{Credentials: creds, PeerTags: policy != corev1.PullAlways,
			Progress: func(done, total int64) {
				w.event(pod, corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q: %s of %s (%d%%)",
					c.Image, humanBytes(done), humanBytes(total), done*100/max(total, 1)))
			}})
	}
	if pullErr != nil {
		if ctx.Err() != nil {
			return pullErr
		}
		b := w.backoffs[key]
		if b == nil {
			b = &backoff{delay: backoffInitial / 2}
			w.backoffs[key] = b
		}
		b.delay = min(b.delay*2, backoffMax)
		b.next = time.Now().Add(b.delay)
		b.msg = pullErr.Error()
		msg := fmt.Sprintf("Failed to pull image %q: %v", c.Image, pullErr)
		w.waiting[c.Name] = [2]string{"ErrImagePull", msg}
		w.event(pod, corev1.EventTypeWarning, "Failed", msg)
		go func(d time.Duration) {
			time.Sleep(d)
			w.kick()
		}(b.delay)
		return errors.New(msg)
	}
	delete(w.backoffs, key)
	w.event(pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q", c.Image))
	return nil
}

// humanBytes prints a size as the kubelet's pull events do (1024-based, one decimal).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func lastSegment(image string) string {
	if i := strings.LastIndex(image, "/"); i >= 0 {
		return image[i+1:]
	}
	return image
}

func (w *podWorker) ensureProbes(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string) {
	if _, ok := w.probes[id]; ok {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	h := &probeHandle{cancel: cancel, res: &probeResults{}}
	w.probes[id] = h
	t := handlerTarget{rt: w.m.cfg.Runtime, containerID: id, podIP: first(w.podIPs), container: c.DeepCopy()}
	podRef := pod.DeepCopy()
	go runProbes(pctx, t, h.res, func(kind probeKind, ok bool, msg string) {
		if kind != "" && !ok {
			w.event(podRef, corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe failed: %s", kind, msg))
		}
		w.kick()
	})
}

// stopProbes stops the probes of one container ("" = all).
func (w *podWorker) stopProbes(id string) {
	for k, h := range w.probes {
		if id == "" || k == id {
			h.cancel()
			delete(w.probes, k)
		}
	}
}

// stopContainer runs preStop, then stops the container within the grace period.
func (w *podWorker) stopContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string, grace time.Duration) {
	deadline := time.Now().Add(grace)
	if c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		hctx, cancel := context.WithDeadline(ctx, deadline)
		t := handlerTarget{rt: w.m.cfg.Runtime, containerID: id, podIP: first(w.podIPs), container: c}
		if err := runLifecycleHandler(hctx, t, c.Lifecycle.PreStop, grace); err != nil {
			w.event(pod, corev1.EventTypeWarning, "FailedPreStopHook", err.Error())
		}
		cancel()
	}
	remaining := time.Until(deadline)
	if remaining < 0 {
		remaining = 0
	}
	if err := w.m.cfg.Runtime.StopContainer(ctx, id, remaining); err != nil {
		w.log.WithError(err).WithField("container", id).Warn("stop container")
	}
	w.stopProbes(id)
	w.m.invalidate()
}

// cleanup stops every container of the pod (preStop first, within the grace period), then
// removes the containers, the sandbox and the pod's directory. pod is nil when the object is
// already gone.
func (w *podWorker) cleanup(ctx context.Context, pod *corev1.Pod) error {
	snap, err := w.m.containers(ctx, true)
	if err != nil {
		return err
	}
	cs := snap[string(w.uid)]
	grace := time.Duration(0)
	if pod != nil {
		grace = gracePeriod(pod)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		if c.State != rt.StateRunning {
			continue
		}
		var spec *corev1.Container
		if pod != nil {
			for i := range pod.Spec.Containers {
				if pod.Spec.Containers[i].Name == c.Labels[labelContainer] {
					spec = &pod.Spec.Containers[i]
				}
			}
			w.event(pod, corev1.EventTypeNormal, "Killing", "Stopping container "+c.Labels[labelContainer])
		}
		wg.Add(1)
		go func(id string, spec *corev1.Container) {
			defer wg.Done()
			w.stopContainer(ctx, pod, spec, id, grace)
		}(c.ID, spec)
	}
	wg.Wait()
	w.stopProbes("")
	for _, c := range cs {
		if err := w.m.cfg.Runtime.RemoveContainer(ctx, c.ID); err != nil {
			return fmt.Errorf("remove container %s: %w", c.ID, err)
		}
	}
	if err := w.m.unmapHostPorts(w.uid); err != nil {
		return fmt.Errorf("unmap the pod's host ports: %w", err)
	}
	if w.m.cfg.Network != nil {
		if err := w.m.cfg.Network.TeardownPod(ctx, string(w.uid)); err != nil {
			return fmt.Errorf("tear down the pod network: %w", err)
		}
	}
	w.m.invalidate()
	return cleanupPodDir(w.m.podDir(w.uid))
}

// pruneAttempts removes attempts older than the previous one of each container.
func (w *podWorker) pruneAttempts(ctx context.Context, byName map[string][]rt.ContainerStatus) {
	for _, list := range byName {
		for _, old := range list[min(len(list), 2):] {
			if old.State == rt.StateRunning {
				continue
			}
			_ = w.m.cfg.Runtime.RemoveContainer(ctx, old.ID)
			delete(w.termMessages, old.ID)
			if p := old.Labels[labelPodUID]; p != "" {
				_ = rt.RemoveLogs(logPath(w.m.podDir(types.UID(p)), old.Labels[labelContainer], attemptOf(old)))
				_ = os.Remove(terminationLogPath(w.m.podDir(types.UID(p)), old.Labels[labelContainer], attemptOf(old)))
			}
		}
	}
}

// terminationMessage is terminationMessage for the attempt s of c once it exited (nil or
// running: ""), read once per attempt: an exited container writes nothing more.
func (w *podWorker) terminationMessage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, s *rt.ContainerStatus) string {
	if s == nil || s.State != rt.StateExited || s.StartError != "" {
		return ""
	}
	if msg, ok := w.termMessages[s.ID]; ok {
		return msg
	}
	msg := terminationMessage(ctx, w.m.podDir(pod.UID), c, s)
	if w.termMessages == nil {
		w.termMessages = map[string]string{}
	}
	w.termMessages[s.ID] = msg
	return msg
}

// createTerminationLog makes the empty file a container's terminationMessagePath is bound
// to, writable by whatever user the container runs as, as the kubelet does.
func createTerminationLog(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o666)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, 0o666)
}

func (w *podWorker) writeStatus(ctx context.Context, pod *corev1.Pod, byName map[string][]rt.ContainerStatus, sandboxReady bool) error {
	obs := podObs{sandboxReady: sandboxReady, podIPs: w.podIPs, hostIPs: w.m.hostIPs(),
		containers: map[string]*containerObs{}, startTime: w.started,
		failedReason: w.failed[0], failedMessage: w.failed[1]}
	all := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		co := &containerObs{}
		if list := byName[c.Name]; len(list) > 0 {
			co.current = &list[0]
			co.attempt = attemptOf(list[0])
			if len(list) > 1 {
				co.previous = &list[1]
			}
			if h := w.probes[list[0].ID]; h != nil {
				co.ready, co.started, _ = h.res.get()
			}
			co.currentMessage = w.terminationMessage(ctx, pod, &c, co.current)
			co.previousMessage = w.terminationMessage(ctx, pod, &c, co.previous)
		}
		if wr, ok := w.waiting[c.Name]; ok {
			co.waitingReason, co.waitingMessage = wr[0], wr[1]
		}
		obs.containers[c.Name] = co
	}
	st := computeStatus(pod, obs, time.Now())
	if equality.Semantic.DeepEqual(st, pod.Status) {
		return nil
	}
	if w.lastStatus != nil && pod.ResourceVersion == w.lastBase && equality.Semantic.DeepEqual(st, *w.lastStatus) {
		// Already written; the informer has not caught up yet.
		return nil
	}
	upd := pod.DeepCopy()
	upd.Status = st
	_, err := w.m.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("update pod status: %w", err)
	}
	w.lastStatus, w.lastBase = &st, pod.ResourceVersion
	return nil
}

func (w *podWorker) event(pod *corev1.Pod, typ, reason, msg string) {
	if pod == nil {
		return
	}
	w.m.recorder.Event(pod, typ, reason, msg)
}
