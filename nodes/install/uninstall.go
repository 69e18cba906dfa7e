package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/flotilla-dev/flotilla/nodes/host"
)

// UninstallOptions say which host to remove.
type UninstallOptions struct {
	DataDir string
	// Name is the host name the agent ran as (its cgroup parent is /flotilla/<name>).
	Name string
	// KeepData keeps the data directory (the site CA, etcd, the checkpoint...).
	KeepData bool
	UnitDir  string
	// StopTimeout is how long the agent has to exit after SIGTERM before SIGKILL.
	StopTimeout time.Duration
	Systemctl   func(args ...string) error
	Systemd     *bool
	// Log reports each step done.
	Log func(format string, args ...any)
	// skipReset leaves the host's containers and network alone (unit tests).
	skipReset bool
}

// Uninstall stops the agent of DataDir (the service where systemd runs it, else the process
// its PID file names) and removes everything it created: containers and their shims,
// containerd, pod network namespaces, mounts and cgroups, the bridge, routes, nftables tables
// and IPVS services of the current network namespace (host.Reset), the unit, and unless
// KeepData the data directory. Every step runs whatever the others did; the errors are
// returned together, and running it again is harmless.
func Uninstall(ctx context.Context, o UninstallOptions) error {
	io := Options{UnitDir: o.UnitDir, Systemctl: o.Systemctl, Systemd: o.Systemd}.withDefaults()
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.DataDir == "" {
		return errors.New("--data-dir is required: the agent's data directory")
	}
	if o.Name == "" {
		return errors.New("--name is required: the host name the agent ran as")
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	// A mistyped --data-dir must not go on to stop and remove things.
	if err := checkDataDir(dataDir); err != nil {
		return err
	}
	var errs []error
	unit := filepath.Join(io.UnitDir, UnitName)
	_, uerr := os.Stat(unit)
	if *io.Systemd && uerr == nil {
		for _, args := range [][]string{{"stop", ServiceName}, {"disable", ServiceName}} {
			if err := io.Systemctl(args...); err != nil {
				errs = append(errs, err)
			}
		}
		o.Log("stopped and disabled the service %s", ServiceName)
	}
	if pid, err := host.StopAgent(dataDir, o.StopTimeout); err != nil {
		errs = append(errs, err)
	} else if pid > 0 {
		o.Log("stopped the agent (pid %d)", pid)
	}
	if !o.skipReset {
		if err := host.Reset(ctx, dataDir, o.Name); err != nil {
			errs = append(errs, err)
		} else {
			o.Log("removed the containers, containerd, pod network, mounts, cgroups, routes, nftables tables and IPVS services")
		}
	}
	// The parent of every host's cgroups, once no host uses it.
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/flotilla")
	for _, p := range append(parents, "/sys/fs/cgroup/flotilla") {
		_ = os.Remove(p)
	}
	if uerr == nil {
		if err := os.Remove(unit); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("remove the unit: %w", err))
		} else {
			o.Log("removed %s", unit)
			if *io.Systemd {
				if err := io.Systemctl("daemon-reload"); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if o.KeepData {
		o.Log("kept the data directory %s", dataDir)
	} else if err := removeDataDir(dataDir); err != nil {
		errs = append(errs, err)
	} else {
		o.Log("removed the data directory %s", dataDir)
	}
	return errors.Join(errs...)
}

// dataDirMarkers are files only a flotilla data directory holds (one is enough).
var dataDirMarkers = []string{"cluster.json", "pki", "containerd", "checkpoint", "kubeconfig", "etcd", host.PIDFileName}

// removeDataDir deletes dir when it looks like an agent's data directory; a directory of
// something else is refused.
func removeDataDir(dir string) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	if err := checkDataDir(dir); err != nil {
		return err
	}
	// A mount left below it (one the reset could not detach) may be a bind of the host's own
	// files into a container: removing through it would delete them.
	if mounts, err := host.MountsUnder(dir); err != nil || len(mounts) > 0 {
		return fmt.Errorf("the data directory %s was kept: mounts remain below it (%v, %v); unmount them and run uninstall again", dir, mounts, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the data directory: %w", err)
	}
	return nil
}

// checkDataDir refuses the root and a non-empty directory holding none of dataDirMarkers; a
// missing directory is fine (removed already).
func checkDataDir(dir string) error {
	if dir == "/" || filepath.Dir(dir) == dir {
		return fmt.Errorf("--data-dir %s: refusing to use the root directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return nil
	}
	for _, m := range dataDirMarkers {
		if _, err := os.Lstat(filepath.Join(dir, m)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s does not look like a flotilla data directory (none of %v in it): nothing was stopped or removed; check --data-dir", dir, dataDirMarkers)
}
