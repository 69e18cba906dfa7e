package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/version"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/nodes/agent"
	"github.com/flotilla-dev/flotilla/nodes/membership"
	"github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
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
	gossipPort     int
	join           []string
	tokenFile      string
	etcdVoters     int
	replaceAfter   time.Duration
	nodeLabels     map[string]string
	controllers    string
	tolerationSecs int64
	nodeGrace      time.Duration
	gitURL         string
	gitRef         string
	gitPath        string

	pods             bool
	containerdSocket string
	agentPort        int
	clusterCIDR      string
	clusterDNS       string
	proxy            bool
	proxyMode        string
	ingressHTTPPort  int
	ingressHTTPSPort int
}

func newAgentCommand() *cobra.Command {
	o := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run this host's part of the site: etcd, the Kubernetes API, the controllers and scheduler (when leader), the pods and the proxy",
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
	f.IntVar(&o.gossipPort, "gossip-port", 7946, "port of gossip (memberlist, UDP and TCP)")
	f.StringArrayVar(&o.join, "join", nil, "HOST:PORT of a host of the site to join (gossip port; repeatable); without it this host starts a new site")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the site's join token (the first host writes <data-dir>/token; joining hosts need a copy)")
	f.IntVar(&o.etcdVoters, "etcd-voters", 3, "how many hosts hold an etcd vote (1, 3 or 5)")
	f.DurationVar(&o.replaceAfter, "voter-replace-after", 60*time.Second, "replace an etcd voter that gossip reports dead for this long, when an alive standby host can take its place")
	f.StringVar(&o.controllers, "controllers", "*", "controllers this host runs when it leads: * for all, a comma list of names, or empty for none")
	f.Int64Var(&o.tolerationSecs, "default-toleration-seconds", 300, "tolerationSeconds of the not-ready/unreachable NoExecute tolerations new pods get: how long pods stay on a failed host before eviction")
	f.DurationVar(&o.nodeGrace, "node-monitor-grace-period", 40*time.Second, "how long a host may miss heartbeats (Lease renewals) before its Node goes Ready=Unknown and gets the unreachable taints")
	f.StringVar(&o.gitURL, "git-url", "", "git repository the site deploys from (recorded as GitSource kube-system/root); file://, https://")
	f.StringVar(&o.gitRef, "git-ref", "main", "branch (or tags/NAME, or a 40-hex commit) of --git-url")
	f.StringVar(&o.gitPath, "git-path", "", "directory in the repository to render (kustomization.yaml or plain YAML)")
	f.StringToStringVar(&o.nodeLabels, "node-label", nil, "extra labels of this host's Node (key=value, repeatable)")
	f.BoolVar(&o.pods, "pods", true, "run the pods bound to this host (containerd, the pod network); false: an API/etcd-only host")
	f.StringVar(&o.containerdSocket, "containerd-socket", "", "use this containerd instead of starting one under <data-dir>/containerd")
	f.IntVar(&o.agentPort, "agent-port", 10250, "port of the node agent's HTTPS endpoint (pod logs through the API)")
	f.StringVar(&o.clusterCIDR, "cluster-cidr", "10.244.0.0/16", "range each host's pod CIDR (/24) is allocated from")
	f.StringVar(&o.clusterDNS, "cluster-dns", "10.96.0.10", "ClusterIP of the cluster DNS (Service kube-system/kube-dns), inside --service-cidr")
	f.BoolVar(&o.proxy, "proxy", true, "run the Service proxy, cluster DNS and the Ingress proxy on this host")
	f.StringVar(&o.proxyMode, "proxy-mode", "auto", "Service dataplane: auto (ipvs when the kernel has it, else nftables), ipvs or nftables")
	f.IntVar(&o.ingressHTTPPort, "ingress-http-port", 80, "port of the Ingress proxy (HTTP)")
	f.IntVar(&o.ingressHTTPSPort, "ingress-https-port", 443, "port of the Ingress proxy (HTTPS); 0 disables it")
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
	if o.etcdVoters != 1 && o.etcdVoters != 3 && o.etcdVoters != 5 {
		return vopts, fmt.Errorf("--etcd-voters %d: use 1, 3 or 5 (an odd count keeps a majority)", o.etcdVoters)
	}
	if len(o.join) > 0 && o.tokenFile == "" {
		return vopts, errors.New("--join needs --token-file: copy <data-dir>/token from the first host")
	}
	if o.gossipPort < 1 || o.gossipPort > 65535 {
		return vopts, fmt.Errorf("--gossip-port %d is not a port (1-65535)", o.gossipPort)
	}
	if pc, err := netip.ParsePrefix(o.clusterCIDR); err != nil || !pc.Addr().Is4() || pc.Bits() > 24 {
		return vopts, fmt.Errorf("--cluster-cidr %q is not an IPv4 CIDR of /24 or larger such as 10.244.0.0/16", o.clusterCIDR)
	} else if pc.Overlaps(vopts.ServiceCIDR) {
		return vopts, fmt.Errorf("--cluster-cidr %s overlaps --service-cidr %s: pick ranges that do not overlap", o.clusterCIDR, o.serviceCIDR)
	}
	if ip, err := netip.ParseAddr(o.clusterDNS); err != nil || !vopts.ServiceCIDR.Contains(ip) {
		return vopts, fmt.Errorf("--cluster-dns %q must be an address inside --service-cidr %s", o.clusterDNS, o.serviceCIDR)
	}
	switch o.proxyMode {
	case "auto", "ipvs", "nftables":
	default:
		return vopts, fmt.Errorf("--proxy-mode %q: use auto, ipvs or nftables", o.proxyMode)
	}
	for flag, p := range map[string]int{"--agent-port": o.agentPort, "--ingress-http-port": o.ingressHTTPPort} {
		if p < 1 || p > 65535 {
			return vopts, fmt.Errorf("%s %d is not a port (1-65535)", flag, p)
		}
	}
	if o.ingressHTTPSPort < 0 || o.ingressHTTPSPort > 65535 {
		return vopts, fmt.Errorf("--ingress-https-port %d is not a port (0 disables HTTPS)", o.ingressHTTPSPort)
	}
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
	pkiDir := filepath.Join(dataDir, "pki")
	statePath := filepath.Join(dataDir, "cluster.json")
	state, err := etcd.LoadClusterState(statePath)
	if err != nil {
		return err
	}
	advertise := net.ParseIP(o.advertise)
	listen := net.ParseIP(o.listenAddress)
	etcdHost := o.listenAddress
	if listen.IsUnspecified() {
		etcdHost = o.advertise
	}
	clientURL := url.URL{Scheme: "https", Host: net.JoinHostPort(etcdHost, strconv.Itoa(o.etcdClientPort))}
	peerURL := url.URL{Scheme: "https", Host: net.JoinHostPort(etcdHost, strconv.Itoa(o.etcdPeerPort))}
	apiURL := fmt.Sprintf("https://%s", net.JoinHostPort(o.advertise, strconv.Itoa(o.apiPort)))

	// The join token: the first host makes one (pinning its CA); joining hosts read theirs.
	var token etcd.Token
	var ca *pki.CA
	bootstrap := len(o.join) == 0
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("read --token-file: %w", err)
		}
		if token, err = etcd.ParseToken(string(b)); err != nil {
			return fmt.Errorf("--token-file %s: %w", o.tokenFile, err)
		}
	}
	if bootstrap || state != nil {
		if ca, err = pki.LoadOrCreateCA(pkiDir, "flotilla-ca"); err != nil {
			return err
		}
	}
	if bootstrap {
		if token.Secret == "" {
			if b, err := os.ReadFile(filepath.Join(dataDir, "token")); err == nil {
				token, _ = etcd.ParseToken(string(b))
			}
		}
		if token.Secret == "" {
			secret, err := randomHex(24)
			if err != nil {
				return err
			}
			token.Secret = secret
		}
		if token.CAPin == "" {
			token.CAPin = ca.Hash()
		}
		if err := os.WriteFile(filepath.Join(dataDir, "token"), []byte(token.String()+"\n"), 0o600); err != nil {
			return fmt.Errorf("write join token: %w", err)
		}
	}

	gossip, err := membership.New(membership.Config{
		Name: o.name, BindAddr: etcdHost, BindPort: o.gossipPort, AdvertiseAddr: o.advertise,
		Token: token.Secret, Meta: membership.Meta{Roles: []string{"host"}},
		ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 3,
		GossipInterval: 200 * time.Millisecond, JoinRetry: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	defer func() { _ = gossip.Leave(time.Second) }()
	deadSince := trackDead(ctx, gossip)
	// Partitions longer than memberlist's 30 s of gossip to the dead need this to heal.
	go gossip.Reconnect(5*time.Second, 24*time.Hour, ctx.Done())

	var initialCluster string
	adminTokenPath := filepath.Join(dataDir, "admin-token")
	joinErr := make(chan error, 1)
	if !bootstrap {
		go func() {
			_, err := gossip.Join(o.join, ctx.Done())
			joinErr <- err
		}()
		if state == nil {
			if err := <-joinErr; err != nil {
				return err
			}
			resp, err := joinSite(ctx, gossip, token, etcd.JoinRequest{
				Name: o.name, PeerURL: peerURL.String(), ClientURL: clientURL.String(), WantMember: true,
			})
			if err != nil {
				return err
			}
			if ca, err = pki.InstallCA(pkiDir, resp.CACert, resp.CAKey); err != nil {
				return err
			}
			if err := os.WriteFile(adminTokenPath, []byte(resp.AdminToken+"\n"), 0o600); err != nil {
				return err
			}
			state = &etcd.ClusterState{Member: resp.Member, ClientURLs: resp.ClientURLs, PeerURL: peerURL.String()}
			initialCluster = resp.InitialCluster
			log.WithFields(logrus.Fields{"member": resp.Member, "initialCluster": initialCluster}).Info("joined the site")
		}
	}
	if state == nil {
		state = &etcd.ClusterState{Member: true}
	}

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
	adminToken, err := loadOrCreateToken(adminTokenPath)
	if err != nil {
		return err
	}

	restarted := initialCluster == "" && !bootstrap
	if restarted && state.Member && state.PeerURL != "" && state.PeerURL != peerURL.String() {
		// This host's address changed: its identity is its name, so tell the cluster the new
		// peer URL before starting (the other members would not reach the old one).
		if err := waitJoined(ctx, joinErr, 2*time.Minute); err != nil {
			return err
		}
		if err := movePeerURL(ctx, gossip, o.name, peerURL.String(), ca.CertFile(), etcdClientCert, etcdClientKey); err != nil {
			return err
		}
		log.WithFields(logrus.Fields{"from": state.PeerURL, "to": peerURL.String()}).Info("etcd peer URL updated after an address change")
	}
	if restarted && state.Member && state.PeerURL == peerURL.String() {
		// A voter replaced while it was away (a standby took its place) cannot start on its
		// old data: the others no longer know it. It keeps that data aside and comes back
		// as a standby.
		if waitJoined(ctx, joinErr, 15*time.Second) == nil &&
			removedFromEtcd(ctx, gossip, o.name, ca.CertFile(), etcdClientCert, etcdClientKey) {
			aside := filepath.Join(dataDir, fmt.Sprintf("etcd.removed-%d", time.Now().Unix()))
			if err := os.Rename(filepath.Join(dataDir, "etcd"), aside); err != nil {
				return fmt.Errorf("keep the etcd data of a removed member aside: %w", err)
			}
			state.Member = false
			log.WithField("oldData", aside).Warn("this host's etcd member was removed while it was away; it rejoins as a standby (old data kept aside)")
		}
	}
	if restarted && !state.Member {
		// A standby uses the voters that gossip knows now, not those of its first join.
		if waitJoined(ctx, joinErr, 15*time.Second) == nil {
			if urls := gossipEtcdURLs(ctx, gossip, o.name, 5*time.Second); len(urls) > 0 {
				state.ClientURLs = urls
			}
		}
	}
	state.PeerURL = peerURL.String()

	start := time.Now()
	etcdServers := state.ClientURLs
	var member *etcd.Member
	if state.Member {
		member, err = etcd.Start(ctx, etcd.Config{
			Name: o.name, DataDir: filepath.Join(dataDir, "etcd"),
			ClientURL: clientURL, PeerURL: peerURL, InitialCluster: initialCluster,
			CAFile: ca.CertFile(), ServerCert: etcdServerCert, ServerKey: etcdServerKey,
			PeerCert: etcdPeerCert, PeerKey: etcdPeerKey, ReadyTimeout: 2 * time.Minute,
		})
		if err != nil {
			return err
		}
		defer member.Close()
		etcdServers = member.ClientURLs()
		log.WithField("clientURLs", etcdServers).Info("etcd member ready")
	}
	if err := state.Save(statePath); err != nil {
		return err
	}
	etcdClient, err := etcd.NewClient(etcdServers, ca.CertFile(), etcdClientCert, etcdClientKey)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer etcdClient.Close()
	if member != nil {
		waitCtx, cancelWait := context.WithTimeout(ctx, 3*time.Minute)
		err := member.WaitVoter(waitCtx, etcdClient)
		cancelWait()
		if err != nil {
			return err
		}
	}
	joinServer := &etcd.JoinServer{CA: ca, Token: token, AdminToken: adminToken, Client: etcdClient, Voters: o.etcdVoters}

	// Git push webhooks may reach any host; the handler needs the API, so it gets a client below.
	gitHook := gitsync.NewWebhook()
	server, err := apiserver.New(apiserver.Config{
		BindAddress:      listen,
		Port:             o.apiPort,
		AdvertiseAddress: advertise,
		ServingCertFile:  apiCert, ServingKeyFile: apiKey,
		Etcd: apiserver.EtcdClientConfig{
			Servers: etcdServers, CAFile: ca.CertFile(), CertFile: etcdClientCert, KeyFile: etcdClientKey,
		},
		Tokens: map[string]*user.DefaultInfo{
			adminToken: {Name: "admin", UID: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		},
		Validation:               vopts,
		DefaultTolerationSeconds: o.tolerationSecs,
		Unauthenticated:          map[string]http.Handler{etcd.CACertsPath: joinServer, etcd.JoinPath: joinServer, gitsync.WebhookPathPrefix: gitHook},
		Nodes:                    apiserver.NodeConnection{CAFile: ca.CertFile(), Token: adminToken},
	})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	apiDone := make(chan error, 1)
	go func() { apiDone <- server.Run(runCtx) }()

	if err := waitReady(ctx, server, apiDone); err != nil {
		return err
	}
	if err := gitHook.SetConfig(server.Loopback); err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(dataDir, "kubeconfig")
	if err := writeKubeconfig(kubeconfigPath, apiURL, ca.CertPEM, adminToken, o.name); err != nil {
		return err
	}
	meta := membership.Meta{Roles: []string{"host"}, APIURL: apiURL, LabelsHash: labelsHash(o.nodeLabels)}
	if state.Member {
		meta.Roles = append(meta.Roles, "etcd")
		meta.EtcdClientURL = clientURL.String()
		meta.EtcdPeerURL = peerURL.String()
	}
	if err := gossip.UpdateMeta(meta); err != nil {
		log.WithError(err).Warn("publish gossip metadata")
	}
	log.WithFields(logrus.Fields{"kubeconfig": kubeconfigPath, "startup": time.Since(start).Round(time.Millisecond)}).Info("API ready")

	client, err := kubernetes.NewForConfig(server.Loopback)
	if err != nil {
		return err
	}
	nodeCfg := agent.NodeConfig{
		Name: o.name, Address: o.advertise, Labels: o.nodeLabels, DataDir: dataDir,
		KubeletVersion: version.Get().GitVersion, NoPods: !o.pods,
	}
	var rt *runtime.Runtime
	if o.pods {
		if rt, err = startRuntime(ctx, o, dataDir); err != nil {
			return err
		}
		defer rt.Close()
		nodeCfg.AgentPort = int32(o.agentPort)
		// Computed once: a different feature set needs an agent restart (NDF-U3).
		nodeCfg.DeclaredFeatures = agent.DeclaredFeatures(nodeCfg.KubeletVersion)
		if v, err := rt.Client().Version(ctx); err == nil {
			nodeCfg.RuntimeVersion = "containerd://" + v.Version
		}
		nodeCfg.Images = func(ctx context.Context) []corev1.ContainerImage { return agent.NodeImages(ctx, rt) }
		go func() {
			if err := runPods(runCtx, o, client, rt, nodeCfg, dataDir, apiCert, apiKey, adminToken); err != nil && runCtx.Err() == nil {
				log.WithError(err).Error("pods")
			}
		}()
	}
	if o.proxy {
		runProxy(runCtx, o, client)
	}
	go agent.RunNodeHeartbeat(runCtx, client, nodeCfg)
	go runKubernetesService(runCtx, client, firstIP(vopts.ServiceCIDR), int32(o.apiPort))
	reconcileMembership := func() {
		rec := &etcd.Reconciler{Client: etcdClient, Endpoint: clientURL.String(), DeadSince: deadSince, ReplaceAfter: o.replaceAfter,
			Alive: func() []string {
				var names []string
				for _, m := range gossip.Members() {
					if m.State == membership.Alive {
						names = append(names, m.Name)
					}
				}
				return names
			}}
		go rec.Run(runCtx)
	}
	promoted := make(chan *etcd.Member, 1)
	if state.Member {
		reconcileMembership()
	} else {
		// A standby host: when the site lacks a voter (one was removed after dying), the
		// first healthy standby by name takes its place.
		go func() {
			m, err := standby(runCtx, o, gossip, etcdClient, token, etcd.Config{
				Name: o.name, DataDir: filepath.Join(dataDir, "etcd"), ClientURL: clientURL, PeerURL: peerURL,
				CAFile: ca.CertFile(), ServerCert: etcdServerCert, ServerKey: etcdServerKey,
				PeerCert: etcdPeerCert, PeerKey: etcdPeerKey, ReadyTimeout: 2 * time.Minute,
			})
			if err != nil {
				if runCtx.Err() == nil {
					log.WithError(err).Error("standby could not become an etcd voter")
				}
				return
			}
			state.Member = true
			if err := state.Save(statePath); err != nil {
				log.WithError(err).Error("save cluster state")
			}
			meta.Roles = append(meta.Roles, "etcd")
			meta.EtcdClientURL, meta.EtcdPeerURL = clientURL.String(), peerURL.String()
			_ = gossip.UpdateMeta(meta)
			reconcileMembership()
			promoted <- m
		}()
	}
	if o.gitURL != "" {
		go func() {
			dyn, err := dynamic.NewForConfig(server.Loopback)
			if err != nil {
				log.WithError(err).Error("git source client")
				return
			}
			_ = wait.PollUntilContextCancel(runCtx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
				if err := gitsync.EnsureRootSource(ctx, dyn, o.gitURL, o.gitRef, o.gitPath); err != nil {
					log.WithError(err).Warn("record GitSource kube-system/root")
					return false, nil
				}
				log.WithFields(logrus.Fields{"url": o.gitURL, "ref": o.gitRef, "path": o.gitPath}).Info("GitSource kube-system/root recorded")
				return true, nil
			})
		}()
	}
	enabled, err := selectControllers(o.controllers, controllerSettings{DataDir: dataDir, ClusterCIDR: o.clusterCIDR, NodeGrace: o.nodeGrace})
	if err != nil {
		return err
	}
	// The scheduler holds a Lease of its own, so it can move independently of the controllers.
	groups := map[string][]controllers.Named{}
	for _, c := range enabled {
		lease := "flotilla-controllers"
		if c.Name == "scheduler" {
			lease = "flotilla-scheduler"
		}
		groups[lease] = append(groups[lease], c)
	}
	for _, c := range enabled {
		if c.Name == "gitsync" {
			// While another host leads, keep gitsync's clones warm for the day this one does.
			go func() {
				_ = gitsync.RunWarm(runCtx, server.Loopback, gitsync.WarmConfig{CacheDir: filepath.Join(dataDir, "git"), Identity: o.name, Lease: "flotilla-controllers"})
			}()
		}
	}
	for lease, list := range groups {
		go func() {
			_ = controllers.RunWhileLeader(runCtx, server.Loopback, lease, o.name, controllers.LeaderConfig{},
				func(ctx context.Context) {
					if err := controllers.RunControllers(ctx, server.Loopback, list, func(c *controllers.Context) {
						c.HostDeadSince = func(name string) (time.Time, bool) {
							since, dead := deadSince()[name]
							return since, dead
						}
					}); err != nil {
						log.WithError(err).WithField("lease", lease).Error("controllers")
					}
				})
		}()
	}

	var etcdErr <-chan error
	if member != nil {
		etcdErr = member.Err()
	}
	var runErr error
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			break wait
		case m := <-promoted:
			member, etcdErr = m, m.Err()
			log.Info("this host is now an etcd voter")
		case err := <-apiDone:
			runErr = fmt.Errorf("API server stopped: %w", err)
			break wait
		case err := <-etcdErr:
			runErr = fmt.Errorf("etcd stopped: %w", err)
			break wait
		}
	}
	cancel()
	// A clean stop takes about a second; whatever hangs, the agent is gone within
	// --shutdown-timeout (etcd's WAL makes an abrupt stop as safe as a crash).
	hardStop := time.AfterFunc(o.shutdownAfter-300*time.Millisecond, func() {
		log.Warnf("clean shutdown took longer than %s; exiting now", o.shutdownAfter)
		os.Exit(0)
	})
	defer hardStop.Stop()
	select {
	case <-apiDone:
	case <-time.After(o.shutdownAfter / 2):
		log.Warn("API server still stopping; closing storage anyway")
	}
	destroyed := make(chan struct{})
	go func() { server.Destroy(); etcdClient.Close(); close(destroyed) }()
	select {
	case <-destroyed:
	case <-time.After(time.Second):
	}
	if member != nil {
		closed := make(chan struct{})
		go func() { member.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(o.shutdownAfter / 3):
			log.Warn("etcd still stopping; exiting anyway")
		}
	}
	_ = gossip.Leave(300 * time.Millisecond)
	return runErr
}

