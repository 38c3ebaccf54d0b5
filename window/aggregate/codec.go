package aggregate

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/axiomhq/hyperloglog"
)

// The binary encoding of a State; docs/formats/aggregate-state.md has the
// byte layout. This file keeps the codec apart from the arithmetic in
// state.go: a decoder that never panics and never half-applies is easier to
// review when it stands alone.

// encodingVersion is the leading byte of every encoding this package writes.
const encodingVersion = 1

// maxCount bounds the record count of a decodable State: counts live in
// float64 slots, which are exact integers only up to 2^53.
const maxCount = 1 << 53

// stackSlots is how many scalar slots Decode and MergeEncoded decode into a
// stack array; larger Sets use a pooled slice. Either way the validating
// pass writes there and never into the State, so that a bad encoding leaves
// the State as it was.
const stackSlots = 64

// AppendEncode appends the encoding of st to dst and returns the extended
// slice. It does not allocate for the scalar aggregates when dst has the
// capacity. A sparse HyperLogLog sketch is compacted in place first so that
// equal sketches encode to equal bytes.
func (s *Set) AppendEncode(dst []byte, st *State) []byte {
	dst = append(dst, encodingVersion)
	dst = binary.AppendUvarint(dst, st.records())
	for i := range s.aggs {
		a := &s.aggs[i]
		if a.fn == Count && a.in < 0 {
			continue // count() is the record count in the header
		}
		n := uint64(st.vals[a.n])
		dst = binary.AppendUvarint(dst, n)
		if n == 0 {
			continue
		}
		v := st.vals[a.v:]
		switch a.fn {
		case Sum, Avg, Min, Max:
			dst = appendF64(dst, v[0])
		case Variance, Stddev:
			dst = appendF64(dst, v[0])
			dst = appendF64(dst, v[1])
		case First, Last:
			dst = binary.AppendVarint(dst, slotTime(v[0]))
			dst = appendF64(dst, v[1])
		case Distinct:
			dst = appendHLL(dst, st.sk.hll[a.sk])
		case Quantile:
			dst = s.quant.appendEncode(dst, st.sk.qs[a.sk])
		}
	}
	return dst
}

func appendF64(dst []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
}

// appendHLL appends a uvarint length and the library's own encoding.
func appendHLL(dst []byte, sk *hyperloglog.Sketch) []byte {
	start := len(dst)
	dst = mustAppendHLL(dst, sk)
	// A sparse sketch buffers recent inserts in a hash set whose iteration
	// order depends on history. Folding them into the sorted sparse list
	// (which Estimate does) makes the bytes a function of the content.
	if b := dst[start:]; len(b) >= 8 && b[3] == 1 && binary.BigEndian.Uint32(b[4:8]) != 0 {
		dst = dst[:start]
		sk.Estimate()
		dst = mustAppendHLL(dst, sk)
	}
	return insertUvarint(dst, start, uint64(len(dst)-start))
}

func mustAppendHLL(dst []byte, sk *hyperloglog.Sketch) []byte {
	dst, err := sk.AppendBinary(dst)
	if err != nil {
		// Only a zero-value sketch fails, and States never hold one.
		panic("aggregate: encode HyperLogLog sketch: " + err.Error())
	}
	return dst
}

