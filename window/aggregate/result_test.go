package aggregate

import (
	"encoding/json"
	"math"
	"testing"
)

func TestAppendJSON(t *testing.T) {
	s := mustSet(t, Options{},
		Spec{Name: "readings", Func: Count, Input: -1},
		Spec{Name: "avg_temp", Func: Avg, Input: 0},
		Spec{Name: "max_temp", Func: Max, Input: 1},
		Spec{Name: `we"ird\name` + "\n\x00<é>", Func: Sum, Input: 0},
		Spec{Name: "ids", Func: Distinct, Input: 0},
	)
	st := s.New()
	s.Add(st, &Input{Nums: []float64{21, null}, Hashes: []uint64{hashOf(1)}})
	s.Add(st, &Input{Nums: []float64{22, null}, Hashes: []uint64{hashOf(1)}})
	got := string(s.AppendJSON([]byte("x"), st))
	want := `x{"readings":2,"avg_temp":21.5,"max_temp":null,"we\"ird\\name\n\u0000\u003cé\u003e":43,"ids":1}`
	if got != want {
		t.Errorf("AppendJSON\n got %s\nwant %s", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got[1:]), &m); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	if _, ok := m[s.Spec(3).Name]; !ok {
		t.Errorf("escaped name does not read back: %v", m)
	}
}

// TestAppendFloat compares with encoding/json, and checks that what
// encoding/json cannot print becomes null.
func TestAppendFloat(t *testing.T) {
	for _, f := range []float64{0, negZero, 1, -1, 21.5, 0.1, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21, -1e21, 123456789.125,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 1.0 / 3} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Errorf("appendFloat(%v) = %s, encoding/json says %s", f, got, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := appendFloat(nil, f); string(got) != "null" {
			t.Errorf("appendFloat(%v) = %s, want null", f, got)
		}
	}
	s := mustSet(t, Options{}, Spec{Name: "s", Func: Sum}, Spec{Name: "m", Func: Max})
	st := s.New()
	addAll(s, st, rec{x: math.Inf(1)}, rec{x: math.Inf(-1)})
	if got := string(s.AppendJSON(nil, st)); got != `{"s":null,"m":null}` {
		t.Errorf("sum of +Inf and -Inf, max +Inf: %s", got)
	}
	if got := s.Result(st, 1); got != fl(math.Inf(1)) {
		t.Errorf("Result keeps the infinity: %+v", got)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Null: "null", Int: "int", Float: "float", 7: "Kind(7)"} {
		if k.String() != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, k.String(), want)
		}
	}
}
