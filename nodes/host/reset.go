package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/nodes/runtime"
)

// Reset removes what a stopped host leaves running on purpose (its containers keep running
// across agent restarts): containers, containerd, pod sandboxes, mounts and cgroups, and what
// it programmed into the current network namespace (ResetNetwork: the bridge, its routes,
// the nftables tables, IPVS). The agent of dataDir must be stopped; name is the host name it
// ran as. Every step runs whatever the others did; running it again is harmless.
func Reset(ctx context.Context, dataDir, name string) error {
	return ResetOnly(ctx, dataDir, name, true)
}

// ResetOnly is Reset, leaving the network namespace alone unless network is set.
func ResetOnly(ctx context.Context, dataDir, name string, network bool) error {
	log := logrus.WithField("host", name)
	var errs []error
	if _, err := os.Stat(filepath.Join(dataDir, "containerd")); err == nil {
		self, _ := os.Executable()
		if err := runtime.Teardown(ctx, runtime.Config{Dir: filepath.Join(dataDir, "containerd"), CgroupParent: "/flotilla/" + name,
			LoggerBinary: self, Log: log}); err != nil {
			// Cgroups of just-killed containers may still be busy; removeCgroups retries below.
			log.WithError(err).Debug("runtime teardown")
		}
	}
	// Whatever containerd no longer knows of (its state lost with a crash) still runs in our
	// cgroups or as a shim of our socket: end those processes too.
	if n := killLeftovers(dataDir, "/flotilla/"+name); n > 0 {
		log.WithField("processes", n).Warn("killed processes containerd did not account for")
	}
	if err := unmountUnder(dataDir); err != nil {
		errs = append(errs, err)
	}
	for i := 0; ; i++ {
		left := removeCgroups("/flotilla/" + name)
		if len(left) == 0 {
			break
		}
		if i == 20 {
			errs = append(errs, fmt.Errorf("cgroups still in use: %s", strings.Join(left, ", ")))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// After the pods: their namespaces are gone, and with them most veths.
	if network {
		if err := ResetNetwork(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount below dir (pod network namespaces, memory emptyDirs),
// deepest first.
func unmountUnder(dir string) error {
	points, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// MountsUnder lists the mount points below dir, deepest first.
func MountsUnder(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := strings.ReplaceAll(fields[4], `\040`, " ")
		if strings.HasPrefix(p, abs+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points, s.Err()
}

// removeCgroups removes the (now empty) cgroup directories of parent in every hierarchy and
// returns those that remain.
func removeCgroups(parent string) []string {
	var left []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		dir := filepath.Join(root, parent)
		var dirs []string
		_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				left = append(left, d)
			}
		}
	}
	return left
}

// killLeftovers kills the shims serving dataDir's containerd socket and every process in the
// cgroup parent's hierarchies; it returns how many it signalled.
func killLeftovers(dataDir, parent string) int {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return 0
	}
	pids := map[int]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "containerd-shim") && strings.Contains(cmd, "-address "+filepath.Join(abs, "containerd")+"/") {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				pids[pid] = true
			}
		}
	}
	for _, pid := range CgroupProcesses(parent) {
		pids[pid] = true
	}
	for pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// CgroupProcesses lists the processes in the cgroup parent (such as "/flotilla/<host>", where
// a host's containers run) and below it, in every cgroup hierarchy.
func CgroupProcesses(parent string) []int {
	seen := map[int]bool{}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		_ = filepath.Walk(filepath.Join(root, parent), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}
