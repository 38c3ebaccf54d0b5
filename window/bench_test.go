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
	keys    []byte
	relEnd  []int // where each key ends, counted from the start of its batch's first key
	batchAt []int // where each batch's first key starts
	hashes  []uint64
	times   []int64
	temps   []float64
	span    int64 // event time covered by one pass over the columns

	pass      int     // the pass whose event times passTimes holds
	passTimes []int64 // times shifted to pass, computed once per pass
	passMarks []int64 // their watermarks: each time minus the out-of-orderness
}

// benchLag is the watermark's lag behind each record's event time: 5 s of
// out-of-orderness minus the 2 s of jitter already in the times.
const benchLag = 3000

func newBenchStream(nkeys int, period int64) *benchStream {
	rng := rand.New(rand.NewPCG(7, 7))
	ids := rng.Perm(nkeys)
	jitter := make([]int64, nkeys)
	for i := range jitter {
		jitter[i] = rng.Int64N(2000)
	}
	s := &benchStream{span: period}
	for k, id := range ids {
		if k%batchRecords == 0 {
			s.batchAt = append(s.batchAt, len(s.keys))
		}
		s.keys = fmt.Appendf(s.keys, "sensor-%06d", id)
		s.relEnd = append(s.relEnd, len(s.keys)-s.batchAt[k/batchRecords])
		s.hashes = append(s.hashes, xxhash.Sum64(s.keys[len(s.keys)-13:]))
		s.times = append(s.times, int64(k)*period/int64(nkeys)-jitter[k])
		s.temps = append(s.temps, float64(k%400)/10)
	}
	return s
}

// batch sets r to the batch of records from i on (i a multiple of
// batchRecords), stopping at the end of a pass over the columns (the event
// times and watermarks are i's pass's).
func (s *benchStream) batch(i int, r *window.Records) {
	n := len(s.times)
	j, pass := i%n, i/n
	if s.passTimes == nil || pass != s.pass {
		s.pass = pass
		if s.passTimes == nil {
			s.passTimes, s.passMarks = make([]int64, n), make([]int64, n)
		}
		shift := int64(pass) * s.span
		for j, t := range s.times {
			s.passTimes[j], s.passMarks[j] = t+shift, t+shift-benchLag
		}
	}
	m := min(batchRecords, n-j)
	r.Keys = s.keys[s.batchAt[j/batchRecords]:]
	r.KeyEnds = s.relEnd[j : j+m]
	r.Hashes = s.hashes[j : j+m]
	r.Times = s.passTimes[j : j+m]
	r.Marks = s.passMarks[j : j+m]
	r.Nums = s.temps[j : j+m] // one input: temp
}

// batchRecords is how many records a batch holds: a full batch of the
// runtime's (operators.Options.BatchSize's default).
const batchRecords = 512

// feeder adds the records of a benchStream a batch at a time, as a worker
// does; step consumes one record, adding the next batch when the last one
// is used up, so that b.Loop counts records.
type feeder struct {
	s    *benchStream
	op   *window.Operator
	r    window.Records
	i, k int // records added; of them, k not yet consumed by step
	late func(int, int64)
}

func (f *feeder) step() {
	if f.k == 0 {
		f.s.batch(f.i, &f.r)
		f.op.AddRecords(&f.r, f.late)
		f.k = f.r.Len()
		f.i += f.k
	}
	f.k--
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
				f := &feeder{s: s, op: op, late: func(int, int64) {}}
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
