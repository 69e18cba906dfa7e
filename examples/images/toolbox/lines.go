package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// lines prints count numbered lines ("line N" padded with dots to 100 bytes) on stdout at about
// rate lines a second (0: as fast as possible), then sleeps until stopped: a known stream for
// log tests (rotation, kubectl logs -f).
func lines(count, rate string) int {
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return fail("lines COUNT [RATE]: COUNT must be a number, not %q", count)
	}
	r := 0
	if rate != "" {
		if r, err = strconv.Atoi(rate); err != nil || r < 0 {
			return fail("lines COUNT [RATE]: RATE must be lines a second, not %q", rate)
		}
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	pad := strings.Repeat(".", 100)
	// Every 10 ms, the lines due by then.
	start := time.Now()
	for i := 0; i < n; i++ {
		if r > 0 && i%max(r/100, 1) == 0 {
			if err := w.Flush(); err != nil {
				return fail("%v", err)
			}
			if due := start.Add(time.Duration(i) * time.Second / time.Duration(r)); time.Until(due) > 0 {
				time.Sleep(time.Until(due))
			}
		}
		s := fmt.Sprintf("line %d ", i)
		s += pad[:100-1-len(s)]
		if _, err := fmt.Fprintln(w, s); err != nil {
			return fail("%v", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fail("%v", err)
	}
	return run("sleep", []string{"inf"})
}
