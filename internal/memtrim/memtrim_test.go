package memtrim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// executableRSS is how much of the executable's read-only mappings is mapped into the
// process (Rss of /proc/self/smaps), in KiB.
func executableRSS(t *testing.T, regions []Region) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	starts := map[uint64]bool{}
	for _, r := range regions {
		starts[uint64(r.Start)] = true
	}
	total, in := 0, false
	s := bufio.NewScanner(f)
	for s.Scan() {
		fl := strings.Fields(s.Text())
		if len(fl) == 0 {
			continue
		}
		if lo, _, ok := strings.Cut(fl[0], "-"); ok && len(fl) >= 5 {
			a, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && starts[a]
			continue
		}
		if in && fl[0] == "Rss:" {
			n, err := strconv.Atoi(fl[1])
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

func TestReleaseUnmapsTheExecutablesReadOnlyPages(t *testing.T) {
	regions, err := ExecutableRegions()
	if err != nil {
		t.Fatal(err)
	}
	var code bool
	for _, r := range regions {
		if r.Perms != "r-xp" && r.Perms != "r--p" {
			t.Errorf("region %x-%x is %s: only read-only mappings may be released", r.Start, r.End, r.Perms)
		}
		code = code || r.Perms == "r-xp"
	}
	if !code {
		t.Fatalf("no mapping of the executable's code found in /proc/self/maps: %+v", regions)
	}
	// Map every page in, as a long start-up does.
	for _, r := range regions {
		if err := madvise(r, unix.MADV_POPULATE_READ); err != nil {
			t.Fatalf("populate %x-%x: %v", r.Start, r.End, err)
		}
	}
	before := executableRSS(t, regions)
	if err := Release(); err != nil {
		t.Fatal(err)
	}
	after := executableRSS(t, regions)
	t.Logf("executable's read-only pages mapped: %d KiB before, %d KiB after", before, after)
	if before == 0 {
		t.Fatal("no page of the executable's mappings found mapped in /proc/self/smaps")
	}
	if after*4 > before*3 {
		t.Errorf("after Release %d KiB of the executable stay mapped, of %d KiB", after, before)
	}
}
