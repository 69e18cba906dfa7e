package agent

import (
	"context"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/nodes/network"
)

// HostPorts maps the pods' host ports (containers[].ports[].hostPort) on this host
// (nodes/network.HostPorts does).
type HostPorts interface {
	SetPod(uid string, p network.PodHostPorts) error
	RemovePod(uid string) error
	Generation() uint64
	Sync(pods map[string]network.PodHostPorts, since uint64) error
}

// mapHostPorts maps the pod's host ports to its sandbox, whose addresses are ips.
func (m *PodManager) mapHostPorts(pod *corev1.Pod, ips []net.IP) error {
	ports := network.HostPortsOf(pod)
	if m.cfg.HostPorts == nil || len(ports) == 0 {
		return nil
	}
	return m.cfg.HostPorts.SetPod(string(pod.UID), network.PodHostPorts{
		Pod: pod.Namespace + "/" + pod.Name, IP: firstIPv4(ips), Ports: ports})
}

// unmapHostPorts removes the host ports of the pod uid, if it had any.
func (m *PodManager) unmapHostPorts(uid types.UID) error {
	if m.cfg.HostPorts == nil {
		return nil
	}
	return m.cfg.HostPorts.RemovePod(string(uid))
}

// unmapFinishedHostPorts removes the host ports of a pod that finished: the scheduler no
// longer counts them, so a new pod may claim them.
func (m *PodManager) unmapFinishedHostPorts(pod *corev1.Pod) error {
	if network.HostPortsOf(pod) == nil {
		return nil
	}
	return m.unmapHostPorts(pod.UID)
}

// syncHostPorts hands the host ports of the pods this host runs to HostPorts, which drops
// those of pods that are gone (deleted while the agent was down) and, after an agent
// restart, programs the kernel for the first time. Finished pods keep no host ports: the
// scheduler gives them to new pods.
func (m *PodManager) syncHostPorts(ctx context.Context) {
	hp := m.cfg.HostPorts
	if hp == nil {
		return
	}
	since := hp.Generation()
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		m.log.WithError(err).Warn("list pods for their host ports")
		return
	}
	sandboxes, _ := m.cfg.Network.(podNetworks)
	want := map[string]network.PodHostPorts{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ports := network.HostPortsOf(p)
		if len(ports) == 0 {
			continue
		}
		e := network.PodHostPorts{Pod: p.Namespace + "/" + p.Name, Ports: ports}
		if sandboxes != nil {
			if sb, ok := sandboxes.PodNetwork(ctx, string(p.UID)); ok {
				e.IP = firstIPv4(sb.IPs)
			}
		}
		want[string(p.UID)] = e
	}
	if err := hp.Sync(want, since); err != nil {
		m.log.WithError(err).Warn("sync the pods' host ports")
	}
}

func firstIPv4(ips []net.IP) netip.Addr {
	for _, ip := range ips {
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap().Is4() {
			return a.Unmap()
		}
	}
	if len(ips) > 0 {
		a, _ := netip.AddrFromSlice(ips[0])
		return a
	}
	return netip.Addr{}
}
