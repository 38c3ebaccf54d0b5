package window_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/runnel-io/runnel/window"
)

func TestWatermarkSingleInput(t *testing.T) {
	w := window.NewWatermarks(1, 5, 0, testEpoch)
	steps := []struct{ t, want int64 }{
		{100, 95}, {90, 95}, {103, 98}, {50, 98}, {110, 105},
	}
	for _, s := range steps {
		if got := w.Observe(0, s.t); got != s.want {
			t.Fatalf("Observe(%d) = %d, want %d", s.t, got, s.want)
		}
	}
}

// TestWatermarkMinAcrossInputs: the combined watermark is the minimum over
// inputs, and an input that has sent nothing holds it at MinTime.
func TestWatermarkMinAcrossInputs(t *testing.T) {
	w := window.NewWatermarks(3, 0, 0, testEpoch)
	if got := w.Observe(0, 100); got != window.MinTime {
		t.Fatalf("with two silent inputs: %d, want MinTime", got)
	}
	w.Observe(1, 50)
	if got := w.Observe(2, 70); got != 50 {
		t.Fatalf("min = %d, want 50", got)
	}
	if got := w.Observe(1, 200); got != 70 {
		t.Fatalf("min = %d, want 70", got)
	}
}

// TestWatermarkIdle runs under synctest: time passes only as the test says,
// and idleness follows processing time, not event time.
func TestWatermarkIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 30 * time.Second
		w := window.NewWatermarks(2, 0, idle, time.Now())
		w.Observe(0, 1000)
		w.Observe(1, 500)
		if got := w.Tick(time.Now()); got != 500 {
			t.Fatalf("both active: %d, want 500", got)
		}
		// Input 1 goes silent; input 0 keeps sending.
		for i := range 5 {
			time.Sleep(10 * time.Second)
			w.Observe(0, 2000+int64(i))
			got := w.Tick(time.Now())
			if elapsed := time.Duration(i+1) * 10 * time.Second; elapsed < idle {
				if got != 500 || w.Idle(1) {
					t.Fatalf("after %v: wm %d idle %v, want 500 and not idle", elapsed, got, w.Idle(1))
				}
			} else if !w.Idle(1) || got != 2000+int64(i) {
				t.Fatalf("after %v: wm %d idle %v, want input 1 idle and wm %d", elapsed, got, w.Idle(1), 2000+i)
			}
		}
		// Input 1 comes back behind: it is active again, but the combined
		// watermark never goes backwards.
		before := w.Current()
		if got := w.Observe(1, 600); got != before {
			t.Fatalf("returning input moved the watermark to %d, want %d", got, before)
		}
		if w.Idle(1) {
			t.Fatal("input 1 still idle after an event")
		}
		w.Observe(1, 5000)
		if got := w.Observe(0, 3000); got != 3000 {
			t.Fatalf("min after catch-up = %d, want 3000", got)
		}
	})
}

// TestWatermarkAllIdleHolds: when every input is idle the watermark stays.
func TestWatermarkAllIdleHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := window.NewWatermarks(2, 10, time.Second, time.Now())
		w.Observe(0, 100)
		w.Observe(1, 200)
		w.Tick(time.Now())
		time.Sleep(5 * time.Second)
		if got := w.Tick(time.Now()); got != 90 {
			t.Fatalf("all idle: %d, want 90 (held)", got)
		}
		if !w.Idle(0) || !w.Idle(1) {
			t.Fatal("inputs not idle after 5 s")
		}
	})
}

// TestWatermarkNeverIdleWithoutTimeout: idle timeout 0 disables idleness.
func TestWatermarkNeverIdleWithoutTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := window.NewWatermarks(2, 0, 0, time.Now())
		w.Observe(0, 100)
		time.Sleep(time.Hour)
		if got := w.Tick(time.Now()); got != window.MinTime || w.Idle(1) {
			t.Fatalf("wm %d idle %v, want MinTime and not idle", got, w.Idle(1))
		}
	})
}
