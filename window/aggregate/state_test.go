package aggregate

import (
	"math"
	"testing"
)

func fl(f float64) Value { return Value{Kind: Float, Float: f} }
func in(i int64) Value   { return Value{Kind: Int, Int: i} }

var negZero = math.Copysign(0, -1)

// TestFuncs checks each function on small record lists, then checks that
// the same records spread one per State and merged in reverse order, and
// sent through an encode/decode round trip, give the same result.
func TestFuncs(t *testing.T) {
	xs := func(vals ...float64) []rec {
		out := make([]rec, len(vals))
		for i, v := range vals {
			out[i] = rec{t: int64(i), x: v}
		}
		return out
	}
	inf := math.Inf(1)
	ramp := make([]rec, 100)
	for i := range ramp {
		ramp[i] = rec{x: float64(i + 1)}
	}
	tests := []struct {
		name string
		spec Spec
		recs []rec
		want Value
		tol  float64 // relative; 0 means bit for bit
	}{
		{"count() empty", Spec{Func: Count, Input: -1}, nil, in(0), 0},
		{"count() counts null records", Spec{Func: Count, Input: -1}, xs(1, null, 3), in(3), 0},
		{"count(x) empty", Spec{Func: Count}, nil, in(0), 0},
		{"count(x) skips nulls", Spec{Func: Count}, xs(1, null, 3, null), in(2), 0},
		{"count(x) all null", Spec{Func: Count}, xs(null, null), in(0), 0},

		{"sum empty is null", Spec{Func: Sum}, nil, Value{}, 0},
		{"sum all null is null", Spec{Func: Sum}, xs(null), Value{}, 0},
		{"sum", Spec{Func: Sum}, xs(1.5, null, -4, 2), fl(-0.5), 0},
		{"sum of zero values is 0 not null", Spec{Func: Sum}, xs(0), fl(0), 0},
		{"sum +inf", Spec{Func: Sum}, xs(1, inf), fl(inf), 0},
		{"sum inf-inf is NaN", Spec{Func: Sum}, xs(inf, -inf), fl(math.NaN()), 0},

		{"min empty", Spec{Func: Min}, nil, Value{}, 0},
		{"min", Spec{Func: Min}, xs(3, null, -7.25, 5, -7.25), fl(-7.25), 0},
		{"min of +inf", Spec{Func: Min}, xs(inf), fl(inf), 0},
		{"min zero signs", Spec{Func: Min}, xs(negZero, 0), fl(0), 0},
		{"max empty", Spec{Func: Max}, xs(null), Value{}, 0},
		{"max", Spec{Func: Max}, xs(-3, null, -1, -2), fl(-1), 0},
		{"max of -inf", Spec{Func: Max}, xs(-inf, -inf), fl(-inf), 0},
		{"max zero signs", Spec{Func: Max}, xs(0, negZero), fl(0), 0},

		{"avg empty", Spec{Func: Avg}, nil, Value{}, 0},
		{"avg", Spec{Func: Avg}, xs(1, null, 2, -6), fl(-1), 0},
		{"avg one", Spec{Func: Avg}, xs(21.5), fl(21.5), 0},

		{"variance empty", Spec{Func: Variance}, xs(null), Value{}, 0},
		{"variance one value", Spec{Func: Variance}, xs(5), fl(0), 0},
		{"variance", Spec{Func: Variance}, xs(2, 4, 4, null, 4, 5, 5, 7, 9), fl(4), 1e-12},
		{"variance far from zero", Spec{Func: Variance}, xs(1e9+4, 1e9+7, 1e9+13, 1e9+16), fl(22.5), 1e-9},
		{"variance negative", Spec{Func: Variance}, xs(-1, -3), fl(1), 1e-12},
		{"stddev", Spec{Func: Stddev}, xs(2, 4, 4, 4, 5, 5, 7, 9), fl(2), 1e-12},
		{"stddev empty", Spec{Func: Stddev}, nil, Value{}, 0},

		{"first empty", Spec{Func: First}, nil, Value{}, 0},
		{"first by time", Spec{Func: First}, []rec{{t: 5, x: 1}, {t: 2, x: 9}, {t: 3, x: -1}}, fl(9), 0},
		{"first skips null", Spec{Func: First}, []rec{{t: 1, x: null}, {t: 2, x: 4}}, fl(4), 0},
		{"first tie smallest value", Spec{Func: First}, []rec{{t: 2, x: 7}, {t: 2, x: -3}, {t: 2, x: 5}, {t: 9, x: -9}}, fl(-3), 0},
		{"first negative time", Spec{Func: First}, []rec{{t: -10, x: 1}, {t: math.MinInt64, x: 2}}, fl(2), 0},
		{"first at max time", Spec{Func: First}, []rec{{t: math.MaxInt64, x: 8}}, fl(8), 0},
		{"last empty", Spec{Func: Last}, xs(null), Value{}, 0},
		{"last by time", Spec{Func: Last}, []rec{{t: 5, x: 1}, {t: 7, x: 9}, {t: 3, x: -1}}, fl(9), 0},
		{"last tie largest value", Spec{Func: Last}, []rec{{t: 2, x: 7}, {t: 2, x: -3}, {t: 2, x: 5}, {t: 1, x: 99}}, fl(7), 0},
		{"last at min time", Spec{Func: Last}, []rec{{t: math.MinInt64, x: -inf}}, fl(-inf), 0},

		{"distinct empty", Spec{Func: Distinct}, nil, in(0), 0},
		{"distinct skips zero hash", Spec{Func: Distinct}, []rec{{h: 0}, {h: 0}}, in(0), 0},
		{"distinct", Spec{Func: Distinct}, []rec{{h: hashOf(1)}, {h: hashOf(2)}, {h: 0}, {h: hashOf(1)}, {h: hashOf(3)}}, in(3), 0},

		{"quantile empty", Spec{Func: Quantile, Param: 0.5}, xs(null), Value{}, 0},
		// rank q·(n-1) = 49.5: DDSketch answers the 50th smallest value (50) within α.
		{"quantile median", Spec{Func: Quantile, Param: 0.5}, ramp, fl(50), 0.01},
		{"quantile max", Spec{Func: Quantile, Param: 1}, ramp, fl(100), 0.01},
		{"quantile min", Spec{Func: Quantile, Param: 0}, ramp, fl(1), 0.01},
		{"quantile negative", Spec{Func: Quantile, Param: 0}, xs(-5, -1, 3), fl(-5), 0.01},
		{"quantile zero", Spec{Func: Quantile, Param: 0.5}, xs(-5, 0, 3), fl(0), 0},
		{"quantile skips inf", Spec{Func: Quantile, Param: 1}, xs(2, inf), fl(2), 0.01},
		{"quantile all inf is null", Spec{Func: Quantile, Param: 1}, xs(inf), Value{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Name = "a"
			s := mustSet(t, Options{}, tt.spec)
			check := func(how string, got Value) {
				t.Helper()
				ok := sameValue(got, tt.want)
				if tt.tol > 0 {
					ok = got.Kind == tt.want.Kind && closeRel(got.Float, tt.want.Float, tt.tol)
				}
				if !ok {
					t.Errorf("%s: got %+v, want %+v", how, got, tt.want)
				}
			}
			st := s.New()
			addAll(s, st, tt.recs...)
			check("added", s.Result(st, 0))

			merged := s.New()
			for i := len(tt.recs) - 1; i >= 0; i-- {
				one := s.New()
				addAll(s, one, tt.recs[i])
				s.Merge(merged, one)
			}
			check("merged one by one", s.Result(merged, 0))

			dec := s.New()
			addAll(s, dec, rec{t: 1, x: 42, h: hashOf(42)}) // Decode must replace this
			if err := s.Decode(dec, s.AppendEncode(nil, st)); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			check("decoded", s.Result(dec, 0))
			if s.Empty(dec) != (len(tt.recs) == 0) {
				t.Errorf("Empty after decode = %v with %d records", s.Empty(dec), len(tt.recs))
			}
		})
	}
}

