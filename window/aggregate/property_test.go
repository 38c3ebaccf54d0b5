package aggregate

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// propRec is a record of the property tests: slot 0 holds "nice" values
// (multiples of 1/16 in [-125, 125], so sums are exact and duplicates
// common), slot 1 values of wide magnitude for the quantiles, slot 2 any
// float64 at all for min, max, first and last. NaN is null.
type propRec struct {
	t    int64
	nums [3]float64
	h    uint64
}

// hashDomain is how many distinct field values the hashed input draws from.
// TestHashDomainSparseExact checks that their hashes keep distinct sparse
// HyperLogLog keys, which makes small distinct counts exact.
const hashDomain = 512

func genRecs(t *rapid.T) []propRec {
	span := rapid.SampledFrom([]int64{2, 1000, math.MaxInt64}).Draw(t, "time span")
	maybeNull := func(label string, x float64) float64 {
		if rapid.IntRange(0, 9).Draw(t, label+" null") == 0 {
			return null
		}
		return x
	}
	gen := rapid.Custom(func(t *rapid.T) propRec {
		var r propRec
		r.t = rapid.Int64Range(-span, span).Draw(t, "t")
		r.nums[0] = maybeNull("nice", float64(rapid.IntRange(-2000, 2000).Draw(t, "nice"))/16)
		wide := float64(rapid.IntRange(-2000, 2000).Draw(t, "wide")) / 16 * math.Pow(10, float64(rapid.IntRange(-6, 12).Draw(t, "exp")))
		r.nums[1] = maybeNull("wide", wide)
		r.nums[2] = maybeNull("any", rapid.Float64().Draw(t, "any"))
		if rapid.IntRange(0, 9).Draw(t, "hash null") > 0 {
			r.h = hashOf(uint64(rapid.IntRange(0, hashDomain-1).Draw(t, "hash")))
		}
		return r
	})
	// rapid favours short slices; draw the length so that long streams
	// (many merges, sketches with hundreds of values) are common too.
	n := rapid.OneOf(rapid.IntRange(0, 10), rapid.IntRange(10, 300)).Draw(t, "len")
	return rapid.SliceOfN(gen, n, n).Draw(t, "records")
}

func addProp(s *Set, st *State, recs ...propRec) {
	in := Input{Nums: make([]float64, 3), Hashes: make([]uint64, 1)}
	for _, r := range recs {
		in.Time = r.t
		copy(in.Nums, r.nums[:])
		in.Hashes[0] = r.h
		s.Add(st, &in)
	}
}

// propSet draws a Set from a pool with every function, some of them twice
// on one input (as sum and avg of one field, whose second sum Add keeps
// apart from the field's), in a drawn order; quantile q is drawn too.
func propSet(t *rapid.T) *Set {
	pool := []Spec{
		{Name: "n", Func: Count, Input: -1},
		{Name: "cnt", Func: Count, Input: 0},
		{Name: "sum", Func: Sum, Input: 0},
		{Name: "avg", Func: Avg, Input: 0},
		{Name: "min0", Func: Min, Input: 0},
		{Name: "max0", Func: Max, Input: 0},
		{Name: "max0b", Func: Max, Input: 0},
		{Name: "var", Func: Variance, Input: 0},
		{Name: "sd", Func: Stddev, Input: 0},
		{Name: "sum0b", Func: Sum, Input: 0}, // input 2 holds any float: its sums need not be associative
		{Name: "min", Func: Min, Input: 2},
		{Name: "min2b", Func: Min, Input: 2},
		{Name: "max", Func: Max, Input: 2},
		{Name: "first", Func: First, Input: 2},
		{Name: "last", Func: Last, Input: 2},
		{Name: "ids", Func: Distinct, Input: 0},
		{Name: "p50", Func: Quantile, Input: 1, Param: 0.5},
		{Name: "pq", Func: Quantile, Input: 1, Param: rapid.Float64Range(0, 1).Draw(t, "q")},
	}
	// Half the Sets have only simple aggregates (count, sum, avg, min,
	// max), the fields, whose Sets take the paths without the other loops.
	simple := rapid.Bool().Draw(t, "simple only")
	var specs []Spec
	for _, sp := range rapid.Permutation(pool).Draw(t, "order") {
		if simple && !sharesN(sp.Func) {
			continue
		}
		if rapid.Bool().Draw(t, "take "+sp.Name) {
			specs = append(specs, sp)
		}
	}
	if len(specs) == 0 {
		specs = pool[:1]
	}
	s, err := NewSet(specs, Options{})
	if err != nil {
		t.Fatalf("NewSet: %v", err)
	}
	return s
}

// oracle computes each result by brute force over the whole stream.
type oracle struct {
	recs []propRec
}

func (o oracle) vals(slot int) []float64 {
	var out []float64
	for _, r := range o.recs {
		if x := r.nums[slot]; x == x {
			out = append(out, x)
		}
	}
	return out
}

