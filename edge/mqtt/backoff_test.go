package mqtt

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		min, max time.Duration
		n        int
		r        float64
		want     time.Duration
	}{
		{"no retry", 100 * ms, 10 * time.Second, 0, 0.5, 0},
		{"first retry low", 100 * ms, 10 * time.Second, 1, 0, 100 * ms},
		{"first retry high", 100 * ms, 10 * time.Second, 1, 0.999999, 200 * ms},
		{"second retry mid", 100 * ms, 10 * time.Second, 2, 0.5, 300 * ms},
		{"third retry low", 100 * ms, 10 * time.Second, 3, 0, 400 * ms},
		{"capped low", 100 * ms, 1 * time.Second, 10, 0, 500 * ms},
		{"capped high", 100 * ms, 1 * time.Second, 10, 0.999999, 1 * time.Second},
		{"huge n stays capped", 100 * ms, 30 * time.Second, 1 << 20, 0, 15 * time.Second},
		{"min == max", 1 * time.Second, 1 * time.Second, 5, 0.3, 1 * time.Second},
		{"max < 2*min keeps min", 1 * time.Second, 1500 * ms, 1, 0, 1 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := backoff{min: tt.min, max: tt.max, rand: func() float64 { return tt.r }}
			got := b.delay(tt.n)
			if d := got - tt.want; d < -ms || d > ms {
				t.Fatalf("delay(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

// Over random draws: always within [min, max], and the ceiling never
// shrinks as retries go on.
func TestBackoffBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := backoff{min: 250 * time.Millisecond, max: 30 * time.Second, rand: r.Float64}
	for n := 1; n < 200; n++ {
		for range 50 {
			d := b.delay(n)
			if d < b.min || d > b.max {
				t.Fatalf("delay(%d) = %v outside [%v, %v]", n, d, b.min, b.max)
			}
		}
	}
	hi := backoff{min: b.min, max: b.max, rand: func() float64 { return 0.999999 }}
	for n := 2; n < 40; n++ {
		if hi.delay(n) < hi.delay(n-1) {
			t.Fatalf("ceiling shrank at retry %d: %v < %v", n, hi.delay(n), hi.delay(n-1))
		}
	}
}
