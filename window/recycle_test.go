package window

import (
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/window/aggregate"
)

// TestRecycledChunksFollowUse: after a slice that fills whole chunks, slices
// that hold one key a chunk get, once recycling has seen them, chunks with
// room for what they use rather than for the dense slice's peak, wherever
// in the key space their keys are (the shape eviction leaves: keys
// scattered over a key space grown during a burst).
func TestRecycledChunksFollowUse(t *testing.T) {
	set, err := aggregate.NewSet([]aggregate.Spec{{Name: "n", Func: aggregate.Count, Input: -1}}, aggregate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewOperator(Config{Assigner: TumblingWindows(10), Aggregates: set, Emit: func(*Result) {}})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 8 * chunkSize
	names := make([][]byte, keys)
	for i := range names {
		names[i] = fmt.Appendf(nil, "k%05d", i)
	}
	add := func(k int, ts int64) {
		o.Add(names[k], xxhash.Sum64(names[k]), &aggregate.Input{Time: ts})
	}
	for k := range keys { // slice [0, 10): every key, 8 full chunks
		add(k, 5)
	}
	// Then 40 slices, each with one key in each of 8 chunks, a different
	// key each slice (so they also land where the dense slice had none).
	for s := int64(1); s <= 40; s++ {
		for c := range 8 {
			add(c*chunkSize+int(s)*17%chunkSize, s*10+5)
		}
		o.Advance(s*10 + 9)
	}
	room := 0
	count := func(chs []*chunk) {
		for _, ch := range chs {
			if ch != nil {
				room += ch.states.Len()
			}
		}
	}
	for _, sb := range o.slabs {
		count(sb.chunks)
	}
	for _, sb := range o.freeSlabs {
		count(sb.chunks)
	}
	count(o.freeChunks)
	// Live and recycled slabs hold 8 chunks each at most, of
	// minChunkStates partials once recycled with one key in use.
	if limit := 3 * 8 * minChunkStates; room > limit {
		t.Fatalf("chunks hold room for %d partials after the dense slice, want at most %d (the dense slice's %d kept)", room, limit, keys)
	}
}
