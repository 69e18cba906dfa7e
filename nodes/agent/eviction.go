package agent

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/nodes/agent/stats"
)

// pressureCandidate is a pod the eviction manager may choose, with what it uses.
type pressureCandidate struct {
	pod *corev1.Pod
	// usage and request of the starved resource (memory: working set and requests, bytes).
	usage, request int64
	// top is the container using the most of it, for the message.
	top         string
	topUsage    int64
	topRequest  int64
	haveMetrics bool
}

func (c pressureCandidate) exceeds() bool { return c.usage > c.request }

func priorityOf(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// rankForPressure orders candidates as the kubelet's eviction manager does for a signal:
// memory — pods whose usage exceeds their requests first, then lower priority, then usage
// above requests, larger first; disk and PIDs (no per-pod measure here) — lower priority
// first, then by QoS class (BestEffort, Burstable, Guaranteed), then the newest pod.
func rankForPressure(sig Signal, cands []pressureCandidate) {
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if sig == SignalMemoryAvailable {
			if a.exceeds() != b.exceeds() {
				return a.exceeds()
			}
			if pa, pb := priorityOf(a.pod), priorityOf(b.pod); pa != pb {
				return pa < pb
			}
			return a.usage-a.request > b.usage-b.request
		}
		if pa, pb := priorityOf(a.pod), priorityOf(b.pod); pa != pb {
			return pa < pb
		}
		if qa, qb := qosRank(a.pod), qosRank(b.pod); qa != qb {
			return qa < qb
		}
		return a.pod.CreationTimestamp.After(b.pod.CreationTimestamp.Time)
	})
}

// qosRank orders QoS classes by how soon they are evicted.
func qosRank(pod *corev1.Pod) int {
	switch qosClass(pod) {
	case corev1.PodQOSBestEffort:
		return 0
	case corev1.PodQOSBurstable:
		return 1
	}
	return 2
}

// qosClass is the pod's status.qosClass, or computed from its containers when unset.
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests, limits, guaranteed := false, false, true
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			requests = requests || hasReq && !req.IsZero()
			limits = limits || hasLim && !lim.IsZero()
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !requests && !limits:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// memoryRequest is the pod's memory request: the sum over its containers (the largest init
// container's if more, as the scheduler counts).
func memoryRequest(pod *corev1.Pod, container string) int64 {
	var sum, initMax int64
	for _, c := range pod.Spec.Containers {
		if container != "" && c.Name != container {
			continue
		}
		q := c.Resources.Requests[corev1.ResourceMemory]
		sum += q.Value()
	}
	if container != "" {
		return sum
	}
	for _, c := range pod.Spec.InitContainers {
		q := c.Resources.Requests[corev1.ResourceMemory]
		initMax = max(initMax, q.Value())
	}
	return max(sum, initMax)
}

// pressureCandidates lists the pods this host may evict, with their memory use from the
// summary (nil: no measurements).
func (m *PodManager) pressureCandidates(summary *stats.Summary) ([]pressureCandidate, error) {
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	byUID := map[string]stats.PodStats{}
	if summary != nil {
		for _, p := range summary.Pods {
			byUID[p.PodRef.UID] = p
		}
	}
	var out []pressureCandidate
	for _, pod := range pods {
		if !mayEvict(pod) || pod.Spec.NodeName != m.cfg.NodeName {
			continue
		}
		m.mu.Lock()
		w := m.workers[pod.UID]
		m.mu.Unlock()
		if w == nil || w.eviction.Load() != nil {
			continue
		}
		c := pressureCandidate{pod: pod, request: memoryRequest(pod, "")}
		if ps, ok := byUID[string(pod.UID)]; ok {
			c.haveMetrics = true
			for _, cs := range ps.Containers {
				if cs.Memory == nil {
					continue
				}
				ws := int64(cs.Memory.WorkingSetBytes)
				c.usage += ws
				if ws > c.topUsage {
					c.top, c.topUsage, c.topRequest = cs.Name, ws, memoryRequest(pod, cs.Name)
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// EvictForPressure evicts the pod the kubelet would for met: the first of rankForPressure.
// As for an emptyDir over its limit, a Warning event Evicted is recorded and the pod's worker
// stops it, here without a grace period (a hard threshold), and marks it Failed with reason
// Evicted. It reports whether a pod was chosen.
//
// Under disk pressure the host first reclaims what no pod needs, as the kubelet does: it has
// unused images collected (at most every 5 minutes), and evicts only if the threshold is
// still met 30 s after.
func (m *PodManager) EvictForPressure(ctx context.Context, met MetThreshold) (bool, error) {
	if met.Signal != SignalMemoryAvailable && met.Signal != SignalPIDAvailable && m.images != nil {
		m.mu.Lock()
		since := time.Since(m.diskReclaimed)
		if since > 5*time.Minute {
			m.diskReclaimed = time.Now()
		}
		m.mu.Unlock()
		switch {
		case since > 5*time.Minute:
			m.log.WithField("threshold", met.Threshold.String()).Info("disk pressure: collecting unused images before evicting pods")
			m.TriggerImageGC()
			return false, nil
		case since < 30*time.Second:
			return false, nil // the collection is running
		}
	}
	var summary *stats.Summary
	if met.Signal == SignalMemoryAvailable {
		s, err := m.stats.summary(ctx)
		if err != nil {
			return false, fmt.Errorf("measure the pods' memory: %w", err)
		}
		summary = s
	}
	cands, err := m.pressureCandidates(summary)
	if err != nil {
		return false, err
	}
	if len(cands) == 0 {
		return false, nil
	}
	rankForPressure(met.Signal, cands)
	victim := cands[0]
	msg := met.Message()
	if met.Signal == SignalMemoryAvailable && victim.top != "" {
		msg += fmt.Sprintf(" Container %s was using %s, request is %s, has larger consumption of memory.", victim.top,
			resource.NewQuantity(victim.topUsage, resource.BinarySI), resource.NewQuantity(victim.topRequest, resource.BinarySI))
	}
	m.mu.Lock()
	w := m.workers[victim.pod.UID]
	m.mu.Unlock()
	if w == nil {
		return false, nil
	}
	zero := time.Duration(0)
	w.evictGrace.Store(&zero)
	if !w.eviction.CompareAndSwap(nil, &msg) {
		return false, nil
	}
	m.recorder.Event(victim.pod, corev1.EventTypeWarning, reasonEvicted, msg)
	m.log.WithFields(logrus.Fields{"pod": victim.pod.Namespace + "/" + victim.pod.Name, "message": msg}).Warn("evicting pod: the host is under pressure")
	w.kick()
	return true, nil
}
