package window_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// TestPrefetchChangesNothing runs the benchmark's stream, with enough keys
// for Prefetch to act, through two operators, one of them given Prefetch
// before every run of records, and requires the same results.
func TestPrefetchChangesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 10^6 records through two operators")
	}
	for _, a := range []window.Assigner{
		window.TumblingWindows(60_000),
		window.SlidingWindows(600_000, 60_000),
		window.SessionWindows(30_000),
	} {
		t.Run(fmt.Sprint(a.Kind), func(t *testing.T) {
			s := newBenchStream(20_000, 10_000)
			set, err := aggregate.NewSet(countAvgMax, aggregate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var outs [2][]byte
			var ops [2]*window.Operator
			for j := range ops {
				ops[j], err = window.NewOperator(window.Config{Assigner: a, Lateness: 5000, Aggregates: set,
					Emit: func(r *window.Result) {
						outs[j] = fmt.Appendf(outs[j], "%s %d %d %d ", r.Key, r.Start, r.End, r.Version)
						outs[j] = set.AppendEncode(outs[j], r.State)
					}})
				if err != nil {
					t.Fatal(err)
				}
			}
			in := aggregate.Input{Nums: []float64{0}}
			var bt batch
			for i := 0; i < len(s.times)*50; {
				s.batch(i, &bt)
				ops[1].Prefetch(bt.hashes, bt.times)
				for k, ts := range bt.times[:bt.n] {
					key := bt.keys[bt.start:bt.ends[k]]
					bt.start = bt.ends[k]
					in.Time, in.Nums[0] = ts, bt.temps[k]
					for _, op := range ops {
						op.Advance(ts - 3000)
						op.Add(key, bt.hashes[k], &in)
					}
					i++
				}
				if !bytes.Equal(outs[0], outs[1]) {
					t.Fatalf("results differ by record %d", i)
				}
				outs[0], outs[1] = outs[0][:0], outs[1][:0]
			}
			if st := ops[0].Stats(); st.Added == 0 || a.Kind != window.Session && st.Emitted == 0 {
				t.Fatalf("nothing happened: %+v", st) // sessions of keys reporting every 10 s never close
			}
		})
	}
}
