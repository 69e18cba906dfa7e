// Package agent is the kubelet part of a host: it registers the host's Node, keeps its status
// and its Lease in kube-node-lease fresh, and runs the pods bound to it.
package agent

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// NodeConfig describes the host to register.
type NodeConfig struct {
	Name    string
	Address string
	// Labels are extra labels (--node-label); the well-known ones are always set.
	Labels map[string]string
	// DataDir is measured for ephemeral-storage capacity.
	DataDir string
	// KubeletVersion is reported in status.nodeInfo.
	KubeletVersion string
	// HeartbeatInterval is how often the status is checked, which reads the Node from the
	// API (10 s).
	HeartbeatInterval time.Duration
	// StatusReportInterval is how often the status is posted when nothing in it changed but
	// the heartbeat times (5 minutes, the kubelet's nodeStatusReportFrequency). A changed
	// status is posted at the next heartbeat.
	StatusReportInterval time.Duration
	// LeaseRenewInterval is how often the Lease is renewed while the API answers
	// (HeartbeatInterval when zero, as the kubelet). After a failed heartbeat the Lease is
	// renewed at the first one that succeeds. A host whose liveness gossip carries to the
	// node lifecycle controller (flotilla's hosts) renews it far less often: each renewal is
	// a raft entry fsynced on every etcd member.
	LeaseRenewInterval time.Duration
	// LeaseDuration is the Lease's leaseDurationSeconds (40 s): how long the node lifecycle
	// controller waits for a renewal.
	LeaseDuration time.Duration
	// AgentPort is the node agent's HTTPS port (status.daemonEndpoints), 0 when it runs no pods.
	AgentPort int32
	// RuntimeVersion is reported in status.nodeInfo.containerRuntimeVersion.
	RuntimeVersion string
	// Images lists the host's images for status.images (nil: not reported).
	Images func(ctx context.Context) []corev1.ContainerImage
	// NoPods marks a host that runs no pods (agent --pods=false): its Node carries the
	// NoSchedule taint TaintNoPods so nothing is scheduled there.
	NoPods bool
	// DeclaredFeatures is status.declaredFeatures (see DeclaredFeatures). The agent is
	// authoritative: an edit by anyone else is overwritten at the next heartbeat.
	DeclaredFeatures []string
	// Pressure gives the MemoryPressure, DiskPressure and PIDPressure conditions (nil: all
	// False).
	Pressure *PressureMonitor
	// Reserved is left out of allocatable: --system-reserved plus --kube-reserved plus the
	// memory.available and nodefs.available hard eviction thresholds (see Allocatable).
	Reserved corev1.ResourceList
}

// Allocatable is capacity less reserved, per resource, never below zero, as the kubelet's
// node allocatable: capacity − system-reserved − kube-reserved − hard eviction thresholds.
func Allocatable(capacity, reserved corev1.ResourceList) corev1.ResourceList {
	out := capacity.DeepCopy()
	for name, r := range reserved {
		c, ok := out[name]
		if !ok {
			continue
		}
		c.Sub(r)
		if c.Sign() < 0 {
			c = *resource.NewQuantity(0, c.Format)
		}
		out[name] = c
	}
	return out
}

// TaintNoPods is the taint of Nodes whose host runs no pods.
const TaintNoPods = "node.flotilla.dev/no-pods"

