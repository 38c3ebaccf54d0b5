package aggregate

import (
	"strconv"
	"strings"
)

// Func names an aggregate function.
type Func uint8

const (
	Count    Func = iota + 1 // count() counts records; count(x) counts records where x is not null
	Sum                      // sum of the non-null values
	Min                      // smallest non-null value
	Max                      // largest non-null value
	Avg                      // arithmetic mean of the non-null values (sum and count)
	Variance                 // population variance, Welford per record, Chan et al. parallel formula for Merge
	Stddev                   // sqrt(Variance)
	First                    // value with the smallest event time; ties -> smallest value (so Merge is commutative)
	Last                     // value with the largest event time; ties -> largest value
	Distinct                 // approximate distinct count of a field, HyperLogLog (github.com/axiomhq/hyperloglog)
	Quantile                 // quantile(x, q), DDSketch (github.com/DataDog/sketches-go)
)

var funcNames = [...]string{
	Count:    "count",
	Sum:      "sum",
	Min:      "min",
	Max:      "max",
	Avg:      "avg",
	Variance: "variance",
	Stddev:   "stddev",
	First:    "first",
	Last:     "last",
	Distinct: "distinct",
	Quantile: "quantile",
}

// ParseFunc returns the Func called name ("count", "sum", "min", "max",
// "avg", "variance", "stddev", "first", "last", "distinct", "quantile"),
// ignoring ASCII case.
func ParseFunc(name string) (Func, bool) {
	for f := Count; f <= Quantile; f++ {
		if strings.EqualFold(name, funcNames[f]) {
			return f, true
		}
	}
	return 0, false
}

func (f Func) valid() bool { return f >= Count && f <= Quantile }

// String returns the name ParseFunc accepts, or "Func(n)" for an invalid f.
func (f Func) String() string {
	if f.valid() {
		return funcNames[f]
	}
	return "Func(" + strconv.Itoa(int(f)) + ")"
}

// Arity returns how many arguments the function takes in a pipeline spec:
// count takes 0 or 1 (count() or count(x)), quantile takes 2 (the field and
// q), every other function takes 1. An invalid f returns 0, 0.
func (f Func) Arity() (min, max int) {
	switch {
	case f == Count:
		return 0, 1
	case f == Quantile:
		return 2, 2
	case f.valid():
		return 1, 1
	}
	return 0, 0
}
