package window_test

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
	"math/rand/v2"
	"testing"

	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// benchStream is a fleet of sensors: keys report in rounds, every key once
// per period, in a shuffled order (the same each round), each reading up to
// 2 s out of order. One round is precomputed in columns, as a worker
// receives records in a batch, and replayed shifted by a period each time,
// so the timed loop reads memory sequentially like a worker does (whose
// batch buffers, recycled, are smaller still).
type benchStream struct {
	keyEnd []int
	keys   []byte
	hashes []uint64
	times  []int64
	temps  []float64
	span   int64 // event time covered by one pass over the columns

	pass    int     // the pass whose event times passOut holds
	passOut []int64 // times shifted to pass, computed once per pass
}

func newBenchStream(nkeys int, period int64) *benchStream {
	rng := rand.New(rand.NewPCG(7, 7))
	ids := rng.Perm(nkeys)
	jitter := make([]int64, nkeys)
	for i := range jitter {
		jitter[i] = rng.Int64N(2000)
	}
	s := &benchStream{span: period}
	for k, id := range ids {
		s.keys = fmt.Appendf(s.keys, "sensor-%06d", id)
		s.keyEnd = append(s.keyEnd, len(s.keys))
		s.hashes = append(s.hashes, xxhash.Sum64(s.keys[len(s.keys)-13:]))
		s.times = append(s.times, int64(k)*period/int64(nkeys)-jitter[k])
		s.temps = append(s.temps, float64(k%400)/10)
	}
	return s
}

// batch is a run of consecutive records in columns, as a worker receives
// them: key i is keys[ends[i-1]:ends[i]] (the first starts at start). The
// first n are added; the columns go on for PrefetchAhead more, when the
// pass has them, so that Prefetch can look ahead of the last ones.
type batch struct {
	keys   []byte
	start  int
	ends   []int
	hashes []uint64
	times  []int64
	temps  []float64
	n      int
}

// batch sets b to the records from i on, stopping at the end of a pass over
// the columns (the column of event times is i's pass's).
func (s *benchStream) batch(i int, b *batch) {
	n := len(s.times)
	j, pass := i%n, i/n
	if s.passOut == nil || pass != s.pass {
		s.pass = pass
		s.passOut = s.passOut[:0]
		for _, t := range s.times {
			s.passOut = append(s.passOut, t+int64(pass)*s.span)
		}
	}
	m := min(batchRecords+window.PrefetchAhead, n-j)
	b.keys, b.start = s.keys, 0
	if j > 0 {
		b.start = s.keyEnd[j-1]
	}
	b.ends = s.keyEnd[j : j+m]
	b.hashes = s.hashes[j : j+m]
	b.temps = s.temps[j : j+m]
	b.times = s.passOut[j : j+m]
	b.n = min(batchRecords, m)
}

// batchRecords is how many records a batch adds.
const batchRecords = 64

// feeder adds the records of a benchStream one by one, as a worker does:
// in batches, calling Prefetch every PrefetchStep records, the watermark
// advanced before each record. Its state is in one struct, not in variables
// a closure captures, so that the benchmark's own work per record stays
// small beside the operator's, as a worker's loop is.
type feeder struct {
	s    *benchStream
	op   *window.Operator
	in   aggregate.Input
	bt   batch
	i, k int // record i is bt's k-th
}

func (f *feeder) step() {
	bt := &f.bt
	k := f.k
	if k == bt.n {
		f.s.batch(f.i, bt)
		k = 0
	}
	if k%window.PrefetchStep == 0 {
		f.op.Prefetch(bt.hashes[k:], bt.times[k:])
	}
	end := bt.ends[k]
	key := bt.keys[bt.start:end]
	bt.start = end
	t := bt.times[k]
	f.op.Advance(t - 5000 + 2000) // watermark: max seen - out-of-orderness (jitter is < 2 s)
	f.in.Time = t
	f.in.Nums[0] = bt.temps[k]
	f.op.Add(key, bt.hashes[k], &f.in)
	f.i++
	f.k = k + 1
}

var countAvgMax = []aggregate.Spec{
	{Name: "readings", Func: aggregate.Count, Input: -1},
	{Name: "avg_temp", Func: aggregate.Avg, Input: 0},
	{Name: "max_temp", Func: aggregate.Max, Input: 0},
}

// BenchmarkOperator is decoded records through the window operator on one
// core: 10^5 keys each reporting every 10 s, count/avg/max per key, results
// encoded as the runtime does. The tumbling and sliding variants see the
// same stream; the stream runs an hour of event time before timing starts so
// sliding windows are in steady state.
func BenchmarkOperator(b *testing.B) {
	for _, bc := range []struct {
		name string
		a    window.Assigner
	}{
		{"window=tumbling-1m", window.TumblingWindows(60_000)},
		{"window=sliding-1h-1m", window.SlidingWindows(3_600_000, 60_000)},
		{"window=session-30s", window.SessionWindows(30_000)},
	} {
		for _, benchKeys := range []int{1_000, 100_000} {
			b.Run(fmt.Sprintf("%s/keys=%.0e", bc.name, float64(benchKeys)), func(b *testing.B) {
				nkeys := benchKeys
				s := newBenchStream(nkeys, 10_000)
				set, err := aggregate.NewSet(countAvgMax, aggregate.Options{})
				if err != nil {
					b.Fatal(err)
				}
				var buf []byte
				results := 0
				op, err := window.NewOperator(window.Config{Assigner: bc.a, Lateness: 5000, Aggregates: set,
					Emit: func(r *window.Result) {
						buf = set.AppendEncode(buf[:0], r.State)
						results++
					}})
				if err != nil {
					b.Fatal(err)
				}
				f := &feeder{s: s, op: op, in: aggregate.Input{Nums: []float64{0}}}
				// The warm-up runs like the timed loop, so a CPU profile of
				// the benchmark shows the timed loop's costs.
				warm := len(s.times) * int(62*60_000/s.span) // a little over an hour of event time
				for range warm {
					f.step()
				}
				results = 0
				for b.Loop() {
					f.step()
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				b.ReportMetric(float64(results)/float64(b.N), "results/record")
			})
		}
	}
}