// TestMergeProperty splits a random stream across k States, merges them in a
// random order and tree shape (by Merge, by MergeEncoded, by Decode then
// Merge, by MergeRows on States), and compares with the stream added to one State and with a brute
// force oracle.
func TestMergeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := propSet(t)
		recs := genRecs(t)
		k := rapid.IntRange(1, 8).Draw(t, "k")

		single := s.New()
		addProp(s, single, recs...)

		parts := make([]*State, k)
		for i := range parts {
			parts[i] = s.New()
		}
		for i, r := range recs {
			addProp(s, parts[rapid.IntRange(0, k-1).Draw(t, "part")], r)
			_ = i
		}
		for len(parts) > 1 {
			i := rapid.IntRange(0, len(parts)-1).Draw(t, "dst")
			j := rapid.IntRange(0, len(parts)-2).Draw(t, "src")
			if j >= i {
				j++
			}
			dst, src := parts[i], parts[j]
			before := s.AppendEncode(nil, src)
			switch rapid.IntRange(0, 3).Draw(t, "how") {
			case 0:
				s.Merge(dst, src)
			case 3: // by MergeRows between partials of States, as the window operator merges slices
				ds, ss := s.NewStates(2), s.NewStates(3)
				d, sr := ds.At(1), ss.At(2)
				s.CopyTo(&d, dst)
				s.CopyTo(&sr, src)
				s.MergeRows(&ds, &ss, []Row{{Dst: 1, Src: 2}})
				s.CopyTo(dst, &d)
			case 1:
				if err := s.MergeEncoded(dst, before); err != nil {
					t.Fatalf("MergeEncoded: %v", err)
				}
			case 2:
				tmp := s.New()
				if err := s.Decode(tmp, before); err != nil {
					t.Fatalf("Decode: %v", err)
				}
				s.Merge(dst, tmp)
			}
			if after := s.AppendEncode(nil, src); string(after) != string(before) {
				t.Fatalf("merge changed src")
			}
			parts = slices.Delete(parts, j, j+1)
		}
		merged := parts[0]
		checkAgainstOracle(t, s, "single", single, oracle{recs})
		checkAgainstOracle(t, s, "merged", merged, oracle{recs})
		for i := range s.Len() {
			a, b := s.Result(single, i), s.Result(merged, i)
			ok := sameValue(a, b)
			switch s.Spec(i).Func {
			case Sum, Avg, Variance, Stddev:
				ok = a.Kind == b.Kind && closeRel(a.Float, b.Float, 1e-9)
			}
			if !ok {
				t.Errorf("%s: single %+v, merged %+v", s.Spec(i).Name, a, b)
			}
		}
	})
}

func checkAgainstOracle(t *rapid.T, s *Set, label string, st *State, o oracle) {
	for i := range s.Len() {
		sp := s.Spec(i)
		got := s.Result(st, i)
		bad := func(want any) { t.Errorf("%s %s = %+v, oracle %v", label, sp.Name, got, want) }
		if sp.Func == Count && sp.Input < 0 {
			if got != in(int64(len(o.recs))) {
				bad(len(o.recs))
			}
			continue
		}
		if sp.Func == Distinct {
			seen := map[uint64]bool{}
			for _, r := range o.recs {
				if r.h != 0 {
					seen[r.h] = true
				}
			}
			// Sparse mode at p=14 is exact for these counts (see
			// TestHashDomainSparseExact).
			if got != in(int64(len(seen))) {
				bad(len(seen))
			}
			continue
		}
		xs := o.vals(sp.Input)
		if sp.Func == Count {
			if got != in(int64(len(xs))) {
				bad(len(xs))
			}
			continue
		}
		if len(xs) == 0 {
			if got != (Value{}) {
				bad("null")
			}
			continue
		}
		if got.Kind != Float {
			bad("a float")
			continue
		}
		var sum float64
		for _, x := range xs {
			sum += x
		}
		n := float64(len(xs))
		mean := sum / n
		var m2 float64
		for _, x := range xs {
			m2 += (x - mean) * (x - mean)
		}
		switch sp.Func {
		case Sum:
			if !closeRel(got.Float, sum, 1e-9) {
				bad(sum)
			}
		case Avg:
			if !closeRel(got.Float, mean, 1e-9) {
				bad(mean)
			}
		case Variance:
			if !closeRel(got.Float, m2/n, 1e-9) {
				bad(m2 / n)
			}
		case Stddev:
			if !closeRel(got.Float, math.Sqrt(m2/n), 1e-9) {
				bad(math.Sqrt(m2 / n))
			}
		case Min, Max, First, Last:
			want := pick(sp.Func, o.recs, sp.Input)
			if math.Float64bits(got.Float) != math.Float64bits(want) {
				bad(want)
			}
		case Quantile:
			// DDSketch is rank based: with the values sorted, rank
			// r = q·(n-1), and it answers the value at rank floor(r) (in
			// the positive range) or ceil(r) (in the negative range)
			// within relative accuracy α. Accept either neighbour.
			slices.Sort(xs)
			r := sp.Param * (n - 1)
			lo, hi := xs[int(math.Floor(r))], xs[int(math.Ceil(r))]
			const alpha = defaultQuantileAccuracy * (1 + 1e-9)
			if math.Abs(got.Float-lo) > alpha*math.Abs(lo) && math.Abs(got.Float-hi) > alpha*math.Abs(hi) {
				bad([2]float64{lo, hi})
			}
		}
	}
}

