package aggregate

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/goleak"
)

// The package starts no goroutines, but the DDSketch stores have a Bins()
// that does; goleak catches a future use of it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var null = math.NaN()

// rec is one test record: event time, one numeric field, one hashed field.
type rec struct {
	t int64
	x float64
	h uint64
}

// hashOf hashes v the way a decoder would hash a field value: uniform bits,
// which HyperLogLog needs (small raw integers share their top bits).
func hashOf(v uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	h := xxhash.Sum64(b[:])
	if h == 0 {
		h = 1
	}
	return h
}

func mustSet(tb testing.TB, opts Options, specs ...Spec) *Set {
	tb.Helper()
	s, err := NewSet(specs, opts)
	if err != nil {
		tb.Fatalf("NewSet: %v", err)
	}
	return s
}

// addAll adds recs to st, the numeric field in every Nums slot and the hash
// in every Hashes slot the Set reads.
func addAll(s *Set, st *State, recs ...rec) {
	nums := make([]float64, max(s.NumInputs(), 1))
	hashes := make([]uint64, max(s.HashInputs(), 1))
	in := Input{Nums: nums, Hashes: hashes}
	for _, r := range recs {
		in.Time = r.t
		for i := range nums {
			nums[i] = r.x
		}
		for i := range hashes {
			hashes[i] = r.h
		}
		s.Add(st, &in)
	}
}

// sameValue reports whether a and b are the same result, bit for bit for
// floats (NaN equal to NaN).
func sameValue(a, b Value) bool {
	if a.Kind != b.Kind || a.Int != b.Int {
		return false
	}
	return math.Float64bits(a.Float) == math.Float64bits(b.Float) || a.Float != a.Float && b.Float != b.Float
}

// closeRel reports whether a and b agree within relative tolerance tol.
func closeRel(a, b, tol float64) bool {
	if a == b || a != a && b != b {
		return true
	}
	return math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b))
}

func results(s *Set, st *State) []Value {
	out := make([]Value, s.Len())
	for i := range out {
		out[i] = s.Result(st, i)
	}
	return out
}
