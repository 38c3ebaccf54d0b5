package jsonfield

import (
	"errors"
	"math"
	"strconv"
	"testing"
)

func TestFloatInt(t *testing.T) {
	tests := []struct {
		raw     string
		float   float64
		floatOK bool
		int     int64
		intErr  error // nil, ErrNotInteger or ErrRange
	}{
		{"0", 0, true, 0, nil},
		{"-0", math.Copysign(0, -1), true, 0, nil},
		{"-0.0e5", math.Copysign(0, -1), true, 0, nil},
		{"0e999999999999999999999", 0, true, 0, nil},
		{"7", 7, true, 7, nil},
		{"-42", -42, true, -42, nil},
		{"21.57", 21.57, true, 0, ErrNotInteger},
		{"0.1", 0.1, true, 0, ErrNotInteger},
		{"1e-7", 1e-7, true, 0, ErrNotInteger},
		{"1E+30", 1e30, true, 0, ErrRange},
		{"1700000000123", 1700000000123, true, 1700000000123, nil},
		{"1.7e12", 1.7e12, true, 1700000000000, nil},
		{"12.0", 12, true, 12, nil},
		{"10.50e1", 105, true, 105, nil},
		{"100e-2", 1, true, 1, nil},
		{"0.000001e6", 1, true, 1, nil},
		{"1000000000000000000000e-21", 1, true, 1, nil},
		{"9007199254740993", 9007199254740992, true, 9007199254740993, nil},
		{"9007199254740993.000", 9007199254740992, true, 9007199254740993, nil},
		{"9223372036854775807", 9223372036854775807, true, math.MaxInt64, nil},
		{"9223372036854775808", 9223372036854775808, true, 0, ErrRange},
		{"-9223372036854775808", -9223372036854775808, true, math.MinInt64, nil},
		{"-9223372036854775809", -9223372036854775809, true, 0, ErrRange},
		{"12345678901234567890", 12345678901234567890, true, 0, ErrRange},
		{"922337203685477580.7e1", 9223372036854775807, true, math.MaxInt64, nil},
		{"1.5", 1.5, true, 0, ErrNotInteger},
		{"123456789012345678901234567890e-10", 12345678901234567890.123456789, true, 0, ErrNotInteger},
		{"123456789012345678901234567890e-9", 123456789012345678901.23456789, true, 0, ErrNotInteger},
		{"12345678901234567890000e-3", 12345678901234567890, true, 0, ErrRange},
		{"123456789012345678901.5e-1", 12345678901234567890.15, true, 0, ErrNotInteger},
		{"1e400", math.Inf(1), false, 0, ErrRange},
		{"-1e400", math.Inf(-1), false, 0, ErrRange},
		{"1e-400", 0, true, 0, ErrNotInteger},
		{"4.9406564584124654e-324", 5e-324, true, 0, ErrNotInteger},
		{"1.7976931348623157e308", math.MaxFloat64, true, 0, ErrRange},
		{"1e22", 1e22, true, 0, ErrRange},
		{"1e23", 1e23, true, 0, ErrRange},
		{"9007199254740991e22", 9007199254740991e22, true, 0, ErrRange},
		{"0.30000000000000004", 0.30000000000000004, true, 0, ErrNotInteger},
	}
	for _, tt := range tests {
		v := Value{Kind: Number, Raw: []byte(tt.raw)}
		f, err := v.Float()
		if (err == nil) != tt.floatOK || math.Float64bits(f) != math.Float64bits(tt.float) {
			t.Errorf("Float(%s) = %v, %v; want %v (ok=%v)", tt.raw, f, err, tt.float, tt.floatOK)
		}
		if err != nil && !errors.Is(err, ErrRange) {
			t.Errorf("Float(%s) error %v does not wrap ErrRange", tt.raw, err)
		}
		// strconv is the reference for every one of them.
		sf, serr := strconv.ParseFloat(tt.raw, 64)
		if math.Float64bits(sf) != math.Float64bits(f) || (serr == nil) != (err == nil) {
			t.Errorf("Float(%s) = %v, %v; strconv says %v, %v", tt.raw, f, err, sf, serr)
		}
		n, err := v.Int()
		if tt.intErr == nil {
			if err != nil || n != tt.int {
				t.Errorf("Int(%s) = %d, %v; want %d", tt.raw, n, err, tt.int)
			}
		} else if !errors.Is(err, tt.intErr) {
			t.Errorf("Int(%s) = %d, %v; want %v", tt.raw, n, err, tt.intErr)
		}
	}
}

func TestValueKindErrors(t *testing.T) {
	for _, v := range []Value{{}, {Kind: String, Raw: []byte("1")}, {Kind: Bool, Raw: []byte("true")}} {
		if _, err := v.Float(); !errors.Is(err, ErrKind) {
			t.Errorf("%v.Float() err = %v", v.Kind, err)
		}
		if _, err := v.Int(); !errors.Is(err, ErrKind) {
			t.Errorf("%v.Int() err = %v", v.Kind, err)
		}
	}
	if _, err := (Value{Kind: Number, Raw: []byte("1")}).Bool(); !errors.Is(err, ErrKind) {
		t.Errorf("Number.Bool() err = %v", err)
	}
	for raw, want := range map[string]bool{"true": true, "false": false} {
		if b, err := (Value{Kind: Bool, Raw: []byte(raw)}).Bool(); err != nil || b != want {
			t.Errorf("Bool(%s) = %v, %v", raw, b, err)
		}
	}
	// A hand-built Number outside JSON grammar is refused, even where
	// strconv would accept it.
	for _, raw := range []string{"", "-", "+1", "inf", "NaN", "0x10", "1_000", "01", "1.", ".5", "1e", "1e+", " 1", "1 "} {
		v := Value{Kind: Number, Raw: []byte(raw)}
		if f, err := v.Float(); !errors.Is(err, ErrSyntax) {
			t.Errorf("Float(%q) = %v, %v; want ErrSyntax", raw, f, err)
		}
		if n, err := v.Int(); !errors.Is(err, ErrSyntax) {
			t.Errorf("Int(%q) = %v, %v; want ErrSyntax", raw, n, err)
		}
	}
}