// standby waits until the site has fewer etcd members than its voter target and this host is
// the first alive non-member by name, then joins etcd as a learner and waits for promotion.
func standby(ctx context.Context, o *agentOptions, gossip *membership.Membership, client *clientv3.Client, token etcd.Token, cfg etcd.Config) (*etcd.Member, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(3 * time.Second):
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		list, err := client.MemberList(lctx)
		cancel()
		if err != nil || len(list.Members) >= o.etcdVoters {
			continue
		}
		names := map[string]bool{}
		for _, m := range list.Members {
			names[m.Name] = true
		}
		first := ""
		for _, m := range gossip.Members() {
			if m.State == membership.Alive && !names[m.Name] && m.Meta.APIURL != "" {
				first = m.Name
				break
			}
		}
		if first != o.name {
			continue
		}
		resp, err := joinSite(ctx, gossip, token, etcd.JoinRequest{Name: o.name, PeerURL: cfg.PeerURL.String(), ClientURL: cfg.ClientURL.String(), WantMember: true})
		if err != nil {
			return nil, err
		}
		if !resp.Member {
			continue
		}
		_ = os.RemoveAll(cfg.DataDir)
		cfg.InitialCluster = resp.InitialCluster
		m, err := etcd.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = m.WaitVoter(wctx, client)
		cancel()
		if err != nil {
			m.Close()
			return nil, err
		}
		return m, nil
	}
}

