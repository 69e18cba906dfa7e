package main

import (
	"fmt"
	"os"
	"strconv"
)

// fill writes mib MiB to file, synced to its storage, then sleeps until stopped. A failed
// write (a full volume: ENOSPC) is reported on stderr and ends the command with 1.
func fill(file, mib string) int {
	n, err := strconv.Atoi(mib)
	if err != nil || n < 0 {
		return fail("fill FILE MIB: MIB must be a number of MiB, not %q", mib)
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fail("%v", err)
	}
	// Varied bytes: a file system that compresses or deduplicates still stores them.
	chunk := make([]byte, 1<<20)
	x := uint32(2463534242)
	for i := range chunk {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		chunk[i] = byte(x)
	}
	for i := 0; i < n; i++ {
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return fail("wrote %d MiB of %d to %s: %v", i, n, file, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fail("sync %s: %v", file, err)
	}
	if err := f.Close(); err != nil {
		return fail("close %s: %v", file, err)
	}
	fmt.Printf("wrote %d MiB to %s\n", n, file)
	return run("sleep", []string{"inf"})
}
