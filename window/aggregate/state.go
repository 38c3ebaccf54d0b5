package aggregate

import (
	"fmt"
	"math"

	"github.com/axiomhq/hyperloglog"
)

// State is one partial aggregate of a Set: the record count and the scalar
// aggregates in one flat []float64, plus one sketch per Distinct and Quantile
// aggregate (only when the Set has them). The zero State is not usable; get
// one from Set.New, or a view of a partial of States from States.At.
//
// A State is not safe for concurrent use, and not even its read-only looking
// methods may run concurrently: Result and AppendEncode compact sketches in
// place.
type State struct {
	// vals[0] holds the records added, plus records of merged states, as
	// uint64 bits (count() reads it); the scalar slots follow, laid out by
	// Set.aggs[i].n and .v. One slice for both keeps a partial in one place.
	vals []float64

	sk *sketches // nil unless the Set has Distinct or Quantile aggregates
}

// records returns the record count kept in slot 0.
func (st *State) records() uint64 { return math.Float64bits(st.vals[0]) }

// sketches is the part of a State only sketch Sets need; keeping it behind
// one pointer keeps the partials of scalar Sets small, which matters when
// the window operator streams through slabs of them.
type sketches struct {
	hll    []*hyperloglog.Sketch // per Distinct aggregate
	hllTmp []*hyperloglog.Sketch // Decode/MergeEncoded: sketches validated before they are applied
	qs     []*qsketch            // per Quantile aggregate
	qsAt   []int                 // Decode/MergeEncoded: offset of each quantile block, found by the validating pass
}

// New returns an empty State for s. It allocates.
func (s *Set) New() *State {
	return &State{vals: append([]float64(nil), s.zero...), sk: s.newSketches()}
}

// newSketches returns the sketches of an empty State, or nil for a Set
// without Distinct and Quantile aggregates. It allocates.
func (s *Set) newSketches() *sketches {
	if s.nHLL == 0 && s.nQuant == 0 {
		return nil
	}
	sk := &sketches{}
	if s.nHLL > 0 {
		sk.hll = make([]*hyperloglog.Sketch, s.nHLL)
		sk.hllTmp = make([]*hyperloglog.Sketch, s.nHLL)
		for i := range sk.hll {
			sk.hll[i] = s.newHLL()
			sk.hllTmp[i] = new(hyperloglog.Sketch)
		}
	}
	if s.nQuant > 0 {
		sk.qs = make([]*qsketch, s.nQuant)
		sk.qsAt = make([]int, s.nQuant)
		for i := range sk.qs {
			sk.qs[i] = s.quant.newSketch()
		}
	}
	return sk
}

func (s *Set) newHLL() *hyperloglog.Sketch {
	sk, err := hyperloglog.NewSketch(s.hllP, true)
	if err != nil {
		panic(fmt.Sprintf("aggregate: HyperLogLog precision %d passed validation: %v", s.hllP, err))
	}
	return sk
}

// Reset empties st, keeping its memory: the scalar slots are reset and the
// sketches cleared in place. One exception: a HyperLogLog sketch that may
// have switched to its dense form (2^p registers) is replaced by a fresh
// sparse one, because a cleared dense sketch stays dense, and would then
// encode every later partial in 2^p bytes and estimate even tiny
// cardinalities inexactly, making results depend on the State's history.
func (s *Set) Reset(st *State) {
	for _, a := range s.sketches {
		switch a.fn {
		case Distinct:
			s.resetHLL(st, a)
		case Quantile:
			st.sk.qs[a.sk].reset()
		}
	}
	copy(st.vals, s.zero)
}

// resetHLL must run before vals are reset: it reads the aggregate's n.
func (s *Set) resetHLL(st *State, a agg) {
	// The sparse list turns dense once it holds more than 2^p bytes, and a
	// key takes at most 5 bytes, so a sketch that absorbed fewer than 2^p/5
	// hashes is still sparse (unless a foreign encoding handed it a dense
	// one, which is merely wasteful).
	if st.vals[a.n] >= float64(uint64(1)<<s.hllP/5) {
		st.sk.hll[a.sk] = s.newHLL()
		return
	}
	st.sk.hll[a.sk].Reset()
}

// Empty reports whether no record was added to st or merged into it since
// it was created or Reset.
func (s *Set) Empty(st *State) bool { return st.records() == 0 }

// Input is one record as the aggregates see it. NaN in Nums means null
// (missing): numeric aggregates skip it, count() still counts the record. A
// zero in Hashes means null (the decoder maps a real 0 hash to 1).
type Input struct {
	Time   int64 // event time, unix ms
	Nums   []float64
	Hashes []uint64
}

