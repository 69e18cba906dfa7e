package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

type agentOptions struct {
	dataDir        string
	name           string
	listenAddress  string
	advertise      string
	apiPort        int
	etcdClientPort int
	etcdPeerPort   int
	serviceCIDR    string
	nodePortRange  string
	shutdownAfter  time.Duration
}

func newAgentCommand() *cobra.Command {
	o := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run this host's part of the site: etcd, the Kubernetes API and (soon) the controllers, node agent and proxy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runAgent(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "directory for this host's state: etcd data, certificates, tokens, kubeconfig (required)")
	f.StringVar(&o.name, "name", "", "host name; identifies the host in the site (default: the system host name)")
	f.StringVar(&o.listenAddress, "listen-address", "0.0.0.0", "IP address the API and etcd listen on")
	f.StringVar(&o.advertise, "advertise-address", "", "IP address other hosts and clients use (default: the listen address, or the first non-loopback address)")
	f.IntVar(&o.apiPort, "api-port", 6443, "port of the Kubernetes API (TLS)")
	f.IntVar(&o.etcdClientPort, "etcd-client-port", 2379, "port of etcd's client API (TLS)")
	f.IntVar(&o.etcdPeerPort, "etcd-peer-port", 2380, "port of etcd's peer API (TLS)")
	f.StringVar(&o.serviceCIDR, "service-cidr", "10.96.0.0/12", "range ClusterIPs are allocated from")
	f.StringVar(&o.nodePortRange, "node-port-range", "30000-32767", "range NodePorts are allocated from")
	f.DurationVar(&o.shutdownAfter, "shutdown-timeout", 5*time.Second, "how long a clean shutdown may take before the agent exits anyway")
	return cmd
}

func (o *agentOptions) validate() (validation.Options, error) {
	vopts := validation.DefaultOptions()
	if o.dataDir == "" {
		return vopts, errors.New("--data-dir is required: the directory where this host keeps its state")
	}
	if o.name == "" {
		h, err := os.Hostname()
		if err != nil {
			return vopts, fmt.Errorf("--name not given and the host name is unknown: %w", err)
		}
		o.name = strings.ToLower(h)
	}
	if net.ParseIP(o.listenAddress) == nil {
		return vopts, fmt.Errorf("--listen-address %q is not an IP address", o.listenAddress)
	}
	if o.advertise == "" {
		o.advertise = defaultAdvertise(o.listenAddress)
	}
	if net.ParseIP(o.advertise) == nil {
		return vopts, fmt.Errorf("--advertise-address %q is not an IP address", o.advertise)
	}
	for flag, p := range map[string]int{"--api-port": o.apiPort, "--etcd-client-port": o.etcdClientPort, "--etcd-peer-port": o.etcdPeerPort} {
		if p < 1 || p > 65535 {
			return vopts, fmt.Errorf("%s %d is not a port (1-65535)", flag, p)
		}
	}
	cidr, err := netip.ParsePrefix(o.serviceCIDR)
	if err != nil || !cidr.Addr().Is4() {
		return vopts, fmt.Errorf("--service-cidr %q is not an IPv4 CIDR such as 10.96.0.0/12", o.serviceCIDR)
	}
	vopts.ServiceCIDR = cidr.Masked()
	lo, hi, ok := strings.Cut(o.nodePortRange, "-")
	min, err1 := strconv.Atoi(lo)
	max, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || min < 1 || max > 65535 || min > max {
		return vopts, fmt.Errorf("--node-port-range %q is not a range such as 30000-32767", o.nodePortRange)
	}
	vopts.NodePortMin, vopts.NodePortMax = int32(min), int32(max)
	return vopts, nil
}

