package aggregate

import "testing"

// scalarSpecs is every scalar function: the Set the hot paths must run
// without allocating.
var scalarSpecs = []Spec{
	{Name: "n", Func: Count, Input: -1},
	{Name: "cnt", Func: Count, Input: 0},
	{Name: "sum", Func: Sum, Input: 0},
	{Name: "min", Func: Min, Input: 0},
	{Name: "max", Func: Max, Input: 1},
	{Name: "avg", Func: Avg, Input: 1},
	{Name: "var", Func: Variance, Input: 0},
	{Name: "sd", Func: Stddev, Input: 1},
	{Name: "first", Func: First, Input: 0},
	{Name: "last", Func: Last, Input: 1},
}

func TestZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are noisy under -short coverage runs")
	}
	s := mustSet(t, Options{}, scalarSpecs...)
	st, other := s.New(), s.New()
	in := Input{Time: 7, Nums: []float64{1.5, null}}
	addAll(s, other, rec{t: 1, x: 3}, rec{t: 9, x: -2})
	enc := s.AppendEncode(nil, other)
	buf := make([]byte, 0, 256)
	tests := []struct {
		name string
		fn   func()
	}{
		{"Add", func() { in.Time++; s.Add(st, &in) }},
		{"Merge", func() { s.Merge(st, other) }},
		{"AppendEncode", func() { buf = s.AppendEncode(buf[:0], st) }},
		{"Decode", func() {
			if err := s.Decode(st, enc); err != nil {
				t.Fatal(err)
			}
		}},
		{"MergeEncoded", func() {
			if err := s.MergeEncoded(st, enc); err != nil {
				t.Fatal(err)
			}
		}},
		{"Result", func() { _ = s.Result(st, 6) }},
		{"AppendJSON", func() { buf = s.AppendJSON(buf[:0], st) }},
		{"Reset", func() { s.Reset(st) }},
		{"CopyTo", func() { s.CopyTo(st, other) }},
		{"Empty", func() { _ = s.Empty(st) }},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, tt.fn); n != 0 {
			t.Errorf("%s: %v allocations, want 0", tt.name, n)
		}
	}
}