func TestResetAndEmpty(t *testing.T) {
	s := mustSet(t, Options{},
		Spec{Name: "n", Func: Count, Input: -1},
		Spec{Name: "min", Func: Min},
		Spec{Name: "first", Func: First},
		Spec{Name: "ids", Func: Distinct},
	)
	st := s.New()
	if !s.Empty(st) {
		t.Fatal("new State is not empty")
	}
	fresh := s.AppendEncode(nil, st)
	addAll(s, st, rec{t: 3, x: -2, h: hashOf(1)}, rec{t: 1, x: 8, h: hashOf(2)})
	if s.Empty(st) {
		t.Fatal("State with records is empty")
	}
	s.Reset(st)
	if !s.Empty(st) {
		t.Fatal("Reset State is not empty")
	}
	if got := s.AppendEncode(nil, st); string(got) != string(fresh) {
		t.Errorf("Reset State encodes to %x, new State to %x", got, fresh)
	}
	for i, v := range results(s, st) {
		if want := (Value{}); s.Spec(i).Func == Count || s.Spec(i).Func == Distinct {
			if v != in(0) {
				t.Errorf("%s after Reset = %+v, want 0", s.Spec(i).Name, v)
			}
		} else if v != want {
			t.Errorf("%s after Reset = %+v, want null", s.Spec(i).Name, v)
		}
	}
	// Merging an empty State changes nothing.
	addAll(s, st, rec{t: 5, x: 1, h: hashOf(9)})
	before := s.AppendEncode(nil, st)
	s.Merge(st, s.New())
	if after := s.AppendEncode(nil, st); string(after) != string(before) {
		t.Errorf("merging an empty State changed %x to %x", before, after)
	}
}

