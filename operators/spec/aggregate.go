package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// aggFuncs lists the aggregate functions and their argument lists, for
// arity messages. Every function's first argument is a field path.
var aggFuncs = map[string]struct {
	min, max int
	args     string
}{
	"count":    {0, 1, "(field) or none"},
	"sum":      {1, 1, "(field)"},
	"min":      {1, 1, "(field)"},
	"max":      {1, 1, "(field)"},
	"avg":      {1, 1, "(field)"},
	"variance": {1, 1, "(field)"},
	"stddev":   {1, 1, "(field)"},
	"first":    {1, 1, "(field)"},
	"last":     {1, 1, "(field)"},
	"distinct": {1, 1, "(field)"},
	"quantile": {2, 2, "(field, q)"},
}

// aggFuncNames is aggFuncs' keys in documentation order, for messages.
var aggFuncNames = []string{"count", "sum", "min", "max", "avg", "variance", "stddev", "first", "last", "distinct", "quantile"}

// aggAliases are names people write from other systems, with what to write
// instead. Edit distance alone would map "mean" to "min", which is worse
// than no hint.
var aggAliases = map[string]string{
	"mean":            "avg",
	"average":         "avg",
	"median":          "quantile(field, 0.5)",
	"percentile":      "quantile(field, q) with q in [0, 1]",
	"p50":             "quantile(field, 0.5)",
	"p90":             "quantile(field, 0.9)",
	"p95":             "quantile(field, 0.95)",
	"p99":             "quantile(field, 0.99)",
	"std":             "stddev",
	"stdev":           "stddev",
	"var":             "variance",
	"count_distinct":  "distinct",
	"countdistinct":   "distinct",
	"uniq":            "distinct",
	"approx_distinct": "distinct",
	"total":           "sum",
}

// aggError is a problem in an aggregate's text; off is the rune offset of
// the offending part, so the message can point at it in the file.
type aggError struct {
	off int
	msg string
}

// parseAggregate parses "func(arg, ...)" with whitespace allowed around
// every token, and checks the function, its arity and its arguments.
func parseAggregate(text string) (a Aggregate, errs []aggError) {
	fail := func(off int, format string, args ...any) {
		errs = append(errs, aggError{off, fmt.Sprintf(format, args...)})
	}
	r := []rune(text)
	i := 0
	skip := func() {
		for i < len(r) && (r[i] == ' ' || r[i] == '\t') {
			i++
		}
	}
	skip()
	start := i
	for i < len(r) && (r[i] == '_' || isLetter(r[i]) || i > start && isDigit(r[i])) {
		i++
	}
	name := string(r[start:i])
	if name == "" {
		fail(start, "expected a function call such as avg(temp) or count(), got %q", text)
		return a, errs
	}
	skip()
	if i == len(r) {
		fail(i, "missing argument list: write %s(...), e.g. count() or avg(temp)", name)
		return a, errs
	}
	if r[i] != '(' {
		fail(i, "expected \"(\" after %s, got %q", name, string(r[i:]))
		return a, errs
	}
	open := i
	i++
	// Arguments are field paths and numbers: no parentheses or quotes, so
	// the first ")" closes the call.
	argStart := i
	for i < len(r) && r[i] != ')' && r[i] != '(' {
		i++
	}
	if i == len(r) {
		fail(open, "missing \")\" to close the argument list")
		return a, errs
	}
	if r[i] == '(' {
		fail(i, "arguments must be field names or numbers, not expressions (use compute for derived fields)")
		return a, errs
	}
	argEnd := i
	i++
	skip()
	if i < len(r) {
		fail(i, "unexpected %q after the closing \")\"", string(r[i:]))
		return a, errs
	}

	a.Func = name
	var offs []int
	if inner := string(r[argStart:argEnd]); strings.TrimSpace(inner) != "" {
		off := argStart
		for _, part := range strings.Split(inner, ",") {
			lead := len([]rune(part)) - len([]rune(strings.TrimLeft(part, " \t")))
			a.Args = append(a.Args, strings.TrimSpace(part))
			offs = append(offs, off+lead)
			off += len([]rune(part)) + 1
		}
	}

	spec, ok := aggFuncs[name]
	if !ok {
		fail(start, "unknown function %q%s", name, aggHint(name))
		return a, errs
	}
	for k, arg := range a.Args {
		if arg == "" {
			fail(offs[k], "argument %d is empty", k+1)
		}
	}
	if len(errs) > 0 {
		return a, errs
	}
	if n := len(a.Args); n < spec.min || n > spec.max {
		want := fmt.Sprintf("%d argument", spec.min)
		switch {
		case spec.min != spec.max:
			want = fmt.Sprintf("%d or %d arguments", spec.min, spec.max)
		case spec.min != 1:
			want += "s"
		}
		fail(open, "%s needs %s %s, got %d", name, want, spec.args, n)
		return a, errs
	}
	for k, arg := range a.Args {
		if name == "quantile" && k == 1 {
			q, err := strconv.ParseFloat(arg, 64)
			switch {
			case err != nil || math.IsNaN(q) || math.IsInf(q, 0):
				fail(offs[k], "quantile's second argument is q, a number in [0, 1], got %q", arg)
			case q >= 2 && q <= 100: // a percentile written as a percentage
				fail(offs[k], "quantile q must be in [0, 1], got %s (did you mean %s?)", arg, strconv.FormatFloat(q/100, 'g', 12, 64))
			case q < 0 || q > 1:
				fail(offs[k], "quantile q must be in [0, 1], got %s", arg)
			default:
				a.Quantile = q
			}
			continue
		}
		if err := checkPath(arg); err != nil {
			fail(offs[k], "argument %d: %v", k+1, err)
		}
	}
	return a, errs
}

// aggHint suggests a function for an unknown name.
func aggHint(name string) string {
	if alt, ok := aggAliases[strings.ToLower(name)]; ok {
		return fmt.Sprintf(" (use %s)", alt)
	}
	if s := suggest(name, aggFuncNames); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return "; known functions: " + strings.Join(aggFuncNames, ", ")
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
func isDigit(r rune) bool  { return r >= '0' && r <= '9' }
