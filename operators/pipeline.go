package operators

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"

	"github.com/runnel-io/runnel/operators/jsonfield"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// Pipeline is a compiled pipeline spec: what to extract from a payload, how
// to key and time it, and what to aggregate per window. It is immutable and
// shared by every goroutine that runs the pipeline.
type Pipeline struct {
	Spec     *spec.Pipeline
	Name     string
	Assigner window.Assigner
	Lateness int64 // ms
	MaxOOO   int64 // ms
	Idle     int64 // ms; 0: the watermark never advances without input
	// MaxFuture and MaxPast bound an event time against the edge's clock
	// (ms; 0: no bound); a record outside is a dead letter.
	MaxFuture, MaxPast int64
	Aggregates         *aggregate.Set

	// Record fields: payload paths first, then topic fields, then computed
	// fields, each at a fixed index of the decoder's value array.
	fieldNames  []string
	payload     []string // extracted JSON paths, fields [0, len(payload))
	topicLevels []int    // topic field i is fields[len(payload)+i]
	computed    []compiledExpr
	filter      *compiledExpr

	timeField int
	timeUnit  spec.TimeUnit
	keyFields []int
	idFields  []int // event_id fields; empty: no redelivery dedup
	numInputs []int // aggregate numeric input slot -> field
	hashInput []int // aggregate hash input slot -> field
}

type compiledExpr struct {
	field int // where the result goes (computed fields); -1 for the filter
	prog  *vm.Program
	uses  []int // fields the expression reads
	src   string
}

// IdleHorizon is how long after its last record the pipeline's watermark
// can still fire or drop a window by advancing with the clock (idle
// timeout, out-of-orderness, window span and lateness): past it an idle
// advance changes nothing. 0 without an idle timeout.
func (p *Pipeline) IdleHorizon() time.Duration {
	if p.Idle == 0 {
		return 0
	}
	span := p.Spec.Window.Size
	if p.Spec.Window.Kind == spec.Session {
		span = p.Spec.Window.Gap
	}
	return time.Duration(p.Idle+p.MaxOOO+int64(span)+p.Lateness) * time.Millisecond
}

// KeyFields returns the names of the key fields, in key order.
func (p *Pipeline) KeyFields() []string {
	out := make([]string, len(p.keyFields))
	for i, f := range p.keyFields {
		out[i] = p.fieldNames[f]
	}
	return out
}

