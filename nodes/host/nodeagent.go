package host

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/nodes/agent"
	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/proxy/dns"
	"github.com/flotilla-dev/flotilla/proxy/ingress"
	"github.com/flotilla-dev/flotilla/proxy/netpol"
	"github.com/flotilla-dev/flotilla/proxy/services"
)

// startNodeAgent starts containerd (or connects to it), the pod workers and the Node's
// heartbeat. A host with Pods false only heartbeats, with a taint that keeps pods away.
func (h *Host) startNodeAgent() error {
	c := h.cfg
	node := agent.NodeConfig{
		Name: c.Name, Address: c.AdvertiseAddress, Labels: c.NodeLabels, DataDir: h.dataDir,
		KubeletVersion: nodeVersion(), NoPods: !c.Pods,
		// Gossip tells the node lifecycle controller that this host is alive; the Lease
		// says that it still reaches the API, and is renewed with the status report.
		LeaseRenewInterval: agent.GossipLeaseRenewInterval, LeaseDuration: agent.GossipLeaseDuration,
	}
	if c.Pods {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		rt, err := runtime.Start(h.runCtx, runtime.Config{
			Dir: filepath.Join(h.dataDir, "containerd"), Socket: c.ContainerdSocket,
			CgroupParent: "/flotilla/" + c.Name, LoggerBinary: self, Registries: c.Registries,
			ContainerLogMaxSize: c.ContainerLogMaxSize, ContainerLogMaxFiles: c.ContainerLogMaxFiles,
			Log: logrus.WithField("component", "runtime"),
		})
		if err != nil {
			return fmt.Errorf("container runtime: %w", err)
		}
		h.rt = rt
		h.limitPods(&node)
		node.AgentPort = int32(c.AgentPort)
		// Computed once: a different feature set needs an agent restart.
		node.DeclaredFeatures = agent.DeclaredFeatures(node.KubeletVersion)
		if v, err := rt.Client().Version(h.runCtx); err == nil {
			node.RuntimeVersion = "containerd://" + v.Version
		}
		node.Images = func(ctx context.Context) []corev1.ContainerImage { return agent.NodeImages(ctx, rt) }
		go func() {
			if err := h.runPods(node); err != nil && h.runCtx.Err() == nil {
				h.log.WithError(err).Error("pods stopped: this host runs no pods until the agent restarts")
			}
		}()
	}
	go agent.RunNodeHeartbeat(h.runCtx, h.client, node)
	return nil
}

// waitPodCIDR waits until the leader has given this host's Node a pod CIDR. It reads the
// host's Node cache, which a resumed host has from its checkpoint.
func (h *Host) waitPodCIDR() (string, error) {
	nodes := h.informers.Core().V1().Nodes()
	nodes.Informer()
	h.informers.Start(h.runCtx.Done())
	var cidr string
	err := wait.PollUntilContextCancel(h.runCtx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := nodes.Lister().Get(h.cfg.Name)
		if err != nil {
			return false, nil
		}
		cidr = n.Spec.PodCIDR
		return cidr != "", nil
	})
	return cidr, err
}

// runPods runs the pod network and the pod workers until the host stops.
func (h *Host) runPods(node agent.NodeConfig) error {
	c, ctx := h.cfg, h.runCtx
	go h.rt.WatchImageDir(ctx, filepath.Join(h.dataDir, "images"))
	h.log.Info("waiting for this host's pod CIDR")
	cidr, err := h.waitPodCIDR()
	if err != nil {
		return err
	}
	if err := h.startPeers(); err != nil {
		h.log.WithError(err).Warn("images are pulled from registries only, not from the site's other hosts")
	}
	netw, err := network.New(network.Config{
		PodCIDR: cidr, ClusterCIDR: c.ClusterCIDR, StateDir: filepath.Join(h.dataDir, "network"),
		Log: logrus.WithField("component", "network"),
	})
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	go func() {
		if err := network.RunRoutes(ctx, h.client, c.Name, netw, network.RoutesConfig{Informers: h.informers}); err != nil && ctx.Err() == nil {
			h.log.WithError(err).Error("routes to other hosts' pods stopped")
		}
	}()
	hostPorts, err := network.NewHostPorts(network.HostPortsConfig{Log: logrus.WithField("component", "hostports")})
	if err != nil {
		return fmt.Errorf("pod host ports: %w", err)
	}
	pm := agent.NewPodManager(h.client, agent.PodConfig{
		NodeName: c.Name, DataDir: h.dataDir, HostIP: c.AdvertiseAddress,
		ClusterDNS: c.ClusterDNS, ClusterDomain: "cluster.local",
		Runtime: h.rt, Network: netw, HostPorts: hostPorts,
		DeclaredFeatures: node.DeclaredFeatures, AgentVersion: node.KubeletVersion, SeccompDefault: c.SeccompDefault,
		Informers: h.informers, PodInformers: h.podInformers, Objects: h.objects,
		ImageGC: &agent.ImageGCConfig{HighThresholdPercent: c.ImageGCHighThresholdPercent,
			LowThresholdPercent: c.ImageGCLowThresholdPercent, MinimumAge: c.ImageMinimumGCAge},
	})
	if node.Pressure != nil {
		node.Pressure.SetEvictor(pm)
	}
	go func() {
		addr := net.JoinHostPort(c.ListenAddress, strconv.Itoa(c.AgentPort))
		if err := pm.Serve(ctx, agent.ServerConfig{Address: addr, CertFile: h.certs.apiCert, KeyFile: h.certs.apiKey,
			ClientCAFile: h.ca.CertFile(), ClientNames: []string{nodeClientName},
			Content: h.rt.PeerHandler(), Peer: h.isPeer}); err != nil {
			h.log.WithError(err).Error("node agent endpoint stopped: pod logs, exec and port-forward to this host fail")
		}
	}()
	return pm.Run(ctx)
}

