package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

// BenchmarkFleetStatus100Sites has 100 simulated sites write their status to one bare
// repository at once (file://, go-git driving the git binary's git-receive-pack), then
// reads all of them back, once per round. Run it with -benchtime 1x for one round (make
// bench-fleet runs 5). It reports:
//
//	lost-reports   reports of the round not read back (must be 0)
//	write-ms       wall time of the 100 concurrent writes of a round
//	read-ms        wall time of one Read of the 100 statuses
//	retries        pushes tried again after a transient error, over all rounds
func BenchmarkFleetStatus100Sites(b *testing.B) {
	const sites = 100
	ctx := context.Background()
	_, url := bareRepo(b)
	var lost, failed int
	var write, read time.Duration
	retries.Store(0)
	round := 0
	for b.Loop() {
		at := t0.Add(time.Duration(round) * time.Minute)
		round++
		start := time.Now()
		for _, err := range writeConcurrently(ctx, url, sites, at) {
			if err != nil {
				failed++
				b.Log(err)
			}
		}
		write += time.Since(start)
		start = time.Now()
		got, errs := Read(ctx, gitremote.Remote{URL: url})
		read += time.Since(start)
		for _, err := range errs {
			b.Error(err)
		}
		fresh := 0
		for _, st := range got {
			if st.Time.Equal(at) {
				fresh++
			}
		}
		lost += sites - fresh
	}
	if lost > 0 {
		b.Errorf("%d reports lost (%d writes failed)", lost, failed)
	}
	b.ReportMetric(float64(lost), "lost-reports")
	b.ReportMetric(float64(write.Milliseconds())/float64(round), "write-ms")
	b.ReportMetric(float64(read.Microseconds())/1000/float64(round), "read-ms")
	b.ReportMetric(float64(retries.Load()), "retries")
	// ns/op would mix the writes and the read: the metrics above say what each takes.
	b.ReportMetric(0, "ns/op")
}
