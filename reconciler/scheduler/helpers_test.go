package scheduler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// node builds a Ready node with allocatable cpu (millicores), memory (MiB) and pods.
func node(name string, milliCPU, memMiB, pods int64, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:              *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
			corev1.ResourceMemory:           *resource.NewQuantity(memMiB<<20, resource.BinarySI),
			corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
			corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func withLabels(kv ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withTaint(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

var podSeq int

// pod builds a pod in namespace default with one container requesting cpu and memory.
func pod(name string, milliCPU, memMiB int64, opts ...func(*corev1.Pod)) *corev1.Pod {
	podSeq++
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%s-%d", name, podSeq)), Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName: DefaultSchedulerName,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	req := corev1.ResourceList{}
	if milliCPU > 0 {
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)
	}
	if memMiB > 0 {
		req[corev1.ResourceMemory] = *resource.NewQuantity(memMiB<<20, resource.BinarySI)
	}
	p.Spec.Containers[0].Resources.Requests = req
	for _, o := range opts {
		o(p)
	}
	return p
}

func podLabels(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func tolerate(key, value string, effect corev1.TaintEffect) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		op := corev1.TolerationOpEqual
		if value == "" {
			op = corev1.TolerationOpExists
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

func onNode(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeName = name }
}

// info builds a NodeInfo with pods bound to it.
func info(n *corev1.Node, pods ...*corev1.Pod) *NodeInfo {
	ni := NewNodeInfo(n)
	for _, p := range pods {
		p.Spec.NodeName = n.Name
		ni.AddPod(NewPodInfo(p))
	}
	return ni
}

// reasonsOf runs every filter of p against the named node of snap.
func reasonsOf(p *corev1.Pod, snap *Snapshot, name string) *Status {
	c := newCycle(NewPodInfo(p), snap)
	if c.preFilter != nil {
		return c.preFilter
	}
	return runFilters(c, snap.Get(name))
}
