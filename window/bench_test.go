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
// per period, in a shuffled order, each reading up to 2 s out of order.
type benchStream struct {
	ids    []int
	hashes []uint64
	jitter []int64
	period int64 // ms between two readings of one key
}

func newBenchStream(nkeys int, period int64) *benchStream {
	rng := rand.New(rand.NewPCG(7, 7))
	s := &benchStream{period: period}
	for _, k := range rng.Perm(nkeys) {
		s.ids = append(s.ids, k)
		s.hashes = append(s.hashes, xxhash.Sum64(fmt.Appendf(nil, "sensor-%06d", k)))
		s.jitter = append(s.jitter, rng.Int64N(2000))
	}
	return s
}

// at returns record i: its key (written into buf, as a decoder writes keys
// into a batch), hash and event time.
func (s *benchStream) at(i int, buf []byte) ([]byte, uint64, int64) {
	n := len(s.ids)
	k := i % n
	round := int64(i / n)
	t := round*s.period + int64(k)*s.period/int64(n) - s.jitter[k]
	buf = append(buf[:0], "sensor-000000"...)
	for j, id := len(buf)-1, s.ids[k]; id > 0; j, id = j-1, id/10 {
		buf[j] = byte('0' + id%10)
	}
	return buf, s.hashes[k], t
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
		b.Run(bc.name+"/keys=1e5", func(b *testing.B) {
			const nkeys = 100_000
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
			nums := []float64{0}
			in := aggregate.Input{Nums: nums}
			i := 0
			var kb []byte
			step := func() {
				key, h, t := s.at(i, kb[:0])
				kb = key
				op.Advance(t - 5000 + 2000) // watermark: max seen - out-of-orderness (jitter is < 2 s)
				in.Time = t
				nums[0] = float64(i%400) / 10
				op.Add(key, h, &in)
				i++
			}
			var hs [window.PrefetchMax]uint64
			var ts [window.PrefetchMax]int64
			prefetch := func() {
				for j := range hs {
					_, hs[j], ts[j] = s.at(i+j, kb[:0])
				}
				op.Prefetch(hs[:], ts[:])
			}
			warm := nkeys * int(3_700_000/s.period) // a little over an hour of event time
			for range warm {
				step()
			}
			results = 0
			for b.Loop() {
				if i%window.PrefetchMax == 0 {
					prefetch()
				}
				step()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(results)/float64(b.N), "results/record")
		})
	}
}
