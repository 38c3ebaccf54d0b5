package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

// The cap holds to the byte on a fake clock: synctest's bubble gives the
// limiter virtual time.
func TestBandwidthCapFakeClock(t *testing.T) {
	for _, c := range []struct {
		name    string
		limit   int64
		readers int
		each    int
	}{
		{"one reader", 100 << 10, 1, 1 << 20},
		{"four readers share the cap", 100 << 10, 4, 256 << 10},
		{"slow link", 2 << 10, 1, 20 << 10},
		{"fast link", 64 << 20, 1, 256 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				burst := burstFor(c.limit)
				l := rate.NewLimiter(rate.Limit(c.limit), burst)
				start := time.Now()
				var wg sync.WaitGroup
				for range c.readers {
					wg.Go(func() {
						r := &limitedReader{ctx: context.Background(), r: bytes.NewReader(make([]byte, c.each)), l: l}
						if n, err := io.Copy(io.Discard, r); err != nil || n != int64(c.each) {
							t.Errorf("copy: %d, %v", n, err)
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				total := int64(c.readers * c.each)
				// The first burst goes at once; the rest at the cap.
				want := time.Duration(float64(total-int64(burst)) / float64(c.limit) * float64(time.Second))
				if elapsed < want-time.Millisecond || elapsed > want+50*time.Millisecond {
					t.Fatalf("%d bytes at %d B/s took %v, want %v", total, c.limit, elapsed, want)
				}
			})
		})
	}
}

// A canceled ctx ends a wait on the cap.
func TestBandwidthCapCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		l := rate.NewLimiter(rate.Limit(1<<10), burstFor(1<<10))
		r := &limitedReader{ctx: ctx, r: bytes.NewReader(make([]byte, 1<<20)), l: l}
		go func() {
			time.Sleep(3 * time.Second)
			cancel()
		}()
		start := time.Now()
		_, err := io.Copy(io.Discard, r)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("copy: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("canceled after %v, want 3s", d)
		}
	})
}

func TestBurstFor(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  int
	}{{1, 1}, {1 << 10, 1 << 10}, {100 << 10, 10 << 10}, {1 << 30, 256 << 10}} {
		if got := burstFor(c.limit); got != c.want {
			t.Errorf("burstFor(%d) = %d, want %d", c.limit, got, c.want)
		}
	}
}

// On a real clock, a Bucket's uploads keep to the cap: a measured lower
// bound (the cap can only slow things down), and a loose upper one.
func TestBandwidthCapMeasured(t *testing.T) {
	const limit = 1 << 20
	b, _ := openFake(t, func(c *Config) { c.BandwidthLimit = limit })
	data := randBytes(9, 1536<<10) // 1.5 MiB: 1.4 s at the cap, after the first burst
	start := time.Now()
	if err := b.Put(context.Background(), "capped", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	floor := time.Duration(float64(len(data)-burstFor(limit)) / limit * float64(time.Second))
	if elapsed < floor || elapsed > floor+3*time.Second {
		t.Fatalf("1.5 MiB at 1 MiB/s took %v, want about %v", elapsed, floor)
	}
	t.Logf("1.5 MiB at a 1 MiB/s cap: %v (floor %v)", elapsed, floor)
}
