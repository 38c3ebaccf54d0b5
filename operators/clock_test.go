package operators_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/operators"
)

// step is one entry of a source's log: a record, or a clock record.
type step struct {
	tick  bool
	clock int64 // tick
	ev    int   // record: index into the oracle's events
}

// TestIdleAdvanceMatchesOracle: records and clock ticks in random order
// through a Runtime with an idle timeout. The expected watermark advances
// are computed here, by the rule the docs state (when the input has been
// silent for idle_timeout by the clock, the watermark is the largest event
// time plus the clock time since the last record, minus max_out_of_order),
// and given to the oracle as advance events; the Runtime's results must be
// the oracle's. And a Runtime restored from a random barrier and fed the
// rest of the log (records and ticks) must give the same results as the
// uninterrupted run: the idle advance replays exactly.
func TestIdleAdvanceMatchesOracle(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := drawConfig(rt)
		idle := rapid.SampledFrom([]int64{1, 20, 100}).Draw(rt, "idle")
		yaml := strings.Replace(pipelineYAML(cfg), "event_time: {field: ts, unit: ms}", "event_time: {field: ts, unit: ms, max_future: 0}", 1)
		yaml = strings.Replace(yaml, "watermark: {", fmt.Sprintf("watermark: {idle_timeout: %dms, ", idle), 1)
		p := compile(rt, yaml)

		// The log, and the oracle's events with the advances the rule
		// gives.
		var (
			steps       []step
			events      []oracle.Event
			clock, seen int64 // the reference's clock and the clock at the last record; 0: unknown
			maxSeen     = int64(math.MinInt64)
			now         = int64(1_700_000_000_000)
			wallClock   = int64(1_800_000_000_000)
		)
		n := rapid.IntRange(1, 300).Draw(rt, "n")
		for range n {
			if rapid.IntRange(0, 3).Draw(rt, "isTick") == 0 {
				wallClock += rapid.Int64Range(-5, 60).Draw(rt, "clockStep")
				steps = append(steps, step{tick: true, clock: wallClock})
				if wallClock <= clock {
					continue
				}
				clock = wallClock
				if seen == 0 {
					seen = clock
				}
				if maxSeen != math.MinInt64 && clock-seen >= idle {
					events = append(events, oracle.Event{Time: maxSeen + (clock - seen) - cfg.MaxOutOfOrder, Advance: true})
				}
				continue
			}
			now += rapid.Int64Range(0, 3).Draw(rt, "step")
			e := oracle.Event{Key: fmt.Sprintf("d%d", rapid.IntRange(0, 5).Draw(rt, "key")), Time: now - rapid.Int64Range(0, 80).Draw(rt, "back")}
			steps = append(steps, step{ev: len(events)})
			events = append(events, e)
			seen, maxSeen = clock, max(maxSeen, e.Time)
		}
		payload := func(i int) []byte {
			return fmt.Appendf(nil, `{"dev":%q,"ts":%d,"i":%d}`, events[i].Key, events[i].Time, i)
		}
		feed := func(r *operators.Runtime, s step) {
			if s.tick {
				r.Clock(s.clock)
				return
			}
			if err := r.Ingest(payload(s.ev), "t", int64(s.ev)); err != nil {
				rt.Fatal(err)
			}
		}

		first := &checkpointing{collect: newCollect(p)}
		r1, err := operators.Start(context.Background(), p, first, operators.Options{Workers: rapid.IntRange(1, 3).Draw(rt, "w1"), BatchSize: 8})
		if err != nil {
			rt.Fatal(err)
		}
		var at []int // barrier k+1 sits before steps[at[k]]
		for i, s := range steps {
			if rapid.IntRange(0, 20).Draw(rt, "barrier") == 0 {
				at = append(at, i)
				if err := r1.Barrier(uint64(len(at))); err != nil {
					rt.Fatal(err)
				}
			}
			feed(r1, s)
		}
		at = append(at, len(steps))
		if err := r1.Barrier(uint64(len(at))); err != nil {
			rt.Fatal(err)
		}
		if _, err := r1.Close(true); err != nil {
			rt.Fatal(err)
		}
		ems, late := oracle.Run(events, cfg)
		want := oracleSummaries(ems)
		compare := func(what string, got map[string][]summary, gotLate int) {
			for key, w := range want {
				if !slices.Equal(got[key], w) {
					rt.Fatalf("%s, key %s: got %d results, want %d; first difference at %d\ngot  %v\nwant %v",
						what, key, len(got[key]), len(w), firstDiff(got[key], w), got[key], w)
				}
			}
			if len(got) != len(want) {
				rt.Fatalf("%s: results for %d keys, want %d", what, len(got), len(want))
			}
			if gotLate != len(late) {
				rt.Fatalf("%s: %d late records, want %d", what, gotLate, len(late))
			}
		}
		compare("uninterrupted", first.results, len(first.late))

		// Restore from a random barrier and feed the rest of the log.
		k := rapid.IntRange(0, len(at)-1).Draw(rt, "restoreFrom")
		c := first.cuts[k]
		second := newCollect(p)
		r2, err := operators.Start(context.Background(), p, second, operators.Options{
			Workers: rapid.IntRange(1, 3).Draw(rt, "w2"), BatchSize: 5, Restore: c.restore,
		})
		if err != nil {
			rt.Fatal(err)
		}
		for _, s := range steps[at[k]:] {
			feed(r2, s)
		}
		if _, err := r2.Close(true); err != nil {
			rt.Fatal(err)
		}
		got := map[string][]summary{}
		for key, rs := range c.results {
			got[key] = append(got[key], rs...)
		}
		for key, rs := range second.results {
			got[key] = append(got[key], rs...)
		}
		compare(fmt.Sprintf("restored from barrier %d", k+1), got, c.late+len(second.late))
	})
}

