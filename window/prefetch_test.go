package window_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"

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
			ops, outs := twoOperators(t, window.Config{Assigner: a, Lateness: 5000})
			in := aggregate.Input{Nums: []float64{0}}
			var bt batch
			for i := 0; i < len(s.times)*50; {
				s.batch(i, &bt)
				for k, ts := range bt.times[:bt.n] {
					if k%window.PrefetchStep == 0 {
						ops[1].Prefetch(bt.hashes[k:], bt.times[k:])
					}
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

// TestPrefetchOfForgottenKey has Prefetch find a key that is then forgotten
// before its records are added, its index left free or given to a new key:
// the Adds must not use the index Prefetch found.
func TestPrefetchOfForgottenKey(t *testing.T) {
	for _, reused := range []bool{false, true} {
		t.Run(fmt.Sprintf("reused=%v", reused), func(t *testing.T) {
			ops, outs := twoOperators(t, window.Config{Assigner: window.TumblingWindows(10_000)})
			add := func(key string, ts int64) {
				for _, op := range ops {
					op.Advance(ts)
					op.Add([]byte(key), xxhash.Sum64String(key), &aggregate.Input{Time: ts, Nums: []float64{1}})
				}
			}
			const nkeys = 20_000 // enough for Prefetch to act
			for i := range nkeys {
				add(fmt.Sprintf("k%05d", i), 0)
			}
			last := fmt.Sprintf("k%05d", nkeys-1) // the last key: forgotten last, so its index is the first reused
			hashes := make([]uint64, window.PrefetchAhead)
			times := make([]int64, window.PrefetchAhead)
			for i := range hashes {
				hashes[i], times[i] = xxhash.Sum64String(last), 100_000
			}
			ops[1].Prefetch(hashes, times)
			for _, op := range ops {
				op.Advance(100_000) // every key is idle now: all are forgotten
				if op.Keys() != 0 {
					t.Fatalf("%d keys remembered, want none", op.Keys())
				}
			}
			if reused {
				add("newcomer", 100_000)
			}
			add(last, 100_000)
			add("newcomer", 100_001) // takes the freed index if last's Add did not
			for i := range 2 * window.PrefetchAhead {
				add(last, 100_002+int64(i))
			}
			if ops[0].Keys() != ops[1].Keys() {
				t.Fatalf("with Prefetch %d keys, without %d", ops[1].Keys(), ops[0].Keys())
			}
			for _, op := range ops {
				op.Advance(window.MaxTime)
			}
			if !bytes.Equal(outs[0], outs[1]) {
				i := 0
				for i < min(len(outs[0]), len(outs[1])) && outs[0][i] == outs[1][i] {
					i++
				}
				t.Fatalf("results differ from byte %d:\nwith Prefetch:    %q\nwithout Prefetch: %q",
					i, outs[1][i:min(i+120, len(outs[1]))], outs[0][i:min(i+120, len(outs[0]))])
			}
		})
	}
}

// twoOperators returns two operators of cfg with count/avg/max, each
// appending its results, encoded, to its own buffer in outs.
func twoOperators(t *testing.T, cfg window.Config) (ops [2]*window.Operator, outs *[2][]byte) {
	t.Helper()
	set, err := aggregate.NewSet(countAvgMax, aggregate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	outs = new([2][]byte)
	for j := range ops {
		c := cfg
		c.Aggregates = set
		c.Emit = func(r *window.Result) {
			outs[j] = fmt.Appendf(outs[j], "%s %d %d %d ", r.Key, r.Start, r.End, r.Version)
			outs[j] = set.AppendEncode(outs[j], r.State)
		}
		if ops[j], err = window.NewOperator(c); err != nil {
			t.Fatal(err)
		}
	}
	return ops, outs
}
