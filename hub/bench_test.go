package hub

import (
	"fmt"
	"testing"
	"time"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// benchYAML is a typical edge pipeline: count, avg and max per key.
const benchYAML = `name: bench
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1m}
aggregates:
  n: count()
  a: avg(v)
  hi: max(v)
`

const (
	benchKeys  = 100_000
	benchEdges = 3
	benchBatch = 1000
)

// benchFeed holds ready batches for every edge: batch i of an edge covers
// keys [i*1000, (i+1)*1000) of one window, so a round over all batches of all
// edges touches every (key, edge) once.
type benchFeed struct {
	batches [][]*runnelv1.Batch // per edge
	next    []uint64            // next seq per edge
	round   int
}

func newBenchFeed(b *testing.B, cfgs ...func(*Config)) (*testHub, *benchFeed) {
	th := newTestHub(b, nil)
	p := compile(b, benchYAML)
	th.Hub.Close()
	th.pipes = append(th.pipes, p)
	th.cfg = func(c *Config) {
		c.KeyGroups = 128
		for _, f := range cfgs {
			f(c)
		}
	}
	th.dir = b.TempDir()
	th.open()

	f := &benchFeed{batches: make([][]*runnelv1.Batch, benchEdges), next: make([]uint64, benchEdges)}
	for e := range benchEdges {
		for i := 0; i < benchKeys; i += benchBatch {
			bt := &runnelv1.Batch{EdgeId: fmt.Sprintf("edge-%d", e), Epoch: 1}
			for k := i; k < i+benchBatch; k++ {
				bt.Partials = append(bt.Partials, &runnelv1.Partial{
					Pipeline: p.Name, Key: encKey(fmt.Sprintf("device-%06d", k)),
					WindowStart: 0, WindowEnd: 60_000, Version: 1,
					State: stateOf(p.Aggregates, float64(k%50), float64(e), 20.5),
				})
			}
			bt.Watermarks = []*runnelv1.Watermark{{Pipeline: p.Name, WatermarkMs: 0}}
			f.batches[e] = append(f.batches[e], bt)
		}
		f.next[e] = 1
	}
	// Warm up: every window and part exists.
	for range len(f.batches[0]) * benchEdges {
		f.apply(b, th)
	}
	return th, f
}

// apply applies the next batch, round robin over the edges, renumbered so
// that it is new.
func (f *benchFeed) apply(b *testing.B, th *testHub) {
	e := f.round % benchEdges
	bt := f.batches[e][(f.round/benchEdges)%len(f.batches[e])]
	f.round++
	bt.FirstSeq = f.next[e]
	for _, p := range bt.Partials {
		p.Seq = f.next[e]
		f.next[e]++
	}
	bt.LastSeq = f.next[e] - 1
	if err := th.Apply(bt); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMerge measures Apply in the steady state (windows known); one
// op is one partial.
func BenchmarkMerge(b *testing.B) {
	b.Run(fmt.Sprintf("keys=1e5/edges=%d/batch=%d", benchEdges, benchBatch), func(b *testing.B) {
		th, f := newBenchFeed(b)
		b.ReportAllocs()
		b.ResetTimer()
		for n := 0; n < b.N; n += benchBatch {
			f.apply(b, th)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "partials/s")
	})
}

// BenchmarkCommit measures Apply plus group commit (NoSync): one commit
// every 10 batches (10^4 partials), each commit writing the changed
// partials and emitting their windows as new versions. One op is one
// partial.
func BenchmarkCommit(b *testing.B) {
	for _, archiveLog := range []bool{false, true} {
		name := fmt.Sprintf("keys=1e5/edges=%d/commit=1e4", benchEdges)
		var cfg []func(*Config)
		if archiveLog {
			// Every result version also logged for the archive (which
			// does not run: the log only grows).
			name += "/archive-log"
			cfg = append(cfg, func(c *Config) { c.ArchiveMaxPending = 1 << 40 })
		}
		b.Run(name, func(b *testing.B) {
			th, f := newBenchFeed(b, cfg...)
			// Emit everything once, so that every commit makes new versions.
			for _, bts := range f.batches {
				for _, bt := range bts {
					bt.Watermarks[0].WatermarkMs = 60_000
				}
			}
			f.apply(b, th)
			th.commit()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for n := 0; n < b.N; n += benchBatch {
				f.apply(b, th)
				if f.round%10 == 0 {
					th.commit()
				}
			}
			th.commit()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "partials/s")
		})
	}
}

// BenchmarkIdleCommit: a group commit with nothing to write in a hub that
// knows 10,000 edges, each of which reported a watermark for every
// pipeline once: the cost every CommitInterval (20 ms) of a fleet between
// two windows' batches.
func BenchmarkIdleCommit(b *testing.B) {
	th := newTestHub(b, nil)
	const n = 10_000
	for i := range n {
		id := fmt.Sprintf("edge-%05d", i)
		if _, err := th.Hello(id, 1, 1); err != nil {
			b.Fatal(err)
		}
	}
	th.commit()
	b.ReportAllocs()
	for b.Loop() {
		th.commit()
	}
}
