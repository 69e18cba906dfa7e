package services

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/nodes/agent"
	"github.com/flotilla-dev/flotilla/nodes/refcache"
	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/proxy/dns"
	"github.com/flotilla-dev/flotilla/proxy/ingress"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// recordingBackend stands in for nftables/IPVS: it keeps the last state it was given.
type recordingBackend struct {
	mu   sync.Mutex
	last DesiredState
}

func (b *recordingBackend) Apply(ds DesiredState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = ds
	return nil
}
func (b *recordingBackend) Resync(ds DesiredState) error { return b.Apply(ds) }
func (b *recordingBackend) Cleanup() error               { return nil }

func (b *recordingBackend) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.ContainsFunc(b.last.Services, func(sp ServicePort) bool { return sp.Key == key })
}

// idleRuntime is a container runtime with no containers; the pod manager only lists them
// while no pod of this node needs to run.
type idleRuntime struct{ agent.Runtime }

func (idleRuntime) ListContainers(context.Context) ([]rt.ContainerStatus, error) { return nil, nil }

// TestHostComponentsShareInformers runs what a host runs against one fake API, given one
// shared factory and one factory of this node's pods: the service proxy, cluster DNS, the
// Ingress proxy and the pod manager. Every resource (and selection) is watched exactly once,
// so none of them made a factory of its own; DNS answers from whole objects; and when they
// return, the shared factory still works, so none shut it down.
func TestHostComponentsShareInformers(t *testing.T) {
	const node = "n1"
	n1 := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.10"}}}}
	other := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	// Finished, so the pod manager has nothing to run for it.
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"},
		Spec:   v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "example/web:1"}}},
		Status: v1.PodStatus{Phase: v1.PodSucceeded}}
	// An Ingress of ours with a TLS Secret, which the Ingress proxy reads by name.
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "site",
		Annotations: map[string]string{"kubernetes.io/ingress.class": ingress.DefaultClassName}},
		Spec: networkingv1.IngressSpec{TLS: []networkingv1.IngressTLS{{Hosts: []string{"site.example"}, SecretName: "site-tls"}}}}
	client := fake.NewClientset(n1, other, pod, mkSvc("web", "10.96.0.50", 80),
		mkSlice("web-1", "web", 8080, readyEP("10.244.0.5", node)), ing)

	var mu sync.Mutex
	watches := map[string]int{} // resource, with ?fieldSelector or ?labelSelector when filtered
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		key := a.GetResource().Resource
		if wa, ok := a.(clienttesting.WatchAction); ok {
			if f := wa.GetWatchRestrictions().Fields; f != nil && !f.Empty() {
				key += "?" + f.String()
			}
			if l := wa.GetWatchRestrictions().Labels; l != nil && !l.Empty() {
				key += "?" + l.String()
			}
		}
		mu.Lock()
		watches[key]++
		mu.Unlock()
		return false, nil, nil
	})
	nodePods := "pods?spec.nodeName=" + node
	// ConfigMaps, Secrets, PVCs and PVs are read one by one (nodes/refcache), never listed:
	// the Ingress's TLS Secret is watched by name.
	want := map[string]int{
		"services": 1, "endpointslices": 1, "nodes": 1, // several users each
		"ingresses": 1, "ingressclasses": 1, // the Ingress proxy
		"secrets?metadata.name=site-tls": 1, // the Ingress proxy, through the host's object caches
		"pods":                           1, // DNS: every pod of the cluster
		nodePods:                         1, // the pod manager and the test: this node's pods
		// The pod manager: its own local volumes, to remove their directories once deleted.
		"persistentvolumes?" + localpv.NodeSelector(node): 1,
	}
	counted := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(watches)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shared := informers.NewSharedInformerFactory(client, 0)
	podInformers := agent.NodePodInformerFactory(client, node)
	// Another user of this node's pods, there first: the pod manager must join its watch.
	mine := podInformers.Core().V1().Pods().Informer()
	podInformers.Start(ctx.Done())

	log := logrus.NewEntry(logrus.StandardLogger())
	hostCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	goRun := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	backend := &recordingBackend{}
	goRun("service proxy", func() error {
		return run(hostCtx, client, Config{NodeName: node, ResyncPeriod: time.Minute, Informers: shared}, backend, log)
	})
	dnsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
	_, dnsPort, _ := net.SplitHostPort(dnsAddr)
	port, _ := strconv.Atoi(dnsPort)
	goRun("cluster DNS", func() error {
		return dns.Run(hostCtx, client, dns.Config{ListenIP: net.ParseIP("127.0.0.1"), Port: port,
			Upstreams: []string{"127.0.0.1:9"}, Log: log, Informers: shared})
	})
	objects := refcache.NewObjects(hostCtx, client, refcache.Config{Log: log})
	goRun("ingress proxy", func() error {
		return ingress.Run(hostCtx, client, ingress.Config{NodeName: node, HTTPAddr: "127.0.0.1:0", Log: log, Informers: shared,
			Secrets: objects.Secrets})
	})
	pm := agent.NewPodManager(client, agent.PodConfig{NodeName: node, DataDir: t.TempDir(), Runtime: idleRuntime{},
		HostResolvConf: os.DevNull, Informers: shared, PodInformers: podInformers, Objects: objects})
	goRun("pod manager", func() error { return pm.Run(hostCtx) })

	resolves := func(name, ip string) bool {
		cl := &mdns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
		q := new(mdns.Msg)
		q.SetQuestion(name, mdns.TypeA)
		r, _, err := cl.Exchange(q, dnsAddr)
		if err != nil || r == nil {
			return false
		}
		for _, rr := range r.Answer {
			if a, ok := rr.(*mdns.A); ok && a.A.String() == ip {
				return true
			}
		}
		return false
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return ok(), nil
		}); err != nil {
			t.Fatalf("%s: never happened (watches %v)", what, counted())
		}
	}
	eventually("service proxy synced", func() bool { return backend.has("default/web/80/TCP") })
	eventually("DNS answers", func() bool { return resolves("web.default.svc.cluster.local.", "10.96.0.50") })
	eventually("every informer watching", func() bool {
		got := counted()
		for k := range want {
			if got[k] == 0 {
				return false
			}
		}
		return true
	})
	// A change seen by the proxy and DNS proves their watches are up, not only their lists.
	if _, err := client.CoreV1().Services("default").Create(ctx, mkSvc("ping", "10.96.0.51", 80), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("service proxy follows a new Service", func() bool { return backend.has("default/ping/80/TCP") })
	eventually("DNS follows a new Service", func() bool { return resolves("ping.default.svc.cluster.local.", "10.96.0.51") })
	time.Sleep(200 * time.Millisecond) // a late second watch of a component's own would show now
	if got := counted(); !maps.Equal(got, want) {
		t.Errorf("watches per resource: got %v, want %v", got, want)
	}

	if nodes, _ := shared.Core().V1().Nodes().Lister().List(labels.Everything()); len(nodes) != 2 {
		t.Errorf("the shared Node cache holds %d Nodes, want both", len(nodes))
	}
	if got := backend.last; got.NodeName != node || !slices.Equal(got.NodeIPs, []netip.Addr{netip.MustParseAddr("192.0.2.10")}) {
		t.Errorf("the proxy's node %q addresses %v, want %s 192.0.2.10 from the shared Node cache", got.NodeName, got.NodeIPs, node)
	}

	stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the components did not return after the host's context ended")
	}
	// The pod informer the test started lives on, and the shared factory still starts new
	// informers: no component shut down a factory it was given.
	if mine.IsStopped() {
		t.Error("the shared pod informer stopped with the components")
	}
	later := shared.Core().V1().Namespaces().Informer()
	shared.Start(ctx.Done())
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), later.HasSynced) {
		t.Error("the shared factory starts no new informer: a component shut it down")
	}
}