// Add adds one record to st. in.Nums must hold at least NumInputs() values
// and in.Hashes at least HashInputs(); Add panics otherwise, like any slice
// index out of range.
//
// Add does not allocate for the scalar aggregates (count through last).
// Distinct and Quantile allocate now and then, when a sketch grows.
func (s *Set) Add(st *State, in *Input) {
	sk := [1]*sketches{st.sk}
	s.AddAt(&States{vals: st.vals, sk: sk[:], stride: len(st.vals)}, 0, in)
}

// AddAt adds one record to partial i of ss: Add(&ss.At(i), in) without
// making the State. For most Sets it is one loop over their fields and
// calls nothing, which matters to the window operator's per-record path:
// Go keeps no registers across calls.
func (s *Set) AddAt(ss *States, i int, in *Input) {
	// The slots past the partial's are never indexed: no upper bound.
	v := ss.vals[i*ss.stride:]
	v[0] = math.Float64frombits(math.Float64bits(v[0]) + 1) // the record count
	nums := in.Nums
	for j := range s.fields {
		f := &s.fields[j]
		x := nums[f.in]
		if x != x { // NaN: null
			continue
		}
		v[f.n]++
		if f.sum >= 0 {
			v[f.sum] += x
		}
		// x+0 turns -0 into +0: otherwise min(-0, +0) would depend on the
		// order the two arrive in, and Merge would not commute.
		x += 0
		if f.min >= 0 && x < v[f.min] {
			v[f.min] = x
		}
		if f.max >= 0 && x > v[f.max] {
			v[f.max] = x
		}
	}
	if s.more {
		st := ss.At(i)
		s.addMore(&st, in)
	}
}

// addMore is AddAt for the aggregates the fields do not cover: apart, so
// that AddAt's loop calls nothing.
func (s *Set) addMore(st *State, in *Input) {
	v, nums := st.vals, in.Nums
	scalars := s.scalars
	for i := range scalars {
		a := &scalars[i]
		x := nums[a.in]
		if x != x {
			continue
		}
		n, o := a.n, a.v
		switch a.fn {
		case Sum, Avg:
			v[o] += x
		case Min:
			x += 0 // as in fields
			if x < v[o] {
				v[o] = x
			}
		case Max:
			x += 0
			if x > v[o] {
				v[o] = x
			}
		case Variance, Stddev:
			// Welford: numerically stable, one pass, no sum of squares to
			// cancel catastrophically for readings far from zero.
			cnt := v[n] + 1
			d := x - v[o]
			mean := v[o] + d/cnt
			v[n] = cnt
			v[o] = mean
			v[o+1] += d * (x - mean)
		case First:
			x += 0
			t := in.Time
			if ct := slotTime(v[o]); t < ct || t == ct && x < v[o+1] {
				v[o] = timeSlot(t)
				v[o+1] = x
			}
			v[n]++
		case Last:
			x += 0
			t := in.Time
			if ct := slotTime(v[o]); t > ct || t == ct && x > v[o+1] {
				v[o] = timeSlot(t)
				v[o+1] = x
			}
			v[n]++
		}
	}
	for i := range s.sketches {
		a := &s.sketches[i]
		if a.fn == Distinct {
			if h := in.Hashes[a.in]; h != 0 {
				st.sk.hll[a.sk].InsertHash(h)
				v[a.n]++
			}
		} else if x := nums[a.in]; x == x && st.sk.qs[a.sk].add(&s.quant, x) {
			v[a.n]++
		}
	}
}

// Merge merges src into dst: afterwards dst is what it would be had it been
// given src's records too. Merge is associative and commutative (exactly
// for count, min, max, first, last, distinct and quantile; up to float
// rounding for sum, avg, variance and stddev). src is not changed. Merge
// does not allocate for the scalar aggregates.
func (s *Set) Merge(dst, src *State) {
	s.mergeVals(dst.vals, src.vals)
	for _, a := range s.sketches {
		if src.vals[a.n] == 0 {
			continue
		}
		switch a.fn {
		case Distinct:
			if err := dst.sk.hll[a.sk].Merge(src.sk.hll[a.sk]); err != nil {
				panic("aggregate: merge of sketches of one Set: " + err.Error())
			}
		case Quantile:
			dst.sk.qs[a.sk].merge(src.sk.qs[a.sk])
		}
	}
}

