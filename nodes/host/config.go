package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/nodes/agent"
	"github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/nodes/snapshot"
	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrsigning"
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
	// InsecureSkipCAPin lets a host join with a token that pins no CA, trusting the CA the
	// site presents.
	InsecureSkipCAPin bool
	// EtcdVoters is how many hosts hold an etcd vote (1, 3 or 5).
	EtcdVoters int
	// VoterReplaceAfter is how long a voter may be dead in gossip before an alive standby
	// replaces it.
	VoterReplaceAfter time.Duration
	// NodeLabels are extra labels of this host's Node.
	NodeLabels map[string]string
	// Site names the site in a fleet and SiteLabels ("k=v,k2=v2") label it; the first host
	// records them (Site defaults to its own name) in ConfigMap kube-system/flotilla-site and
	// every other server checks its own against that record. Empty: take the record's.
	Site, SiteLabels string
	// Controllers this host runs when it leads: "*", a comma list, or empty for none.
	Controllers string
	// DefaultTolerationSeconds of the not-ready/unreachable tolerations new pods get.
	DefaultTolerationSeconds int64
	// NodeMonitorGracePeriod is how long a host may miss heartbeats before its Node goes
	// Ready=Unknown.
	NodeMonitorGracePeriod time.Duration
	// ClusterSigningDuration is the longest validity of the certificates csrsigning issues
	// for CertificateSigningRequests (at least 10 minutes).
	ClusterSigningDuration time.Duration
	// LocalVolumePath is the directory under which the built-in flotilla-local class keeps
	// its volumes (its "path" parameter), read when the leader first creates the class;
	// empty: /var/lib/flotilla/volumes.
	LocalVolumePath string
	// ServiceAccountMaxTokenTTL caps the lifetime of the ServiceAccount tokens the API
	// issues (48h; tests lower it to watch pods' tokens being refreshed).
	ServiceAccountMaxTokenTTL time.Duration
	// PodSecurityDefault is the Pod Security Standards level (privileged, baseline or
	// restricted) enforced and warned about in namespaces without pod-security.kubernetes.io
	// labels.
	PodSecurityDefault string
	// Policies is the built-in admission policy set installed at start (policies.SetNone,
	// SetBaseline or SetRestricted): its ValidatingAdmissionPolicies, bindings and param
	// ConfigMaps are created when absent and never updated, so users may edit them.
	Policies string
	// AuditLogPath is the API's audit log ("-": standard output; "": none; DefaultAuditLogPath:
	// <data-dir>/audit.log), rotated at AuditLogMaxSize megabytes keeping AuditLogMaxBackup
	// files; AuditPolicyFile replaces the default policy (every request at Metadata).
	AuditLogPath                       string
	AuditLogMaxSize, AuditLogMaxBackup int
	AuditPolicyFile                    string
	// EncryptionProviderConfig is an EncryptionConfiguration file (kube-apiserver's
	// --encryption-provider-config) replacing the Secrets key derived from the site CA.
	EncryptionProviderConfig string
	// GitURL, GitRef and GitPath are recorded as GitSource kube-system/root when GitURL is set.
	GitURL, GitRef, GitPath string
	// GitRolloutAfter and GitRolloutSoak set spec.rollout of the root source (a label
	// selector over the sites' labels); GitStatusPush sets its spec.statusPush, with
	// GitStatusInterval as the heartbeat. Unset, the root source's fields stay as they are.
	GitRolloutAfter   string
	GitRolloutSoak    time.Duration
	GitStatusPush     bool
	GitStatusInterval time.Duration
	// GitInterval sets spec.interval of the root source (0: leave it as it is).
	GitInterval time.Duration
	// GitInsecure sets spec.insecure of the root source: GitURL may be http:// or git://.
	GitInsecure bool
	// GitRollbackHealthTimeout enables spec.rollback of the root source with this health
	// timeout (0: leave spec.rollback as it is).
	GitRollbackHealthTimeout time.Duration
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
	// RegistryConfig is the host's registries.yaml (mirrors, credentials, TLS of image
	// registries, as k3s's); "" reads <data-dir>/registries.yaml when it exists. Complete
	// loads it into Registries (nil: none).
	RegistryConfig string
	Registries     *runtime.RegistryConfig
	// SeccompDefault is the seccomp profile of the containers of pods that set none:
	// RuntimeDefault (containerd's default profile) or Unconfined, as the kubelet's
	// seccompDefault. Localhost profiles are files below <data-dir>/seccomp.
	SeccompDefault string
	// ContainerLogMaxSize (bytes) and ContainerLogMaxFiles rotate containers' log files, as
	// the kubelet's containerLogMaxSize and containerLogMaxFiles: a file is rotated when it
	// reaches the size, and at most that many files (the current one included) are kept.
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// MemoryLimit (bytes) is the soft limit of the agent's Go heap and runtime (the runtime's
	// GOMEMLIMIT): near it the garbage collector runs more often instead of letting the heap
	// double. 0 leaves the runtime's own setting (the GOMEMLIMIT environment variable, or
	// none); MemoryLimitAuto (the default) follows the live heap (internal/memlimit), unless
	// GOMEMLIMIT or GOGC is set in the environment.
	MemoryLimit int64
	// ImageGCHighThresholdPercent and ImageGCLowThresholdPercent: when the usage of the
	// filesystem holding containerd's images reaches the high threshold, unused images are
	// removed, least recently used first, down to the low one (the kubelet's
	// imageGCHigh/LowThresholdPercent; 100 turns it off). ImageMinimumGCAge keeps an image
	// that long after it was first seen.
	ImageGCHighThresholdPercent, ImageGCLowThresholdPercent int
	ImageMinimumGCAge                                       time.Duration
	// EvictionHard are the hard eviction thresholds, as the kubelet's --eviction-hard
	// (agent.DefaultEvictionHard); EvictionPressureTransition keeps a pressure condition
	// True that long after its threshold was last met.
	EvictionHard               string
	EvictionPressureTransition time.Duration
	// SystemReserved and KubeReserved ("cpu=100m,memory=256Mi,ephemeral-storage=1Gi") are
	// left out of the Node's allocatable, and the pods' cgroup is capped at capacity less
	// both; KubeReserved defaults to what flotilla and containerd use (DefaultKubeReserved).
	SystemReserved, KubeReserved string
	// Parsed by Complete.
	evictionHard                 []agent.Threshold
	systemReserved, kubeReserved corev1.ResourceList
	// AgentPort is the node agent's HTTPS endpoint (logs, exec, port-forward).
	AgentPort int
	// ClusterCIDR is split into the hosts' pod CIDRs (/24 each).
	ClusterCIDR string
	// ClusterDNS is the ClusterIP of kube-system/kube-dns, inside ServiceCIDR.
	ClusterDNS string
	// Proxy runs the Service proxy, cluster DNS and the Ingress proxy.
	Proxy bool
	// Etcd lets this host hold etcd, the API and the site CA (a server, as k3s says); false
	// makes a worker: it joins with the token and receives only its own node certificates
	// (no CA key, no admin token), runs pods and proxies, and reaches the API of the servers
	// through a local proxy on 127.0.0.1:--api-port.
	Etcd bool
	// ProxyMode is auto, ipvs or nftables.
	ProxyMode string
	// IngressHTTPPort and IngressHTTPSPort are the Ingress proxy's ports (HTTPS 0: off).
	IngressHTTPPort, IngressHTTPSPort int
	// WebhookPort serves the git push webhook on a TLS listener of its own (0: off; the API
	// port serves it too), with WebhookTLSCertFile/KeyFile or else the API's certificate.
	WebhookPort                           int
	WebhookTLSCertFile, WebhookTLSKeyFile string
	// SnapshotSchedule is a cron expression (5 fields, UTC) at which this server host saves an
	// etcd snapshot (nodes/snapshot) to <data-dir>/snapshots, keeping the newest
	// SnapshotRetention; empty: none.
	SnapshotSchedule  string
	SnapshotRetention int
}