// TestResetDenseHLL checks that a Distinct sketch that went dense comes back
// sparse after Reset: small partials must stay small and exact.
func TestResetDenseHLL(t *testing.T) {
	s := mustSet(t, Options{HLLPrecision: 8}, Spec{Name: "ids", Func: Distinct})
	st := s.New()
	for i := range 5000 {
		addAll(s, st, rec{h: hashOf(uint64(i))})
	}
	if n := len(s.AppendEncode(nil, st)); n < 256 {
		t.Fatalf("5000 distinct at p=8 encode in %d bytes; expected a dense sketch", n)
	}
	s.Reset(st)
	addAll(s, st, rec{h: hashOf(1)}, rec{h: hashOf(2)})
	if n := len(s.AppendEncode(nil, st)); n > 64 {
		t.Errorf("2 distinct after Reset encode in %d bytes; the sketch stayed dense", n)
	}
	if got := s.Result(st, 0); got != in(2) {
		t.Errorf("distinct after Reset = %+v, want 2", got)
	}
}

func TestCopyTo(t *testing.T) {
	specs := []Spec{
		{Name: "n", Func: Count, Input: -1},
		{Name: "var", Func: Variance},
		{Name: "last", Func: Last},
		{Name: "ids", Func: Distinct},
	}
	specs = append(specs, Spec{Name: "p90", Func: Quantile, Param: 0.9})
	s := mustSet(t, Options{}, specs...)
	src, dst := s.New(), s.New()
	addAll(s, src, rec{t: 1, x: 3, h: hashOf(1)}, rec{t: 2, x: 5, h: hashOf(2)})
	addAll(s, dst, rec{t: 9, x: 100, h: hashOf(3)})
	s.CopyTo(dst, src)
	if a, b := s.AppendEncode(nil, src), s.AppendEncode(nil, dst); string(a) != string(b) {
		t.Errorf("CopyTo: dst encodes %x, src %x", b, a)
	}
	// dst is independent of src afterwards.
	addAll(s, dst, rec{t: 10, x: 1, h: hashOf(4)})
	if got := s.Result(src, 0); got != in(2) {
		t.Errorf("adding to the copy changed src: count %+v", got)
	}
	s.CopyTo(src, src)
	if got := s.Result(src, 0); got != in(2) {
		t.Errorf("CopyTo(src, src) changed src: count %+v", got)
	}
}

