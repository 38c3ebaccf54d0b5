package aggregate

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// Quantile aggregates keep a DDSketch with a logarithmic index mapping and
// two buffered paginated stores (the library's default, compact for small
// partials). The library's own serialization is not used: its decoder trusts
// bin indexes (a hostile index would size a store to gigabytes) and ignores
// store errors. Our block carries the bins alone, delta-coded, and read
// checks every index against the mapping's range before a store sees it.

// quantiles is the per-Set DDSketch configuration, shared by all its States.
type quantiles struct {
	m        *mapping.LogarithmicMapping
	code     uint64 // relative accuracy in millionths, carried by the encoding
	minIndex int    // bin index of the smallest trackable magnitude
	maxIndex int    // bin index of the largest trackable magnitude
}

func newQuantiles(accuracy float64) (quantiles, error) {
	code := uint64(math.Round(accuracy * 1e6))
	m, err := mapping.NewLogarithmicMapping(float64(code) / 1e6)
	if err != nil {
		return quantiles{}, err
	}
	return quantiles{
		m:        m,
		code:     code,
		minIndex: m.Index(m.MinIndexableValue()),
		maxIndex: m.Index(m.MaxIndexableValue()),
	}, nil
}

// qsketch is one Quantile aggregate's sketch in a State.
type qsketch struct {
	dd *ddsketch.DDSketch
	w  binWriter
	// visit is w.visit bound once, so that encoding passes the stores a
	// callback without allocating a closure each time.
	visit func(index int, count float64) bool
}

func (q *quantiles) newSketch() *qsketch {
	sk := &qsketch{dd: ddsketch.NewDDSketch(q.m, store.NewBufferedPaginatedStore(), store.NewBufferedPaginatedStore())}
	sk.visit = sk.w.visit
	return sk
}

// add adds x and reports whether the sketch took it: ±Inf and magnitudes
// beyond the mapping's range (about 1.26e308) are refused and not counted.
func (sk *qsketch) add(_ *quantiles, x float64) bool { return sk.dd.Add(x) == nil }

func (sk *qsketch) reset() { sk.dd.Clear() }

func (sk *qsketch) merge(src *qsketch) {
	if err := sk.dd.MergeWith(src.dd); err != nil {
		panic("aggregate: merge of sketches of one Set: " + err.Error())
	}
}

func (sk *qsketch) quantile(q float64) float64 {
	v, err := sk.dd.GetValueAtQuantile(q)
	if err != nil {
		return math.NaN()
	}
	return v
}

// appendEncode appends the quantile block after its count n: accuracy code,
// zero-bin count, positive store, negative store.
func (q *quantiles) appendEncode(dst []byte, sk *qsketch) []byte {
	dst = binary.AppendUvarint(dst, q.code)
	dst = binary.AppendUvarint(dst, uint64(sk.dd.GetZeroCount()))
	dst = sk.appendStore(dst, sk.dd.GetPositiveValueStore())
	dst = sk.appendStore(dst, sk.dd.GetNegativeValueStore())
	return dst
}

// appendStore appends a bin count, then the bins in ascending index order:
// the first index zig-zag coded, each later one as the gap to the previous,
// each followed by its count. ForEach of the paginated store visits in
// ascending order, which makes the bytes canonical.
func (sk *qsketch) appendStore(dst []byte, st store.Store) []byte {
	start := len(dst)
	sk.w = binWriter{b: dst}
	st.ForEach(sk.visit)
	dst, bins := sk.w.b, sk.w.bins
	sk.w = binWriter{}
	return insertUvarint(dst, start, bins)
}

type binWriter struct {
	b    []byte
	prev int
	bins uint64
}

func (w *binWriter) visit(index int, count float64) bool {
	if w.bins == 0 {
		w.b = binary.AppendVarint(w.b, int64(index))
	} else {
		w.b = binary.AppendUvarint(w.b, uint64(index-w.prev))
	}
	w.b = binary.AppendUvarint(w.b, uint64(count)) // counts are whole: Add counts 1, Merge adds
	w.prev = index
	w.bins++
	return false
}

// read reads a quantile block whose count is n. With sk nil it only
// validates: accuracy code, every index within the mapping's range and
// strictly ascending, every count at least 1, and the counts summing to n.
// With sk non-nil it also adds the bins to sk; callers pass sk only for a
// block that already validated.
func (q *quantiles) read(r *reader, n uint64, sk *qsketch) error {
	at := r.off
	code, bad := r.uvarint()
	if bad != "" {
		return fmt.Errorf("accuracy at byte %d: %s: %w", at, bad, ErrCorrupt)
	}
	if code != q.code {
		return fmt.Errorf("sketch at byte %d has relative accuracy %g, this Set uses %g: %w", at, float64(code)/1e6, float64(q.code)/1e6, ErrMismatch)
	}
	at = r.off
	zero, bad := r.uvarint()
	if bad != "" {
		return fmt.Errorf("zero count at byte %d: %s: %w", at, bad, ErrCorrupt)
	}
	if zero > n {
		return fmt.Errorf("zero count %d at byte %d exceeds the count %d: %w", zero, at, n, ErrCorrupt)
	}
	total := zero
	for _, side := range [2]string{"positive", "negative"} {
		at = r.off
		bins, bad := r.uvarint()
		if bad != "" {
			return fmt.Errorf("%s bin count at byte %d: %s: %w", side, at, bad, ErrCorrupt)
		}
		if bins > n-total {
			return fmt.Errorf("%s bin count %d at byte %d exceeds the %d values left: %w", side, bins, at, n-total, ErrCorrupt)
		}
		var st store.Store
		if sk != nil {
			st = sk.dd.GetPositiveValueStore()
			if side == "negative" {
				st = sk.dd.GetNegativeValueStore()
			}
		}
		index := 0
		for j := range bins {
			at = r.off
			if j == 0 {
				first, bad := r.varint()
				if bad != "" {
					return fmt.Errorf("%s bin index at byte %d: %s: %w", side, at, bad, ErrCorrupt)
				}
				if first < int64(q.minIndex) || first > int64(q.maxIndex) {
					return fmt.Errorf("%s bin index %d at byte %d outside [%d, %d]: %w", side, first, at, q.minIndex, q.maxIndex, ErrCorrupt)
				}
				index = int(first)
			} else {
				gap, bad := r.uvarint()
				if bad != "" {
					return fmt.Errorf("%s bin gap at byte %d: %s: %w", side, at, bad, ErrCorrupt)
				}
				if gap == 0 || gap > uint64(q.maxIndex-index) {
					return fmt.Errorf("%s bin gap %d at byte %d after index %d: not in [1, %d]: %w", side, gap, at, index, q.maxIndex-index, ErrCorrupt)
				}
				index += int(gap)
			}
			at = r.off
			c, bad := r.uvarint()
			if bad != "" {
				return fmt.Errorf("%s bin count at byte %d: %s: %w", side, at, bad, ErrCorrupt)
			}
			if c == 0 || c > n-total {
				return fmt.Errorf("%s bin %d count %d at byte %d: not in [1, %d]: %w", side, index, c, at, n-total, ErrCorrupt)
			}
			total += c
			if st != nil {
				st.AddWithCount(index, float64(c))
			}
		}
	}
	if total != n {
		return fmt.Errorf("sketch holds %d values, its count says %d: %w", total, n, ErrCorrupt)
	}
	if sk != nil && zero > 0 {
		if err := sk.dd.AddWithCount(0, float64(zero)); err != nil {
			return fmt.Errorf("zero bin: %w", err)
		}
	}
	return nil
}
