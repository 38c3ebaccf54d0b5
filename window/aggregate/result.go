package aggregate

import (
	"math"
	"strconv"
)

// Kind is the type of a result Value.
type Kind uint8

const (
	Null  Kind = iota // no value: the aggregate saw no non-null input
	Int               // Value.Int holds the result: count, distinct
	Float             // Value.Float holds the result: every other function
)

// String returns "null", "int" or "float".
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Int:
		return "int"
	case Float:
		return "float"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is the result of one aggregate. The zero Value is Null.
type Value struct {
	Kind  Kind
	Int   int64
	Float float64
}

// Result returns the result of the i-th aggregate of st. count and distinct
// are Int and never Null (0 for no input). Every other function is Float,
// and Null when it saw no non-null input. A Float can be ±Inf or NaN when the
// inputs were infinite (sum of +Inf and -Inf); AppendJSON prints those as
// null.
//
// Result of a Distinct aggregate compacts the sketch in place and may
// allocate; the scalar aggregates do not allocate.
func (s *Set) Result(st *State, i int) Value {
	a := &s.aggs[i]
	if a.fn == Count && a.in < 0 {
		return Value{Kind: Int, Int: int64(st.records())}
	}
	n := st.vals[a.n]
	v := st.vals[a.v:]
	switch a.fn {
	case Count:
		return Value{Kind: Int, Int: int64(n)}
	case Distinct:
		if n == 0 {
			return Value{Kind: Int}
		}
		return Value{Kind: Int, Int: int64(st.sk.hll[a.sk].Estimate())}
	}
	if n == 0 {
		return Value{}
	}
	var f float64
	switch a.fn {
	case Sum:
		f = v[0]
	case Avg:
		f = v[0] / n
	case Min, Max:
		f = v[0]
	case Variance:
		f = v[1] / n
	case Stddev:
		f = math.Sqrt(v[1] / n)
	case First, Last:
		f = v[1]
	case Quantile:
		f = st.sk.qs[a.sk].quantile(a.q)
	}
	return Value{Kind: Float, Float: f}
}

// AppendJSON appends st's results as one JSON object in Set order, e.g.
// {"readings":12,"avg_temp":21.5,"max_temp":null}. Names are escaped;
// Null, NaN and ±Inf print as null. Floats print in the shortest form that
// reads back to the same float64, as encoding/json does.
func (s *Set) AppendJSON(dst []byte, st *State) []byte {
	dst = append(dst, '{')
	for i := range s.aggs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, s.json[i]...)
		dst = appendValue(dst, s.Result(st, i))
	}
	return append(dst, '}')
}

func appendValue(dst []byte, v Value) []byte {
	switch v.Kind {
	case Int:
		return strconv.AppendInt(dst, v.Int, 10)
	case Float:
		return appendFloat(dst, v.Float)
	}
	return append(dst, "null"...)
}

// appendFloat formats like encoding/json: 'f' notation for 1e-6 <= |f| <
// 1e21, 'e' otherwise with a one-digit negative exponent shortened (1e-7,
// not 1e-07).
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
