package aggregate

import (
	"errors"
	"strings"
	"testing"
)

func TestNewSetRejects(t *testing.T) {
	tests := []struct {
		name  string
		specs []Spec
		opts  Options
		want  []string // substrings of the error, one per problem
	}{
		{"empty name", []Spec{{Func: Sum}}, Options{}, []string{"empty name"}},
		{"duplicate name", []Spec{{Name: "a", Func: Sum}, {Name: "a", Func: Max}}, Options{}, []string{`spec 1 ("a", max): name already used by spec 0`}},
		{"unknown func", []Spec{{Name: "a", Func: 0}}, Options{}, []string{"unknown function"}},
		{"unknown func high", []Spec{{Name: "a", Func: 99}}, Options{}, []string{"unknown function"}},
		{"negative input", []Spec{{Name: "a", Func: Sum, Input: -1}}, Options{}, []string{"input slot -1 outside [0, 65536)"}},
		{"count input below -1", []Spec{{Name: "a", Func: Count, Input: -2}}, Options{}, []string{"input slot -2 outside [-1, 65536)"}},
		{"input too large", []Spec{{Name: "a", Func: Distinct, Input: 1 << 16}}, Options{}, []string{"outside [0, 65536)"}},
		{"param on sum", []Spec{{Name: "a", Func: Sum, Param: 0.5}}, Options{}, []string{"only quantile takes one"}},
		{"bad accuracy", []Spec{{Name: "a", Func: Sum}}, Options{QuantileAccuracy: 0.9}, []string{"quantile accuracy 0.9"}},
		{"bad precision", []Spec{{Name: "a", Func: Sum}}, Options{HLLPrecision: 3}, []string{"precision 3"}},
		{"quantile q", []Spec{{Name: "a", Func: Quantile, Param: 1.5}, {Name: "b", Func: Quantile, Param: nan()}}, Options{}, []string{"q=1.5 outside", "q=NaN outside"}},
		{"all at once", []Spec{{Func: Sum}, {Name: "b", Func: Min, Input: -1}, {Name: "b", Func: 0}}, Options{HLLPrecision: 19},
			[]string{"empty name", "input slot -1", "name already used", "unknown function", "precision 19"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSet(tt.specs, tt.opts)
			if err == nil {
				t.Fatalf("NewSet succeeded with %d aggregates", s.Len())
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func nan() float64 { return null }

func TestSetShape(t *testing.T) {
	specs := []Spec{
		{Name: "n", Func: Count, Input: -1},
		{Name: "avg", Func: Avg, Input: 2},
		{Name: "ids", Func: Distinct, Input: 4},
		{Name: "c", Func: Count, Input: 0},
	}
	s := mustSet(t, Options{}, specs...)
	if s.Len() != 4 || s.NumInputs() != 3 || s.HashInputs() != 5 {
		t.Errorf("Len, NumInputs, HashInputs = %d, %d, %d; want 4, 3, 5", s.Len(), s.NumInputs(), s.HashInputs())
	}
	specs[0].Name = "changed"
	if s.Spec(0).Name != "n" {
		t.Errorf("Set shares the caller's spec slice")
	}
	only := mustSet(t, Options{}, Spec{Name: "n", Func: Count, Input: -1})
	if only.NumInputs() != 0 || only.HashInputs() != 0 {
		t.Errorf("count() only: NumInputs, HashInputs = %d, %d; want 0, 0", only.NumInputs(), only.HashInputs())
	}
	st := only.New()
	only.Add(st, &Input{}) // count() reads no slot: nil slices are fine
	if got := only.Result(st, 0); got.Int != 1 {
		t.Errorf("count() = %+v", got)
	}
}