// Compile checks a parsed spec against what the runtime can do and builds
// the Pipeline. Problems are reported together, in the spec's format.
func Compile(s *spec.Pipeline) (*Pipeline, error) {
	p := &Pipeline{Spec: s, Name: s.Name, filter: nil}
	var probs spec.Problems
	bad := func(pos spec.Pos, field, format string, args ...any) {
		probs = append(probs, spec.Problem{File: s.File, Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
	}

	switch s.Window.Kind {
	case spec.Tumbling:
		p.Assigner = window.TumblingWindows(int64(s.Window.Size))
	case spec.Sliding:
		p.Assigner = window.SlidingWindows(int64(s.Window.Size), int64(s.Window.Slide))
	case spec.Session:
		p.Assigner = window.SessionWindows(int64(s.Window.Gap))
	}
	if err := p.Assigner.Validate(); err != nil {
		bad(spec.Pos{}, "window", "%v", err)
	}
	p.Lateness = int64(s.AllowedLateness)
	p.MaxOOO = int64(s.Watermark.MaxOutOfOrder)
	p.Idle = int64(s.Watermark.IdleTimeout)
	p.MaxFuture, p.MaxPast = int64(s.EventTime.MaxFuture), int64(s.EventTime.MaxPast)

	// Field table.
	index := map[string]int{}
	p.payload = s.Fields()
	for _, f := range p.payload {
		index[f] = len(p.fieldNames)
		p.fieldNames = append(p.fieldNames, f)
	}
	if s.Source.MQTT != nil {
		for _, tf := range s.Source.MQTT.TopicFields {
			index[tf.Name] = len(p.fieldNames)
			p.fieldNames = append(p.fieldNames, tf.Name)
			p.topicLevels = append(p.topicLevels, tf.Level)
		}
	}
	for _, c := range s.Compute {
		index[c.Name] = len(p.fieldNames)
		p.fieldNames = append(p.fieldNames, c.Name)
	}
	// spec.Fields lists every payload path the pipeline reads, so every name
	// must resolve; a miss is a bug between spec and compiler, not user error.
	var missing []string
	check := func(name string) {
		if _, ok := index[name]; !ok {
			missing = append(missing, name)
		}
	}
	check(s.EventTime.Field)
	for _, k := range s.Key {
		check(k)
	}
	for _, k := range s.EventID {
		check(k)
	}
	for _, a := range s.Aggregates {
		if len(a.Args) > 0 {
			check(a.Args[0])
		}
	}
	exprUses := map[string][]string{}
	for _, src := range append([]string{s.Filter}, computedSources(s)...) {
		if src == "" {
			continue
		}
		used, err := spec.ExprFields(src)
		if err != nil {
			continue // spec.Parse reported it
		}
		exprUses[src] = used
		for _, u := range used {
			check(u)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("operators: compile %s: fields %q not in the spec's field list", s.Name, missing)
	}

	p.timeField = index[s.EventTime.Field]
	p.timeUnit = s.EventTime.Unit
	for _, k := range s.Key {
		p.keyFields = append(p.keyFields, index[k])
	}
	for _, k := range s.EventID {
		p.idFields = append(p.idFields, index[k])
	}
	for i, c := range s.Compute {
		ce, err := compileExpr(c.Expr, exprUses[c.Expr], index, false)
		if err != nil {
			bad(c.Pos, "compute."+c.Name, "%v", err)
			continue
		}
		ce.field = index[s.Compute[i].Name]
		p.computed = append(p.computed, ce)
	}
	if s.Filter != "" {
		ce, err := compileExpr(s.Filter, exprUses[s.Filter], index, true)
		if err != nil {
			bad(s.FilterPos, "filter", "%v", err)
		} else {
			ce.field = -1
			p.filter = &ce
		}
	}

	// Aggregates: one numeric slot per distinct numeric input field, one hash
	// slot per distinct distinct() field.
	numSlot, hashSlot := map[int]int{}, map[int]int{}
	var specs []aggregate.Spec
	for _, a := range s.Aggregates {
		fn, ok := aggregate.ParseFunc(a.Func)
		if !ok {
			bad(a.Pos, "aggregates."+a.Name, "unknown function %q", a.Func)
			continue
		}
		as := aggregate.Spec{Name: a.Name, Func: fn, Input: -1}
		if len(a.Args) > 0 {
			f := index[a.Args[0]]
			if fn == aggregate.Distinct {
				if _, ok := hashSlot[f]; !ok {
					hashSlot[f] = len(p.hashInput)
					p.hashInput = append(p.hashInput, f)
				}
				as.Input = hashSlot[f]
			} else {
				if _, ok := numSlot[f]; !ok {
					numSlot[f] = len(p.numInputs)
					p.numInputs = append(p.numInputs, f)
				}
				as.Input = numSlot[f]
			}
		}
		if fn == aggregate.Quantile && len(a.Args) == 2 {
			q, err := strconv.ParseFloat(strings.TrimSpace(a.Args[1]), 64)
			if err != nil {
				bad(a.Pos, "aggregates."+a.Name, "quantile: %v", err)
			}
			as.Param = q
		}
		specs = append(specs, as)
	}
	if len(probs) == 0 {
		set, err := aggregate.NewSet(specs, aggregate.Options{})
		if err != nil {
			bad(spec.Pos{}, "aggregates", "%v", err)
		}
		p.Aggregates = set
	}
	if len(probs) > 0 {
		return nil, probs
	}
	if _, err := jsonfield.New(p.payload); err != nil {
		return nil, fmt.Errorf("operators: compile %s: %w", s.Name, err)
	}
	return p, nil
}

// compileExpr compiles an expr-lang expression over record fields. Member
// chains (meta.site) are rewritten to the dotted field names the decoder
// fills in, so expressions see exactly the projected fields.
func compileExpr(src string, uses []string, index map[string]int, asBool bool) (compiledExpr, error) {
	ce := compiledExpr{src: src}
	for _, u := range uses {
		ce.uses = append(ce.uses, index[u])
	}
	// Field types are known only per record, so variables are untyped
	// (undefined variables are `any` to the checker) and checked when run.
	opts := []expr.Option{expr.Env(map[string]any{}), expr.Patch(dottedNames{}), expr.AllowUndefinedVariables()}
	if asBool {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		return ce, errors.New(firstLine(err.Error()))
	}
	ce.prog = prog
	return ce, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// dottedNames rewrites a.b.c member chains on identifiers into the
// identifier "a.b.c".
type dottedNames struct{}

func (dottedNames) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok {
		return
	}
	if name, ok := dotted(m); ok {
		ast.Patch(node, &ast.IdentifierNode{Value: name})
	}
}

func dotted(n ast.Node) (string, bool) {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		return n.Value, true
	case *ast.MemberNode:
		prop, ok := n.Property.(*ast.StringNode)
		if !ok || n.Optional || n.Method {
			return "", false
		}
		base, ok := dotted(n.Node)
		if !ok {
			return "", false
		}
		return base + "." + prop.Value, true
	}
	return "", false
}

func computedSources(s *spec.Pipeline) []string {
	out := make([]string, len(s.Compute))
	for i, c := range s.Compute {
		out[i] = c.Expr
	}
	return out
}
