package operators_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/window/aggregate"
)

// tb is what both *testing.T and *rapid.T offer.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Errorf(format string, args ...any)
}

func compile(t tb, yaml string) *operators.Pipeline {
	t.Helper()
	p, err := operators.CompileYAML("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	return p
}

// collect is a Sink that keeps everything, decoded.
type collect struct {
	p       *operators.Pipeline
	st      *aggregate.State
	results map[string][]summary // by rendered key
	late    []int64              // offsets
	dead    []string             // reasons
	block   chan struct{}        // if set, Result waits on it
}

type summary struct {
	Start, End int64
	Version    int
	Count      int64
	Sum        float64
	Min, Max   float64
}

func newCollect(p *operators.Pipeline) *collect {
	return &collect{p: p, st: p.Aggregates.New(), results: map[string][]summary{}}
}

func (c *collect) Result(r *operators.Result) error {
	if c.block != nil {
		<-c.block
	}
	if err := c.p.Aggregates.Decode(c.st, r.State); err != nil {
		return err
	}
	key, err := c.p.AppendKeyJSON(nil, r.Key)
	if err != nil {
		return err
	}
	set := c.p.Aggregates
	c.results[string(key)] = append(c.results[string(key)], summary{
		Start: r.Start, End: r.End, Version: int(r.Version),
		Count: set.Result(c.st, 0).Int, Sum: set.Result(c.st, 1).Float,
		Min: set.Result(c.st, 2).Float, Max: set.Result(c.st, 3).Float,
	})
	return nil
}

func (c *collect) Late(l *operators.Late) error { c.late = append(c.late, l.Offset); return nil }
func (c *collect) Dead(d *operators.DeadLetter) error {
	c.dead = append(c.dead, fmt.Sprintf("%d: %s", d.Offset, d.Reason))
	return nil
}

func windowYAML(cfg oracle.Config) string {
	switch cfg.Kind {
	case oracle.Sliding:
		return fmt.Sprintf("{sliding: {size: %dms, slide: %dms}}", cfg.Size, cfg.Slide)
	case oracle.Session:
		return fmt.Sprintf("{session: {gap: %dms}}", cfg.Gap)
	}
	return fmt.Sprintf("{tumbling: %dms}", cfg.Size)
}

func pipelineYAML(cfg oracle.Config) string {
	return fmt.Sprintf(`name: oracle
source: {mqtt: {topic: "t/#"}}
event_time: {field: ts, unit: ms}
key: [dev]
watermark: {max_out_of_order: %dms}
window: %s
allowed_lateness: %dms
aggregates:
  n: count()
  sum: sum(i)
  min: min(i)
  max: max(i)
`, cfg.MaxOutOfOrder, windowYAML(cfg), cfg.Lateness)
}

// TestRuntimeMatchesOracle runs random out-of-order streams, as JSON
// payloads, through the whole runtime — decode, watermark, routing over
// several workers, batching of random sizes — and compares every key's
// results and the late records with the brute-force oracle.
func TestRuntimeMatchesOracle(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := oracle.Config{
			Kind:          oracle.Kind(rapid.IntRange(0, 2).Draw(rt, "kind")),
			MaxOutOfOrder: rapid.SampledFrom([]int64{0, 5, 50}).Draw(rt, "ooo"),
			Lateness:      rapid.SampledFrom([]int64{0, 10, 100}).Draw(rt, "lateness"),
		}
		switch cfg.Kind {
		case oracle.Tumbling:
			cfg.Size = rapid.SampledFrom([]int64{5, 10, 60}).Draw(rt, "size")
			cfg.Slide = cfg.Size
		case oracle.Sliding:
			cfg.Slide = rapid.SampledFrom([]int64{2, 5}).Draw(rt, "slide")
			cfg.Size = cfg.Slide * rapid.Int64Range(1, 5).Draw(rt, "mult")
		case oracle.Session:
			cfg.Gap = rapid.SampledFrom([]int64{3, 10}).Draw(rt, "gap")
		}
		n := rapid.IntRange(1, 400).Draw(rt, "n")
		keys := rapid.IntRange(1, 8).Draw(rt, "keys")
		events := make([]oracle.Event, n)
		now := int64(1_700_000_000_000)
		for i := range events {
			now += rapid.Int64Range(0, 3).Draw(rt, "step")
			events[i] = oracle.Event{Key: fmt.Sprintf("d%d", rapid.IntRange(0, keys-1).Draw(rt, "key")), Time: now - rapid.Int64Range(0, 120).Draw(rt, "back")}
		}
		p := compile(rt, pipelineYAML(cfg))
		sink := newCollect(p)
		r, err := operators.Start(context.Background(), p, sink, operators.Options{
			Workers:   rapid.IntRange(1, 4).Draw(rt, "workers"),
			BatchSize: rapid.IntRange(1, 64).Draw(rt, "batch"),
			KeyGroups: rapid.SampledFrom([]int{1, 7, 128}).Draw(rt, "groups"),
		})
		if err != nil {
			rt.Fatal(err)
		}
		for i, e := range events {
			payload := fmt.Sprintf(`{"dev":%q,"ts":%d,"i":%d}`, e.Key, e.Time, i)
			if err := r.Ingest([]byte(payload), "t/x", int64(i)); err != nil {
				rt.Fatal(err)
			}
			if rapid.IntRange(0, 50).Draw(rt, "flush") == 0 {
				if err := r.Flush(); err != nil {
					rt.Fatal(err)
				}
			}
		}
		if _, err := r.Close(true); err != nil {
			rt.Fatal(err)
		}

		ems, late := oracle.Run(events, cfg)
		want := oracleSummaries(ems)
		gotLate := slices.Clone(sink.late)
		slices.Sort(gotLate)
		wantLate := make([]int64, len(late))
		for i, l := range late {
			wantLate[i] = int64(l)
		}
		if !slices.Equal(gotLate, wantLate) {
			rt.Fatalf("late: got %v, want %v", gotLate, wantLate)
		}
		if len(sink.dead) > 0 {
			rt.Fatalf("dead letters: %v", sink.dead)
		}
		for k, w := range want {
			if !slices.Equal(sink.results[k], w) {
				rt.Fatalf("key %s:\n got  %v\n want %v", k, sink.results[k], w)
			}
		}
		if len(sink.results) != len(want) {
			rt.Fatalf("got results for %d keys, want %d", len(sink.results), len(want))
		}
	})
}

