package runtime

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// LimitCgroupParent caps what the containers below parent (Config.CgroupParent, e.g.
// "/flotilla/host-1") may use together, as the kubelet's pods cgroup enforces node
// allocatable: memoryBytes of memory (0: no cap) and a CPU weight in proportion to cpuMilli
// (cpu.shares = cpuMilli × 1024 / 1000 with cgroup v1, cpu.weight with v2), so pods cannot
// starve etcd and the agent. The cgroup is created if missing.
func LimitCgroupParent(parent string, memoryBytes, cpuMilli int64) error {
	return limitCgroupParent("/sys/fs/cgroup", parent, memoryBytes, cpuMilli)
}

func limitCgroupParent(root, parent string, memoryBytes, cpuMilli int64) error {
	parent = path.Clean("/" + parent)
	if parent == "/" {
		return errors.New("limit the pods' cgroup: refusing to limit the root cgroup")
	}
	shares := max(cpuMilli*1024/1000, 2)
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return limitV2(root, parent, memoryBytes, shares)
	}
	var errs []error
	if memoryBytes > 0 {
		errs = append(errs, writeCgroup(filepath.Join(root, "memory", parent), "memory.limit_in_bytes", strconv.FormatInt(memoryBytes, 10)))
	}
	if cpuMilli > 0 {
		errs = append(errs, writeCgroup(filepath.Join(root, "cpu", parent), "cpu.shares", strconv.FormatInt(shares, 10)))
	}
	return errors.Join(errs...)
}

// limitV2 enables the memory and cpu controllers down to parent and writes memory.max and
// cpu.weight (shares mapped to 1-10000 as runc does: 1 + ((shares-2)*9999)/262142).
func limitV2(root, parent string, memoryBytes, shares int64) error {
	dir := root
	for _, part := range strings.Split(strings.TrimPrefix(parent, "/"), "/") {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644); err != nil {
			return fmt.Errorf("enable the memory and cpu controllers in %s: %w", dir, err)
		}
		dir = filepath.Join(dir, part)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	var errs []error
	if memoryBytes > 0 {
		errs = append(errs, writeCgroup(dir, "memory.max", strconv.FormatInt(memoryBytes, 10)))
	}
	weight := 1 + ((shares-2)*9999)/262142
	errs = append(errs, writeCgroup(dir, "cpu.weight", strconv.FormatInt(weight, 10)))
	return errors.Join(errs...)
}

func writeCgroup(dir, file, value string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s of cgroup %s: %w", file, dir, err)
	}
	return nil
}
