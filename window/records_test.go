package window_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// TestAddRecordsChangesNothing runs the benchmark's stream, with enough
// keys for AddRecords to look ahead, through two operators, one of them
// given each record with Advance and Add (a batch of one), the other whole
// batches with AddRecords, and requires the same results and late records.
func TestAddRecordsChangesNothing(t *testing.T) {
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
			ops, outs := twoOperators(t, window.Config{Assigner: a, Lateness: 1000})
			in := aggregate.Input{Nums: []float64{0}}
			var r window.Records
			var late [2][]int
			for i := 0; i < len(s.times)*50; i += r.Len() {
				s.batch(i, &r)
				if i%(len(s.times)*7) == 0 {
					for j := range r.Times { // now and then a batch's readings are 15 min old
						r.Times[j] -= 15 * 60_000
					}
				}
				start := 0
				for k, end := range r.KeyEnds {
					ops[0].Advance(r.Marks[k])
					in.Time, in.Nums[0] = r.Times[k], r.Nums[k]
					if !ops[0].Add(r.Keys[start:end], r.Hashes[k], &in) {
						late[0] = append(late[0], i+k)
					}
					start = end
				}
				ops[1].AddRecords(&r, func(k int, wm int64) {
					if wm != ops[1].Watermark() {
						t.Fatalf("late record %d reported at watermark %d, the operator's is %d", i+k, wm, ops[1].Watermark())
					}
					late[1] = append(late[1], i+k)
				})
				if !bytes.Equal(outs[0], outs[1]) {
					t.Fatalf("results differ by record %d", i)
				}
				outs[0], outs[1] = outs[0][:0], outs[1][:0]
			}
			if !slices.Equal(late[0], late[1]) {
				t.Fatalf("late records: Add %d, AddRecords %d", len(late[0]), len(late[1]))
			}
			if st := ops[0].Stats(); st.Added == 0 || st.Late == 0 || a.Kind != window.Session && st.Emitted == 0 {
				t.Fatalf("nothing happened: %+v", st) // sessions of keys reporting every 10 s never close
			}
		})
	}
}

// TestAddRecordsForgottenKey has AddRecords find a key while looking ahead
// that the records before it then make the operator forget, its index left
// free or given to a new key: the key's records must not use the index
// found.
func TestAddRecordsForgottenKey(t *testing.T) {
	for _, reused := range []bool{false, true} {
		t.Run(fmt.Sprintf("reused=%v", reused), func(t *testing.T) {
			ops, outs := twoOperators(t, window.Config{Assigner: window.TumblingWindows(10_000)})
			var r window.Records
			add := func(key string, ts, mark int64) {
				r.Keys = append(r.Keys, key...)
				r.KeyEnds = append(r.KeyEnds, len(r.Keys))
				r.Hashes = append(r.Hashes, xxhash.Sum64String(key))
				r.Times = append(r.Times, ts)
				r.Marks = append(r.Marks, mark)
				r.Nums = append(r.Nums, 1)
			}
			flush := func() {
				start := 0
				for i, end := range r.KeyEnds {
					ops[0].Advance(r.Marks[i])
					ops[0].Add(r.Keys[start:end], r.Hashes[i], &aggregate.Input{Time: r.Times[i], Nums: r.Nums[i : i+1]})
					start = end
				}
				ops[1].AddRecords(&r, func(int, int64) {})
				r = window.Records{}
			}
			const nkeys = 20_000 // enough for AddRecords to look ahead
			for i := range nkeys {
				add(fmt.Sprintf("k%05d", i), 0, 0)
			}
			flush()
			// One batch. Its first group advances the watermark so far that
			// every key is idle and forgotten, after the second group's keys
			// were found; its records are too late to make keys, but for a
			// newcomer when the index found is to be reused at once. The
			// second group is the last key's; the third starts with a
			// newcomer, which takes the index freed last unless the last key
			// took it again.
			last := fmt.Sprintf("k%05d", nkeys-1) // forgotten last, so its index is the first reused
			for i := range window.PipelineGroup {
				if reused && i == window.PipelineGroup-1 {
					add("newcomer", 100_000, 100_000)
				} else {
					add("late", 0, 100_000)
				}
			}
			for i := range window.PipelineGroup {
				add(last, 100_001+int64(i), 100_001+int64(i))
			}
			add("newcomer", 100_100, 100_100)
			for i := range 2 * window.PipelineGroup {
				add(last, 100_101+int64(i), 100_101+int64(i))
			}
			flush()
			if ops[0].Keys() != ops[1].Keys() {
				t.Fatalf("with AddRecords %d keys, with Add %d", ops[1].Keys(), ops[0].Keys())
			}
			for _, op := range ops {
				op.Advance(window.MaxTime)
			}
			if !bytes.Equal(outs[0], outs[1]) {
				i := 0
				for i < min(len(outs[0]), len(outs[1])) && outs[0][i] == outs[1][i] {
					i++
				}
				t.Fatalf("results differ from byte %d:\nwith AddRecords: %q\nwith Add:        %q",
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
