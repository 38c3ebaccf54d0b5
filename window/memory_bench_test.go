package window_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// BenchmarkStateMemory reports the operator's live heap in the edge
// ingest benchmark's shape: 10^5 devices reporting at random, 20 readings
// per ms of event time (so a 1 s slice holds ~18k of the keys), 1 s
// tumbling count/avg/max, watermark 5 s behind. Each iteration is a fresh
// operator fed 3·10^6 readings; the figure is heap-MiB.
func BenchmarkStateMemory(b *testing.B) {
	const devices = 100_000
	keys := make([][]byte, devices)
	hashes := make([]uint64, devices)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "sensor-%06d", i)
		hashes[i] = xxhash.Sum64(keys[i])
	}
	var heap float64
	for b.Loop() {
		set, err := aggregate.NewSet(countAvgMax, aggregate.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var buf []byte
		op, err := window.NewOperator(window.Config{Assigner: window.TumblingWindows(1000), Aggregates: set,
			Emit: func(r *window.Result) { buf = set.AppendEncode(buf[:0], r.State) }})
		if err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		rng := rand.New(rand.NewPCG(1, 1))
		in := aggregate.Input{Nums: []float64{0}}
		for i := range 3_000_000 {
			k := rng.IntN(devices)
			t := 1_767_225_600_000 + int64(i/20)
			op.Advance(t - 5000)
			in.Time = t
			in.Nums[0] = float64(i%400) / 10
			op.Add(keys[k], hashes[k], &in)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap = float64(ms.HeapAlloc-before) / (1 << 20)
		runtime.KeepAlive(op)
	}
	b.ReportMetric(heap, "heap-MiB")
}
