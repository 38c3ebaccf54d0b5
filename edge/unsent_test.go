package edge

import (
	"math/rand/v2"
	"testing"
)

// TestUnsentAges against a brute-force record of every sequence's commit
// time: the age it gives is never younger than the truth, exact while the
// marks fit, and past that off by at most the span two merged marks
// cover; sequences committed before the start are not claimed.
func TestUnsentAges(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var u unsentAges
	truth := map[uint64]int64{}
	next, acked, now := uint64(1), uint64(0), int64(1_000)
	if _, ok := u.oldest(1); ok {
		t.Fatal("an empty record claims an age")
	}
	for step := range 20_000 {
		now += 1000
		if n := rng.IntN(5); n > 0 { // a checkpoint with n entries
			u.committed(next, now)
			for range n {
				truth[next] = now
				next++
			}
		}
		// Acks come in bursts, and stop for long stretches (an outage).
		if step%5000 < 4000 && rng.IntN(3) == 0 {
			acked = min(next-1, acked+uint64(rng.IntN(12)))
		}
		if acked+1 == next {
			continue
		}
		at, ok := u.oldest(acked + 1)
		want := truth[acked+1]
		if !ok || at > want {
			t.Fatalf("step %d: oldest unsent (seq %d) committed at %d (%v), truly at %d", step, acked+1, at, ok, want)
		}
		// Exact unless marks merged; merged, within 1/256 of the outage.
		if slack := (now - truth[acked+1]) / 256; want-at > slack+1000 {
			t.Fatalf("step %d: age off by %d ms, outage %d ms", step, want-at, now-want)
		}
		if len(u.marks) > maxUnsentMarks {
			t.Fatalf("%d marks kept", len(u.marks))
		}
	}
}