// MemoryLimitAuto is the MemoryLimit that follows the agent's live heap.
const MemoryLimitAuto = -1

// DefaultConfig returns the defaults of `flotilla agent`.
func DefaultConfig() Config {
	return Config{
		MemoryLimit:   MemoryLimitAuto,
		ListenAddress: "0.0.0.0", APIPort: 6443, EtcdClientPort: 2379, EtcdPeerPort: 2380, GossipPort: 7946,
		ServiceCIDR: "10.96.0.0/12", NodePortRange: "30000-32767", ShutdownTimeout: 5 * time.Second,
		EtcdVoters: 3, VoterReplaceAfter: 60 * time.Second, Controllers: "*",
		DefaultTolerationSeconds: 300, NodeMonitorGracePeriod: 40 * time.Second, GitRef: "main",
		ClusterSigningDuration: csrsigning.DefaultDuration, ServiceAccountMaxTokenTTL: 48 * time.Hour,
		PodSecurityDefault: "baseline", Policies: policies.SetNone, Pods: true, AgentPort: 10250, ClusterCIDR: "10.244.0.0/16", ClusterDNS: "10.96.0.10",
		Proxy: true, ProxyMode: "auto", IngressHTTPPort: 80, IngressHTTPSPort: 443, Etcd: true,
		SeccompDefault: "RuntimeDefault", GitLimits: gitsync.DefaultLimits(), GitMinInterval: v1alpha1.MinInterval,
		AuditLogPath: DefaultAuditLogPath, AuditLogMaxSize: 50, AuditLogMaxBackup: 3,
		ContainerLogMaxSize: 10 << 20, ContainerLogMaxFiles: 5,
		ImageGCHighThresholdPercent: 85, ImageGCLowThresholdPercent: 80, ImageMinimumGCAge: 2 * time.Minute,
		EvictionHard: agent.DefaultEvictionHard, EvictionPressureTransition: 5 * time.Minute,
		SnapshotRetention: 5,
	}
}