// MergeAt merges partial j of src into partial i of dst: Merge of their
// States without making them.
func (s *Set) MergeAt(dst *States, i int, src *States, j int) {
	if s.nHLL > 0 || s.nQuant > 0 {
		d, sr := dst.At(i), src.At(j)
		s.Merge(&d, &sr)
		return
	}
	// The slots past the partials' are never indexed: no upper bounds.
	s.mergeVals(dst.vals[i*dst.stride:], src.vals[j*src.stride:])
}

// Row names a partial of one States to merge into a partial of another.
type Row struct{ Dst, Src int32 }

// MergeRows merges, for each row, partial Src of src into partial Dst of
// dst: MergeAt of each, in one call. For most Sets it is a loop that calls
// nothing; the window operator merges the slices of a sliding window so,
// a chunk of keys at a time.
func (s *Set) MergeRows(dst, src *States, rows []Row) {
	if s.more {
		for _, r := range rows {
			s.MergeAt(dst, int(r.Dst), src, int(r.Src))
		}
		return
	}
	dw, sw := dst.stride, src.stride
	for _, r := range rows {
		// The slots past the partials' are never indexed: no upper bounds.
		s.mergeFields(dst.vals[int(r.Dst)*dw:], src.vals[int(r.Src)*sw:])
	}
}

// mergeVals merges the record count and the scalar slots sv into dv: the
// fields first, as Add does, then the other aggregates.
func (s *Set) mergeVals(dv, sv []float64) {
	s.mergeFields(dv, sv)
	if !s.more {
		return
	}
	for i := range s.sketches {
		n := s.sketches[i].n
		dv[n] += sv[n]
	}
	aggs := s.scalars
	for i := range aggs {
		a := &aggs[i]
		n, o := a.n, a.v
		switch a.fn {
		case Sum, Avg:
			dv[o] += sv[o]
		case Min:
			if sv[o] < dv[o] {
				dv[o] = sv[o]
			}
		case Max:
			if sv[o] > dv[o] {
				dv[o] = sv[o]
			}
		case Variance, Stddev:
			// Chan, Golub, LeVeque: combine (n, mean, M2) of two parts.
			nb := sv[n]
			if nb == 0 {
				continue
			}
			na := dv[n]
			if na == 0 {
				dv[n], dv[o], dv[o+1] = sv[n], sv[o], sv[o+1]
				continue
			}
			cnt := na + nb
			d := sv[o] - dv[o]
			dv[n] = cnt
			dv[o] += d * (nb / cnt)
			dv[o+1] += sv[o+1] + d*d*(na*nb/cnt)
		case First:
			if sv[n] == 0 {
				continue
			}
			dv[n] += sv[n]
			if t, ct := slotTime(sv[o]), slotTime(dv[o]); t < ct || t == ct && sv[o+1] < dv[o+1] {
				dv[o] = sv[o]
				dv[o+1] = sv[o+1]
			}
		case Last:
			if sv[n] == 0 {
				continue
			}
			dv[n] += sv[n]
			if t, ct := slotTime(sv[o]), slotTime(dv[o]); t > ct || t == ct && sv[o+1] > dv[o+1] {
				dv[o] = sv[o]
				dv[o+1] = sv[o+1]
			}
		}
	}
}

// mergeFields merges the record count and the fields of sv into dv: all
// of mergeVals for most Sets. It calls nothing, so it needs no stack frame.
func (s *Set) mergeFields(dv, sv []float64) {
	dv[0] = math.Float64frombits(math.Float64bits(dv[0]) + math.Float64bits(sv[0])) // the record count
	for k := range s.fields {
		f := &s.fields[k]
		dv[f.n] += sv[f.n]
		if f.sum >= 0 {
			dv[f.sum] += sv[f.sum]
		}
		if f.min >= 0 && sv[f.min] < dv[f.min] {
			dv[f.min] = sv[f.min]
		}
		if f.max >= 0 && sv[f.max] > dv[f.max] {
			dv[f.max] = sv[f.max]
		}
	}
}

// CopyTo makes dst equal to src, reusing dst's memory like Reset does.
func (s *Set) CopyTo(dst, src *State) {
	if dst == src {
		return
	}
	for _, a := range s.sketches {
		switch a.fn {
		case Distinct:
			s.resetHLL(dst, a)
			if src.vals[a.n] > 0 {
				if err := dst.sk.hll[a.sk].Merge(src.sk.hll[a.sk]); err != nil {
					panic("aggregate: merge of sketches of one Set: " + err.Error())
				}
			}
		case Quantile:
			dst.sk.qs[a.sk].reset()
			dst.sk.qs[a.sk].merge(src.sk.qs[a.sk])
		}
	}
	copy(dst.vals, src.vals)
}
