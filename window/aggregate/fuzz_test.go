package aggregate

import (
	"errors"
	"testing"
)

// fuzzSets are the Sets the fuzz targets decode with: scalars only, every
// function, a low-precision HyperLogLog (dense quickly), and the scalar one
// with two inputs.
func fuzzSets(tb testing.TB) []*Set {
	all := []Spec{
		{Name: "n", Func: Count, Input: -1},
		{Name: "cnt", Func: Count, Input: 0},
		{Name: "sum", Func: Sum, Input: 0},
		{Name: "min", Func: Min, Input: 0},
		{Name: "max", Func: Max, Input: 0},
		{Name: "avg", Func: Avg, Input: 0},
		{Name: "var", Func: Variance, Input: 0},
		{Name: "sd", Func: Stddev, Input: 0},
		{Name: "first", Func: First, Input: 0},
		{Name: "last", Func: Last, Input: 0},
		{Name: "ids", Func: Distinct, Input: 0},
		{Name: "p90", Func: Quantile, Input: 0, Param: 0.9},
	}
	sketches := []Spec{{Name: "ids", Func: Distinct}, {Name: "p", Func: Quantile, Param: 0.5}}
	return []*Set{
		mustSet(tb, Options{}, all[:10]...),
		mustSet(tb, Options{}, all...),
		mustSet(tb, Options{HLLPrecision: 4, QuantileAccuracy: 0.05}, sketches...),
		mustSet(tb, Options{}, Spec{Name: "n", Func: Count, Input: -1}, Spec{Name: "avg", Func: Avg, Input: 0}, Spec{Name: "max", Func: Max, Input: 1}),
	}
}

func fuzzSeeds(f *testing.F, sets []*Set) {
	for i, s := range sets {
		for _, n := range []int{0, 1, 3, 40, 300} {
			st := s.New()
			for j := range n {
				x := float64(j%17) - 8.25
				if j%5 == 0 {
					x = null
				}
				addAll(s, st, rec{t: int64(j % 9), x: x, h: hashOf(uint64(j % 150))})
			}
			f.Add(uint8(i), s.AppendEncode(nil, st))
		}
	}
}

// FuzzDecode: Decode never panics; it fails with ErrCorrupt and leaves the
// State alone, or succeeds and re-encoding decodes to the same results.
func FuzzDecode(f *testing.F) {
	sets := fuzzSets(f)
	fuzzSeeds(f, sets)
	f.Fuzz(func(t *testing.T, which uint8, in []byte) {
		s := sets[int(which)%len(sets)]
		st := s.New()
		addAll(s, st, rec{t: 3, x: 1.5, h: hashOf(1)})
		before := s.AppendEncode(nil, st)
		if err := s.Decode(st, in); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			if after := s.AppendEncode(nil, st); string(after) != string(before) {
				t.Fatalf("failed Decode changed the State")
			}
			return
		}
		want := results(s, st)
		enc := s.AppendEncode(nil, st)
		again := s.New()
		if err := s.Decode(again, enc); err != nil {
			t.Fatalf("re-encoding of a decoded state does not decode: %v", err)
		}
		for i, w := range want {
			if got := s.Result(again, i); !sameValue(got, w) {
				t.Fatalf("%s: %+v after re-encoding, %+v before", s.Spec(i).Name, got, w)
			}
		}
		if enc2 := s.AppendEncode(nil, again); string(enc2) != string(enc) {
			t.Fatalf("re-encoding is not stable:\n%x\n%x", enc, enc2)
		}
	})
}

// FuzzMergeEncoded: MergeEncoded never panics; it fails with ErrCorrupt and
// leaves dst alone, or succeeds and agrees with Decode followed by Merge.
func FuzzMergeEncoded(f *testing.F) {
	sets := fuzzSets(f)
	fuzzSeeds(f, sets)
	f.Fuzz(func(t *testing.T, which uint8, in []byte) {
		s := sets[int(which)%len(sets)]
		dst := s.New()
		addAll(s, dst, rec{t: 3, x: 1.5, h: hashOf(1)}, rec{t: 4, x: -2, h: hashOf(2)})
		before := s.AppendEncode(nil, dst)
		err := s.MergeEncoded(dst, in)
		tmp := s.New()
		derr := s.Decode(tmp, in)
		if (err == nil) != (derr == nil) {
			t.Fatalf("MergeEncoded error %v, Decode error %v", err, derr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			if after := s.AppendEncode(nil, dst); string(after) != string(before) {
				t.Fatalf("failed MergeEncoded changed dst")
			}
			return
		}
		ref := s.New()
		if err := s.Decode(ref, before); err != nil {
			t.Fatal(err)
		}
		s.Merge(ref, tmp)
		for i := range s.Len() {
			if got, want := s.Result(dst, i), s.Result(ref, i); !sameValue(got, want) {
				t.Fatalf("%s: MergeEncoded %+v, Decode+Merge %+v", s.Spec(i).Name, got, want)
			}
		}
	})
}