// insertUvarint inserts the uvarint v at dst[at], shifting dst[at:] right.
// Encoders use it to prefix a block with a length or count they only know
// once the block is written.
func insertUvarint(dst []byte, at int, v uint64) []byte {
	var tmp [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(tmp[:], v)
	dst = append(dst, tmp[:k]...)
	copy(dst[at+k:], dst[at:len(dst)-k])
	copy(dst[at:], tmp[:k])
	return dst
}

// Decode replaces st's content with the state encoded in b. The whole of b
// is validated before st is touched: on error st is unchanged, and the error
// wraps ErrCorrupt (ErrVersion and ErrMismatch are special cases) and names
// the aggregate and byte offset. Decode never panics on any input.
//
// Decode does not allocate for the scalar aggregates. A Distinct aggregate
// allocates a new sketch (the library decodes only into fresh memory); a
// Quantile aggregate decodes into its cleared sketch.
func (s *Set) Decode(st *State, b []byte) error {
	var stack [stackSlots]float64
	vals := stack[:]
	if len(s.zero) > stackSlots {
		p := s.scratch.Get().(*[]float64)
		defer s.scratch.Put(p)
		vals = *p
	}
	vals = vals[:len(s.zero)]
	if err := s.parse(st, vals, b); err != nil {
		dropScratch(st)
		return err
	}
	for _, a := range s.sketches {
		n := vals[a.n]
		switch a.fn {
		case Distinct:
			if n == 0 {
				s.resetHLL(st, a) // reads st's old n: before the copy below
				continue
			}
			// Adopt the validated sketch; the old one becomes scratch and
			// is emptied so that it holds no memory.
			st.sk.hll[a.sk], st.sk.hllTmp[a.sk] = st.sk.hllTmp[a.sk], st.sk.hll[a.sk]
			*st.sk.hllTmp[a.sk] = hyperloglog.Sketch{}
		case Quantile:
			q := st.sk.qs[a.sk]
			q.reset()
			if n > 0 {
				r := reader{b: b, off: st.sk.qsAt[a.sk]}
				_ = s.quant.read(&r, uint64(n), q) // validated by parse
			}
		}
	}
	copy(st.vals, vals)
	return nil
}

// MergeEncoded merges the state encoded in b into dst, as Decode into a
// fresh State followed by Merge would, without the fresh State. It is the
// hub's path. The whole of b is validated first: on error dst is unchanged
// and the error wraps ErrCorrupt.
//
// MergeEncoded does not allocate for the scalar aggregates. A Distinct
// aggregate allocates while decoding its sketch; a Quantile aggregate merges
// bin by bin into dst's sketch.
func (s *Set) MergeEncoded(dst *State, b []byte) error {
	var stack [stackSlots]float64
	vals := stack[:]
	if len(s.zero) > stackSlots {
		p := s.scratch.Get().(*[]float64)
		defer s.scratch.Put(p)
		vals = *p
	}
	vals = vals[:len(s.zero)]
	if err := s.parse(dst, vals, b); err != nil {
		dropScratch(dst)
		return err
	}
	s.mergeVals(dst.vals, vals)
	for _, a := range s.sketches {
		n := vals[a.n]
		if n == 0 {
			continue
		}
		switch a.fn {
		case Distinct:
			tmp := dst.sk.hllTmp[a.sk]
			if err := dst.sk.hll[a.sk].Merge(tmp); err != nil {
				panic("aggregate: merge of validated sketch: " + err.Error()) // precision checked by parse
			}
			*tmp = hyperloglog.Sketch{}
		case Quantile:
			r := reader{b: b, off: dst.sk.qsAt[a.sk]}
			_ = s.quant.read(&r, uint64(n), dst.sk.qs[a.sk]) // validated by parse
		}
	}
	return nil
}

// dropScratch releases what a failed parse may have left in the scratch
// sketches, so that a rejected partial does not pin its memory.
func dropScratch(st *State) {
	if st.sk == nil {
		return
	}
	for _, tmp := range st.sk.hllTmp {
		*tmp = hyperloglog.Sketch{}
	}
}

// parse validates all of b. It leaves the record count and the scalar slots
// of the encoded state in vals, a validated sketch per Distinct aggregate in st.sk.hllTmp, and the
// offset of each Quantile block in st.sk.qsAt; it changes nothing else in st.
func (s *Set) parse(st *State, vals []float64, b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("aggregate: decode: empty input: %w", ErrCorrupt)
	}
	if b[0] != encodingVersion {
		return fmt.Errorf("aggregate: decode: version byte %d, want %d: %w", b[0], encodingVersion, ErrVersion)
	}
	r := reader{b: b, off: 1}
	records, bad := r.uvarint()
	if bad != "" {
		return fmt.Errorf("aggregate: decode: record count at byte 1: %s: %w", bad, ErrCorrupt)
	}
	if records > maxCount {
		return fmt.Errorf("aggregate: decode: record count %d exceeds 2^53: %w", records, ErrCorrupt)
	}
	copy(vals, s.zero)
	vals[0] = math.Float64frombits(records)
	for i := range s.aggs {
		a := &s.aggs[i]
		if a.fn == Count && a.in < 0 {
			continue
		}
		at := r.off
		n, bad := r.uvarint()
		if bad != "" {
			return s.corrupt(i, at, "count: "+bad)
		}
		if n > records {
			return s.corrupt(i, at, fmt.Sprintf("count %d exceeds the record count %d", n, records))
		}
		if a.first {
			vals[a.n] = float64(n)
		} else if vals[a.n] != float64(n) {
			// Aggregates of one input count its non-null values alike; a
			// partial where they disagree was not made by Add and Merge.
			return s.corrupt(i, at, fmt.Sprintf("count %d differs from the %v of another aggregate of the same input", n, vals[a.n]))
		}
		if n == 0 {
			continue
		}
		v := vals[a.v:]
		switch a.fn {
		case Sum, Avg:
			if v[0], bad = r.f64(); bad != "" {
				return s.corrupt(i, r.off, "sum: "+bad)
			}
		case Variance, Stddev:
			if v[0], bad = r.f64(); bad != "" {
				return s.corrupt(i, r.off, "mean: "+bad)
			}
			if v[1], bad = r.f64(); bad != "" {
				return s.corrupt(i, r.off, "sum of squared deviations: "+bad)
			}
		case Min, Max:
			at := r.off
			if v[0], bad = r.f64(); bad != "" {
				return s.corrupt(i, at, "value: "+bad)
			}
			if v[0] != v[0] {
				return s.corrupt(i, at, "value is NaN")
			}
			v[0] += 0 // -0 -> +0, as Add does
		case First, Last:
			at := r.off
			t, bad := r.varint()
			if bad != "" {
				return s.corrupt(i, at, "event time: "+bad)
			}
			v[0] = timeSlot(t)
			at = r.off
			if v[1], bad = r.f64(); bad != "" {
				return s.corrupt(i, at, "value: "+bad)
			}
			if v[1] != v[1] {
				return s.corrupt(i, at, "value is NaN")
			}
			v[1] += 0
		case Distinct:
			if err := s.parseHLL(st.sk.hllTmp[a.sk], &r); err != nil {
				return fmt.Errorf("aggregate: decode: aggregate %d (%q, distinct): %w", i, s.specs[i].Name, err)
			}
		case Quantile:
			st.sk.qsAt[a.sk] = r.off
			if err := s.quant.read(&r, n, nil); err != nil {
				return fmt.Errorf("aggregate: decode: aggregate %d (%q, quantile): %w", i, s.specs[i].Name, err)
			}
		}
	}
	if r.off != len(b) {
		return fmt.Errorf("aggregate: decode: %d trailing bytes at byte %d: %w", len(b)-r.off, r.off, ErrCorrupt)
	}
	return nil
}