// joinSite asks the site's hosts (learned by gossip) to let this host in, until one does.
func joinSite(ctx context.Context, gossip *membership.Membership, token etcd.Token, req etcd.JoinRequest) (*etcd.JoinResponse, error) {
	for {
		var lastErr error
		for _, m := range gossip.Members() {
			if m.Name == req.Name || m.State != membership.Alive || m.Meta.APIURL == "" {
				continue
			}
			resp, err := etcd.RequestJoin(ctx, m.Meta.APIURL, token, req)
			if err == nil {
				return resp, nil
			}
			lastErr = err
			logrus.WithError(err).WithField("via", m.Name).Warn("join attempt failed")
			if strings.Contains(err.Error(), "(401)") || strings.Contains(err.Error(), "pins") {
				return nil, err
			}
		}
		if lastErr == nil {
			logrus.Info("waiting for gossip to show a host that serves the API")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// waitJoined waits for the gossip join started at boot.
func waitJoined(ctx context.Context, joinErr chan error, timeout time.Duration) error {
	select {
	case err := <-joinErr:
		joinErr <- err // later waiters see it too
		return err
	case <-time.After(timeout):
		return fmt.Errorf("gossip join not done after %s", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gossipEtcdURLs returns the etcd client URLs that alive hosts publish, waiting up to timeout
// for gossip to show at least one.
func gossipEtcdURLs(ctx context.Context, g *membership.Membership, self string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var urls []string
		for _, m := range g.Members() {
			if m.Name != self && m.State == membership.Alive && m.Meta.EtcdClientURL != "" {
				urls = append(urls, m.Meta.EtcdClientURL)
			}
		}
		if len(urls) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return urls
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// removedFromEtcd reports whether the other hosts' etcd answers and has no member named
// name. When nobody answers it cannot tell, and says no.
func removedFromEtcd(ctx context.Context, g *membership.Membership, name, caFile, certFile, keyFile string) bool {
	urls := gossipEtcdURLs(ctx, g, name, 5*time.Second)
	if len(urls) == 0 {
		return false
	}
	cli, err := etcd.NewClient(urls, caFile, certFile, keyFile)
	if err != nil {
		return false
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(cctx)
	if err != nil {
		return false
	}
	for _, m := range list.Members {
		if m.Name == name {
			return false
		}
	}
	return true
}

// movePeerURL records a member's new peer URL through the other members.
func movePeerURL(ctx context.Context, g *membership.Membership, name, peerURL, caFile, certFile, keyFile string) error {
	urls := gossipEtcdURLs(ctx, g, name, time.Minute)
	if len(urls) == 0 {
		return errors.New("address changed, but gossip shows no other etcd member to record the new peer URL with")
	}
	cli, err := etcd.NewClient(urls, caFile, certFile, keyFile)
	if err != nil {
		return err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := cli.MemberList(cctx)
	if err != nil {
		return fmt.Errorf("list etcd members to update the peer URL: %w", err)
	}
	for _, m := range list.Members {
		if m.Name == name {
			if _, err := cli.MemberUpdate(cctx, m.ID, []string{peerURL}); err != nil {
				return fmt.Errorf("update peer URL of %s: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("etcd has no member named %s (removed while away?): wipe %s/etcd and cluster.json to rejoin", name, "<data-dir>")
}

// trackDead follows gossip and reports since when each dead host has been dead.
func trackDead(ctx context.Context, g *membership.Membership) func() map[string]time.Time {
	var mu sync.Mutex
	dead := map[string]time.Time{}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-g.Events():
				mu.Lock()
				switch ev.Member.State {
				case membership.Dead, membership.Left:
					if _, ok := dead[ev.Member.Name]; !ok {
						dead[ev.Member.Name] = time.Now()
					}
				default:
					delete(dead, ev.Member.Name)
				}
				mu.Unlock()
			}
		}
	}()
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]time.Time, len(dead))
		for k, v := range dead {
			out[k] = v
		}
		return out
	}
}

// labelsHash summarises the host's extra Node labels for gossip (a change shows as an update
// event without carrying the labels themselves, which may not fit in the metadata).
func labelsHash(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, labels[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func randomHex(n int) (string, error) {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf), nil
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