// wantTaints returns taints with TaintNoPods added or removed per cfg, and whether it changed.
func wantTaints(taints []corev1.Taint, cfg NodeConfig) ([]corev1.Taint, bool) {
	var out []corev1.Taint
	had := false
	for _, t := range taints {
		if t.Key == TaintNoPods {
			had = true
			continue
		}
		out = append(out, t)
	}
	if cfg.NoPods {
		out = append(out, corev1.Taint{Key: TaintNoPods, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	}
	return out, had != cfg.NoPods
}

// The Lease timing of a host whose liveness gossip carries to the node lifecycle controller:
// renewed every 5 minutes (with the status report), held for 15 (three renewals). While
// gossip sees the host alive, the controller needs no renewal to call it alive; the Lease
// tells it that the host still reaches the API. The kubelet renews every 10 s for 40 s: on a
// 3-host site that alone was 0.3 raft entries/s (docs/endurance.md).
const (
	GossipLeaseRenewInterval = 5 * time.Minute
	GossipLeaseDuration      = 15 * time.Minute
)

// RunNodeHeartbeat registers the Node and renews its Lease and Ready status until ctx ends.
func RunNodeHeartbeat(ctx context.Context, client kubernetes.Interface, cfg NodeConfig) {
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.StatusReportInterval == 0 {
		cfg.StatusReportInterval = 5 * time.Minute
	}
	if cfg.LeaseRenewInterval == 0 {
		cfg.LeaseRenewInterval = cfg.HeartbeatInterval
	}
	log := logrus.WithField("node", cfg.Name)
	registered := false
	var posted time.Time  // when this agent last posted the status (zero: not yet)
	var renewed time.Time // when this agent last renewed the Lease (zero: not yet)
	failures := 0         // failed heartbeats in a row
	t := time.NewTicker(cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		// One attempt may not outlive the heartbeat interval: without quorum (a partition)
		// writes hang, and the next attempt must start as soon as the site heals. After a
		// failure, attempts are short, so that the Lease is renewed within seconds of a
		// partition healing: a controller that has just taken over sees the heartbeat before
		// gossip has reconnected.
		attempt := cfg.HeartbeatInterval
		if failures > 0 {
			attempt = min(attempt, 3*time.Second)
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		failed := false
		if !registered {
			if err := registerNode(actx, client, cfg); err != nil {
				log.WithError(err).Warn("register node")
			} else {
				registered = true
				log.Info("node registered")
			}
		}
		if registered {
			// The Lease first: it is the heartbeat the node lifecycle controller waits for.
			// Renewed when due, and at once after a failed heartbeat (a partition that
			// healed: the controller may have called this host unreachable).
			if renewed.IsZero() || failures > 0 || time.Since(renewed) >= cfg.LeaseRenewInterval-cfg.HeartbeatInterval/2 {
				if err := renewLease(actx, client, cfg); err != nil {
					heartbeatLog(log, failures, err, "node lease")
					failed = true
				} else {
					renewed = time.Now()
				}
			}
			force := posted.IsZero() || time.Since(posted) >= cfg.StatusReportInterval
			if wrote, err := updateStatus(actx, client, cfg, force); err != nil {
				heartbeatLog(log, failures, err, "node status")
				failed = true
				if apierrors.IsNotFound(err) {
					registered = false
				}
			} else if wrote {
				posted = time.Now()
			}
		}
		cancel()
		switch {
		case failed:
			failures++
		case failures >= heartbeatWarnAfter:
			log.WithField("failedAttempts", failures).Info("heartbeat restored")
			failures = 0
		default:
			failures = 0
		}
		// Until the Node exists, or after a failed write, retry every second rather than
		// every heartbeat: a host back from a partition reports Ready before its pods'
		// unreachable tolerations run out.
		retry := t.C
		if !registered || failed {
			retry = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-retry:
		}
	}
}

func nodeLabels(cfg NodeConfig) map[string]string {
	l := map[string]string{
		corev1.LabelHostname:   cfg.Name,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range cfg.Labels {
		l[k] = v
	}
	return l
}

func registerNode(ctx context.Context, client kubernetes.Interface, cfg NodeConfig) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Labels: nodeLabels(cfg)}}
	node.Spec.Taints, _ = wantTaints(nil, cfg)
	node.Status = desiredStatus(cfg)
	_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, err := client.CoreV1().Nodes().Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		for k, v := range nodeLabels(cfg) {
			if cur.Labels[k] != v {
				cur.Labels[k] = v
				changed = true
			}
		}
		if taints, diff := wantTaints(cur.Spec.Taints, cfg); diff {
			cur.Spec.Taints = taints
			changed = true
		}
		if changed {
			_, err = client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
		}
		return err
	}
	return err
}

