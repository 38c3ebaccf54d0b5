package selector_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/hub/fleet/selector"
)

type L = map[string]string

// TestMatches checks Matches against the semantics of Kubernetes'
// labels.Parse: the cases are those of apimachinery's selector_test.go
// (TestSelectorMatches, TestSetSelectorParser) that this syntax covers.
func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		sel    string
		labels L
		want   bool
	}{
		{"", L{"x": "y"}, true},
		{"", nil, true},
		{"x=y", L{"x": "y"}, true},
		{"x==y", L{"x": "y"}, true},
		{"x=y", L{"x": "z"}, false},
		{"x=y", nil, false},
		{"x!=y", nil, true}, // a missing label is "not y"
		{"x!=y", L{"x": "z"}, true},
		{"x!=y", L{"x": "y"}, false},
		{"x=y,z=w", L{"x": "y", "z": "w"}, true},
		{"x=y,z=w", L{"x": "y", "z": "a"}, false},
		{"x in (a,b)", L{"x": "a"}, true},
		{"x in (a,b)", L{"x": "b"}, true},
		{"x in (a,b)", L{"x": "c"}, false},
		{"x in (a,b)", nil, false},
		{"x notin (a,b)", nil, true},
		{"x notin (a,b)", L{"x": "c"}, true},
		{"x notin (a,b)", L{"x": "a"}, false},
		{"x", L{"x": ""}, true},
		{"x", L{"y": "x"}, false},
		{"!x", nil, true},
		{"!x", L{"x": ""}, false},
		{"x=", L{"x": ""}, true},
		{"x=", L{"x": "a"}, false},
		{"x=", nil, false},
		{"x!=", L{"x": "a"}, true},
		{"x in (,a)", L{"x": ""}, true},
		{"x in (a,)", L{"x": ""}, true},
		{"x in (a,)", L{"x": "b"}, false},
		{" x = y ,  z in ( a , b ) , ! w ", L{"x": "y", "z": "b"}, true},
		{" x = y ,  z in ( a , b ) , ! w ", L{"x": "y", "z": "b", "w": "1"}, false},
		{"site=plant-7,hw in (rpi4,cm4),!legacy", L{"site": "plant-7", "hw": "cm4"}, true},
		{"site=plant-7,hw in (rpi4,cm4),!legacy", L{"site": "plant-7", "hw": "cm4", "legacy": "true"}, false},
		{"site=plant-7,hw in (rpi4,cm4),!legacy", L{"site": "plant-8", "hw": "cm4"}, false},
		{"example.com/tier=a", L{"example.com/tier": "a"}, true},
		{"x=1,x=2", L{"x": "1"}, false}, // both must hold
		{"in", L{"in": "x"}, true},      // keywords are keys where a key is expected
	} {
		s, err := selector.Parse(tc.sel)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.sel, err)
			continue
		}
		if got := s.Matches(tc.labels); got != tc.want {
			t.Errorf("Parse(%q).Matches(%v) = %v, want %v", tc.sel, tc.labels, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"x==y", "x=y"},
		{"b=1,a=2", "a=2,b=1"},
		{"x in (b,a,b)", "x in (a,b)"},
		{"x notin(b , a)", "x notin (a,b)"},
		{"!x,x", "x,!x"},
		{"x in (a,)", "x in (,a)"},
		{"x=", "x="},
		{"x in (,)", "x in (,)"},
		{"x in (,,)", "x in (,)"},
		{"x!=y", "x!=y"},
		{"  site = plant-7 , hw in (rpi4, cm4), !legacy ", "hw in (cm4,rpi4),!legacy,site=plant-7"},
	} {
		s, err := selector.Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := s.String(); got != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		col  int
		want string
	}{
		{"x in a", 6, `expected "(" after "in", found "a"`},
		{"x in ()", 7, "at least one value"},
		{"x in (a", 8, `expected ")" to close the list opened at column 6`},
		{"x in (a b)", 9, `expected a value, "," or ")"`},
		{"x=a b", 5, `expected "," or the end after x=a, found "b"`},
		{"=a", 1, "expected a label key, found \"=\""},
		{"x,", 3, "expected a label key, found the end"},
		{",x", 1, "expected a label key, found \",\""},
		{"!x=a", 3, `expected "," or the end after !x, found "="`},
		{"!", 2, `expected a label key after "!", found the end`},
		{"x>1", 2, `operator ">" is not supported`},
		{"x gt 1", 3, `operator "gt" is not supported`},
		{"x foo", 3, `expected an operator (=, ==, !=, in, notin), "," or the end after key "x", found "foo"`},
		{"x=(a)", 3, `expected a value after "=", found "("`},
		{"x/y/z", 1, `more than one "/"`},
		{"/x", 1, "the prefix before \"/\" is empty"},
		{"x/", 1, "the name is empty"},
		{"-x", 1, "must begin and end with a letter or digit"},
		{"x=a/b", 3, `has '/' at position 2`},
		{"x=-a", 3, "must begin and end with a letter or digit"},
		{strings.Repeat("k", 64), 1, "is 64 characters, at most 63"},
		{"x=" + strings.Repeat("v", 64), 3, "is 64 characters, at most 63"},
		{"Example.com/x", 1, "a DNS subdomain has lower-case letters"},
		{"a..b/x", 1, "empty part between dots"},
		{"é=1", 1, "a non-ASCII character"},
		{"x=1,é", 5, "a non-ASCII character"},
		{"x in (a,é)", 9, "a non-ASCII character"},
	} {
		_, err := selector.Parse(tc.in)
		var se *selector.SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a *SyntaxError", tc.in, err)
			continue
		}
		if se.Column != tc.col || !strings.Contains(se.Msg, tc.want) {
			t.Errorf("Parse(%q): column %d %q, want column %d and %q", tc.in, se.Column, se.Msg, tc.col, tc.want)
		}
		if !strings.HasPrefix(err.Error(), fmt.Sprintf("selector %q: column %d: ", tc.in, tc.col)) {
			t.Errorf("Parse(%q): error %q does not name the selector and column", tc.in, err)
		}
	}
}