// pick is the oracle of min, max, first and last, with their tie rules and
// -0 counted as +0.
func pick(f Func, recs []propRec, slot int) float64 {
	var best propRec
	found := false
	for _, r := range recs {
		x := r.nums[slot]
		if x != x {
			continue
		}
		x += 0
		b := best.nums[slot]
		better := !found
		if found {
			switch f {
			case Min:
				better = x < b
			case Max:
				better = x > b
			case First:
				better = r.t < best.t || r.t == best.t && x < b
			case Last:
				better = r.t > best.t || r.t == best.t && x > b
			}
		}
		if better {
			best, found = r, true
			best.nums[slot] = x
		}
	}
	return best.nums[slot]
}

// TestRoundTripProperty: decode(encode(st)) has the same results and
// re-encodes to the same bytes, also when decoded over a non-empty State;
// MergeEncoded equals Decode followed by Merge.
func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := propSet(t)
		st := s.New()
		addProp(s, st, genRecs(t)...)
		other := genRecs(t)
		enc := s.AppendEncode(nil, st)

		dec := s.New()
		addProp(s, dec, other...)
		if err := s.Decode(dec, enc); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		for i, want := range results(s, st) {
			if got := s.Result(dec, i); !sameValue(got, want) {
				t.Errorf("%s: decoded %+v, encoded %+v", s.Spec(i).Name, got, want)
			}
		}
		if again := s.AppendEncode(nil, dec); string(again) != string(enc) {
			t.Fatalf("re-encoding differs:\n%x\n%x", enc, again)
		}

		viaBytes, viaState := s.New(), s.New()
		addProp(s, viaBytes, other...)
		addProp(s, viaState, other...)
		if err := s.MergeEncoded(viaBytes, enc); err != nil {
			t.Fatalf("MergeEncoded: %v", err)
		}
		s.Merge(viaState, dec)
		a, b := s.AppendEncode(nil, viaBytes), s.AppendEncode(nil, viaState)
		if string(a) != string(b) {
			t.Fatalf("MergeEncoded gives\n%x\nDecode+Merge gives\n%x", a, b)
		}
	})
}

// TestHashDomainSparseExact backs the exact distinct check of the property
// tests: in sparse mode HyperLogLog keeps one key per distinct top 25 bits
// of the hash (for p=14) and counts keys, so a domain whose hashes differ in
// their top 25 bits counts exactly.
func TestHashDomainSparseExact(t *testing.T) {
	seen := map[uint64]int{}
	for v := range uint64(hashDomain) {
		p := hashOf(v) >> (64 - 25)
		if w, dup := seen[p]; dup {
			t.Fatalf("values %d and %d share the top 25 hash bits", w, v)
		}
		seen[p] = int(v)
	}
	s := mustSet(t, Options{}, Spec{Name: "ids", Func: Distinct})
	st := s.New()
	for v := range uint64(hashDomain) {
		addAll(s, st, rec{h: hashOf(v)})
		if got := s.Result(st, 0); got != in(int64(v+1)) {
			t.Fatalf("after %d distinct values: %+v", v+1, got)
		}
	}
}

// TestDistinctDenseMerge covers the dense regime the property test does not
// reach: the merged sketch equals the single one exactly (register maxima),
// and the estimate is within 3 standard errors, 3·1.04/sqrt(2^p).
func TestDistinctDenseMerge(t *testing.T) {
	for _, p := range []uint8{6, 10, 14} {
		for seed := range uint64(3) {
			s := mustSet(t, Options{HLLPrecision: p}, Spec{Name: "ids", Func: Distinct})
			single := s.New()
			parts := []*State{s.New(), s.New(), s.New(), s.New(), s.New()}
			const n = 40000
			for i := range uint64(n) {
				r := rec{h: hashOf(seed<<32 | i)}
				addAll(s, single, r)
				addAll(s, parts[(i*7+seed)%uint64(len(parts))], r)
			}
			merged := s.New()
			for i := len(parts) - 1; i >= 0; i-- {
				if i%2 == 0 {
					s.Merge(merged, parts[i])
				} else if err := s.MergeEncoded(merged, s.AppendEncode(nil, parts[i])); err != nil {
					t.Fatal(err)
				}
			}
			got, want := s.Result(merged, 0), s.Result(single, 0)
			if got != want {
				t.Errorf("p=%d seed %d: merged %d, single %d", p, seed, got.Int, want.Int)
			}
			se := 1.04 / math.Sqrt(float64(uint64(1)<<p))
			if rel := math.Abs(float64(got.Int)-n) / n; rel > 3*se {
				t.Errorf("p=%d seed %d: estimate %d of %d is off by %.2f%%, more than 3 standard errors (%.2f%%)",
					p, seed, got.Int, n, 100*rel, 300*se)
			}
		}
	}
}
