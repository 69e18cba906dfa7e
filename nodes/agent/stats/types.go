// Package stats reads the resource usage of a host and of its containers from the kernel
// (cgroup v2, with a cgroup v1 fallback, /proc/stat and /proc/meminfo), turns cumulative CPU
// counters into rates, and defines the summary the node agent serves at SummaryPath. The API
// server turns summaries into metrics.k8s.io NodeMetrics and PodMetrics.
//
// The figures are the kubelet's: CPU is cumulative CPU time (cgroup cpu.stat usage_usec; for the
// host the busy time of /proc/stat), memory is the working set, usage minus inactive file
// pages (memory.current - memory.stat inactive_file; for the host MemTotal - MemFree -
// Inactive(file) of /proc/meminfo).
package stats

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SummaryPath is the node agent endpoint that serves a Summary (GET, JSON).
const SummaryPath = "/stats/summary"

// Summary is the resource usage of a host and of the running containers of its pods.
type Summary struct {
	Node NodeStats  `json:"node"`
	Pods []PodStats `json:"pods"`
}

// NodeStats is the usage of the whole host.
type NodeStats struct {
	NodeName string       `json:"nodeName"`
	CPU      *CPUStats    `json:"cpu,omitempty"`
	Memory   *MemoryStats `json:"memory,omitempty"`
}

// PodReference names a pod.
type PodReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

// PodStats is the usage of a pod: the sums over its running containers, and each container.
type PodStats struct {
	PodRef     PodReference     `json:"podRef"`
	CPU        *CPUStats        `json:"cpu,omitempty"`
	Memory     *MemoryStats     `json:"memory,omitempty"`
	Containers []ContainerStats `json:"containers"`
}

// ContainerStats is the usage of one running container.
type ContainerStats struct {
	Name      string       `json:"name"`
	StartTime time.Time    `json:"startTime,omitzero"`
	CPU       *CPUStats    `json:"cpu,omitempty"`
	Memory    *MemoryStats `json:"memory,omitempty"`
}

// CPUStats is CPU time read at Time. UsageNanoCores, when set, is the average rate over the
// Window that ends at Time (nanoseconds of CPU time per second: 1e9 is one core).
type CPUStats struct {
	Time                 time.Time       `json:"time"`
	UsageCoreNanoSeconds uint64          `json:"usageCoreNanoSeconds"`
	UsageNanoCores       *uint64         `json:"usageNanoCores,omitempty"`
	Window               metav1.Duration `json:"window,omitzero"`
}

// MemoryStats is memory read at Time, in bytes.
type MemoryStats struct {
	Time            time.Time `json:"time"`
	UsageBytes      uint64    `json:"usageBytes"`
	WorkingSetBytes uint64    `json:"workingSetBytes"`
}