func TestValidate(t *testing.T) {
	good := []string{"a", "A", "a.b-c_d", "example.com/a", "a-b.example.com/x", strings.Repeat("k", 63), strings.Repeat("p", 63) + "/x"}
	for _, k := range good {
		if err := selector.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q): %v", k, err)
		}
	}
	bad := []string{"", "a b", "_a", "a_", "a/b/c", "/a", "a/", "EX.com/a", "-a.com/x", "a.com-/x", strings.Repeat("k", 64), strings.Repeat("p.", 127) + "p/x"}
	for _, k := range bad {
		if err := selector.ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) = nil, want an error", k)
		}
	}
	for _, v := range []string{"", "a", "plant-7", "1.2.3", strings.Repeat("v", 63)} {
		if err := selector.ValidateValue(v); err != nil {
			t.Errorf("ValidateValue(%q): %v", v, err)
		}
	}
	for _, v := range []string{"a b", "-a", "a-", "a/b", strings.Repeat("v", 64), "ü"} {
		if err := selector.ValidateValue(v); err == nil {
			t.Errorf("ValidateValue(%q) = nil, want an error", v)
		}
	}
}

// TestAgainstOracle compares Matches over random selectors and label sets
// with a direct reading of the Kubernetes rules.
func TestAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	vals := []string{"", "x", "y", "z"}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	for range 5000 {
		type req struct {
			k, op string
			vs    []string
		}
		var reqs []req
		var parts []string
		for range r.IntN(4) {
			q := req{k: pick(keys)}
			switch r.IntN(6) {
			case 0:
				q.op, q.vs = "=", []string{pick(vals)}
				parts = append(parts, q.k+"="+q.vs[0])
			case 1:
				q.op, q.vs = "!=", []string{pick(vals)}
				parts = append(parts, q.k+"!="+q.vs[0])
			case 2, 3:
				q.op = "in"
				if r.IntN(2) == 0 {
					q.op = "notin"
				}
				for range 1 + r.IntN(3) {
					q.vs = append(q.vs, pick(vals))
				}
				list := strings.Join(q.vs, ",")
				if list == "" {
					list = "," // one empty value: "()" is refused
				}
				parts = append(parts, q.k+" "+q.op+" ("+list+")")
			case 4:
				q.op = "exists"
				parts = append(parts, q.k)
			case 5:
				q.op = "!"
				parts = append(parts, "!"+q.k)
			}
			reqs = append(reqs, q)
		}
		text := strings.Join(parts, ",")
		s, err := selector.Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		labels := L{}
		for _, k := range keys {
			if r.IntN(3) > 0 {
				labels[k] = pick(vals)
			}
		}
		want := true
		for _, q := range reqs {
			v, ok := labels[q.k]
			in := false
			for _, x := range q.vs {
				in = in || x == v
			}
			var hold bool
			switch q.op {
			case "=", "in":
				hold = ok && in
			case "!=", "notin":
				hold = !ok || !in
			case "exists":
				hold = ok
			case "!":
				hold = !ok
			}
			want = want && hold
		}
		if got := s.Matches(labels); got != want {
			t.Fatalf("Parse(%q).Matches(%v) = %v, want %v", text, labels, got, want)
		}
	}
}

func TestMatchesAllocs(t *testing.T) {
	s, err := selector.Parse("site=plant-7,hw in (rpi4,cm4),!legacy")
	if err != nil {
		t.Fatal(err)
	}
	labels := L{"site": "plant-7", "hw": "cm4"}
	if n := testing.AllocsPerRun(100, func() { s.Matches(labels) }); n != 0 {
		t.Errorf("Matches allocates %v times, want 0", n)
	}
}

func ExampleParse() {
	s, err := selector.Parse("site=plant-7, hw in (rpi4,cm4), !legacy")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s)
	fmt.Println(s.Matches(map[string]string{"site": "plant-7", "hw": "rpi4"}))
	fmt.Println(s.Matches(map[string]string{"site": "plant-7", "hw": "rpi4", "legacy": "yes"}))
	_, err = selector.Parse("hw in rpi4")
	fmt.Println(err)
	// Output:
	// hw in (cm4,rpi4),!legacy,site=plant-7
	// true
	// false
	// selector "hw in rpi4": column 7: expected "(" after "in", found "rpi4"
}