func desiredStatus(cfg NodeConfig) corev1.NodeStatus {
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memTotal(), resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	if s := diskBytes(cfg.DataDir); s > 0 {
		capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(s, resource.BinarySI)
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	pressure := []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "flotilla agent has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "flotilla agent has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "flotilla agent has sufficient PID available"),
	}
	if cfg.Pressure != nil {
		pressure = cfg.Pressure.Conditions(now)
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: Allocatable(capacity, cfg.Reserved),
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: cfg.Address},
			{Type: corev1.NodeHostName, Address: cfg.Name},
		},
		Conditions:      append(pressure, cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "flotilla agent is posting ready status")),
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: cfg.AgentPort}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               readTrim("/etc/machine-id"),
			BootID:                  readTrim("/proc/sys/kernel/random/boot_id"),
			KernelVersion:           utsString(uts.Release[:]),
			OSImage:                 osImage(),
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			KubeletVersion:          cfg.KubeletVersion,
			ContainerRuntimeVersion: cfg.RuntimeVersion,
		},
	}
}

// updateStatus posts the Node's status if it differs from the stored one in more than the
// conditions' heartbeat times, or if force is set; it reports whether it wrote. Every write
// is a raft entry fsynced on every etcd member: an unchanged status every heartbeat was a
// fifth of an idle site's writes, ~3.4 kB each (docs/endurance.md).
func updateStatus(ctx context.Context, client kubernetes.Interface, cfg NodeConfig, force bool) (bool, error) {
	cur, err := client.CoreV1().Nodes().Get(ctx, cfg.Name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	want := desiredStatus(cfg)
	// Keep transition times of conditions whose status did not change.
	for i, c := range want.Conditions {
		for _, old := range cur.Status.Conditions {
			if old.Type == c.Type && old.Status == c.Status {
				want.Conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	// Keep what other writers own (images, volumes).
	want.Images = cur.Status.Images
	if cfg.Images != nil {
		want.Images = cfg.Images(ctx)
	}
	want.VolumesInUse = cur.Status.VolumesInUse
	want.VolumesAttached = cur.Status.VolumesAttached
	want.DeclaredFeatures = cfg.DeclaredFeatures
	if want.NodeInfo.ContainerRuntimeVersion == "" {
		want.NodeInfo.ContainerRuntimeVersion = cur.Status.NodeInfo.ContainerRuntimeVersion
	}
	if !force && sameStatus(cur.Status, want) {
		return false, nil
	}
	cur.Status = want
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err == nil, err
}

// sameStatus reports whether want says nothing that cur does not, heartbeat times aside.
func sameStatus(cur, want corev1.NodeStatus) bool {
	w := *want.DeepCopy()
	for i, c := range w.Conditions {
		for _, old := range cur.Conditions {
			if old.Type == c.Type {
				w.Conditions[i].LastHeartbeatTime = old.LastHeartbeatTime
			}
		}
	}
	return apiequality.Semantic.DeepEqual(cur, w)
}

func renewLease(ctx context.Context, client kubernetes.Interface, cfg NodeConfig) error {
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, nerr := client.CoreV1().Nodes().Get(ctx, cfg.Name, metav1.GetOptions{})
		if nerr != nil {
			return nerr
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(cfg.Name),
				LeaseDurationSeconds: ptr.To(int32(cfg.LeaseDuration / time.Second)), RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(cfg.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(cfg.LeaseDuration / time.Second))
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// memTotal is MemTotal of /proc/meminfo in bytes, 0 when unknown.
func memTotal() int64 {
	_, total, err := memInfo()
	if err != nil {
		return 0
	}
	return total
}

// diskBytes is the size of the filesystem holding dir, 0 when unknown.
func diskBytes(dir string) int64 {
	if dir == "" {
		return 0
	}
	u, err := StatfsUsage(dir)
	if err != nil {
		return 0
	}
	return u.Capacity
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func osImage() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

func utsString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// heartbeatWarnAfter is how many heartbeats in a row may fail (retried every second) before
// it is worth a warning: a single failure is a blip, a run of them makes the Node go
// Ready=Unknown and its pods get evicted.
const heartbeatWarnAfter = 3

func heartbeatLog(log *logrus.Entry, failures int, err error, what string) {
	if failures == heartbeatWarnAfter-1 {
		log.WithError(err).WithField("failedAttempts", failures+1).Warn(what + ": heartbeat failing; the Node goes Ready=Unknown if this lasts")
		return
	}
	log.WithError(err).Debug(what)
}
