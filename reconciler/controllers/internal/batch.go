package internal

import "sync"

// SlowStartInitialBatchSize is the first batch of SlowStartBatch, as upstream.
const SlowStartInitialBatchSize = 1

// SlowStartBatch calls fn count times in batches that double in size (1, 2, 4, ...), each
// batch in parallel, and stops after the first batch with an error. When a quota or an
// admission policy refuses pods this makes one failed call instead of hundreds. It returns the
// number of successful calls and the first error.
func SlowStartBatch(count, initialBatchSize int, fn func() error) (int, error) {
	remaining := count
	successes := 0
	for batch := min(remaining, initialBatchSize); batch > 0; batch = min(2*batch, remaining) {
		errCh := make(chan error, batch)
		var wg sync.WaitGroup
		wg.Add(batch)
		for i := 0; i < batch; i++ {
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errCh <- err
				}
			}()
		}
		wg.Wait()
		successes += batch - len(errCh)
		if len(errCh) > 0 {
			return successes, <-errCh
		}
		remaining -= batch
	}
	return successes, nil
}
