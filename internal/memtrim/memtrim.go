// Package memtrim unmaps from the process the pages of its own executable that only its
// start-up ran.
package memtrim

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Region is one read-only mapping of the executable.
type Region struct {
	Start, End uintptr
	Perms      string
}

// ExecutableRegions lists the read-only mappings (code and constant data) of the running
// executable, from /proc/self/maps.
func ExecutableRegions() ([]Region, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Region
	s := bufio.NewScanner(f)
	for s.Scan() {
		fl := strings.Fields(s.Text())
		// address perms offset dev inode path
		if len(fl) < 6 || strings.Join(fl[5:], " ") != exe {
			continue
		}
		if fl[1] != "r-xp" && fl[1] != "r--p" {
			continue // writable data is the program's own state
		}
		lo, hi, ok := strings.Cut(fl[0], "-")
		if !ok {
			return nil, fmt.Errorf("/proc/self/maps: bad range %q", fl[0])
		}
		a, err := strconv.ParseUint(lo, 16, 64)
		if err != nil {
			return nil, err
		}
		b, err := strconv.ParseUint(hi, 16, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, Region{Start: uintptr(a), End: uintptr(b), Perms: fl[1]})
	}
	return out, s.Err()
}

func madvise(r Region, advice int) error {
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, uintptr(advice))
	if errno != 0 {
		return errno
	}
	return nil
}

// Release unmaps the executable's read-only pages (code and constants) from the process.
// They stay in the page cache (clean, reclaimable like any file page), and the kernel maps a
// page back at its next use: what comes back is what the program still runs, and the code
// around it. Nothing is released while a debugger is attached.
func Release() error {
	if traced() {
		// A debugger's breakpoints are private copies of code pages: releasing them would
		// drop the breakpoints.
		return nil
	}
	regions, err := ExecutableRegions()
	if err != nil {
		return err
	}
	for _, r := range regions {
		if err := madvise(r, unix.MADV_DONTNEED); err != nil {
			return fmt.Errorf("madvise %x-%x: %w", r.Start, r.End, err)
		}
	}
	return nil
}

// traced reports whether a debugger (ptrace) is attached to the process.
func traced() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}
