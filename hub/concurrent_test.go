package hub

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestConcurrentApply runs edges in parallel against the commit loop (-race
// checks the locking) and waits for the acks as a server would; with a
// tiny residency, windows are evicted and reloaded meanwhile.
func TestConcurrentApply(t *testing.T) {
	for _, resident := range []time.Duration{0, time.Nanosecond} {
		t.Run(fmt.Sprint("resident=", resident), func(t *testing.T) { testConcurrentApply(t, resident) })
	}
}

func testConcurrentApply(t *testing.T, resident time.Duration) {
	th := newTestHub(t, func(c *Config) { c.CommitInterval = time.Millisecond; c.Resident = resident })
	p := th.pipes[0]
	const edges, batches = 4, 50
	var wg sync.WaitGroup
	for e := range edges {
		wg.Go(func() {
			id := fmt.Sprintf("e%d", e)
			for i := range uint64(batches) {
				b := wm(batch(id, 1, i+1, i+1, partial(p, i+1, fmt.Sprintf("k%d", i%5), int64(i%3)*1000, 1)), "temps", 3000)
				if err := th.Apply(b); err != nil {
					t.Error(err)
					return
				}
			}
			for {
				_, seq, next := th.Acked(id)
				if seq == batches {
					return
				}
				<-next
			}
		})
	}
	wg.Wait()
	if err := th.Commit(); err != nil {
		t.Fatal(err)
	}
	rs, _, err := th.Query(Query{Pipeline: "temps"})
	if err != nil || len(rs) != 15 {
		t.Fatalf("%d results, %v", len(rs), err)
	}
	for _, r := range rs {
		if r.Edges != edges || th.count(r) != edges {
			t.Fatalf("%s@%d: %d edges, count %d", r.Key, r.Start, r.Edges, th.count(r))
		}
	}
}