// DefaultKubeReserved is what a host's flotilla and containerd use, measured on idle hosts
// of a 3-host site with a few pods (resident memory): a server (etcd, the API, the
// controllers) and a worker (node agent, proxies, containerd).
func DefaultKubeReserved(server bool) string {
	if server {
		return "cpu=200m,memory=512Mi"
	}
	return "cpu=100m,memory=256Mi"
}

// DefaultAuditLogPath stands for <data-dir>/audit.log until Complete knows the directory.
const DefaultAuditLogPath = "<data-dir>/audit.log"

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
	if c.Policies == "" {
		c.Policies = policies.SetNone
	}
	if _, err := policies.Library(c.Policies); err != nil {
		return vopts, fmt.Errorf("--policies: %w", err)
	}
	if c.AuditLogPath == DefaultAuditLogPath {
		c.AuditLogPath = filepath.Join(c.DataDir, "audit.log")
	}
	if c.AuditLogMaxSize < 0 || c.AuditLogMaxBackup < 0 {
		return vopts, fmt.Errorf("--audit-log-maxsize %d and --audit-log-maxbackup %d: give 0 or more (megabytes before rotation, rotated files kept; 0: no rotation, keep all)", c.AuditLogMaxSize, c.AuditLogMaxBackup)
	}
	if c.AuditPolicyFile != "" && c.AuditLogPath == "" {
		return vopts, errors.New("--audit-policy-file without an audit log (--audit-log-path is empty): give a path")
	}
	switch c.SeccompDefault {
	case "RuntimeDefault", "Unconfined":
	default:
		return vopts, fmt.Errorf("--seccomp-default %q: use RuntimeDefault or Unconfined (the seccomp profile of containers whose pod sets none; default RuntimeDefault)", c.SeccompDefault)
	}
	if c.MemoryLimit != 0 && c.MemoryLimit != MemoryLimitAuto && c.MemoryLimit < 64<<20 {
		return vopts, fmt.Errorf("--memory-limit %d: give auto, 0 (none) or at least 64Mi (the soft limit of the agent's Go memory; an agent with etcd and the API needs about 100Mi)", c.MemoryLimit)
	}
	if c.ContainerLogMaxSize < 1<<10 || c.ContainerLogMaxFiles < 2 {
		return vopts, fmt.Errorf("--container-log-max-size %d and --container-log-max-files %d: give at least 1Ki and 2 (size at which a container's log file is rotated, files kept; default 10Mi and 5)", c.ContainerLogMaxSize, c.ContainerLogMaxFiles)
	}
	if c.ImageGCLowThresholdPercent < 0 || c.ImageGCHighThresholdPercent > 100 || c.ImageGCLowThresholdPercent >= c.ImageGCHighThresholdPercent {
		return vopts, fmt.Errorf("--image-gc-low-threshold %d and --image-gc-high-threshold %d: give 0 <= low < high <= 100 (percent of the image filesystem used: collection starts at high and removes unused images down to low; default 80 and 85, high 100 turns it off)", c.ImageGCLowThresholdPercent, c.ImageGCHighThresholdPercent)
	}
	if c.ImageMinimumGCAge < 0 {
		return vopts, fmt.Errorf("--image-minimum-gc-age %s is negative (how long an image is kept after it was first seen; default 2m)", c.ImageMinimumGCAge)
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
	if bad := apiserver.ForbiddenNodeLabels(c.NodeLabels); len(bad) > 0 {
		return vopts, fmt.Errorf("--node-label %s: a host may not set labels under node-restriction.kubernetes.io/ nor kubernetes.io or k8s.io labels other than the kubelet's own (set those on the Node with kubectl label, as an administrator)", strings.Join(bad, ", "))
	}
	if c.Site != "" || c.SiteLabels != "" {
		if !c.Etcd {
			return vopts, errors.New("--site and --site-labels are set on a site's servers: a worker belongs to the site it joins; remove them")
		}
		labels, err := gitsync.ParseSiteLabels(c.SiteLabels)
		if err != nil {
			return vopts, fmt.Errorf("--site-labels: %w", err)
		}
		if c.Site != "" {
			if err := gitsync.ValidateSite(gitsync.Site{Name: c.Site}); err != nil {
				return vopts, fmt.Errorf("--site: %w", err)
			}
		}
		for k, v := range labels {
			if nv, ok := c.NodeLabels[k]; ok && nv != v {
				return vopts, fmt.Errorf("--site-labels %s=%s and --node-label %s=%s: the site's labels are also its Nodes' labels; drop one", k, v, k, nv)
			}
		}
	}
	if c.GitRolloutAfter != "" || c.GitStatusPush || c.GitRollbackHealthTimeout != 0 || c.GitInsecure {
		if c.GitURL == "" {
			return vopts, errors.New("--git-rollout-after, --git-status-push, --git-rollback-health-timeout and --git-insecure configure the root source: give --git-url too")
		}
		if _, err := labels.Parse(c.GitRolloutAfter); err != nil {
			return vopts, fmt.Errorf("--git-rollout-after %q: not a label selector: %v (such as tier=canary)", c.GitRolloutAfter, err)
		}
	}
	if c.GitInterval != 0 && c.GitInterval < c.GitMinInterval {
		return vopts, fmt.Errorf("--git-interval %s: at least --git-min-interval (%s)", c.GitInterval, c.GitMinInterval)
	}
	if c.GitRollbackHealthTimeout != 0 && c.GitRollbackHealthTimeout < v1alpha1.MinHealthTimeout {
		return vopts, fmt.Errorf("--git-rollback-health-timeout %s: at least %s (0: no rollback set by the flag)", c.GitRollbackHealthTimeout, v1alpha1.MinHealthTimeout)
	}
	if c.GitRolloutSoak < 0 {
		return vopts, fmt.Errorf("--git-rollout-soak %s: must not be negative", c.GitRolloutSoak)
	}
	if c.GitStatusInterval != 0 && c.GitStatusInterval < v1alpha1.MinStatusInterval {
		return vopts, fmt.Errorf("--git-status-interval %s: at least %s", c.GitStatusInterval, v1alpha1.MinStatusInterval)
	}
	if !c.Etcd && len(c.Join) == 0 {
		return vopts, errors.New("--etcd=false makes a worker, which joins a site: give --join and --token-file")
	}
	if !c.Etcd && !c.Pods {
		return vopts, errors.New("--etcd=false with --pods=false leaves the host nothing to do: a worker runs pods")
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
	if err := c.completeSnapshots(); err != nil {
		return vopts, err
	}
	if err := c.completeWebhook(); err != nil {
		return vopts, err
	}
	if err := c.completeRegistries(); err != nil {
		return vopts, err
	}
	if err := c.completeEviction(); err != nil {
		return vopts, err
	}
	if err := c.completeGit(&vopts); err != nil {
		return vopts, err
	}
	if _, err := SelectControllers(c.Controllers, *c); err != nil {
		return vopts, err
	}
	if c.LocalVolumePath != "" && !filepath.IsAbs(c.LocalVolumePath) {
		return vopts, fmt.Errorf("--local-volume-path %q must be an absolute path", c.LocalVolumePath)
	}
	if c.ClusterSigningDuration < csrsigning.MinDuration {
		return vopts, fmt.Errorf("--cluster-signing-duration %s is too short: certificates are issued for at least %s", c.ClusterSigningDuration, csrsigning.MinDuration)
	}
	return vopts, nil
}

// completeSnapshots checks --snapshot-schedule and --snapshot-retention.
func (c *Config) completeSnapshots() error {
	if c.SnapshotRetention < 1 {
		return fmt.Errorf("--snapshot-retention %d: keep at least 1 snapshot (default 5)", c.SnapshotRetention)
	}
	if c.SnapshotSchedule == "" {
		return nil
	}
	if !c.Etcd {
		return errors.New("--snapshot-schedule is set on a worker (--etcd=false), which holds no etcd and no site CA: set it on a server host")
	}
	if _, err := snapshot.ParseSchedule(c.SnapshotSchedule); err != nil {
		return fmt.Errorf("--snapshot-schedule %w", err)
	}
	return nil
}

// completeEviction parses the eviction thresholds and the reservations.
func (c *Config) completeEviction() error {
	var err error
	if c.evictionHard, err = agent.ParseThresholds(c.EvictionHard); err != nil {
		return fmt.Errorf("--eviction-hard: %w", err)
	}
	if c.EvictionPressureTransition < 0 {
		return fmt.Errorf("--eviction-pressure-transition-period %s: give 0 or more (default 5m)", c.EvictionPressureTransition)
	}
	if c.systemReserved, err = agent.ParseReserved(c.SystemReserved); err != nil {
		return fmt.Errorf("--system-reserved: %w", err)
	}
	if c.KubeReserved == "" {
		c.KubeReserved = DefaultKubeReserved(c.Etcd)
	}
	if c.kubeReserved, err = agent.ParseReserved(c.KubeReserved); err != nil {
		return fmt.Errorf("--kube-reserved: %w", err)
	}
	return nil
}

// completeRegistries loads --registry-config, or <data-dir>/registries.yaml when it exists.
func (c *Config) completeRegistries() error {
	path := c.RegistryConfig
	if path == "" {
		path = filepath.Join(c.DataDir, "registries.yaml")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			c.Registries = nil
			return nil
		}
	}
	reg, err := runtime.LoadRegistryConfig(path)
	if err != nil {
		return fmt.Errorf("--registry-config: %w", err)
	}
	c.Registries = reg
	return nil
}

// completeGit checks the flags of the root GitSource and of gitsync's limits.
func (c *Config) completeGit(vopts *validation.Options) error {
	if c.GitURL != "" {
		if errs := validation.ValidateGitURL(c.GitURL, c.GitInsecure, field.NewPath("--git-url")); len(errs) > 0 {
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
