package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/memlimit"
	"github.com/flotilla-dev/flotilla/internal/memtrim"
	"github.com/flotilla-dev/flotilla/nodes/host"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

// newAgentCommand is `flotilla agent`: it maps flags (and --config) onto host.Config and runs
// the host until a signal or a fatal error.
func newAgentCommand() *cobra.Command {
	c := host.DefaultConfig()
	var configFile string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run this host's part of the site: etcd, the Kubernetes API, the controllers and scheduler (when leader), the pods and the proxy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if configFile != "" {
				if err := applyConfigFile(cmd.Flags(), configFile); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if c.DataDir != "" {
				// DIR/agent.pid lets `flotilla uninstall` and `flotilla status` find this agent.
				removePID, err := host.WritePIDFile(c.DataDir)
				if err != nil {
					return err
				}
				defer removePID()
			}
			switch {
			case c.MemoryLimit > 0:
				debug.SetMemoryLimit(c.MemoryLimit)
			case c.MemoryLimit == host.MemoryLimitAuto && os.Getenv("GOMEMLIMIT") == "" && os.Getenv("GOGC") == "":
				go agentMemoryPolicy().Run(ctx, time.Second)
			}
			h, err := host.Start(ctx, c)
			if err != nil {
				return err
			}
			go releaseStartupPages(ctx, time.Minute)
			var runErr error
			select {
			case <-ctx.Done():
				logrus.WithField("host", h.Name()).Info("shutting down")
			case runErr = <-h.Err():
			}
			// Whatever hangs, the agent is gone within --shutdown-timeout.
			closed := make(chan struct{})
			go func() { h.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(c.ShutdownTimeout - 300*time.Millisecond):
				logrus.Warnf("clean shutdown took longer than %s; exiting now", c.ShutdownTimeout)
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML file of settings named like these flags (without --); flags given on the command line win")
	f.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for this host's state: etcd data, certificates, tokens, kubeconfig (required)")
	f.StringVar(&c.Name, "name", c.Name, "host name; identifies the host in the site (default: the system host name)")
	f.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "IP address the API and etcd listen on")
	f.StringVar(&c.AdvertiseAddress, "advertise-address", c.AdvertiseAddress, "IP address other hosts and clients use (default: the listen address, or the first non-loopback address)")
	f.IntVar(&c.APIPort, "api-port", c.APIPort, "port of the Kubernetes API (TLS)")
	f.IntVar(&c.EtcdClientPort, "etcd-client-port", c.EtcdClientPort, "port of etcd's client API (TLS)")
	f.IntVar(&c.EtcdPeerPort, "etcd-peer-port", c.EtcdPeerPort, "port of etcd's peer API (TLS)")
	f.StringVar(&c.ServiceCIDR, "service-cidr", c.ServiceCIDR, "range ClusterIPs are allocated from")
	f.StringVar(&c.NodePortRange, "node-port-range", c.NodePortRange, "range NodePorts are allocated from")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a clean shutdown may take before the agent exits anyway")
	f.IntVar(&c.GossipPort, "gossip-port", c.GossipPort, "port of gossip (memberlist, UDP and TCP)")
	f.StringArrayVar(&c.Join, "join", c.Join, "HOST:PORT of a host of the site to join (gossip port; repeatable); without it this host starts a new site")
	f.StringVar(&c.TokenFile, "token-file", c.TokenFile, "file holding the site's join token (the first host writes <data-dir>/token; joining hosts need a copy)")
	f.BoolVar(&c.InsecureSkipCAPin, "insecure-skip-ca-pin", c.InsecureSkipCAPin, "join with a token that pins no CA (a bare secret), trusting whatever CA the site presents")
	f.IntVar(&c.EtcdVoters, "etcd-voters", c.EtcdVoters, "how many hosts hold an etcd vote (1, 3 or 5)")
	f.DurationVar(&c.VoterReplaceAfter, "voter-replace-after", c.VoterReplaceAfter, "replace an etcd voter that gossip reports dead for this long, when an alive standby host can take its place")
	f.StringVar(&c.Controllers, "controllers", c.Controllers, "controllers this host runs when it leads: * for all, a comma list of names, or empty for none")
	f.Int64Var(&c.DefaultTolerationSeconds, "default-toleration-seconds", c.DefaultTolerationSeconds, "tolerationSeconds of the not-ready/unreachable NoExecute tolerations new pods get: how long pods stay on a failed host before eviction")
	f.DurationVar(&c.ServiceAccountMaxTokenTTL, "service-account-max-token-ttl", c.ServiceAccountMaxTokenTTL, "longest lifetime of the ServiceAccount tokens the API issues; longer requests are shortened (pods' tokens are refreshed at 80 % of theirs)")
	f.StringVar(&c.PodSecurityDefault, "pod-security-default", c.PodSecurityDefault, "Pod Security Standards level enforced and warned about in namespaces without pod-security.kubernetes.io labels: privileged, baseline or restricted (kube-system, kube-public and kube-node-lease are exempt)")
	f.StringVar(&c.Policies, "policies", c.Policies, "built-in admission policy set installed at start (policies/library): none, baseline or restricted; its objects are created when absent and never overwritten, so edit or delete them as any object")
	f.StringVar(&c.AuditLogPath, "audit-log-path", c.AuditLogPath, "audit log of the API (JSON events of audit.k8s.io/v1, as kube-apiserver's); - for standard output, empty for none")
	f.IntVar(&c.AuditLogMaxSize, "audit-log-maxsize", c.AuditLogMaxSize, "megabytes of the audit log before it is rotated (0: never)")
	f.IntVar(&c.AuditLogMaxBackup, "audit-log-maxbackup", c.AuditLogMaxBackup, "rotated audit log files kept (0: all)")
	f.StringVar(&c.AuditPolicyFile, "audit-policy-file", c.AuditPolicyFile, "audit policy (audit.k8s.io/v1 Policy) replacing the default, which logs every request at Metadata; a policy logging Secrets above Metadata is refused")
	f.StringVar(&c.EncryptionProviderConfig, "encryption-provider-config", c.EncryptionProviderConfig, "EncryptionConfiguration file (apiserver.config.k8s.io/v1, as kube-apiserver's) replacing the default encryption of Secrets with a key derived from the site CA; the way to rotate that key")
	f.DurationVar(&c.NodeMonitorGracePeriod, "node-monitor-grace-period", c.NodeMonitorGracePeriod, "how long a host may miss heartbeats (Lease renewals) before its Node goes Ready=Unknown and gets the unreachable taints")
	f.DurationVar(&c.ClusterSigningDuration, "cluster-signing-duration", c.ClusterSigningDuration, "longest validity of the certificates the site CA issues for CertificateSigningRequests (kubernetes.io/kube-apiserver-client, kube-apiserver-client-kubelet, kubelet-serving); spec.expirationSeconds may ask for less, at least 10m")
	f.StringVar(&c.LocalVolumePath, "local-volume-path", c.LocalVolumePath, "directory under which the built-in StorageClass flotilla-local keeps its volumes (its path parameter), read when the class is first created; give every host of a site the same; default /var/lib/flotilla/volumes")
	f.StringVar(&c.GitURL, "git-url", c.GitURL, "git repository the site deploys from (recorded as GitSource kube-system/root); file://, https://")
	f.StringVar(&c.GitRef, "git-ref", c.GitRef, "branch (or tags/NAME, or a 40-hex commit) of --git-url")
	f.StringVar(&c.GitPath, "git-path", c.GitPath, "directory in the repository to render (kustomization.yaml or plain YAML)")
	f.StringVar(&c.GitWebhookSecretFile, "git-webhook-secret-file", c.GitWebhookSecretFile, "file holding the push webhook secret of --git-url (the one given to the git server); recorded as Secret kube-system/root-webhook and named in spec.webhookSecretRef of GitSource kube-system/root")
	f.IntVar(&c.WebhookPort, "webhook-port", c.WebhookPort, "port of a TLS listener serving only the git push webhooks (/hooks/git/<namespace>/<name>), to expose to the git server instead of the API port; typically 9443; 0: off (the API port serves them too)")
	f.StringVar(&c.WebhookTLSCertFile, "webhook-tls-cert-file", c.WebhookTLSCertFile, "PEM certificate (chain) of the --webhook-port listener, e.g. a publicly trusted one for GitHub; reloaded when the file changes; default: the API's serving certificate, signed by the site CA")
	f.StringVar(&c.WebhookTLSKeyFile, "webhook-tls-key-file", c.WebhookTLSKeyFile, "private key of --webhook-tls-cert-file")
	addGitLimitFlags(f, &c.GitLimits)
	f.DurationVar(&c.GitMinInterval, "git-min-interval", c.GitMinInterval, "shortest spec.interval the API accepts for a GitSource")
	f.StringVar(&c.Site, "site", c.Site, "name of this site in a fleet, a DNS label: recorded by the site's first host (default: its host name) in ConfigMap kube-system/flotilla-site and on the Nodes as label flotilla.dev/site; the same on every server of the site")
	f.StringVar(&c.SiteLabels, "site-labels", c.SiteLabels, "labels of this site (k=v,k2=v2), on its Nodes and in its published status, for the spec.rollout.after of other sites; the same on every server of the site")
	f.DurationVar(&c.GitInterval, "git-interval", c.GitInterval, "spec.interval of the root source: how often --git-url is fetched (default 1m; at least --git-min-interval)")
	f.BoolVar(&c.GitInsecure, "git-insecure", c.GitInsecure, "set spec.insecure of the root source: accept an http:// or git:// --git-url, fetched in the clear (a network attacker can change what is applied)")
	f.DurationVar(&c.GitRollbackHealthTimeout, "git-rollback-health-timeout", c.GitRollbackHealthTimeout, "enable spec.rollback of the root source with this health timeout (at least 10s): a revision not healthy in time is replaced by the last healthy one")
	f.StringVar(&c.GitRolloutAfter, "git-rollout-after", c.GitRolloutAfter, "spec.rollout.after.selector of the root source: apply a new revision only once the sites with these labels (such as tier=canary) report it healthy for --git-rollout-soak")
	f.DurationVar(&c.GitRolloutSoak, "git-rollout-soak", c.GitRolloutSoak, "spec.rollout.soak of the root source (default 10m): how long the sites of --git-rollout-after must have run a revision healthy")
	f.BoolVar(&c.GitStatusPush, "git-status-push", c.GitStatusPush, "set spec.statusPush of the root source: publish this site's status to refs/flotilla/status/<site> of --git-url, with the fetch credentials (for flotilla fleet status and other sites' --git-rollout-after)")
	f.DurationVar(&c.GitStatusInterval, "git-status-interval", c.GitStatusInterval, "spec.statusPush.interval of the root source (default 10m): how often the status is published when nothing changes")
	f.StringToStringVar(&c.NodeLabels, "node-label", c.NodeLabels, "extra labels of this host's Node (key=value, repeatable)")
	f.BoolVar(&c.Pods, "pods", c.Pods, "run the pods bound to this host (containerd, the pod network); false: an API/etcd-only host")
	f.StringVar(&c.ContainerdSocket, "containerd-socket", c.ContainerdSocket, "use this containerd instead of starting one under <data-dir>/containerd")
	f.StringVar(&c.RegistryConfig, "registry-config", c.RegistryConfig, "registries.yaml of image registries, as k3s's: mirrors (endpoint URLs; plain HTTP only for an http:// one) and configs (auth, tls) per registry host; default <data-dir>/registries.yaml when it exists")
	f.StringVar(&c.SeccompDefault, "seccomp-default", c.SeccompDefault, "seccomp profile of the containers of pods that set none: RuntimeDefault (containerd's default profile) or Unconfined; Localhost profiles are files below <data-dir>/seccomp")
	f.Var((*byteSize)(&c.ContainerLogMaxSize), "container-log-max-size", "size at which a container's log file is rotated (such as 10Mi; at least 1Ki); a container's logs take at most this times --container-log-max-files on disk")
	f.Var((*memoryLimit)(&c.MemoryLimit), "memory-limit", "soft limit of the agent's Go memory, as the GOMEMLIMIT environment variable (such as 200Mi): near it the garbage collector runs more often rather than let the heap double; auto: 150Mi, or 1.5 to 2 times the live heap when more (none from 200Mi of live heap), and while the API server takes 300 writes a second or more (for 2s) GOGC=200 under a quarter of the host's memory, unless GOMEMLIMIT or GOGC is set; 0: the environment's GOMEMLIMIT, or none")
	f.IntVar(&c.ContainerLogMaxFiles, "container-log-max-files", c.ContainerLogMaxFiles, "log files kept per container, the current one included (at least 2); rotated files are named <log>.<timestamp>, uncompressed")
	f.StringVar(&c.EvictionHard, "eviction-hard", c.EvictionHard, "hard eviction thresholds, as the kubelet's: SIGNAL<QUANTITY or SIGNAL<PERCENT%, comma-separated (memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available); empty: none")
	f.DurationVar(&c.EvictionPressureTransition, "eviction-pressure-transition-period", c.EvictionPressureTransition, "how long a pressure condition stays True after its threshold was last met")
	f.StringVar(&c.SystemReserved, "system-reserved", c.SystemReserved, "resources kept for the operating system, left out of the Node's allocatable (cpu=...,memory=...,ephemeral-storage=...)")
	f.StringVar(&c.KubeReserved, "kube-reserved", c.KubeReserved, "resources kept for flotilla and containerd, left out of allocatable (default "+host.DefaultKubeReserved(true)+" on a server, "+host.DefaultKubeReserved(false)+" on a worker)")
	f.IntVar(&c.ImageGCHighThresholdPercent, "image-gc-high-threshold", c.ImageGCHighThresholdPercent, "percent of the image filesystem (containerd's) used at which unused images are removed, least recently used first; 100 turns image garbage collection off")
	f.IntVar(&c.ImageGCLowThresholdPercent, "image-gc-low-threshold", c.ImageGCLowThresholdPercent, "percent of the image filesystem used that image garbage collection brings usage down to (below --image-gc-high-threshold)")
	f.DurationVar(&c.ImageMinimumGCAge, "image-minimum-gc-age", c.ImageMinimumGCAge, "how long an image is kept after it was first seen on the host, used or not")
	f.IntVar(&c.AgentPort, "agent-port", c.AgentPort, "port of the node agent's HTTPS endpoint (pod logs through the API)")
	f.StringVar(&c.ClusterCIDR, "cluster-cidr", c.ClusterCIDR, "range each host's pod CIDR (/24) is allocated from")
	f.StringVar(&c.ClusterDNS, "cluster-dns", c.ClusterDNS, "ClusterIP of the cluster DNS (Service kube-system/kube-dns), inside --service-cidr")
	f.BoolVar(&c.Etcd, "etcd", c.Etcd, "this host may hold etcd, the API and the site CA; false: a worker that holds only its own node certificates and reaches the servers' API")
	f.BoolVar(&c.Proxy, "proxy", c.Proxy, "run the Service proxy, cluster DNS and the Ingress proxy on this host")
	f.StringVar(&c.ProxyMode, "proxy-mode", c.ProxyMode, "Service dataplane: auto (ipvs when the kernel has it, else nftables), ipvs or nftables")
	f.IntVar(&c.IngressHTTPPort, "ingress-http-port", c.IngressHTTPPort, "port of the Ingress proxy (HTTP)")
	f.IntVar(&c.IngressHTTPSPort, "ingress-https-port", c.IngressHTTPSPort, "port of the Ingress proxy (HTTPS); 0 disables it")
	f.StringVar(&c.SnapshotSchedule, "snapshot-schedule", c.SnapshotSchedule, "cron expression (5 fields: minute hour day-of-month month day-of-week, UTC; or @daily, @every 6h) at which this server host saves a snapshot (as flotilla snapshot save) to <data-dir>/snapshots; empty: none")
	f.IntVar(&c.SnapshotRetention, "snapshot-retention", c.SnapshotRetention, "scheduled snapshots kept in <data-dir>/snapshots, the newest (at least 1)")
	return cmd
}

