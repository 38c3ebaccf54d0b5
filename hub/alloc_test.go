package hub

import (
	"fmt"
	"testing"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestApplyAllocs: applying a valid batch to windows that exist allocates
// nothing (BenchmarkMerge measures the same at scale), whatever the checks
// on the way: validation, the clock bound, the watermark.
// Partials of managed revisions (two of one class, alternating) too.
func TestApplyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, managed := range []bool{false, true} {
		t.Run(fmt.Sprint("managed=", managed), func(t *testing.T) { testApplyAllocs(t, managed) })
	}
}

func testApplyAllocs(t *testing.T, managed bool) {
	revs := tempsRevisions(t)
	th := newTestHub(t, func(c *Config) { c.Revisions = revs })
	p := th.pipes[0]
	now := th.nowMs()
	b := &runnelv1.Batch{EdgeId: "e", Epoch: 1, Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", WatermarkMs: now}}}
	for k := range 100 {
		pt := partial(p, 0, fmt.Sprintf("k%d", k), now-60_000, 1, 2)
		if managed {
			pt.Revision = uint32(1 + k%2)
		}
		b.Partials = append(b.Partials, pt)
	}
	next := uint64(1)
	apply := func() {
		b.FirstSeq = next
		for _, pt := range b.Partials {
			pt.Seq = next
			next++
		}
		b.LastSeq = next - 1
		if err := th.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	if n := testing.AllocsPerRun(20, apply); n != 0 {
		t.Fatalf("%v allocations per batch of %d partials, want 0", n, len(b.Partials))
	}
}
