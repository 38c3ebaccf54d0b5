package window_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

type entry struct {
	hash       uint64
	key, value []byte
}

// driver runs events through an Operator as runOperator does, collecting
// results as summaries in emission order.
type driver struct {
	set *aggregate.Set
	op  *window.Operator
	wms *window.Watermarks
	out []string
}

func newDriver(t tb, cfg oracle.Config) *driver {
	set, err := aggregate.NewSet(digestAggs, aggregate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{set: set, wms: window.NewWatermarks(1, cfg.MaxOutOfOrder, 0)}
	var a window.Assigner
	switch cfg.Kind {
	case oracle.Tumbling:
		a = window.TumblingWindows(cfg.Size)
	case oracle.Sliding:
		a = window.SlidingWindows(cfg.Size, cfg.Slide)
	case oracle.Session:
		a = window.SessionWindows(cfg.Gap)
	}
	d.op, err = window.NewOperator(window.Config{Assigner: a, Lateness: cfg.Lateness, Aggregates: set,
		Emit: func(r *window.Result) {
			s := summary{Start: r.Start, End: r.End, Version: int(r.Version), Count: set.Result(r.State, 0).Int,
				Sum: set.Result(r.State, 1).Float, SumSq: set.Result(r.State, 2).Float,
				Min: set.Result(r.State, 3).Float, Max: set.Result(r.State, 4).Float}
			d.out = append(d.out, string(r.Key)+" "+s.String())
		}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *driver) feed(events []oracle.Event, from int) {
	nums := make([]float64, 2)
	for i, e := range events {
		i += from
		d.op.Advance(d.wms.Observe(0, e.Time))
		nums[0], nums[1] = float64(i), float64(i)*float64(i)
		d.op.Add([]byte(e.Key), xxhash.Sum64String(e.Key), &aggregate.Input{Time: e.Time, Nums: nums})
	}
}

// TestSnapshotRestoreContinues cuts a random stream at a random point,
// snapshots the operator, restores the entries (copied, in shuffled order)
// into a new operator and runs the rest of the stream there: the results
// after the cut are exactly those of an uninterrupted run.
func TestSnapshotRestoreContinues(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		events := genEvents(t)
		cut := rapid.IntRange(0, len(events)).Draw(t, "cut")

		whole := newDriver(t, cfg)
		whole.feed(events[:cut], 0)
		before := len(whole.out)
		whole.feed(events[cut:], cut)
		whole.op.Advance(window.MaxTime)

		first := newDriver(t, cfg)
		// Feed up to the cut with incremental snapshots in between.
		store0 := mapStore{}
		for from := 0; from < cut; {
			to := min(cut, from+rapid.IntRange(1, 60).Draw(t, "chunk"))
			first.feed(events[from:to], from)
			if err := first.op.SnapshotDirty(store0); err != nil {
				t.Fatal(err)
			}
			from = to
		}
		// The first run takes incremental snapshots at random points into
		// a store; at the cut the store must hold exactly what a full
		// snapshot holds.
		store := store0
		if err := first.op.SnapshotDirty(store); err != nil {
			t.Fatal(err)
		}
		full := mapStore{}
		if err := first.op.Snapshot(full); err != nil {
			t.Fatal(err)
		}
		if !store.equal(full) {
			t.Fatalf("incremental snapshots add up to %d entries, a full snapshot has %d", len(store), len(full))
		}
		var entries []entry
		for k, e := range store {
			entries = append(entries, entry{e.hash, []byte(k), e.value})
		}
		slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(string(a.key), string(b.key)) })
		for i := len(entries) - 1; i > 0; i-- {
			j := rapid.IntRange(0, i).Draw(t, "shuffle")
			entries[i], entries[j] = entries[j], entries[i]
		}
		second := newDriver(t, cfg)
		for _, e := range entries {
			if err := second.op.Restore(e.hash, e.key, e.value); err != nil {
				t.Fatal(err)
			}
		}
		second.op.FinishRestore()
		// The watermark generator is the caller's state: carry it over.
		for _, e := range events[:cut] {
			second.wms.Observe(0, e.Time)
		}
		second.feed(events[cut:], cut)
		second.op.Advance(window.MaxTime)
		// Keys may get other indexes after a restore, so only each key's own
		// order is fixed (as always): compare per key.
		got, want := byKey(second.out), byKey(whole.out[before:])
		if len(got) != len(want) {
			t.Fatalf("after restore: results for %d keys, want %d", len(got), len(want))
		}
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Fatalf("after restore, key %s:\n got  %v\n want %v", k, got[k], w)
			}
		}
	})
}

// FuzzRestore: arbitrary entries are refused with ErrCorrupt or accepted;
// never a panic.
func FuzzRestore(f *testing.F) {
	f.Add(byte(0), []byte("m"), []byte{1, 1, 2, 2})
	f.Add(byte(0), []byte("s\x80\x00\x00\x00\x00\x00\x00\x0ak1"), []byte{1, 1})
	f.Add(byte(2), []byte("x\x80\x00\x00\x00\x00\x00\x00\x0ak1"), []byte{20, 1, 0, 1})
	f.Add(byte(1), []byte("v\x80\x00\x00\x00\x00\x00\x00\x0ak1"), []byte{3})
	set, err := aggregate.NewSet(digestAggs, aggregate.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, kind byte, key, value []byte) {
		a := []window.Assigner{window.TumblingWindows(10), window.SlidingWindows(40, 2), window.SessionWindows(5)}[int(kind)%3]
		op, err := window.NewOperator(window.Config{Assigner: a, Aggregates: set, Emit: func(*window.Result) {}})
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Restore(xxhash.Sum64(key), key, value); err != nil && !errors.Is(err, window.ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
		op.FinishRestore()
		op.Advance(window.MaxTime)
	})
}

func byKey(lines []string) map[string][]string {
	m := map[string][]string{}
	for _, l := range lines {
		k, _, _ := strings.Cut(l, " ")
		m[k] = append(m[k], l)
	}
	return m
}

type stored struct {
	hash  uint64
	value []byte
}

// mapStore applies snapshot operations to a map, as a state store would.
type mapStore map[string]stored

func (m mapStore) Put(h uint64, k, v []byte) error {
	m[string(k)] = stored{h, slices.Clone(v)}
	return nil
}

func (m mapStore) Delete(_ uint64, k []byte) error {
	delete(m, string(k))
	return nil
}

func (m mapStore) DeletePrefix(p []byte) error {
	for k := range m {
		if strings.HasPrefix(k, string(p)) {
			delete(m, k)
		}
	}
	return nil
}

func (m mapStore) equal(o mapStore) bool {
	if len(m) != len(o) {
		return false
	}
	for k, v := range m {
		if w, ok := o[k]; !ok || w.hash != v.hash || string(w.value) != string(v.value) {
			return false
		}
	}
	return true
}
