package host

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigCompleteBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no data dir", func(c *Config) { c.DataDir = "" }, "--data-dir is required"},
		{"bad listen address", func(c *Config) { c.ListenAddress = "localhost" }, "--listen-address"},
		{"port out of range", func(c *Config) { c.GossipPort = 70000 }, "--gossip-port 70000"},
		{"even voters", func(c *Config) { c.EtcdVoters = 2 }, "use 1, 3 or 5"},
		{"join without token", func(c *Config) { c.Join = []string{"10.0.0.1:7946"} }, "--join needs --token-file"},
		{"overlapping ranges", func(c *Config) { c.ClusterCIDR = "10.96.0.0/16" }, "overlaps --service-cidr"},
		{"dns outside services", func(c *Config) { c.ClusterDNS = "10.244.0.10" }, "inside --service-cidr"},
		{"unknown proxy mode", func(c *Config) { c.ProxyMode = "iptables" }, "use auto, ipvs or nftables"},
		{"unknown controller", func(c *Config) { c.Controllers = "deployment,hpa" }, `unknown controller "hpa"`},
		{"relative local volume path", func(c *Config) { c.LocalVolumePath = "volumes" }, `--local-volume-path "volumes" must be an absolute path`},
		{"bad node port range", func(c *Config) { c.NodePortRange = "32767-30000" }, "--node-port-range"},
		{"unknown seccomp default", func(c *Config) { c.SeccompDefault = "Localhost" }, "--seccomp-default"},
		{"one container log file", func(c *Config) { c.ContainerLogMaxFiles = 1 }, "--container-log-max-files 1"},
		{"tiny container log", func(c *Config) { c.ContainerLogMaxSize = 100 }, "--container-log-max-size 100"},
		{"tiny memory limit", func(c *Config) { c.MemoryLimit = 1 << 20 }, "--memory-limit 1048576: give auto, 0 (none) or at least 64Mi"},
		{"negative audit rotation", func(c *Config) { c.AuditLogMaxBackup = -1 }, "--audit-log-maxbackup"},
		{"audit policy without log", func(c *Config) { c.AuditLogPath, c.AuditPolicyFile = "", "p.yaml" }, "--audit-policy-file"},
		{"reserved node label", func(c *Config) { c.NodeLabels = map[string]string{"node-role.kubernetes.io/worker": ""} }, "--node-label node-role.kubernetes.io/worker"},
		{"node-restriction label", func(c *Config) { c.NodeLabels = map[string]string{"node-restriction.kubernetes.io/pool": "a"} }, "node-restriction.kubernetes.io/pool"},
		{"bad eviction threshold", func(c *Config) { c.EvictionHard = "memory.available>1Gi" }, "--eviction-hard"},
		{"negative pressure transition", func(c *Config) { c.EvictionPressureTransition = -time.Second }, "--eviction-pressure-transition-period"},
		{"bad kube reservation", func(c *Config) { c.KubeReserved = "gpu=1" }, "--kube-reserved"},
		{"bad system reservation", func(c *Config) { c.SystemReserved = "memory" }, "--system-reserved"},
		{"site not a DNS label", func(c *Config) { c.Site = "Shop_Berlin" }, "--site: site name"},
		{"site label without value", func(c *Config) { c.SiteLabels = "tier" }, "--site-labels: site labels \"tier\""},
		{"reserved site label", func(c *Config) { c.SiteLabels = "topology.kubernetes.io/zone=a" }, "reserved"},
		{"site label against node label", func(c *Config) { c.SiteLabels, c.NodeLabels = "tier=canary", map[string]string{"tier": "edge"} }, "--site-labels tier=canary and --node-label tier=edge"},
		{"site on a worker", func(c *Config) {
			c.Etcd, c.Join, c.TokenFile, c.Site = false, []string{"10.0.0.1:7946"}, "t", "paris"
		}, "a worker belongs to the site it joins"},
		{"rollout without a repository", func(c *Config) { c.GitRolloutAfter = "tier=canary" }, "give --git-url too"},
		{"rollout after a bad selector", func(c *Config) { c.GitURL, c.GitRolloutAfter = "https://git.example.com/f.git", "tier==(" }, "--git-rollout-after"},
		{"short status interval", func(c *Config) {
			c.GitURL, c.GitStatusPush, c.GitStatusInterval = "https://git.example.com/f.git", true, time.Second
		}, "--git-status-interval 1s"},
		{"short health timeout", func(c *Config) { c.GitURL, c.GitRollbackHealthTimeout = "https://git.example.com/f.git", time.Second }, "--git-rollback-health-timeout 1s"},
		{"interval under the minimum", func(c *Config) { c.GitURL, c.GitInterval = "https://git.example.com/f.git", 2*time.Second }, "--git-interval 2s"},
		{"http repository without insecure", func(c *Config) { c.GitURL = "http://git.example.com/f.git" }, "spec.insecure"},
		{"worker without join", func(c *Config) { c.Etcd = false }, "--etcd=false makes a worker"},
		{"worker without pods", func(c *Config) { c.Etcd, c.Pods, c.Join, c.TokenFile = false, false, []string{"10.0.0.1:7946"}, "t" }, "leaves the host nothing to do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.DataDir, c.Name = t.TempDir(), "host-1"
			tc.change(&c)
			if _, err := c.Complete(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Complete() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigCompleteDefaults(t *testing.T) {
	c := DefaultConfig()
	c.DataDir, c.Name = t.TempDir(), "host-1"
	vopts, err := c.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if c.AdvertiseAddress == "" || vopts.ServiceCIDR.String() != "10.96.0.0/12" || vopts.NodePortMin != 30000 || vopts.NodePortMax != 32767 {
		t.Fatalf("completed config: advertise %q, options %+v", c.AdvertiseAddress, vopts)
	}
}

func TestConfigCompleteAuditLogPath(t *testing.T) {
	for _, tc := range []struct{ given, want string }{
		{DefaultAuditLogPath, "audit.log"}, {"-", "-"}, {"", ""}, {"/var/log/flotilla-audit.log", "/var/log/flotilla-audit.log"},
	} {
		c := DefaultConfig()
		c.DataDir, c.Name = t.TempDir(), "host-1"
		c.AuditLogPath = tc.given
		if _, err := c.Complete(); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if want == "audit.log" {
			want = filepath.Join(c.DataDir, "audit.log")
		}
		if c.AuditLogPath != want {
			t.Errorf("--audit-log-path %q completes to %q, want %q", tc.given, c.AuditLogPath, want)
		}
	}
}
