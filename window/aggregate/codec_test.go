package aggregate

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestEncodingGolden pins the byte layout documented in
// docs/formats/aggregate-state.md.
func TestEncodingGolden(t *testing.T) {
	s := mustSet(t, Options{},
		Spec{Name: "readings", Func: Count, Input: -1},
		Spec{Name: "avg_temp", Func: Avg, Input: 0},
		Spec{Name: "max_temp", Func: Max, Input: 1},
		Spec{Name: "first_temp", Func: First, Input: 0},
	)
	st := s.New()
	s.Add(st, &Input{Time: 1000, Nums: []float64{21, null}})
	s.Add(st, &Input{Time: 999, Nums: []float64{22, null}})
	got := hex.EncodeToString(s.AppendEncode(nil, st))
	want := "01" + // version
		"02" + // records: count() reads it
		"02" + "0000000000804540" + // avg: n=2, sum=43.0
		"00" + // max: n=0, null
		"02" + "ce0f" + "0000000000003640" // first: n=2, time 999 zig-zag, value 22.0
	if got != want {
		t.Errorf("encoding\n got %s\nwant %s", got, want)
	}
	empty := hex.EncodeToString(s.AppendEncode(nil, s.New()))
	if empty != "0100000000" {
		t.Errorf("empty State encodes to %s, want 0100000000", empty)
	}
}

// b builds encodings by hand.
type b []byte

func (x b) u(v uint64) b  { return binary.AppendUvarint(x, v) }
func (x b) i(v int64) b   { return binary.AppendVarint(x, v) }
func (x b) f(v float64) b { return binary.LittleEndian.AppendUint64(x, math.Float64bits(v)) }
func (x b) raw(v ...byte) b {
	return append(x, v...)
}

func TestDecodeRejects(t *testing.T) {
	s := mustSet(t, Options{},
		Spec{Name: "n", Func: Count, Input: -1},
		Spec{Name: "cnt", Func: Count, Input: 0},
		Spec{Name: "min", Func: Min, Input: 0},
		Spec{Name: "last", Func: Last, Input: 0},
		Spec{Name: "ids", Func: Distinct, Input: 0},
	)
	hllOther := mustSet(t, Options{HLLPrecision: 12}, Spec{Name: "ids", Func: Distinct})
	other := hllOther.New()
	addAll(hllOther, other, rec{h: hashOf(1)})
	otherHLL := hllOther.AppendEncode(nil, other)[2:] // n and the length-prefixed sketch

	v1 := b{encodingVersion}
	tests := []struct {
		name string
		in   []byte
		is   error
		msg  string
	}{
		{"empty", nil, ErrCorrupt, "empty input"},
		{"version 0", b{0}, ErrVersion, "version byte 0"},
		{"version 2", b{2, 0, 0, 0, 0, 0}, ErrVersion, "version byte 2"},
		{"no record count", v1, ErrCorrupt, "record count at byte 1: truncated varint"},
		{"padded varint", v1.raw(0x80, 0x00, 0, 0, 0, 0), ErrCorrupt, "not minimally encoded"},
		{"varint overflow", v1.raw(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), ErrCorrupt, "overflows 64 bits"},
		{"records beyond 2^53", v1.u(1<<53 + 1).u(0).u(0).u(0).u(0), ErrCorrupt, "exceeds 2^53"},
		{"missing aggregate", v1.u(0).u(0).u(0).u(0), ErrCorrupt, `aggregate 4 ("ids", distinct) at byte 5: count: truncated`},
		{"trailing byte", v1.u(0).u(0).u(0).u(0).u(0).raw(7), ErrCorrupt, "1 trailing bytes at byte 6"},
		{"count above records", v1.u(2).u(3), ErrCorrupt, `aggregate 1 ("cnt", count) at byte 2: count 3 exceeds the record count 2`},
		{"counts of one input differ", v1.u(2).u(2).u(1).f(3), ErrCorrupt, `aggregate 2 ("min", min) at byte 3: count 1 differs from the 2 of another aggregate of the same input`},
		{"min truncated", v1.u(1).u(1).u(1).raw(1, 2, 3), ErrCorrupt, `("min", min) at byte 4: value: truncated float64`},
		{"min NaN", v1.u(1).u(1).u(1).f(math.NaN()), ErrCorrupt, "value is NaN"},
		{"last time truncated", v1.u(1).u(1).u(1).f(1).u(1).raw(0x80), ErrCorrupt, `("last", last) at byte 13: event time: truncated varint`},
		{"last NaN", v1.u(1).u(1).u(1).f(1).u(1).i(5).f(math.NaN()), ErrCorrupt, `("last", last) at byte 14: value is NaN`},
		{"sketch longer than input", v1.u(1).u(0).u(0).u(0).u(1).u(50).raw(2, 14), ErrCorrupt, "sketch of 50 bytes at byte 7, 2 left"},
		{"sketch garbage", v1.u(1).u(0).u(0).u(0).u(1).u(8).raw(2, 14, 0, 1, 0xff, 0xff, 0xff, 0xff), ErrCorrupt, `("ids", distinct): sketch at byte 7`},
		{"sketch empty", v1.u(1).u(0).u(0).u(0).u(1).u(0), ErrCorrupt, "sketch at byte 7"},
		{"sketch precision", append(v1.u(1).u(0).u(0).u(0), otherHLL...), ErrMismatch, "precision 12, this Set uses 14"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRejected(t, s, tt.in, tt.is, tt.msg)
		})
	}
}

