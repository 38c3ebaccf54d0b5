package jsonfield

import (
	"fmt"
	"math"
	"strconv"
	"unsafe"
)

// Kind is the JSON type of an extracted value, or Missing.
type Kind uint8

const (
	// Missing: the path is absent from the document, or runs through a
	// value that is not an object.
	Missing Kind = iota
	Null
	Bool
	Number
	String
	Object
	Array
)

var kindNames = [...]string{"missing", "null", "bool", "number", "string", "object", "array"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one extracted field. Raw aliases the document or the Extractor's
// scratch buffer and is valid only until the next Extract call; the caller
// must not retain it (copy it, or convert it with string(Raw)).
type Value struct {
	Kind Kind
	// Raw holds, by Kind:
	//   Number:        the literal bytes, e.g. -1.5e3
	//   String:        the unescaped contents, without quotes (valid UTF-8)
	//   Bool:          true or false
	//   Null:          null
	//   Object, Array: the raw JSON text of the value, as in the document
	//   Missing:       nil
	Raw []byte
}

// Float returns a Number as the float64 nearest to it, exactly as
// strconv.ParseFloat would, without allocating. A number beyond the float64
// range returns ±Inf and an error wrapping ErrRange; other kinds return an
// error wrapping ErrKind.
func (v Value) Float() (float64, error) {
	if v.Kind != Number {
		return 0, v.kindError("number")
	}
	d, ok := parseDecimal(v.Raw)
	if !ok {
		return 0, fmt.Errorf("jsonfield: %w: invalid number %q", ErrSyntax, v.Raw)
	}
	if f, ok := d.fastFloat(); ok {
		return f, nil
	}
	// The hard cases: more than 2^53 in the mantissa, or a large exponent.
	// strconv copies the string into any error it returns, so viewing Raw
	// as a string without a copy is safe and keeps this path allocation
	// free.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(v.Raw), len(v.Raw)), 64)
	if err != nil {
		return f, fmt.Errorf("jsonfield: %w: %s does not fit in a float64", ErrRange, v.Raw)
	}
	return f, nil
}

// Int returns a Number that is an exact integer as an int64: 42, -0,
// 1700000000123, 1.7e12 and 12.0 qualify; 1.5 fails with ErrNotInteger and
// 9223372036854775808 with ErrRange. The decision is made on the decimal
// literal, not on a float64, so integers beyond 2^53 are exact.
func (v Value) Int() (int64, error) {
	if v.Kind != Number {
		return 0, v.kindError("number")
	}
	d, ok := parseDecimal(v.Raw)
	if !ok {
		return 0, fmt.Errorf("jsonfield: %w: invalid number %q", ErrSyntax, v.Raw)
	}
	n, err := d.int64()
	if err != nil {
		return 0, fmt.Errorf("jsonfield: %w: %s", err, v.Raw)
	}
	return n, nil
}

// Bool returns a Bool value; other kinds return an error wrapping ErrKind.
func (v Value) Bool() (bool, error) {
	if v.Kind != Bool {
		return false, v.kindError("bool")
	}
	return len(v.Raw) > 0 && v.Raw[0] == 't', nil
}

func (v Value) kindError(want string) error {
	return fmt.Errorf(msgBadKind, ErrKind, v.Kind, want)
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
}

// fastFloat is Clinger's fast path: when the mantissa and 10^|exp| are both
// exact float64s, one IEEE multiplication or division is correctly rounded,
// which is exactly what strconv.ParseFloat returns. It covers the integers
// and short decimals that sensors send.
func (d decimal) fastFloat() (float64, bool) {
	if d.mant == 0 {
		if d.neg {
			return math.Copysign(0, -1), true
		}
		return 0, true
	}
	if d.trunc || d.mant > 1<<53 || d.exp < -22 || d.exp > 22 {
		return 0, false
	}
	f := float64(d.mant)
	if d.exp < 0 {
		f /= pow10[-d.exp]
	} else {
		f *= pow10[d.exp]
	}
	if d.neg {
		f = -f
	}
	return f, true
}
