package selector_test

import (
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/runnel-io/runnel/hub/fleet/selector"
)

// FuzzParse: Parse never panics; an error is a *SyntaxError within the
// input; a selector survives String → Parse unchanged, and both forms
// select the same label sets.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "x", "!x", "x=y", "x==y", "x!=y", "x=", "x in (a,b)", "x notin (a,b)",
		"x in (,a)", "x in (a,,b)", "site=plant-7,hw in (rpi4,cm4),!legacy",
		"example.com/x=a", "x in a", "x in ()", "x>1", "!x=a", " a = b , c ",
		"a/b/c", "x=a b", "x in (a", "é", "x=1,x=2", "in", "notin in (in)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := selector.Parse(in)
		if err != nil {
			var se *selector.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): %T %v, want a *SyntaxError", in, err, err)
			}
			if se.Column < 1 || se.Column > utf8.RuneCountInString(in)+1 {
				t.Fatalf("Parse(%q): column %d outside the input", in, se.Column)
			}
			return
		}
		c := s.String()
		s2, err := selector.Parse(c)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its String %q does not parse: %v", in, c, err)
		}
		if c2 := s2.String(); c2 != c {
			t.Fatalf("String not canonical: %q → %q → %q", in, c, c2)
		}
		if !reflect.DeepEqual(s.Requirements(), s2.Requirements()) {
			t.Fatalf("%q and its String %q parse differently", in, c)
		}
		// Label sets built from the selector's own keys and values, so
		// that requirements are exercised both ways.
		reqs := s.Requirements()
		for mask := range 1 << min(len(reqs), 6) {
			labels := map[string]string{}
			for i, r := range reqs[:min(len(reqs), 6)] {
				if mask&(1<<i) == 0 {
					continue
				}
				v := "other"
				if len(r.Values) > 0 {
					v = r.Values[(mask>>1)%len(r.Values)]
				}
				labels[r.Key] = v
			}
			if s.Matches(labels) != s2.Matches(labels) {
				t.Fatalf("%q and %q disagree on %v", in, c, labels)
			}
		}
	})
}