// parseHLL reads a length-prefixed HyperLogLog encoding into tmp, which the
// library replaces wholesale (and allocates for).
func (s *Set) parseHLL(tmp *hyperloglog.Sketch, r *reader) error {
	at := r.off
	l, bad := r.uvarint()
	if bad != "" {
		return fmt.Errorf("sketch length at byte %d: %s: %w", at, bad, ErrCorrupt)
	}
	if l > uint64(len(r.b)-r.off) {
		return fmt.Errorf("sketch of %d bytes at byte %d, %d left: %w", l, r.off, len(r.b)-r.off, ErrCorrupt)
	}
	body := r.b[r.off : r.off+int(l)]
	// Byte 1 of the library's format is the precision. Check it here so that
	// a sketch from a Set with other options is called what it is.
	if len(body) >= 2 && body[1] != s.hllP {
		return fmt.Errorf("sketch at byte %d has precision %d, this Set uses %d: %w", r.off, body[1], s.hllP, ErrMismatch)
	}
	if err := tmp.UnmarshalBinary(body); err != nil {
		return fmt.Errorf("sketch at byte %d: %w: %w", r.off, err, ErrCorrupt)
	}
	r.off += int(l)
	return nil
}

func (s *Set) corrupt(i, at int, what string) error {
	return fmt.Errorf("aggregate: decode: aggregate %d (%q, %v) at byte %d: %s: %w",
		i, s.specs[i].Name, s.specs[i].Func, at, what, ErrCorrupt)
}

// reader reads the primitives of the encoding. Its methods return a reason
// instead of an error so that the success path does not allocate; the
// caller adds the context.
type reader struct {
	b   []byte
	off int
}

// uvarint reads a minimally encoded unsigned varint. Rejecting padded forms
// keeps the encoding canonical: one state, one byte string.
func (r *reader) uvarint() (uint64, string) {
	v, n := binary.Uvarint(r.b[r.off:])
	switch {
	case n == 0:
		return 0, "truncated varint"
	case n < 0:
		return 0, "varint overflows 64 bits"
	case n > 1 && r.b[r.off+n-1] == 0:
		return 0, "varint not minimally encoded"
	}
	r.off += n
	return v, ""
}

// varint reads a zig-zag signed varint (encoding/binary's AppendVarint).
func (r *reader) varint() (int64, string) {
	u, bad := r.uvarint()
	return int64(u>>1) ^ -int64(u&1), bad
}

func (r *reader) f64() (float64, string) {
	if len(r.b)-r.off < 8 {
		return 0, "truncated float64"
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return f, ""
}