// agentMemoryPolicy is memlimit.Default following the bursts of this process's API server,
// whose heap may then grow to a quarter of the host's memory.
func agentMemoryPolicy() memlimit.Policy {
	p := memlimit.Default
	p.Writes = apiserver.Writes
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		p.Ceiling = int64(si.Totalram) * int64(si.Unit) / 4
	}
	p.Bursting = func(on bool) {
		if on {
			logrus.WithFields(logrus.Fields{"gogc": p.BurstPercent, "limit": p.Ceiling}).Infof("the API server takes %.0f writes a second or more: the heap gets more room until the burst ends", p.BurstRate)
		} else {
			logrus.Info("the burst of API writes is over: the heap returns to its limit")
		}
	}
	return p
}

// releaseStartupPages unmaps, once the host has run for settle, the pages of the executable
// that only start-up used (package initialization, the OpenAPI documents, etcd's bootstrap,
// the first sync of every cache), and the pages the kernel mapped around them: some 30 MiB of
// an idle host's resident memory. They stay in the page cache; what runs again maps back.
func releaseStartupPages(ctx context.Context, settle time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(settle):
	}
	if err := memtrim.Release(); err != nil {
		logrus.WithError(err).Warn("could not release the start-up pages of the executable")
	}
}

// memoryLimit is --memory-limit: a size, 0 (none) or auto (host.MemoryLimitAuto).
type memoryLimit int64

func (m *memoryLimit) String() string {
	switch *m {
	case host.MemoryLimitAuto:
		return "auto"
	case 0:
		return "0"
	}
	return gitsync.FormatBytes(int64(*m))
}
func (m *memoryLimit) Type() string { return "auto|size" }
func (m *memoryLimit) Set(s string) error {
	switch s {
	case "auto":
		*m = host.MemoryLimitAuto
		return nil
	case "0":
		*m = 0
		return nil
	}
	if err := (*byteSize)(m).Set(s); err != nil {
		return fmt.Errorf("%q: give auto, 0 (none) or a size such as 200Mi", s)
	}
	return nil
}