const badInputSpec = `name: bad
source: {mqtt: {topic: "plant/+/temp", topic_fields: {site: 1}}}
event_time: {field: ts, unit: ms}
key: [device]
filter: "temp > -40"
window: {tumbling: 1m}
aggregates:
  n: count()
  sum: sum(temp)
  min: min(temp)
  max: max(temp)
`

// TestBadInputGoesToDeadLetters feeds every kind of broken payload between
// good ones: each bad one becomes a dead letter with its reason, the good
// ones are all counted, and nothing stops.
func TestBadInputGoesToDeadLetters(t *testing.T) {
	p := compile(t, badInputSpec)
	sink := newCollect(p)
	r, err := operators.Start(context.Background(), p, sink, operators.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	payloads := []struct {
		json   string
		reason string // "" for a good record
	}{
		{`{"device":"a","ts":1000,"temp":20}`, ""},
		{`{"device":"a","ts":1000,"temp":20`, "invalid JSON"},
		{`not json`, "invalid JSON"},
		{`[1,2,3]`, "invalid JSON"},
		{`{"device":"a","temp":20}`, "event time ts"},
		{`{"device":"a","ts":"yesterday","temp":20}`, "event time ts: want a number"},
		{`{"ts":2000,"temp":20}`, "key device: missing"},
		{`{"device":{"id":1},"ts":2000,"temp":20}`, "key device: want a string, number or bool"},
		{`{"device":"a","ts":2000,"temp":"hot"}`, "filter"},
		{`{"device":"a","ts":3000,"temp":null}`, "filter"},
		{`{"device":"a","ts":3000,"temp":-100}`, ""}, // filtered, not dead
		{`{"device":"b","ts":3000,"temp":25.5}`, ""},
		{`{"device":"a","ts":1e400,"temp":20}`, "event time ts"},
		{"{\"device\":\"a\",\"ts\":4000,\"temp\":20,\"x\":\"\xff\"}", "invalid UTF-8"}, // even in a field nobody reads
	}
	want := 0
	for i, pl := range payloads {
		if err := r.Ingest([]byte(pl.json), "plant/north/temp", int64(i)); err != nil {
			t.Fatal(err)
		}
		if pl.reason != "" {
			want++
		}
	}
	st, err := r.Close(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.dead) != want || st.Dead != uint64(want) {
		t.Fatalf("got %d dead letters (stats %d), want %d: %q", len(sink.dead), st.Dead, want, sink.dead)
	}
	for _, d := range sink.dead {
		var off int
		fmt.Sscanf(d, "%d:", &off)
		if !strings.Contains(d, payloads[off].reason) {
			t.Errorf("dead letter %q: want reason containing %q", d, payloads[off].reason)
		}
	}
	if st.Filtered != 1 {
		t.Errorf("filtered = %d, want 1", st.Filtered)
	}
	if got := sink.results[`{"device":"a"}`]; len(got) != 1 || got[0].Count != 1 {
		t.Errorf("device a: %v, want one window of 1", got)
	}
}

// TestBackPressure: a Sink that does not return stalls the workers, which
// stall Ingest: the ingesting goroutine blocks instead of buffering without
// bound. Under synctest the blocked state is observed, not slept for.
func TestBackPressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := compile(t, pipelineYAML(oracle.Config{Kind: oracle.Tumbling, Size: 1, Slide: 1}))
		sink := newCollect(p)
		sink.block = make(chan struct{})
		r, err := operators.Start(context.Background(), p, sink, operators.Options{Workers: 1, BatchSize: 4, Depth: 1})
		if err != nil {
			t.Fatal(err)
		}
		var ingested int
		var mu sync.Mutex
		done := make(chan error, 1)
		go func() {
			for i := range 100_000 {
				// every record closes a window: plenty of results
				if err := r.Ingest(fmt.Appendf(nil, `{"dev":"d","ts":%d,"i":%d}`, i, i), "", int64(i)); err != nil {
					done <- err
					return
				}
				mu.Lock()
				ingested++
				mu.Unlock()
			}
			done <- nil
		}()
		synctest.Wait()
		mu.Lock()
		n := ingested
		mu.Unlock()
		if n >= 100_000 {
			t.Fatalf("ingested everything with a stalled sink")
		}
		if n > 10_000 {
			t.Fatalf("ingested %d records with a stalled sink: buffering is not bounded", n)
		}
		close(sink.block)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := r.Close(true); err != nil {
			t.Fatal(err)
		}
		if got := len(sink.results[`{"dev":"d"}`]); got != 100_000 {
			t.Fatalf("%d results, want 100000", got)
		}
	})
}

