package edge

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/operators"
)

// BenchmarkCheckpoint measures the writer's commit of one checkpoint (with
// fsync) on a node whose pipeline holds 10^6 keys of operator state, when
// 1% of them, at random, changed: the op records, the compaction that is
// due, the outbox and the metadata, in one transaction. The store is first
// filled and then run through warmup checkpoints, so the figure includes
// compaction in its steady state; max-ms is the slowest checkpoint timed.
func BenchmarkCheckpoint(b *testing.B) {
	for _, bc := range []struct {
		name        string
		keys, dirty int
	}{
		{"keys=1e6/dirty=1e4", 1_000_000, 10_000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n := benchNode(b)
			defer n.closeAll(context.Background())
			pipe := n.pipes[0].p.Name
			groups := n.store.KeyGroups()
			rng := rand.New(rand.NewPCG(1, 2))
			var kb, vb []byte
			put := func(l *opLog, i int, gen uint64) {
				dev := fmt.Appendf(nil, "sensor-%07d", i)
				kb = append(kb[:0], 's')
				kb = binary.BigEndian.AppendUint64(kb, uint64(1_767_225_660_000)^1<<63)
				kb = append(kb, dev...)
				vb = binary.LittleEndian.AppendUint64(vb[:0], gen)
				vb = append(vb, make([]byte, 16)...)
				l.Put(xxhash.Sum64(dev), kb, vb)
			}
			id := uint64(0)
			checkpoint := func(l *opLog) time.Duration {
				id++
				began := time.Now()
				if err := n.commit(id, []ckptPart{{id: id, isPos: true}, {id: id, pipe: pipe, ops: l}}); err != nil {
					b.Fatal(err)
				}
				return time.Since(began)
			}
			dirty := func() *opLog {
				l := newOpLog(groups)
				l.Put(0, []byte{'m'}, []byte{2, 0, 0, 0})
				l.DeletePrefix([]byte{'s', 0, 0, 0, 0, 0, 0, 0, byte(id)}) // a dropped slice: no entries
				for range bc.dirty {
					put(l, rng.IntN(bc.keys), id)
				}
				return l
			}
			all := newOpLog(groups)
			for i := range bc.keys {
				put(all, i, 0)
			}
			checkpoint(all)
			// Warm up until every group has been compacted at least
			// about once since the fill.
			for range 3 * groups / 2 {
				checkpoint(dirty())
			}
			var worst time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				l := dirty()
				b.StartTimer()
				worst = max(worst, checkpoint(l))
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/checkpoint")
			b.ReportMetric(float64(worst.Milliseconds()), "max-ms")
			var ops, base int64
			for _, g := range n.pipes[0].state.groups {
				ops, base = ops+g.ops, base+g.base
			}
			b.ReportMetric(float64(ops)/(1<<20), "oplog-MiB")
			b.ReportMetric(float64(base)/(1<<20), "base-MiB")
		})
	}
}

// benchNode opens a node (fsync on) without starting it: its writer's
// commit is driven by hand.
func benchNode(b *testing.B) *node {
	b.Helper()
	p, err := operators.CompileYAML("bench.yaml", []byte(`name: ckpt
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 5s}
window: {tumbling: 1m}
aggregates: {readings: count()}
`))
	if err != nil {
		b.Fatal(err)
	}
	n, err := open(context.Background(), &NodeConfig{EdgeID: "ckpt", DataDir: b.TempDir(), Pipelines: []*operators.Pipeline{p}})
	if err != nil {
		b.Fatal(err)
	}
	// The runtime is not fed; only its pipeline's name is used.
	if _, err := n.pipes[0].rt.Close(false); err != nil {
		b.Fatal(err)
	}
	n.pipes[0].rt = nil
	return n
}
