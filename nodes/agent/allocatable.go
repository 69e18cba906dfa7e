package agent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ParseReserved reads a --system-reserved or --kube-reserved value:
// "cpu=100m,memory=256Mi,ephemeral-storage=1Gi" (any of the three, each once).
func ParseReserved(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want RESOURCE=QUANTITY, e.g. memory=256Mi", part)
		}
		rn := corev1.ResourceName(strings.TrimSpace(name))
		switch rn {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		default:
			return nil, fmt.Errorf("%q: %s cannot be reserved; use cpu, memory or ephemeral-storage", part, rn)
		}
		if _, dup := out[rn]; dup {
			return nil, fmt.Errorf("%q: %s given twice", part, rn)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(value))
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("%q: %q is not a quantity of 0 or more, e.g. 256Mi or 100m", part, value)
		}
		out[rn] = q
	}
	return out, nil
}

// Reserved is what the Node's allocatable leaves out of capacity: system and kube
// reservations, plus the memory.available and nodefs.available hard eviction thresholds
// (against memory and disk capacities in bytes), as the kubelet computes node allocatable.
func Reserved(system, kube corev1.ResourceList, hard []Threshold, memCapacity, diskCapacity int64) corev1.ResourceList {
	out := corev1.ResourceList{}
	add := func(name corev1.ResourceName, q resource.Quantity) {
		cur, ok := out[name]
		if !ok {
			out[name] = q.DeepCopy()
			return
		}
		cur.Add(q)
		out[name] = cur
	}
	for _, l := range []corev1.ResourceList{system, kube} {
		for name, q := range l {
			add(name, q)
		}
	}
	if v := HardMemory(hard, memCapacity); v > 0 {
		add(corev1.ResourceMemory, *resource.NewQuantity(v, resource.BinarySI))
	}
	if v := HardNodeFS(hard, diskCapacity); v > 0 {
		add(corev1.ResourceEphemeralStorage, *resource.NewQuantity(v, resource.BinarySI))
	}
	return out
}

// MemoryCapacity is the host's memory in bytes (MemTotal).
func MemoryCapacity() int64 { return memTotal() }

// DiskCapacity is the size in bytes of the filesystem holding dir.
func DiskCapacity(dir string) int64 { return diskBytes(dir) }
