package mqtt

import "time"

// backoff is the wait between connection attempts: exponential, capped,
// with jitter so that a fleet of edges that lost the same broker does not
// reconnect in lock-step when it returns.
type backoff struct {
	min, max time.Duration
	// rand returns a uniform value in [0, 1); injected so tests are exact.
	rand func() float64
}

// delay returns the wait before retry n (n >= 1, the first retry after a
// failure is 1). The ceiling doubles from 2·min up to max, and the wait is
// uniform in [ceiling/2, ceiling] (but not below min): never below min,
// never above max, and jittered from the first retry on.
func (b backoff) delay(n int) time.Duration {
	if n < 1 {
		return 0
	}
	ceiling := b.min
	for i := 0; i < n && ceiling < b.max; i++ {
		ceiling *= 2 // b.max <= 24h keeps this far from overflow
	}
	ceiling = min(ceiling, b.max)
	floor := min(max(ceiling/2, b.min), ceiling)
	return floor + time.Duration(b.rand()*float64(ceiling-floor))
}
