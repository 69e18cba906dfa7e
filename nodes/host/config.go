package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Config is everything a host needs to run; `flotilla agent` maps its flags (and --config
// file) onto it. DefaultConfig holds the defaults.
type Config struct {
	// DataDir holds this host's state: etcd data, certificates, tokens, kubeconfig.
	DataDir string
	// Name identifies the host in the site (default: the system host name).
	Name string
	// ListenAddress is the IP the API and etcd listen on; AdvertiseAddress is what other
	// hosts and clients use (default: the listen address, or the first non-loopback address).
	ListenAddress, AdvertiseAddress string
	// Ports of the Kubernetes API (TLS), etcd's client and peer APIs, gossip.
	APIPort, EtcdClientPort, EtcdPeerPort, GossipPort int
	// ServiceCIDR is the range ClusterIPs come from; NodePortRange is "min-max".
	ServiceCIDR, NodePortRange string
	// ShutdownTimeout bounds a clean shutdown; past it the process exits anyway.
	ShutdownTimeout time.Duration
	// Join lists HOST:PORT gossip addresses of the site; empty starts a new site.
	Join []string
	// TokenFile holds the site's join token (the first host writes <data-dir>/token).
	TokenFile string
	// EtcdVoters is how many hosts hold an etcd vote (1, 3 or 5).
	EtcdVoters int
	// VoterReplaceAfter is how long a voter may be dead in gossip before an alive standby
	// replaces it.
	VoterReplaceAfter time.Duration
	// NodeLabels are extra labels of this host's Node.
	NodeLabels map[string]string
	// Controllers this host runs when it leads: "*", a comma list, or empty for none.
	Controllers string
	// DefaultTolerationSeconds of the not-ready/unreachable tolerations new pods get.
	DefaultTolerationSeconds int64
	// NodeMonitorGracePeriod is how long a host may miss heartbeats before its Node goes
	// Ready=Unknown.
	NodeMonitorGracePeriod time.Duration
	// ServiceAccountMaxTokenTTL caps the lifetime of the ServiceAccount tokens the API
	// issues (48h; tests lower it to watch pods' tokens being refreshed).
	ServiceAccountMaxTokenTTL time.Duration
	// PodSecurityDefault is the Pod Security Standards level (privileged, baseline or
	// restricted) enforced and warned about in namespaces without pod-security.kubernetes.io
	// labels.
	PodSecurityDefault string
	// GitURL, GitRef and GitPath are recorded as GitSource kube-system/root when GitURL is set.
	GitURL, GitRef, GitPath string
	// GitWebhookSecretFile holds the push webhook token of the root source: the host stores
	// it in Secret kube-system/root-webhook and names that in the source's webhookSecretRef.
	GitWebhookSecretFile string
	// GitLimits bound what one GitSource may cost this host (fetch, render).
	GitLimits gitsync.Limits
	// GitMinInterval is the shortest spec.interval the API accepts for a GitSource.
	GitMinInterval time.Duration

	// Pods runs the pods bound to this host (containerd, the pod network).
	Pods bool
	// ContainerdSocket uses this containerd instead of starting one.
	ContainerdSocket string
	// SeccompDefault is the seccomp profile of the containers of pods that set none:
	// RuntimeDefault (containerd's default profile) or Unconfined, as the kubelet's
	// seccompDefault. Localhost profiles are files below <data-dir>/seccomp.
	SeccompDefault string
	// AgentPort is the node agent's HTTPS endpoint (logs, exec, port-forward).
	AgentPort int
	// ClusterCIDR is split into the hosts' pod CIDRs (/24 each).
	ClusterCIDR string
	// ClusterDNS is the ClusterIP of kube-system/kube-dns, inside ServiceCIDR.
	ClusterDNS string
	// Proxy runs the Service proxy, cluster DNS and the Ingress proxy.
	Proxy bool
	// ProxyMode is auto, ipvs or nftables.
	ProxyMode string
	// IngressHTTPPort and IngressHTTPSPort are the Ingress proxy's ports (HTTPS 0: off).
	IngressHTTPPort, IngressHTTPSPort int
	// WebhookPort serves the git push webhook on a TLS listener of its own (0: off; the API
	// port serves it too), with WebhookTLSCertFile/KeyFile or else the API's certificate.
	WebhookPort                           int
	WebhookTLSCertFile, WebhookTLSKeyFile string
}

// DefaultConfig returns the defaults of `flotilla agent`.
func DefaultConfig() Config {
	return Config{
		ListenAddress: "0.0.0.0", APIPort: 6443, EtcdClientPort: 2379, EtcdPeerPort: 2380, GossipPort: 7946,
		ServiceCIDR: "10.96.0.0/12", NodePortRange: "30000-32767", ShutdownTimeout: 5 * time.Second,
		EtcdVoters: 3, VoterReplaceAfter: 60 * time.Second, Controllers: "*",
		DefaultTolerationSeconds: 300, NodeMonitorGracePeriod: 40 * time.Second, GitRef: "main",
		ServiceAccountMaxTokenTTL: 48 * time.Hour, PodSecurityDefault: "baseline", Pods: true, AgentPort: 10250, ClusterCIDR: "10.244.0.0/16", ClusterDNS: "10.96.0.10",
		Proxy: true, ProxyMode: "auto", IngressHTTPPort: 80, IngressHTTPSPort: 443,
		SeccompDefault: "RuntimeDefault", GitLimits: gitsync.DefaultLimits(), GitMinInterval: v1alpha1.MinInterval,
	}
}

// Complete fills the name and advertise address from the system and checks every field,
// returning the API's validation options; errors name the flag and say what to change.
func (c *Config) Complete() (validation.Options, error) {
	vopts := validation.DefaultOptions()
	if c.DataDir == "" {
		return vopts, errors.New("--data-dir is required: the directory where this host keeps its state")
	}
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return vopts, fmt.Errorf("--name not given and the host name is unknown: %w", err)
		}
		c.Name = strings.ToLower(h)
	}
	if net.ParseIP(c.ListenAddress) == nil {
		return vopts, fmt.Errorf("--listen-address %q is not an IP address", c.ListenAddress)
	}
	if c.AdvertiseAddress == "" {
		c.AdvertiseAddress = defaultAdvertise(c.ListenAddress)
	}
	if net.ParseIP(c.AdvertiseAddress) == nil {
		return vopts, fmt.Errorf("--advertise-address %q is not an IP address", c.AdvertiseAddress)
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"--api-port", c.APIPort}, {"--etcd-client-port", c.EtcdClientPort}, {"--etcd-peer-port", c.EtcdPeerPort},
		{"--gossip-port", c.GossipPort}, {"--agent-port", c.AgentPort}, {"--ingress-http-port", c.IngressHTTPPort}} {
		if p.port < 1 || p.port > 65535 {
			return vopts, fmt.Errorf("%s %d is not a port (1-65535)", p.flag, p.port)
		}
	}
	if c.IngressHTTPSPort < 0 || c.IngressHTTPSPort > 65535 {
		return vopts, fmt.Errorf("--ingress-https-port %d is not a port (0 disables HTTPS)", c.IngressHTTPSPort)
	}
	if c.ServiceAccountMaxTokenTTL < 30*time.Second {
		return vopts, fmt.Errorf("--service-account-max-token-ttl %s: give at least 30s (default 48h)", c.ServiceAccountMaxTokenTTL)
	}
	switch c.PodSecurityDefault {
	case "privileged", "baseline", "restricted":
	default:
		return vopts, fmt.Errorf("--pod-security-default %q: use privileged, baseline or restricted (the Pod Security Standards level of namespaces without pod-security.kubernetes.io labels; default baseline)", c.PodSecurityDefault)
	}
	switch c.SeccompDefault {
	case "RuntimeDefault", "Unconfined":
	default:
		return vopts, fmt.Errorf("--seccomp-default %q: use RuntimeDefault or Unconfined (the seccomp profile of containers whose pod sets none; default RuntimeDefault)", c.SeccompDefault)
	}
	cidr, err := netip.ParsePrefix(c.ServiceCIDR)
	if err != nil || !cidr.Addr().Is4() {
		return vopts, fmt.Errorf("--service-cidr %q is not an IPv4 CIDR such as 10.96.0.0/12", c.ServiceCIDR)
	}
	vopts.ServiceCIDR = cidr.Masked()
	lo, hi, ok := strings.Cut(c.NodePortRange, "-")
	min, err1 := strconv.Atoi(lo)
	max, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || min < 1 || max > 65535 || min > max {
		return vopts, fmt.Errorf("--node-port-range %q is not a range such as 30000-32767", c.NodePortRange)
	}
	vopts.NodePortMin, vopts.NodePortMax = int32(min), int32(max)
	if c.EtcdVoters != 1 && c.EtcdVoters != 3 && c.EtcdVoters != 5 {
		return vopts, fmt.Errorf("--etcd-voters %d: use 1, 3 or 5 (an odd count keeps a majority)", c.EtcdVoters)
	}
	if len(c.Join) > 0 && c.TokenFile == "" {
		return vopts, errors.New("--join needs --token-file: copy <data-dir>/token from the first host")
	}
	if pc, err := netip.ParsePrefix(c.ClusterCIDR); err != nil || !pc.Addr().Is4() || pc.Bits() > 24 {
		return vopts, fmt.Errorf("--cluster-cidr %q is not an IPv4 CIDR of /24 or larger such as 10.244.0.0/16", c.ClusterCIDR)
	} else if pc.Overlaps(vopts.ServiceCIDR) {
		return vopts, fmt.Errorf("--cluster-cidr %s overlaps --service-cidr %s: pick ranges that do not overlap", c.ClusterCIDR, c.ServiceCIDR)
	}
	if ip, err := netip.ParseAddr(c.ClusterDNS); err != nil || !vopts.ServiceCIDR.Contains(ip) {
		return vopts, fmt.Errorf("--cluster-dns %q must be an address inside --service-cidr %s", c.ClusterDNS, c.ServiceCIDR)
	}
	switch c.ProxyMode {
	case "auto", "ipvs", "nftables":
	default:
		return vopts, fmt.Errorf("--proxy-mode %q: use auto, ipvs or nftables", c.ProxyMode)
	}
	if c.ShutdownTimeout < time.Second {
		return vopts, fmt.Errorf("--shutdown-timeout %s is too short: give a clean shutdown at least 1s", c.ShutdownTimeout)
	}
	if err := c.completeWebhook(); err != nil {
		return vopts, err
	}
	if err := c.completeGit(&vopts); err != nil {
		return vopts, err
	}
	if _, err := SelectControllers(c.Controllers, *c); err != nil {
		return vopts, err
	}
	return vopts, nil
}

