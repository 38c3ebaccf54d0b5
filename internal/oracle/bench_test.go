package oracle

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkRun says how long a stream the property tests of the window
// operator can afford: the oracle is quadratic by design, not a target.
func BenchmarkRun(b *testing.B) {
	for _, cfg := range []Config{
		{Kind: Tumbling, Size: 10, MaxOutOfOrder: 5, Lateness: 10},
		{Kind: Sliding, Size: 10, Slide: 3, MaxOutOfOrder: 5, Lateness: 10},
		{Kind: Session, Gap: 4, MaxOutOfOrder: 5, Lateness: 10},
	} {
		for _, n := range []int{100, 1000} {
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			events := make([]Event, n)
			for i := range events {
				events[i] = Event{Key: fmt.Sprint(rng.IntN(4)), Time: int64(i) + rng.Int64N(20) - 10}
			}
			b.Run(fmt.Sprintf("kind=%s/events=%d", cfg.Kind, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					Run(events, cfg)
				}
			})
		}
	}
}
