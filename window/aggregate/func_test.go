package aggregate

import "testing"

func TestParseFuncRoundTrip(t *testing.T) {
	for f := Count; f <= Quantile; f++ {
		got, ok := ParseFunc(f.String())
		if !ok || got != f {
			t.Errorf("ParseFunc(%q) = %v, %v; want %v, true", f.String(), got, ok, f)
		}
	}
	if f, ok := ParseFunc("AVG"); !ok || f != Avg {
		t.Errorf("ParseFunc(AVG) = %v, %v; want avg, true", f, ok)
	}
	for _, name := range []string{"", "median", "count ", "p99"} {
		if f, ok := ParseFunc(name); ok {
			t.Errorf("ParseFunc(%q) = %v, true; want false", name, f)
		}
	}
	if got := Func(0).String(); got != "Func(0)" {
		t.Errorf("Func(0).String() = %q", got)
	}
}

func TestArity(t *testing.T) {
	tests := []struct {
		f        Func
		min, max int
	}{
		{Count, 0, 1},
		{Sum, 1, 1},
		{Min, 1, 1},
		{Max, 1, 1},
		{Avg, 1, 1},
		{Variance, 1, 1},
		{Stddev, 1, 1},
		{First, 1, 1},
		{Last, 1, 1},
		{Distinct, 1, 1},
		{Quantile, 2, 2},
		{Func(0), 0, 0},
		{Func(200), 0, 0},
	}
	for _, tt := range tests {
		if mn, mx := tt.f.Arity(); mn != tt.min || mx != tt.max {
			t.Errorf("%v.Arity() = %d, %d; want %d, %d", tt.f, mn, mx, tt.min, tt.max)
		}
	}
}