// ensureServiceRoute routes the service CIDR to lo in this host's namespace. Connections
// from the host itself to a ClusterIP need a route before the nftables output hook rewrites
// their destination; edge hosts (and the test namespaces) may have no default route.
func ensureServiceRoute(serviceCIDR string) error {
	_, dst, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return err
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK, Protocol: netlink.RouteProtocol(4) /* static: not one of nodes/network's pod routes */}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("route %s to lo: %w", serviceCIDR, err)
	}
	return nil
}

// startProxy runs Service IPs, NetworkPolicies, cluster DNS and the Ingress proxy.
func (h *Host) startProxy() error {
	c, ctx, log := h.cfg, h.runCtx, h.log
	if !c.Proxy {
		return nil
	}
	if err := ensureServiceRoute(c.ServiceCIDR); err != nil {
		log.WithError(err).Warn("the host itself may not reach ClusterIPs")
	}
	go func() {
		err := services.Run(ctx, h.client, services.Config{NodeName: c.Name, Mode: c.ProxyMode, ClusterCIDR: c.ClusterCIDR,
			Log: logrus.WithField("component", "services"), Informers: h.informers})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("service proxy stopped: ClusterIPs on this host no longer follow their Services")
		}
	}()
	go func() {
		err := netpol.Run(ctx, netpol.Config{NodeName: c.Name, Informers: h.informers, PodInformers: h.dnsPodInformers,
			Log: logrus.WithField("component", "netpol")})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("network policy controller stopped: this host's pods no longer follow their NetworkPolicies")
		}
	}()
	dnsIP := net.ParseIP(c.ClusterDNS)
	go func() {
		err := dns.Run(ctx, h.client, dns.Config{ListenIP: dnsIP, Log: logrus.WithField("component", "dns"), Informers: h.informers, PodInformers: h.dnsPodInformers})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("cluster DNS stopped")
		}
	}()
	h.ingressStarted.Store(true)
	go func() {
		defer close(h.ingressDone)
		httpsAddr := ""
		if c.IngressHTTPSPort > 0 {
			httpsAddr = net.JoinHostPort(c.ListenAddress, strconv.Itoa(c.IngressHTTPSPort))
		}
		err := ingress.Run(ctx, h.client, ingress.Config{NodeName: c.Name,
			HTTPAddr:  net.JoinHostPort(c.ListenAddress, strconv.Itoa(c.IngressHTTPPort)),
			HTTPSAddr: httpsAddr, Log: logrus.WithField("component", "ingress"), Informers: h.informers, Secrets: h.objects.Secrets})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("ingress proxy stopped")
		}
	}()
	return nil
}

// retry calls f every 2 s until it succeeds or the host stops. The first failures are
// expected while the site starts; one that lasts a minute is worth a warning.
func (h *Host) retry(what string, f func(ctx context.Context) error) {
	start := time.Now()
	warned := false
	_ = wait.PollUntilContextCancel(h.runCtx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		err := f(ctx)
		if err == nil {
			return true, nil
		}
		if !warned && time.Since(start) > time.Minute {
			h.log.WithError(err).Warn(what + " keeps failing")
			warned = true
		} else {
			h.log.WithError(err).Debug(what)
		}
		return false, nil
	})
}

// limitPods sets what the host keeps from its pods: the Node's allocatable leaves out
// --system-reserved, --kube-reserved and the hard eviction thresholds; the pods' cgroup is
// capped at capacity less both reservations (so pods cannot starve etcd and the agent); and
// the pressure monitor measures the eviction signals and evicts.
func (h *Host) limitPods(node *agent.NodeConfig) {
	c := h.cfg
	memCap, diskCap := agent.MemoryCapacity(), agent.DiskCapacity(h.dataDir)
	node.Reserved = agent.Reserved(c.systemReserved, c.kubeReserved, c.evictionHard, memCap, diskCap)
	kept := agent.Reserved(c.systemReserved, c.kubeReserved, nil, memCap, diskCap)
	mem := kept[corev1.ResourceMemory]
	cpu := kept[corev1.ResourceCPU]
	podsMem := memCap - mem.Value()
	podsCPU := int64(goruntime.NumCPU())*1000 - cpu.MilliValue()
	if podsMem <= 0 || podsCPU <= 0 {
		h.log.WithFields(logrus.Fields{"systemReserved": c.SystemReserved, "kubeReserved": c.KubeReserved}).Warn("the reservations take all of this host's memory or CPU: the pods' cgroup is not capped")
	} else if err := runtime.LimitCgroupParent("/flotilla/"+c.Name, podsMem, podsCPU); err != nil {
		h.log.WithError(err).Warn("cap the pods' cgroup: pods may starve etcd and the agent")
	}
	imageFS := filepath.Join(h.dataDir, "containerd")
	if c.ContainerdSocket != "" {
		imageFS = h.dataDir
	}
	node.Pressure = agent.NewPressureMonitor(agent.PressureConfig{Hard: c.evictionHard, Transition: c.EvictionPressureTransition,
		NodeFS: h.dataDir, ImageFS: imageFS})
	go node.Pressure.Run(h.runCtx)
}