// defaultAdvertise picks the address others reach this host at.
func defaultAdvertise(listen string) string {
	ip := net.ParseIP(listen)
	if !ip.IsUnspecified() {
		return listen
	}
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

func runAgent(ctx context.Context, o *agentOptions) error {
	vopts, err := o.validate()
	if err != nil {
		return err
	}
	log := logrus.WithFields(logrus.Fields{"host": o.name})
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	ca, err := pki.LoadOrCreateCA(filepath.Join(dataDir, "pki"), "flotilla-ca")
	if err != nil {
		return err
	}
	advertise := net.ParseIP(o.advertise)
	listen := net.ParseIP(o.listenAddress)
	hostIPs := uniqueIPs(net.ParseIP("127.0.0.1"), advertise, listen)
	apiCert, apiKey, err := ca.Ensure(pki.Request{
		Name: "apiserver", CommonName: "kube-apiserver", Usage: pki.Server,
		DNSNames: []string{o.name, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:      append(hostIPs, firstIP(vopts.ServiceCIDR)),
	})
	if err != nil {
		return err
	}
	etcdServerCert, etcdServerKey, err := ca.Ensure(pki.Request{Name: "etcd-server", CommonName: o.name, Usage: pki.Server | pki.Client, DNSNames: []string{o.name, "localhost"}, IPs: hostIPs})
	if err != nil {
		return err
	}
	etcdPeerCert, etcdPeerKey, err := ca.Ensure(pki.Request{Name: "etcd-peer", CommonName: o.name, Usage: pki.Server | pki.Client, DNSNames: []string{o.name, "localhost"}, IPs: hostIPs})
	if err != nil {
		return err
	}
	etcdClientCert, etcdClientKey, err := ca.Ensure(pki.Request{Name: "etcd-client", CommonName: "kube-apiserver-etcd-client", Usage: pki.Client})
	if err != nil {
		return err
	}
	token, err := loadOrCreateToken(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		return err
	}

	etcdHost := o.listenAddress
	if listen.IsUnspecified() {
		etcdHost = o.advertise
	}
	start := time.Now()
	member, err := etcd.Start(ctx, etcd.Config{
		Name:       o.name,
		DataDir:    filepath.Join(dataDir, "etcd"),
		ClientURL:  url.URL{Scheme: "https", Host: net.JoinHostPort(etcdHost, strconv.Itoa(o.etcdClientPort))},
		PeerURL:    url.URL{Scheme: "https", Host: net.JoinHostPort(etcdHost, strconv.Itoa(o.etcdPeerPort))},
		CAFile:     ca.CertFile(),
		ServerCert: etcdServerCert, ServerKey: etcdServerKey,
		PeerCert: etcdPeerCert, PeerKey: etcdPeerKey,
	})
	if err != nil {
		return err
	}
	defer member.Close()
	log.WithField("clientURLs", member.ClientURLs()).Info("etcd member ready")

	server, err := apiserver.New(apiserver.Config{
		BindAddress:      listen,
		Port:             o.apiPort,
		AdvertiseAddress: advertise,
		ServingCertFile:  apiCert, ServingKeyFile: apiKey,
		Etcd: apiserver.EtcdClientConfig{
			Servers: member.ClientURLs(), CAFile: ca.CertFile(), CertFile: etcdClientCert, KeyFile: etcdClientKey,
		},
		Tokens: map[string]*user.DefaultInfo{
			token: {Name: "admin", UID: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		},
		Validation: vopts,
	})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	apiDone := make(chan error, 1)
	go func() { apiDone <- server.Run(runCtx) }()

	kubeconfigPath := filepath.Join(dataDir, "kubeconfig")
	serverHost := o.advertise
	if err := waitReady(ctx, server, apiDone); err != nil {
		return err
	}
	if err := writeKubeconfig(kubeconfigPath, fmt.Sprintf("https://%s", net.JoinHostPort(serverHost, strconv.Itoa(o.apiPort))), ca.CertPEM, token, o.name); err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"kubeconfig": kubeconfigPath, "startup": time.Since(start).Round(time.Millisecond)}).Info("API ready")

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-apiDone:
		return fmt.Errorf("API server stopped: %w", err)
	case err := <-member.Err():
		return fmt.Errorf("etcd stopped: %w", err)
	}
	cancel()
	select {
	case <-apiDone:
	case <-time.After(o.shutdownAfter):
		log.Warnf("API server did not stop within %s; exiting anyway", o.shutdownAfter)
	}
	closed := make(chan struct{})
	go func() { member.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		log.Warn("etcd did not stop within 2s; exiting anyway")
	}
	return nil
}

// waitReady polls /readyz through the loopback client.
func waitReady(ctx context.Context, server *apiserver.Server, apiDone <-chan error) error {
	client, err := kubernetes.NewForConfig(server.Loopback)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-apiDone:
			return false, fmt.Errorf("API server stopped before it was ready: %w", err)
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

func writeKubeconfig(path, server string, caPEM []byte, token, name string) error {
	cfg := clientcmdapi.NewConfig()
	cluster := "flotilla"
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = cluster
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadOrCreateToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	t := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return t, nil
}

func uniqueIPs(ips ...net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if ip == nil || ip.IsUnspecified() {
			continue
		}
		dup := false
		for _, o := range out {
			if o.Equal(ip) {
				dup = true
			}
		}
		if !dup {
			out = append(out, ip)
		}
	}
	return out
}

// firstIP is the first usable address of the service range: the `kubernetes` Service.
func firstIP(p netip.Prefix) net.IP {
	a := p.Masked().Addr().Next()
	return net.IP(a.AsSlice())
}
