package agent

import (
	"context"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/nodes/network"
)

// recordingHostPorts records what the agent asks of the host ports.
type recordingHostPorts struct {
	gen   uint64
	set   map[string]network.PodHostPorts
	rm    []string
	pods  map[string]network.PodHostPorts
	since uint64
}

func (r *recordingHostPorts) SetPod(uid string, p network.PodHostPorts) error {
	r.gen++
	r.set[uid] = p
	return nil
}

func (r *recordingHostPorts) RemovePod(uid string) error {
	r.gen++
	r.rm = append(r.rm, uid)
	return nil
}

func (r *recordingHostPorts) Generation() uint64 { return r.gen }

func (r *recordingHostPorts) Sync(pods map[string]network.PodHostPorts, since uint64) error {
	r.pods, r.since = pods, since
	return nil
}

// hpSandboxes is a pod network that knows some sandboxes.
type hpSandboxes map[string][]net.IP

func (s hpSandboxes) SetupPod(context.Context, string, string, string) (network.PodNetwork, error) {
	return network.PodNetwork{}, nil
}
func (s hpSandboxes) TeardownPod(context.Context, string) error { return nil }
func (s hpSandboxes) Pods() ([]string, error)                   { return nil, nil }
func (s hpSandboxes) PodNetwork(_ context.Context, uid string) (network.PodNetwork, bool) {
	ips, ok := s[uid]
	return network.PodNetwork{IPs: ips}, ok
}

func hostPortPod(name string, phase corev1.PodPhase, hostPort int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "host-1", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080, HostPort: hostPort}}}}},
		Status: corev1.PodStatus{Phase: phase}}
	return p
}

func TestSyncHostPorts(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	hostNet := hostPortPod("hostnet", corev1.PodRunning, 8080)
	hostNet.Spec.HostNetwork = true
	for _, p := range []*corev1.Pod{
		hostPortPod("web", corev1.PodRunning, 18080),
		hostPortPod("starting", corev1.PodPending, 18081),
		hostPortPod("done", corev1.PodSucceeded, 18082),
		hostPortPod("plain", corev1.PodRunning, 0),
		hostNet,
	} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	hp := &recordingHostPorts{gen: 7, set: map[string]network.PodHostPorts{}}
	m := &PodManager{cfg: PodConfig{HostPorts: hp, Network: hpSandboxes{
		"uid-web": {net.ParseIP("fd00::2"), net.ParseIP("10.244.1.2")},
	}}, pods: corelisters.NewPodLister(idx), log: logrus.NewEntry(logrus.New())}

	m.syncHostPorts(context.Background())
	want := map[string]network.PodHostPorts{
		"uid-web":      {Pod: "ns/web", IP: netip.MustParseAddr("10.244.1.2"), Ports: []network.HostPort{{Protocol: corev1.ProtocolTCP, Port: 18080, ContainerPort: 8080}}},
		"uid-starting": {Pod: "ns/starting", Ports: []network.HostPort{{Protocol: corev1.ProtocolTCP, Port: 18081, ContainerPort: 8080}}},
	}
	if !reflect.DeepEqual(hp.pods, want) || hp.since != 7 {
		t.Fatalf("Sync(%+v, %d), want Sync(%+v, 7)", hp.pods, hp.since, want)
	}

	// A sandbox made: its ports go to its IPv4 address. A finished pod releases its ports;
	// a pod without any is left alone.
	web, _ := m.pods.Pods("ns").Get("web")
	if err := m.mapHostPorts(web, []net.IP{net.ParseIP("fd00::2"), net.ParseIP("10.244.1.2")}); err != nil {
		t.Fatal(err)
	}
	if got := hp.set["uid-web"]; got.IP != netip.MustParseAddr("10.244.1.2") || len(got.Ports) != 1 {
		t.Errorf("SetPod got %+v", got)
	}
	plain, _ := m.pods.Pods("ns").Get("plain")
	if err := m.mapHostPorts(plain, []net.IP{net.ParseIP("10.244.1.3")}); err != nil {
		t.Fatal(err)
	}
	if _, ok := hp.set["uid-plain"]; ok {
		t.Error("a pod without host ports was set")
	}
	done, _ := m.pods.Pods("ns").Get("done")
	if err := m.unmapFinishedHostPorts(done); err != nil {
		t.Fatal(err)
	}
	if err := m.unmapFinishedHostPorts(plain); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(hp.rm, []string{"uid-done"}) {
		t.Errorf("RemovePod calls %v, want [uid-done]", hp.rm)
	}
}
