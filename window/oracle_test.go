package window_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// tb is what both *testing.T and *rapid.T offer.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Errorf(format string, args ...any)
}

// summary identifies a window result by its bounds, version and a digest of
// its members: count, sum, min and max of the event indexes and the sum of
// their squares pin the member set down in practice.
type summary struct {
	Start, End int64
	Version    int
	Count      int64
	Sum, SumSq float64
	Min, Max   float64
}

func (s summary) String() string {
	return fmt.Sprintf("[%d,%d) v%d n=%d sum=%g sq=%g min=%g max=%g", s.Start, s.End, s.Version, s.Count, s.Sum, s.SumSq, s.Min, s.Max)
}

var digestAggs = []aggregate.Spec{
	{Name: "n", Func: aggregate.Count, Input: -1},
	{Name: "sum", Func: aggregate.Sum, Input: 0},
	{Name: "sq", Func: aggregate.Sum, Input: 1},
	{Name: "min", Func: aggregate.Min, Input: 0},
	{Name: "max", Func: aggregate.Max, Input: 0},
}

func oracleSummaries(events []oracle.Event, cfg oracle.Config) (map[string][]summary, []int) {
	ems, late := oracle.Run(events, cfg)
	out := map[string][]summary{}
	for _, e := range ems {
		s := summary{Start: e.Start, End: e.End, Version: e.Version, Min: math.Inf(1), Max: math.Inf(-1)}
		for _, m := range e.Members {
			x := float64(m)
			s.Count++
			s.Sum += x
			s.SumSq += x * x
			s.Min = min(s.Min, x)
			s.Max = max(s.Max, x)
		}
		out[e.Key] = append(out[e.Key], s)
	}
	return out, late
}

// runOperator drives an Operator as the runtime does: per event, advance to
// the watermark that includes it, then add it; at the end, advance to MaxTime.
func runOperator(t tb, events []oracle.Event, cfg oracle.Config) (map[string][]summary, []int) {
	set, err := aggregate.NewSet(digestAggs, aggregate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var a window.Assigner
	switch cfg.Kind {
	case oracle.Tumbling:
		a = window.TumblingWindows(cfg.Size)
	case oracle.Sliding:
		a = window.SlidingWindows(cfg.Size, cfg.Slide)
	case oracle.Session:
		a = window.SessionWindows(cfg.Gap)
	}
	out := map[string][]summary{}
	op, err := window.NewOperator(window.Config{
		Assigner: a, Lateness: cfg.Lateness, Aggregates: set,
		Emit: func(r *window.Result) {
			s := summary{Start: r.Start, End: r.End, Version: int(r.Version)}
			s.Count = set.Result(r.State, 0).Int
			s.Sum = set.Result(r.State, 1).Float
			s.SumSq = set.Result(r.State, 2).Float
			s.Min = set.Result(r.State, 3).Float
			s.Max = set.Result(r.State, 4).Float
			out[string(r.Key)] = append(out[string(r.Key)], s)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	wms := window.NewWatermarks(1, cfg.MaxOutOfOrder, 0)
	var late []int
	nums := make([]float64, 2)
	for i, e := range events {
		op.Advance(wms.Observe(0, e.Time))
		nums[0], nums[1] = float64(i), float64(i)*float64(i)
		if !op.Add([]byte(e.Key), xxhash.Sum64String(e.Key), &aggregate.Input{Time: e.Time, Nums: nums}) {
			late = append(late, i)
		}
	}
	op.Advance(window.MaxTime)
	if op.Keys() != 0 {
		t.Errorf("%d keys left after end of input", op.Keys())
	}
	return out, late
}

func genConfig(t *rapid.T) oracle.Config {
	cfg := oracle.Config{
		Kind:          oracle.Kind(rapid.IntRange(0, 2).Draw(t, "kind")),
		MaxOutOfOrder: rapid.SampledFrom([]int64{0, 1, 5, 20, 100}).Draw(t, "ooo"),
		Lateness:      rapid.SampledFrom([]int64{0, 1, 10, 50, 1000}).Draw(t, "lateness"),
	}
	switch cfg.Kind {
	case oracle.Tumbling:
		cfg.Size = rapid.SampledFrom([]int64{1, 7, 10, 60}).Draw(t, "size")
		cfg.Slide = cfg.Size
	case oracle.Sliding:
		cfg.Slide = rapid.SampledFrom([]int64{1, 3, 5, 10}).Draw(t, "slide")
		cfg.Size = cfg.Slide * rapid.Int64Range(1, 6).Draw(t, "mult")
		if rapid.Bool().Draw(t, "many") {
			// 16+ slices per window: merged blocks take part
			cfg.Slide = rapid.SampledFrom([]int64{1, 2, 3}).Draw(t, "slide2")
			cfg.Size = cfg.Slide * rapid.Int64Range(16, 40).Draw(t, "mult2")
		}
		if rapid.Bool().Draw(t, "unaligned") && cfg.Size > cfg.Slide+1 {
			cfg.Size-- // size not a multiple of slide: slices of gcd
		}
	case oracle.Session:
		cfg.Gap = rapid.SampledFrom([]int64{1, 5, 10, 30}).Draw(t, "gap")
	}
	return cfg
}

func genEvents(t *rapid.T) []oracle.Event {
	n := rapid.IntRange(0, 300).Draw(t, "n")
	keys := rapid.IntRange(1, 5).Draw(t, "keys")
	jitter := rapid.SampledFrom([]int64{0, 3, 30, 200}).Draw(t, "jitter")
	base := rapid.Int64Range(-500, 500).Draw(t, "base")
	events := make([]oracle.Event, n)
	now := base
	for i := range events {
		now += rapid.Int64Range(0, 4).Draw(t, "step")
		tm := now - rapid.Int64Range(0, jitter).Draw(t, "back")
		if i > 0 && rapid.IntRange(0, 9).Draw(t, "dup") == 0 {
			tm = events[rapid.IntRange(0, i-1).Draw(t, "dupOf")].Time // a repeated timestamp
		}
		events[i] = oracle.Event{Key: fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key")), Time: tm}
	}
	return events
}

// TestOperatorMatchesOracle compares the operator with the brute-force
// oracle on random out-of-order streams: per key, the same results in the
// same order, and the same late events.
func TestOperatorMatchesOracle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		events := genEvents(t)
		want, wantLate := oracleSummaries(events, cfg)
		got, gotLate := runOperator(t, events, cfg)
		if !slices.Equal(gotLate, wantLate) {
			t.Fatalf("late events: got %v, want %v", gotLate, wantLate)
		}
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Fatalf("key %s:\n got  %v\n want %v", k, got[k], w)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				t.Fatalf("key %s: unexpected results %v", k, g)
			}
		}
	})
}