// completeGit checks the flags of the root GitSource and of gitsync's limits.
func (c *Config) completeGit(vopts *validation.Options) error {
	if c.GitURL != "" {
		if errs := validation.ValidateGitURL(c.GitURL, field.NewPath("--git-url")); len(errs) > 0 {
			return errs.ToAggregate()
		}
	}
	if c.GitMinInterval < time.Second {
		return fmt.Errorf("--git-min-interval %s: give at least 1s (default %s)", c.GitMinInterval, v1alpha1.MinInterval)
	}
	vopts.GitSourceMinInterval = c.GitMinInterval
	l := c.GitLimits
	for _, f := range []struct {
		flag string
		bad  bool
	}{{"--git-max-repo-size", l.MaxRepoSize < 1<<20}, {"--git-max-objects", l.MaxObjects < 1}, {"--git-max-object-size", l.MaxObjectSize < 1<<10},
		{"--git-fetch-timeout", l.FetchTimeout < time.Second}, {"--git-render-timeout", l.RenderTimeout < 100*time.Millisecond}} {
		if f.bad {
			return fmt.Errorf("%s is too small: give at least 1Mi, 1, 1Ki, 1s and 100ms for --git-max-repo-size, --git-max-objects, --git-max-object-size, --git-fetch-timeout and --git-render-timeout", f.flag)
		}
	}
	return nil
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