// TestEventTimeBounds: with the clock known, an event time beyond
// max_future or max_past is a dead letter naming the bound, and does not
// move the watermark; before the first clock nothing is bounded.
func TestEventTimeBounds(t *testing.T) {
	p := compile(t, `name: b
source: {mqtt: {topic: "t/#"}}
event_time: {field: ts, unit: ms, max_future: 10m, max_past: 1h}
key: [dev]
window: {tumbling: 1m}
aggregates: {n: count(), sum: sum(i), min: min(i), max: max(i)}
`)
	c := newCollect(p)
	r, err := operators.Start(context.Background(), p, c, operators.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	const clock = int64(1_800_000_000_000) // a minute boundary
	in := func(ts int64, i int) {
		t.Helper()
		if err := r.Ingest(fmt.Appendf(nil, `{"dev":"a","ts":%d,"i":%d}`, ts, i), "t/a", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	in(clock+600_000, 0) // no clock yet: taken
	r.Clock(clock)
	in(clock+600_000, 1)   // exactly max_future ahead: taken
	in(clock+600_001, 2)   // 1 ms more: dead
	in(math.MaxInt64, 3)   // dead
	in(clock-3_600_000, 4) // exactly max_past behind: taken
	in(clock-3_600_001, 5) // dead
	in(math.MinInt64+1, 6) // dead
	in(clock+600_000, 7)   // on time: the watermark is where 0 and 1 put it (4 is late)
	if _, err := r.Close(true); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"2: event time 2027-01-15T08:10:00.001Z (1800000600001 ms) is more than max_future (10m0s) ahead of the edge's clock, 2027-01-15T08:00:00.000Z (1800000000000 ms)",
		"3: event time 9223372036854775807 ms is more than max_future (10m0s) ahead of the edge's clock, 2027-01-15T08:00:00.000Z (1800000000000 ms)",
		"5: event time 2027-01-15T06:59:59.999Z (1799996399999 ms) is more than max_past (1h0m0s) behind the edge's clock, 2027-01-15T08:00:00.000Z (1800000000000 ms)",
		"6: event time -9223372036854775807 ms is more than max_past (1h0m0s) behind the edge's clock, 2027-01-15T08:00:00.000Z (1800000000000 ms)",
	}
	if !slices.Equal(c.dead, want) {
		t.Fatalf("dead letters:\n%s\nwant\n%s", strings.Join(c.dead, "\n"), strings.Join(want, "\n"))
	}
	var n int64
	for _, rs := range c.results {
		for _, s := range rs {
			n += s.Count
		}
	}
	if n != 3 || !slices.Equal(c.late, []int64{4}) {
		t.Fatalf("%d records in results and late %v, want 3 and [4] (results %v)", n, c.late, c.results)
	}
}