// TestInputSlots checks that each aggregate reads its own slot.
func TestInputSlots(t *testing.T) {
	s := mustSet(t, Options{},
		Spec{Name: "a", Func: Sum, Input: 0},
		Spec{Name: "b", Func: Sum, Input: 2},
		Spec{Name: "c", Func: Count, Input: 1},
		Spec{Name: "d", Func: Distinct, Input: 1},
	)
	st := s.New()
	s.Add(st, &Input{Nums: []float64{1, null, 10}, Hashes: []uint64{hashOf(1), 0}})
	s.Add(st, &Input{Nums: []float64{2, 5, 20}, Hashes: []uint64{0, hashOf(7)}})
	want := []Value{fl(3), fl(30), in(1), in(1)}
	for i, w := range want {
		if got := s.Result(st, i); got != w {
			t.Errorf("%s = %+v, want %+v", s.Spec(i).Name, got, w)
		}
	}
}

// TestNewStates: partials of States (states.go, for the window operator)
// behave like States from New, keep what is done through their views, and
// do not share slots.
func TestNewStates(t *testing.T) {
	for _, specs := range [][]Spec{scalarSpecs, {{Name: "ids", Func: Distinct}, {Name: "p", Func: Quantile, Param: 0.5}, {Name: "avg", Func: Avg}}} {
		s := mustSet(t, Options{}, specs...)
		sts := s.NewStates(3)
		if sts.Len() != 3 {
			t.Fatalf("Len = %d, want 3", sts.Len())
		}
		ref := s.New()
		for i := range sts.Len() {
			if st := sts.At(i); !s.Empty(&st) {
				t.Fatalf("partial %d not empty", i)
			}
		}
		st := sts.At(1)
		addAll(s, &st, rec{t: 1, x: 2, h: hashOf(1)}, rec{t: 2, x: -4, h: hashOf(2)})
		addAll(s, ref, rec{t: 1, x: 2, h: hashOf(1)}, rec{t: 2, x: -4, h: hashOf(2)})
		again := sts.At(1)
		if a, b := s.AppendEncode(nil, &again), s.AppendEncode(nil, ref); string(a) != string(b) {
			t.Errorf("partial encodes %x, New State %x", a, b)
		}
		empty := s.AppendEncode(nil, s.New())
		for _, i := range []int{0, 2} {
			other := sts.At(i)
			if got := s.AppendEncode(nil, &other); string(got) != string(empty) {
				t.Errorf("adding to partial 1 changed partial %d: %x", i, got)
			}
		}
		s.Reset(&st)
		if got := s.AppendEncode(nil, &again); string(got) != string(empty) {
			t.Errorf("Reset partial encodes %x", got)
		}
	}
}

// TestGrowStates: growing keeps the partials and their contents, sketches
// included, and adds empty ones that share nothing with the old ones.
func TestGrowStates(t *testing.T) {
	for _, specs := range [][]Spec{scalarSpecs, {{Name: "ids", Func: Distinct}, {Name: "p", Func: Quantile, Param: 0.5}, {Name: "avg", Func: Avg}}} {
		s := mustSet(t, Options{}, specs...)
		sts := s.NewStates(2)
		for i := range 2 {
			st := sts.At(i)
			addAll(s, &st, rec{t: int64(i), x: float64(10 * i), h: hashOf(uint64(i))}, rec{t: 5, x: 3, h: hashOf(9)})
		}
		var want [][]byte
		for i := range 2 {
			st := sts.At(i)
			want = append(want, s.AppendEncode(nil, &st))
		}
		s.GrowStates(&sts, 5)
		s.GrowStates(&sts, 3) // smaller: nothing
		if sts.Len() != 5 {
			t.Fatalf("Len = %d, want 5", sts.Len())
		}
		for i := range 2 {
			st := sts.At(i)
			if got := s.AppendEncode(nil, &st); string(got) != string(want[i]) {
				t.Errorf("partial %d after growing: %x, want %x", i, got, want[i])
			}
		}
		empty := s.AppendEncode(nil, s.New())
		for i := 2; i < 5; i++ {
			st := sts.At(i)
			if got := s.AppendEncode(nil, &st); string(got) != string(empty) {
				t.Errorf("new partial %d: %x, want empty", i, got)
			}
		}
		st := sts.At(3)
		addAll(s, &st, rec{t: 1, x: 1, h: hashOf(7)})
		for _, i := range []int{0, 1, 2, 4} {
			other := sts.At(i)
			if s.Empty(&other) != (i >= 2) {
				t.Errorf("adding to partial 3 changed partial %d", i)
			}
		}
	}
}
