package aggregate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
)

// Spec is one named aggregate of a pipeline.
type Spec struct {
	Name  string  // output name, e.g. "avg_temp"
	Func  Func    // the function
	Input int     // slot: index into Input.Hashes for Distinct, into Input.Nums otherwise; -1 for count() without argument
	Param float64 // quantile q in [0, 1]; must be 0 for every other function
}

// Options tune the sketches; the zero value means the defaults.
type Options struct {
	// QuantileAccuracy is the DDSketch relative accuracy α: a quantile
	// result is within α·|x| of the true value x. Default 0.01, allowed
	// [0.0001, 0.5]. It is rounded to a multiple of 1e-6 (the encoding
	// carries it as an integer number of millionths so that a hub can refuse
	// sketches built with another accuracy).
	QuantileAccuracy float64

	// HLLPrecision is the HyperLogLog precision p, 4..18, default 14: 2^p
	// registers, standard error 1.04/sqrt(2^p) (0.81% at p=14) once the
	// sketch leaves its exact sparse mode.
	HLLPrecision uint8
}

const (
	defaultQuantileAccuracy = 0.01
	minQuantileAccuracy     = 0.0001
	maxQuantileAccuracy     = 0.5
	defaultHLLPrecision     = 14

	// maxInput bounds Spec.Input so that NumInputs and HashInputs stay
	// reasonable sizes for the callers that allocate Input slices from them.
	maxInput = 1 << 16
)

// Validate reports every problem with o at once, each wrapping ErrInvalid.
// The zero value is valid.
func (o Options) Validate() error {
	var errs []error
	if a := o.QuantileAccuracy; a != 0 && !(a >= minQuantileAccuracy && a <= maxQuantileAccuracy) {
		errs = append(errs, fmt.Errorf("aggregate: options: quantile accuracy %v outside [%v, %v]: %w",
			a, minQuantileAccuracy, maxQuantileAccuracy, ErrInvalid))
	}
	if p := o.HLLPrecision; p != 0 && (p < 4 || p > 18) {
		errs = append(errs, fmt.Errorf("aggregate: options: HyperLogLog precision %d outside [4, 18]: %w", p, ErrInvalid))
	}
	return errors.Join(errs...)
}

// agg is the compiled form of one Spec.
type agg struct {
	fn Func
	in int32 // input slot; -1 for count()
	// n is the slot in State.vals of n, the number of non-null inputs the
	// aggregate has absorbed, which is what tells "no input" (Null) apart
	// from a value (>= 1: slot 0 is the record count). The simple
	// aggregates (count(x), sum, avg, min, max) of one input share theirs:
	// a partial of count/avg/max of one field is 4 slots, not 5, and n is
	// counted once per record. The first of them in spec order is first.
	n     int32
	v     int32 // the aggregate's first value slot (valueSlots of them)
	first bool  // the first aggregate in spec order to use slot n
	sk    int32 // index into State.hll (Distinct) or State.qs (Quantile)
	q     float64
}

// sharesN reports whether aggregates of f on one input share their n.
func sharesN(f Func) bool {
	switch f {
	case Count, Sum, Avg, Min, Max:
		return true
	}
	return false
}

// valueSlots returns how many float64 slots of State.vals f uses besides n.
func valueSlots(f Func) int {
	switch f {
	case Sum, Avg:
		return 1 // sum
	case Min, Max:
		return 1 // value (+Inf / -Inf while empty)
	case Variance, Stddev:
		return 2 // mean, m2
	case First, Last:
		return 2 // event time (int64 bits), value
	}
	return 0 // count(x): n itself; distinct, quantile: the sketch lives beside vals
}

// field is what Add does with one input's value for its simple aggregates
// (count(x), sum, avg, min, max): count it in their shared n, add it to one
// sum, compare it with one min and one max. Doing them together costs Add
// half of a loop over the aggregates with a switch for each (callgrind:
// count/avg/max of one field went from 132 to 67 instructions per record).
// A second aggregate of one kind on one input (sum and avg of one field)
// is left to the loop over scalars.
type field struct {
	in, n         int32
	sum, min, max int32 // value slots; -1 for none
}

// Set is the compiled list of aggregates of one pipeline. It is immutable
// and safe for concurrent use; the States it creates are not.
type Set struct {
	specs []Spec
	aggs  []agg // one per spec, in spec order
	// Add's and Merge's loops: fields, then (only when more is set) the
	// other scalars, which call nothing, so the compiler keeps their state
	// in registers, and the sketches, whose calls go in their own loop.
	fields   []field // the simple aggregates by input
	scalars  []agg   // the scalar aggregates fields does not cover
	sketches []agg
	more     bool      // scalars or sketches is not empty
	zero     []float64 // an empty State's vals
	json     [][]byte  // `"name":` per spec, escaped once here

	numInputs  int
	hashInputs int
	nHLL       int
	nQuant     int
	hllP       uint8
	quant      quantiles

	// scratch holds []float64 of len(zero) for MergeEncoded and Decode when
	// the Set has more slots than fit on the stack.
	scratch sync.Pool
}

