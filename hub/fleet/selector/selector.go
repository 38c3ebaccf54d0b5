package selector

import (
	"cmp"
	"slices"
	"strings"
)

// Op is the operator of a Requirement.
type Op uint8

// The operators, in the order String sorts requirements of one key.
const (
	// Equals: the label exists and has the value ("k=v", "k==v").
	Equals Op = iota + 1
	// NotEquals: the label is missing or has another value ("k!=v").
	NotEquals
	// In: the label exists and has one of the values ("k in (a,b)").
	In
	// NotIn: the label is missing or has none of the values
	// ("k notin (a,b)").
	NotIn
	// Exists: the label exists ("k").
	Exists
	// DoesNotExist: the label is missing ("!k").
	DoesNotExist
)

// Requirement is one condition of a Selector.
type Requirement struct {
	Key string
	Op  Op
	// Values: one for Equals and NotEquals, at least one for In and
	// NotIn (sorted, without duplicates), none for Exists and
	// DoesNotExist.
	Values []string
}

// Matches reports whether labels satisfy r.
func (r *Requirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Op {
	case Equals:
		return ok && v == r.Values[0]
	case NotEquals:
		return !ok || v != r.Values[0]
	case In:
		return ok && contains(r.Values, v)
	case NotIn:
		return !ok || !contains(r.Values, v)
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	}
	return false
}

// contains is slices.Contains for the few values of a list, which is
// faster than a binary search at these sizes.
func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// String renders r in the canonical form.
func (r *Requirement) String() string {
	var b strings.Builder
	r.appendTo(&b)
	return b.String()
}

func (r *Requirement) appendTo(b *strings.Builder) {
	switch r.Op {
	case DoesNotExist:
		b.WriteByte('!')
		b.WriteString(r.Key)
	case Exists:
		b.WriteString(r.Key)
	case Equals, NotEquals:
		b.WriteString(r.Key)
		if r.Op == Equals {
			b.WriteByte('=')
		} else {
			b.WriteString("!=")
		}
		b.WriteString(r.Values[0])
	case In, NotIn:
		b.WriteString(r.Key)
		if r.Op == In {
			b.WriteString(" in (")
		} else {
			b.WriteString(" notin (")
		}
		for i, v := range r.Values {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v)
		}
		if len(r.Values) == 1 && r.Values[0] == "" {
			b.WriteByte(',') // "(,)": "()" would be an empty list
		}
		b.WriteByte(')')
	}
}

// Selector is a parsed label selector: the conjunction of its
// requirements. The zero Selector selects everything. A Selector is
// immutable and safe for concurrent use.
type Selector struct {
	reqs []Requirement
}

// Matches reports whether labels satisfy every requirement of s. A nil
// map is a set of no labels.
func (s Selector) Matches(labels map[string]string) bool {
	for i := range s.reqs {
		if !s.reqs[i].Matches(labels) {
			return false
		}
	}
	return true
}

// Empty reports whether s selects everything.
func (s Selector) Empty() bool { return len(s.reqs) == 0 }

// Requirements returns a copy of s's requirements, in canonical order.
func (s Selector) Requirements() []Requirement {
	out := make([]Requirement, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = Requirement{Key: r.Key, Op: r.Op, Values: slices.Clone(r.Values)}
	}
	return out
}

// String renders s in the canonical form: requirements sorted by key
// (then operator and values) and joined by commas; "" for the empty
// selector. Parse(s.String()) is equal to s.
func (s Selector) String() string {
	var b strings.Builder
	for i := range s.reqs {
		if i > 0 {
			b.WriteByte(',')
		}
		s.reqs[i].appendTo(&b)
	}
	return b.String()
}

// canonicalize sorts the requirements of s. Values are sorted by the
// parser.
func (s *Selector) canonicalize() {
	slices.SortStableFunc(s.reqs, func(a, b Requirement) int {
		return cmp.Or(
			cmp.Compare(a.Key, b.Key),
			cmp.Compare(a.Op, b.Op),
			slices.Compare(a.Values, b.Values),
		)
	})
}
