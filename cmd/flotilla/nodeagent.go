package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/nodes/agent"
	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/proxy/dns"
	"github.com/flotilla-dev/flotilla/proxy/ingress"
	"github.com/flotilla-dev/flotilla/proxy/services"
)

// startRuntime starts (or connects to) the host's containerd.
func startRuntime(ctx context.Context, o *agentOptions, dataDir string) (*runtime.Runtime, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	rt, err := runtime.Start(ctx, runtime.Config{
		Dir:          filepath.Join(dataDir, "containerd"),
		Socket:       o.containerdSocket,
		CgroupParent: "/flotilla/" + o.name,
		LoggerBinary: self,
		Log:          logrus.WithField("component", "runtime"),
	})
	if err != nil {
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	return rt, nil
}

// waitPodCIDR waits until the leader has given this host's Node a pod CIDR.
func waitPodCIDR(ctx context.Context, client kubernetes.Interface, name string) (string, error) {
	var cidr string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cidr = n.Spec.PodCIDR
		return cidr != "", nil
	})
	return cidr, err
}

// runPods runs the node agent's pod workers on rt until ctx ends.
func runPods(ctx context.Context, o *agentOptions, client kubernetes.Interface, rt *runtime.Runtime, node agent.NodeConfig, dataDir, certFile, keyFile, token string) error {
	log := logrus.WithField("node", o.name)
	go rt.WatchImageDir(ctx, filepath.Join(dataDir, "images"))
	log.Info("waiting for this host's pod CIDR")
	cidr, err := waitPodCIDR(ctx, client, o.name)
	if err != nil {
		return err
	}
	netw, err := network.New(network.Config{
		PodCIDR: cidr, ClusterCIDR: o.clusterCIDR, StateDir: filepath.Join(dataDir, "network"),
		Log: logrus.WithField("component", "network"),
	})
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	go func() {
		if err := network.RunRoutes(ctx, client, o.name, netw); err != nil && ctx.Err() == nil {
			log.WithError(err).Error("routes to other hosts' pods")
		}
	}()
	pm := agent.NewPodManager(client, agent.PodConfig{
		NodeName: o.name, DataDir: dataDir, HostIP: o.advertise,
		ClusterDNS: o.clusterDNS, ClusterDomain: "cluster.local",
		Runtime: rt, Network: netw,
		DeclaredFeatures: node.DeclaredFeatures, AgentVersion: node.KubeletVersion,
	})
	go func() {
		addr := net.JoinHostPort(o.listenAddress, strconv.Itoa(o.agentPort))
		if err := pm.Serve(ctx, agent.ServerConfig{Address: addr, CertFile: certFile, KeyFile: keyFile, Token: token}); err != nil {
			log.WithError(err).Error("node agent endpoint")
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

// runProxy runs Service IPs, cluster DNS and the Ingress proxy until ctx ends.
func runProxy(ctx context.Context, o *agentOptions, client kubernetes.Interface) {
	log := logrus.WithField("node", o.name)
	if err := ensureServiceRoute(o.serviceCIDR); err != nil {
		log.WithError(err).Warn("the host itself may not reach ClusterIPs")
	}
	go func() {
		err := services.Run(ctx, client, services.Config{NodeName: o.name, Mode: o.proxyMode, ClusterCIDR: o.clusterCIDR,
			Log: logrus.WithField("component", "services")})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("service proxy")
		}
	}()
	dnsIP := net.ParseIP(o.clusterDNS)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := dns.EnsureService(ctx, client, dnsIP); err != nil {
				log.WithError(err).Debug("ensure Service kube-system/kube-dns")
				return false, nil
			}
			return true, nil
		})
		err := dns.Run(ctx, client, dns.Config{ListenIP: dnsIP, Log: logrus.WithField("component", "dns")})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("cluster DNS")
		}
	}()
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := ingress.EnsureClass(ctx, client); err != nil {
				log.WithError(err).Debug("ensure IngressClass flotilla")
				return false, nil
			}
			return true, nil
		})
		httpsAddr := ""
		if o.ingressHTTPSPort > 0 {
			httpsAddr = net.JoinHostPort(o.listenAddress, strconv.Itoa(o.ingressHTTPSPort))
		}
		err := ingress.Run(ctx, client, ingress.Config{NodeName: o.name,
			HTTPAddr:  net.JoinHostPort(o.listenAddress, strconv.Itoa(o.ingressHTTPPort)),
			HTTPSAddr: httpsAddr, Log: logrus.WithField("component", "ingress")})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Error("ingress proxy")
		}
	}()
}