// TestCancelStopsEverything: cancelling the context stops the goroutines
// (goleak checks) and Close(false) reports no error.
func TestCancelStopsEverything(t *testing.T) {
	p := compile(t, pipelineYAML(oracle.Config{Kind: oracle.Tumbling, Size: 10, Slide: 10}))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := operators.Start(ctx, p, newCollect(p), operators.Options{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := r.Ingest(fmt.Appendf(nil, `{"dev":"d%d","ts":%d,"i":%d}`, i%10, i, i), "", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := r.Ingest([]byte(`{"dev":"x","ts":1,"i":1}`), "", 0); err == nil {
		t.Fatal("Ingest after cancel: no error")
	}
	if _, err := r.Close(false); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestRedeliveryDedup: with event_id, a redelivered reading counts once,
// also across a restore from a barrier.
func TestRedeliveryDedup(t *testing.T) {
	p := compile(t, `name: dd
source: {mqtt: {topic: "t"}}
event_time: {field: ts}
event_id: [dev, seq]
key: [dev]
window: {tumbling: 1s}
aggregates: {n: count(), sum: sum(i), min: min(i), max: max(i)}
`)
	msg := func(seq int) []byte {
		return fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"i":%d}`, seq, 100+seq, seq)
	}
	first := &checkpointing{collect: newCollect(p)}
	r, err := operators.Start(context.Background(), p, first, operators.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for seq := range 10 {
		r.Ingest(msg(seq), "t", int64(seq))
		r.Ingest(msg(seq), "t", int64(seq)) // redelivered at once
	}
	if err := r.Barrier(1); err != nil {
		t.Fatal(err)
	}
	st, err := r.Close(false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dupes != 10 {
		t.Fatalf("dupes %d, want 10", st.Dupes)
	}
	// Restore and see the last readings again (the tail redelivered after a
	// crash), then new ones.
	c := first.cuts[0]
	second := newCollect(p)
	r2, err := operators.Start(context.Background(), p, second, operators.Options{Workers: 1, Restore: c.restore})
	if err != nil {
		t.Fatal(err)
	}
	for seq := 5; seq < 15; seq++ {
		r2.Ingest(msg(seq), "t", int64(seq))
	}
	st2, err := r2.Close(true)
	if err != nil {
		t.Fatal(err)
	}
	got := second.results[`{"dev":"a"}`]
	if st2.Dupes != 5 || len(got) != 1 || got[0].Count != 15 || got[0].Sum != 105 {
		t.Fatalf("after restore: dupes %d, results %v; want 5 dupes and one window of 15 readings summing to 105", st2.Dupes, got)
	}
}

// oracleSummaries digests the oracle's emissions per rendered key, as the
// collect Sink digests the runtime's results.
func oracleSummaries(ems []oracle.Emission) map[string][]summary {
	want := map[string][]summary{}
	for _, e := range ems {
		s := summary{Start: e.Start, End: e.End, Version: e.Version, Min: math.Inf(1), Max: math.Inf(-1)}
		for _, m := range e.Members {
			s.Count++
			s.Sum += float64(m)
			s.Min = min(s.Min, float64(m))
			s.Max = max(s.Max, float64(m))
		}
		k := fmt.Sprintf(`{"dev":%q}`, e.Key)
		want[k] = append(want[k], s)
	}
	return want
}
