package stats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc/stat's counters (USER_HZ), 100 per second on every
// architecture the agent is built for.
const userHZ = 100

// Cgroups reads the counters of the cgroups under a cgroup filesystem root, normally
// /sys/fs/cgroup: the unified hierarchy (cgroup v2) when the root holds cgroup.controllers,
// otherwise the cpuacct and memory controllers of cgroup v1 mounted below it.
type Cgroups struct {
	Root string
}

// V2 reports whether Root is the unified (cgroup v2) hierarchy.
func (c Cgroups) V2() bool {
	_, err := os.Stat(filepath.Join(c.Root, "cgroup.controllers"))
	return err == nil
}

// v1CPUDirs are the names the cgroup v1 cpuacct controller is mounted under.
var v1CPUDirs = []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu", "cpu"}

// CPU returns the cumulative CPU time of the cgroup at path (as runc names it, e.g.
// "/flotilla/host-1/<container id>"), in nanoseconds.
func (c Cgroups) CPU(path string) (uint64, error) {
	if c.V2() {
		b, err := os.ReadFile(filepath.Join(c.Root, path, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		return ParseCPUStat(b)
	}
	var err error
	for _, dir := range v1CPUDirs {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(c.Root, dir, path, "cpuacct.usage")); err == nil {
			return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	return 0, err
}

// Memory returns the memory usage and the working set of the cgroup at path, in bytes.
func (c Cgroups) Memory(path string) (usage, workingSet uint64, err error) {
	usageFile, inactiveKey := "memory.current", "inactive_file"
	dir := filepath.Join(c.Root, path)
	if !c.V2() {
		usageFile, inactiveKey = "memory.usage_in_bytes", "total_inactive_file"
		dir = filepath.Join(c.Root, "memory", path)
	}
	b, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, 0, err
	}
	if usage, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", usageFile, err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "memory.stat")); err != nil {
		return 0, 0, err
	}
	stat := parseKeyValues(b)
	return usage, WorkingSet(usage, stat[inactiveKey]), nil
}

// WorkingSet is usage less the inactive file pages the kernel can drop, never below zero.
func WorkingSet(usage, inactiveFile uint64) uint64 { return sub(usage, inactiveFile) }

// sub is a - b, or 0 when b is larger.
func sub(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// ParseCPUStat returns usage_usec of a cgroup v2 cpu.stat file, in nanoseconds.
func ParseCPUStat(b []byte) (uint64, error) {
	v, ok := parseKeyValues(b)["usage_usec"]
	if !ok {
		return 0, errors.New("cpu.stat has no usage_usec")
	}
	return v * 1000, nil
}

// parseKeyValues reads "key value" lines (cpu.stat, memory.stat); lines that do not parse
// are skipped.
func parseKeyValues(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}

// NodeCPU returns the host's cumulative busy CPU time from procRoot/stat, in nanoseconds.
func NodeCPU(procRoot string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return 0, err
	}
	return ParseProcStat(b)
}

// ParseProcStat returns the busy time of the "cpu" line of /proc/stat (user, nice, system,
// irq, softirq and steal; idle and iowait are not busy, guest time is already in user), in
// nanoseconds.
func ParseProcStat(b []byte) (uint64, error) {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var busy uint64
		// user nice system idle iowait irq softirq steal guest guest_nice
		for i, v := range f[1:] {
			if i == 3 || i == 4 || i >= 8 {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat cpu line: %w", err)
			}
			busy += n
		}
		return busy * (1e9 / userHZ), nil
	}
	return 0, errors.New("/proc/stat has no cpu line")
}

// NodeMemory returns the host's memory usage and working set from procRoot/meminfo, in bytes.
func NodeMemory(procRoot string) (usage, workingSet uint64, err error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, 0, err
	}
	return ParseMeminfo(b)
}

// ParseMeminfo returns usage (MemTotal - MemFree) and working set (usage - Inactive(file))
// of a /proc/meminfo file, in bytes.
func ParseMeminfo(b []byte) (usage, workingSet uint64, err error) {
	kb := map[string]uint64{}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			kb[name] = v
		}
	}
	total, ok1 := kb["MemTotal"]
	free, ok2 := kb["MemFree"]
	if !ok1 || !ok2 {
		return 0, 0, errors.New("/proc/meminfo has no MemTotal or MemFree")
	}
	usage = sub(total, free) * 1024
	return usage, WorkingSet(usage, kb["Inactive(file)"]*1024), nil
}