// checkRejected checks that Decode and MergeEncoded both refuse in with an
// error matching is and msg, and leave their State as it was.
func checkRejected(t *testing.T, s *Set, in []byte, is error, msg string) {
	t.Helper()
	st := s.New()
	addAll(s, st, rec{t: 1, x: 5, h: hashOf(5)}, rec{t: 2, x: -1, h: hashOf(6)})
	before := s.AppendEncode(nil, st)
	for _, op := range []struct {
		name string
		fn   func(*State, []byte) error
	}{{"Decode", s.Decode}, {"MergeEncoded", s.MergeEncoded}} {
		err := op.fn(st, in)
		if err == nil {
			t.Fatalf("%s(%x) succeeded", op.name, in)
		}
		if !errors.Is(err, is) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v is not %v and ErrCorrupt", op.name, err, is)
		}
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: error %q does not say %q", op.name, err, msg)
		}
		if after := s.AppendEncode(nil, st); string(after) != string(before) {
			t.Errorf("%s changed the State on error:\n%x\n%x", op.name, before, after)
		}
	}
}

// TestDecodeTruncations: every proper prefix of a valid encoding is refused.
func TestDecodeTruncations(t *testing.T) {
	for _, s := range fuzzSets(t) {
		st := s.New()
		for i := range 50 {
			addAll(s, st, rec{t: int64(i % 7), x: float64(i) - 20.5, h: hashOf(uint64(i % 13))})
		}
		enc := s.AppendEncode(nil, st)
		for n := range len(enc) {
			if err := s.Decode(s.New(), enc[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Set of %d: prefix of %d of %d bytes: error %v", s.Len(), n, len(enc), err)
			}
		}
	}
}

// TestScratchPool covers Sets with more slots than Decode keeps on the stack.
func TestScratchPool(t *testing.T) {
	var specs []Spec
	for i := range 30 {
		specs = append(specs, Spec{Name: "v" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Func: Variance, Input: i})
	}
	s := mustSet(t, Options{}, specs...)
	if len(s.zero) <= stackSlots {
		t.Fatalf("Set has only %d slots", len(s.zero))
	}
	st := s.New()
	addAll(s, st, rec{x: 1}, rec{x: 3})
	enc := s.AppendEncode(nil, st)
	dst := s.New()
	if err := s.MergeEncoded(dst, enc); err != nil {
		t.Fatal(err)
	}
	if err := s.MergeEncoded(dst, enc); err != nil {
		t.Fatal(err)
	}
	if got := s.Result(dst, 29); !closeRel(got.Float, 1, 1e-12) {
		t.Errorf("variance of {1,3,1,3} = %+v", got)
	}
	if err := s.Decode(dst, enc[:len(enc)-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated: %v", err)
	}
}
