package window_test

import (
	"testing"

	"github.com/runnel-io/runnel/window"
)

func TestWatermarkSingleInput(t *testing.T) {
	w := window.NewWatermarks(1, 5, 0)
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
	w := window.NewWatermarks(3, 0, 0)
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

// TestWatermarkIdle: idleness follows the processing clock given to Tick,
// not event time; an idle input stops holding the watermark back.
func TestWatermarkIdle(t *testing.T) {
	const idle = 30_000
	clock := int64(1_000_000)
	w := window.NewWatermarks(2, 0, idle)
	w.Tick(clock)
	w.Observe(0, 1000)
	w.Observe(1, 500)
	if got := w.Tick(clock); got != 500 {
		t.Fatalf("both active: %d, want 500", got)
	}
	// Input 1 goes silent; input 0 keeps sending.
	for i := range 5 {
		clock += 10_000
		w.Tick(clock)
		got := w.Observe(0, 2000+int64(i))
		if elapsed := int64(i+1) * 10_000; elapsed < idle {
			if got != 500 || w.Idle(1) {
				t.Fatalf("after %d ms: wm %d idle %v, want 500 and not idle", elapsed, got, w.Idle(1))
			}
		} else if !w.Idle(1) || got != 2000+int64(i) {
			t.Fatalf("after %d ms: wm %d idle %v, want input 1 idle and wm %d", elapsed, got, w.Idle(1), 2000+i)
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
}

// TestWatermarkIdleAdvance: when every input is idle the watermark moves
// on with the clock from the last event, and stops as soon as data comes.
func TestWatermarkIdleAdvance(t *testing.T) {
	const idle, ooo = 5_000, 2_000
	w := window.NewWatermarks(1, ooo, idle)
	clock := int64(1_700_000_000_000)
	w.Tick(clock)
	if got := w.Observe(0, 60_000); got != 58_000 {
		t.Fatalf("first event: %d", got)
	}
	for _, step := range []struct {
		after int64 // ms since the event
		want  int64
	}{
		{1_000, 58_000},  // not idle yet
		{4_999, 58_000},  // not yet
		{5_000, 63_000},  // idle: 60 000 + 5 000 − 2 000
		{9_000, 67_000},  // and on with the clock
		{8_000, 67_000},  // a clock going back changes nothing
		{20_000, 78_000}, // further
	} {
		if got := w.Tick(clock + step.after); got != step.want {
			t.Fatalf("%d ms after the last event: wm %d, want %d", step.after, got, step.want)
		}
	}
	// An event ends the idle period; the watermark never goes back, so
	// an event older than it is late to the operator.
	if got := w.Observe(0, 61_000); got != 78_000 || w.Idle(0) {
		t.Fatalf("after a new event: wm %d idle %v", got, w.Idle(0))
	}
	if got := w.Tick(clock + 21_000); got != 78_000 {
		t.Fatalf("active again, the clock does not move the watermark: %d", got)
	}
}

// TestWatermarkNoIdleTimeoutHolds: idle timeout 0 disables idleness; with
// no input the watermark holds however far the clock goes.
func TestWatermarkNoIdleTimeoutHolds(t *testing.T) {
	w := window.NewWatermarks(2, 0, 0)
	w.Tick(1)
	w.Observe(0, 100)
	if got := w.Tick(3_600_000); got != window.MinTime || w.Idle(1) {
		t.Fatalf("wm %d idle %v, want MinTime and not idle", got, w.Idle(1))
	}
	// An input that never delivered anything never advances it either.
	w = window.NewWatermarks(1, 0, 1000)
	w.Tick(1)
	if got := w.Tick(1_000_000); got != window.MinTime {
		t.Fatalf("nothing delivered: %d", got)
	}
}

// TestWatermarkRestore: a Watermarks restored from State continues exactly
// as the original does.
func TestWatermarkRestore(t *testing.T) {
	run := func(w *window.Watermarks, from int) []int64 {
		var out []int64
		for i := from; i < 20; i++ {
			if i%7 < 4 {
				out = append(out, w.Observe(0, int64(1000*i)))
			}
			out = append(out, w.Tick(int64(5_000_000+i*3000)))
		}
		return out
	}
	a := window.NewWatermarks(1, 500, 4000)
	for i := range 9 {
		if i%7 < 4 {
			a.Observe(0, int64(1000*i))
		}
		a.Tick(int64(5_000_000 + i*3000))
	}
	st := a.State()
	b := window.NewWatermarks(1, 500, 4000)
	b.Restore(st)
	want, got := run(a, 9), run(b, 9)
	if len(want) != len(got) {
		t.Fatal(len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("step %d: restored %d, original %d", i, got[i], want[i])
		}
	}
}
