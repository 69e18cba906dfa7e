package host

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/clusterroleaggregation"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/cronjob"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrapproving"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrsigning"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/daemonset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/deployment"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/disruption"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/endpointslice"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/ephemeralvolume"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/garbagecollector"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/job"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/namespace"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/nodeipam"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/nodelifecycle"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/podautoscaler"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/policyinventory"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/replicaset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/resourcequota"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/rootca"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/serviceaccount"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/servicelb"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/statefulset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/unenforced"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
	"github.com/flotilla-dev/flotilla/reconciler/scheduler"
)

// controllerList is every controller the leader runs, configured from cfg.
func controllerList(cfg Config) []controllers.Named {
	dataDir, clusterCIDR, gitLimits, signingDuration := cfg.DataDir, cfg.ClusterCIDR, cfg.GitLimits, cfg.ClusterSigningDuration
	localVolumePath := cfg.LocalVolumePath
	return []controllers.Named{
		{Name: "gitsync", New: func(c *controllers.Context) (controllers.Runner, error) {
			return gitsync.NewWithConfig(c, gitsync.Config{CacheDir: filepath.Join(dataDir, "git"), Limits: gitLimits})
		}, Workers: 2},
		{Name: "replicaset", New: replicaset.New, Workers: 3},
		{Name: "deployment", New: deployment.New, Workers: 3},
		{Name: "statefulset", New: statefulset.New, Workers: 2},
		{Name: "daemonset", New: daemonset.New, Workers: 2},
		{Name: "job", New: job.New, Workers: 3},
		{Name: "cronjob", New: cronjob.New, Workers: 1},
		{Name: "podautoscaler", New: podautoscaler.New, Workers: 2},
		{Name: "servicelb", New: servicelb.New, Workers: 1},
		{Name: "volumebinding", New: volumebinding.New, Workers: 2},
		{Name: "volumeprotection", New: volumeprotection.New, Workers: 2},
		{Name: "ephemeralvolume", New: ephemeralvolume.New, Workers: 2},
		{Name: "localvolume", New: func(c *controllers.Context) (controllers.Runner, error) {
			return localvolume.NewWithOptions(c, localvolume.Options{Path: localVolumePath})
		}, Workers: 2},
		{Name: "serviceaccount", New: serviceaccount.New, Workers: 1},
		{Name: "rootca", New: rootca.New, Workers: 1},
		{Name: "clusterroleaggregation", New: clusterroleaggregation.New, Workers: 1},
		{Name: "unenforced", New: unenforced.New, Workers: 1},
		{Name: "policyinventory", New: policyinventory.New, Workers: 1},
		{Name: "garbagecollector", New: func(c *controllers.Context) (controllers.Runner, error) { return garbagecollector.New(c) }, Workers: 3},
		{Name: "endpointslice", New: endpointslice.New, Workers: 3},
		{Name: "disruption", New: disruption.New, Workers: 2},
		{Name: "resourcequota", New: resourcequota.New, Workers: 2},
		{Name: "nodelifecycle", New: func(c *controllers.Context) (controllers.Runner, error) {
			nc := nodelifecycle.DefaultConfig()
			if cfg.NodeMonitorGracePeriod > 0 {
				nc.GracePeriod = cfg.NodeMonitorGracePeriod
			}
			return nodelifecycle.NewWithConfig(c, nc)
		}, Workers: 1},
		{Name: "scheduler", New: func(c *controllers.Context) (controllers.Runner, error) {
			return scheduler.New(c, scheduler.Options{})
		}, Workers: 1},
		{Name: "nodeipam", New: func(c *controllers.Context) (controllers.Runner, error) {
			return nodeipam.NewWithOptions(c, nodeipam.Options{ClusterCIDR: clusterCIDR})
		}, Workers: 1},
		{Name: "namespace", New: func(c *controllers.Context) (controllers.Runner, error) { return namespace.New(c) }, Workers: 2},
		{Name: "csrapproving", New: csrapproving.New, Workers: 1},
		{Name: "csrsigning", New: func(c *controllers.Context) (controllers.Runner, error) {
			sc := csrsigning.DefaultConfig()
			if signingDuration > 0 {
				sc.Duration = signingDuration
			}
			return csrsigning.NewWithConfig(c, sc)
		}, Workers: 1},
	}
}

// SelectControllers returns the controllers named by spec (--controllers): "*" for all, a
// comma list of names, or empty for none.
func SelectControllers(spec string, cfg Config) ([]controllers.Named, error) {
	all := controllerList(cfg)
	spec = strings.TrimSpace(spec)
	if spec == "*" {
		return all, nil
	}
	var out []controllers.Named
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		found := false
		for _, c := range all {
			if c.Name == name {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			var names []string
			for _, c := range all {
				names = append(names, c.Name)
			}
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}
