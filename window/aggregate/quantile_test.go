package aggregate

import (
	"math"
	"testing"
)

func TestDecodeRejectsQuantile(t *testing.T) {
	s := mustSet(t, Options{}, Spec{Name: "p", Func: Quantile, Param: 0.5})
	q := s.quant
	hdr := func(records, n uint64) b { return b{encodingVersion}.u(records).u(n) }
	tests := []struct {
		name string
		in   []byte
		is   error
		msg  string
	}{
		{"accuracy mismatch", hdr(1, 1).u(20000).u(1).u(0).u(0), ErrMismatch, "relative accuracy 0.02, this Set uses 0.01"},
		{"zero above n", hdr(3, 1).u(q.code).u(2), ErrCorrupt, "zero count 2 at byte 5 exceeds the count 1"},
		{"too many bins", hdr(3, 2).u(q.code).u(0).u(3), ErrCorrupt, "positive bin count 3 at byte 6 exceeds the 2 values left"},
		{"index below range", hdr(1, 1).u(q.code).u(0).u(1).i(int64(q.minIndex) - 1).u(1).u(0), ErrCorrupt, "positive bin index"},
		{"index above range", hdr(1, 1).u(q.code).u(0).u(0).u(1).i(int64(q.maxIndex) + 1).u(1), ErrCorrupt, "negative bin index"},
		{"huge index", hdr(1, 1).u(q.code).u(0).u(1).i(math.MaxInt64).u(1).u(0), ErrCorrupt, "outside"},
		{"gap zero", hdr(2, 2).u(q.code).u(0).u(2).i(5).u(1).u(0).u(1).u(0), ErrCorrupt, "bin gap 0"},
		{"gap past range", hdr(2, 2).u(q.code).u(0).u(2).i(5).u(1).u(1 << 40).u(1).u(0), ErrCorrupt, "bin gap 1099511627776"},
		{"count zero", hdr(1, 1).u(q.code).u(0).u(1).i(5).u(0).u(0), ErrCorrupt, "count 0"},
		{"counts short of n", hdr(3, 3).u(q.code).u(1).u(1).i(5).u(1).u(0), ErrCorrupt, "sketch holds 2 values, its count says 3"},
		{"truncated", hdr(3, 3).u(q.code).u(1).u(1), ErrCorrupt, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRejected(t, s, tt.in, tt.is, tt.msg)
		})
	}
	// And a hand-made valid block decodes: zero bin 1, one positive bin.
	ok := hdr(2, 2).u(q.code).u(1).u(1).i(int64(q.m.Index(100))).u(1).u(0)
	st := s.New()
	if err := s.Decode(st, ok); err != nil {
		t.Fatalf("valid block: %v", err)
	}
	if got := s.Result(st, 0); !closeRel(got.Float, 0, 0) {
		t.Errorf("median of {0, 100} = %+v, want 0 (rank 0.5 -> first value)", got)
	}
}
