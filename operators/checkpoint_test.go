package operators_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/operators"
)

// checkpointing is a BarrierSink that keeps, for every barrier, the outputs
// seen before it and its snapshot entries: what a checkpoint stores.
type checkpointing struct {
	*collect
	store  kvStore // the checkpoints' state, as a store holds it
	cuts   []cut
	staged []staged // results in arrival order, with their epoch
	lates  []uint64 // epochs of late records
}

type staged struct {
	key   string
	epoch uint64
	s     summary
}

func (c *checkpointing) Result(r *operators.Result) error {
	if err := c.collect.Result(r); err != nil {
		return err
	}
	key, _ := c.p.AppendKeyJSON(nil, r.Key)
	rs := c.results[string(key)]
	c.staged = append(c.staged, staged{string(key), r.Epoch, rs[len(rs)-1]})
	return nil
}

func (c *checkpointing) Late(l *operators.Late) error {
	c.lates = append(c.lates, l.Epoch)
	return c.collect.Late(l)
}

type cut struct {
	id      uint64
	results map[string][]summary // outputs before the barrier
	late    int
	entries []entry
}

type entry struct {
	hash       uint64
	key, value []byte
}

// restore is an Options.Restore that loads the cut's state.
func (c cut) restore(fn func(uint64, []byte, []byte) error) error {
	for _, e := range c.entries {
		if err := fn(e.hash, e.key, e.value); err != nil {
			return err
		}
	}
	return nil
}

func (c *checkpointing) Barrier(b *operators.Barrier) error {
	// The checkpoint of barrier n holds the outputs with Epoch < n.
	k := cut{id: b.ID, results: map[string][]summary{}}
	for _, st := range c.staged {
		if st.epoch < b.ID {
			k.results[st.key] = append(k.results[st.key], st.s)
		}
	}
	for _, e := range c.lates {
		if e < b.ID {
			k.late++
		}
	}
	if c.store == nil {
		c.store = kvStore{}
	}
	if err := b.Changes(c.store); err != nil {
		return err
	}
	for key, e := range c.store {
		k.entries = append(k.entries, entry{e.hash, []byte(key), e.value})
	}
	c.cuts = append(c.cuts, k)
	return nil
}

type kv struct {
	hash  uint64
	value []byte
}

// kvStore applies snapshot operations as a state store does.
type kvStore map[string]kv

func (m kvStore) Put(h uint64, k, v []byte) error {
	m[string(k)] = kv{h, slices.Clone(v)}
	return nil
}

func (m kvStore) Delete(_ uint64, k []byte) error {
	delete(m, string(k))
	return nil
}

func (m kvStore) DeletePrefix(p []byte) error {
	for k := range m {
		if strings.HasPrefix(k, string(p)) {
			delete(m, k)
		}
	}
	return nil
}

// TestRecoveryFromBarrier is exactly-once at the runtime level: run a random
// stream with barriers at random places, "crash" after it, restore the
// snapshot of a random barrier into a new Runtime (with another worker
// count) and replay only the records after that barrier. The outputs the
// first run made before the barrier plus the outputs of the second run
// equal the oracle's: nothing lost, nothing counted twice.
func TestRecoveryFromBarrier(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := drawConfig(rt)
		n := rapid.IntRange(1, 300).Draw(rt, "n")
		events := make([]oracle.Event, n)
		now := int64(1_700_000_000_000)
		for i := range events {
			now += rapid.Int64Range(0, 3).Draw(rt, "step")
			events[i] = oracle.Event{Key: fmt.Sprintf("d%d", rapid.IntRange(0, 5).Draw(rt, "key")), Time: now - rapid.Int64Range(0, 80).Draw(rt, "back")}
		}
		p := compile(rt, pipelineYAML(cfg))
		payload := func(i int) []byte {
			return fmt.Appendf(nil, `{"dev":%q,"ts":%d,"i":%d}`, events[i].Key, events[i].Time, i)
		}

		// First run, with barriers; barrier id k+1 sits before record at[k].
		first := &checkpointing{collect: newCollect(p)}
		r1, err := operators.Start(context.Background(), p, first, operators.Options{Workers: rapid.IntRange(1, 3).Draw(rt, "w1"), BatchSize: 8})
		if err != nil {
			rt.Fatal(err)
		}
		var at []int
		for i := range events {
			if rapid.IntRange(0, 20).Draw(rt, "barrier") == 0 {
				at = append(at, i)
				if err := r1.Barrier(uint64(len(at))); err != nil {
					rt.Fatal(err)
				}
			}
			if err := r1.Ingest(payload(i), "t", int64(i)); err != nil {
				rt.Fatal(err)
			}
		}
		at = append(at, n)
		if err := r1.Barrier(uint64(len(at))); err != nil {
			rt.Fatal(err)
		}
		if _, err := r1.Close(false); err != nil { // a crash: open windows never fire
			rt.Fatal(err)
		}
		if len(first.cuts) != len(at) {
			rt.Fatalf("%d barriers came through, want %d", len(first.cuts), len(at))
		}

		// Recover from a random barrier and replay the rest.
		k := rapid.IntRange(0, len(at)-1).Draw(rt, "restoreFrom")
		c := first.cuts[k]
		second := newCollect(p)
		r2, err := operators.Start(context.Background(), p, second, operators.Options{
			Workers: rapid.IntRange(1, 3).Draw(rt, "w2"), BatchSize: 5, Restore: c.restore,
		})
		if err != nil {
			rt.Fatal(err)
		}
		for i := at[k]; i < n; i++ {
			if err := r2.Ingest(payload(i), "t", int64(i)); err != nil {
				rt.Fatal(err)
			}
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
		ems, late := oracle.Run(events, cfg)
		want := oracleSummaries(ems)
		for key, w := range want {
			if !slices.Equal(got[key], w) {
				rt.Fatalf("restored from barrier %d (before record %d), key %s: got %d results, want %d; first difference at %d",
					k+1, at[k], key, len(got[key]), len(w), firstDiff(got[key], w))
			}
		}
		if len(got) != len(want) {
			rt.Fatalf("results for %d keys, want %d", len(got), len(want))
		}
		if l := c.late + len(second.late); l != len(late) {
			rt.Fatalf("%d late records, want %d", l, len(late))
		}
	})
}

// drawConfig draws a window and watermark setup for the recovery tests.
func drawConfig(rt *rapid.T) oracle.Config {
	cfg := oracle.Config{
		Kind:          oracle.Kind(rapid.IntRange(0, 2).Draw(rt, "kind")),
		MaxOutOfOrder: rapid.SampledFrom([]int64{0, 5, 50}).Draw(rt, "ooo"),
		Lateness:      rapid.SampledFrom([]int64{0, 10, 100}).Draw(rt, "lateness"),
	}
	switch cfg.Kind {
	case oracle.Tumbling:
		cfg.Size = rapid.SampledFrom([]int64{5, 60}).Draw(rt, "size")
		cfg.Slide = cfg.Size
	case oracle.Sliding:
		cfg.Slide = rapid.SampledFrom([]int64{1, 5}).Draw(rt, "slide")
		cfg.Size = cfg.Slide * rapid.Int64Range(1, 20).Draw(rt, "mult")
	case oracle.Session:
		cfg.Gap = rapid.SampledFrom([]int64{3, 10}).Draw(rt, "gap")
	}
	return cfg
}

func firstDiff(a, b []summary) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