// NewSet validates specs and opts and compiles them. Every problem is
// reported at once (errors.Join), each naming the spec by position and name
// and wrapping ErrInvalid. Checks: a valid Func; a non-empty name, unique in
// the Set; Input >= 0 (or -1 for count) and below 65536; quantile q in
// [0, 1] and Param 0 for other functions; valid Options.
func NewSet(specs []Spec, opts Options) (*Set, error) {
	errs := []error{opts.Validate()}
	bad := func(i int, sp Spec, format string, args ...any) {
		where := fmt.Sprintf("aggregate: spec %d (%q, %v): ", i, sp.Name, sp.Func)
		errs = append(errs, fmt.Errorf(where+format+": %w", append(args, ErrInvalid)...))
	}
	seen := make(map[string]int, len(specs))
	hasQuantile := false
	for i, sp := range specs {
		if sp.Name == "" {
			bad(i, sp, "empty name")
		} else if j, dup := seen[sp.Name]; dup {
			bad(i, sp, "name already used by spec %d", j)
		} else {
			seen[sp.Name] = i
		}
		if !sp.Func.valid() {
			bad(i, sp, "unknown function")
			continue
		}
		minIn := 0
		if sp.Func == Count {
			minIn = -1
		}
		if sp.Input < minIn || sp.Input >= maxInput {
			bad(i, sp, "input slot %d outside [%d, %d)", sp.Input, minIn, maxInput)
		}
		if sp.Func == Quantile {
			hasQuantile = true
			if !(sp.Param >= 0 && sp.Param <= 1) {
				bad(i, sp, "quantile q=%v outside [0, 1]", sp.Param)
			}
		} else if sp.Param != 0 {
			bad(i, sp, "parameter %v given, only quantile takes one", sp.Param)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	s := &Set{
		specs: append([]Spec(nil), specs...),
		aggs:  make([]agg, len(specs)),
		json:  make([][]byte, len(specs)),
		hllP:  opts.HLLPrecision,
	}
	if s.hllP == 0 {
		s.hllP = defaultHLLPrecision
	}
	accuracy := opts.QuantileAccuracy
	if accuracy == 0 {
		accuracy = defaultQuantileAccuracy
	}
	if hasQuantile {
		q, err := newQuantiles(accuracy)
		if err != nil {
			return nil, fmt.Errorf("aggregate: quantile accuracy %v: %v: %w", accuracy, err, ErrInvalid)
		}
		s.quant = q
	}
	s.zero = []float64{0} // the record count
	for i, sp := range specs {
		a := agg{fn: sp.Func, in: int32(sp.Input), sk: -1, q: sp.Param}
		if sp.Func != Count || sp.Input >= 0 { // count() reads the record count, State.vals[0]
			a.n = -1
			if sharesN(sp.Func) {
				for _, f := range s.fields {
					if f.in == a.in {
						a.n = f.n
						break
					}
				}
			}
			if a.n < 0 {
				a.n, a.first = int32(len(s.zero)), true
				s.zero = append(s.zero, 0)
			}
			a.v = int32(len(s.zero))
			for range valueSlots(sp.Func) {
				s.zero = append(s.zero, 0)
			}
		}
		v := a.v
		switch sp.Func {
		case Min:
			s.zero[v] = math.Inf(1)
		case Max:
			s.zero[v] = math.Inf(-1)
		case First:
			s.zero[v] = timeSlot(math.MaxInt64)
			s.zero[v+1] = math.Inf(1)
		case Last:
			s.zero[v] = timeSlot(math.MinInt64)
			s.zero[v+1] = math.Inf(-1)
		case Distinct:
			a.sk = int32(s.nHLL)
			s.nHLL++
			s.hashInputs = max(s.hashInputs, sp.Input+1)
		case Quantile:
			a.sk = int32(s.nQuant)
			s.nQuant++
		}
		if sp.Func != Distinct {
			s.numInputs = max(s.numInputs, sp.Input+1)
		}
		s.aggs[i] = a
		switch {
		case sp.Func == Count && sp.Input < 0:
		case sp.Func == Distinct || sp.Func == Quantile:
			s.sketches = append(s.sketches, a)
		default:
			if !s.addToField(a) {
				s.scalars = append(s.scalars, a)
			}
		}
		name, _ := json.Marshal(sp.Name) // a string always marshals; invalid UTF-8 becomes U+FFFD
		s.json[i] = append(name, ':')
	}
	s.more = len(s.scalars)+len(s.sketches) > 0
	s.scratch.New = func() any {
		b := make([]float64, len(s.zero))
		return &b
	}
	return s, nil
}

// addToField gives a to the field of its input and reports whether it took
// it: a must be a simple aggregate on an input, and the field must not have
// one of its kind already.
func (s *Set) addToField(a agg) bool {
	if !sharesN(a.fn) || a.in < 0 {
		return false
	}
	i := 0
	for i < len(s.fields) && s.fields[i].in != a.in {
		i++
	}
	if i == len(s.fields) {
		s.fields = append(s.fields, field{in: a.in, n: a.n, sum: -1, min: -1, max: -1})
	}
	f := &s.fields[i]
	var slot *int32
	switch a.fn {
	case Count:
		return true // n is its value
	case Sum, Avg:
		slot = &f.sum
	case Min:
		slot = &f.min
	case Max:
		slot = &f.max
	}
	if *slot >= 0 {
		return false
	}
	*slot = a.v
	return true
}

// Len returns the number of aggregates.
func (s *Set) Len() int { return len(s.specs) }

// Spec returns the i-th aggregate's spec.
func (s *Set) Spec(i int) Spec { return s.specs[i] }

// NumInputs returns 1 + the largest Input of the numeric aggregates (all but
// Distinct), or 0 if there is none: Add reads Input.Nums[0:NumInputs()].
func (s *Set) NumInputs() int { return s.numInputs }

// HashInputs returns 1 + the largest Input of the Distinct aggregates, or 0
// if there is none: Add reads Input.Hashes[0:HashInputs()].
func (s *Set) HashInputs() int { return s.hashInputs }

// timeSlot stores an event time in a float64 slot bit for bit, so that all
// scalar state fits one []float64 without losing int64 precision.
func timeSlot(t int64) float64 { return math.Float64frombits(uint64(t)) }

// slotTime is the inverse of timeSlot.
func slotTime(f float64) int64 { return int64(math.Float64bits(f)) }
