package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
)

// MaxExprLen bounds the length of a filter or compute expression. Real ones
// are a line or two; the bound keeps a runaway value (a pasted payload) from
// costing seconds in the expression compiler at start-up.
const MaxExprLen = 4096

// ExprError is a problem in an expression (filter or compute). Line and
// Column are 1-based and relative to the expression text, not the spec file;
// Parse maps them into the file.
type ExprError struct {
	Line, Column int
	Msg          string
}

func (e *ExprError) Error() string {
	return fmt.Sprintf("expression line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Unwrap makes an ExprError match ErrInvalid.
func (e *ExprError) Unwrap() error { return ErrInvalid }

// ExprFields returns the record fields an expression reads, as field paths,
// each once, in order of first use: identifiers ("temp"), member chains
// rendered as dotted paths ("meta.device" for meta.device or meta["device"]),
// and $env.name as "name". A chain stops at the first part that is not a
// plain name (an index, a computed key, a key with '.', a space or another
// character a field path cannot hold), so a[0].b and a["x y"] report "a":
// the compiler extracts all of a. A path and its prefix may both
// appear ("meta", "meta.device") when the expression uses both.
//
// Names bound by let, and the # and .field of predicates (all, filter, ...)
// are not record fields and are left out. Calls of anything but expr-lang
// builtins are refused (a record has no functions or methods), and so is
// now(): results must not depend on the wall clock, or a replay would differ.
func ExprFields(src string) ([]string, error) {
	refs, err := exprRefs(src)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.path)
	}
	return out, nil
}

// exprRef is one field an expression reads and where it is first read.
type exprRef struct {
	path string
	from int // rune offset into the expression
}

// exprConfig is the parser configuration: builtins enabled, as the compiler
// will have them, so that len(x) parses as a builtin and not as a call of an
// unknown function.
func exprConfig() *conf.Config { return conf.CreateNew() }

func exprRefs(src string) ([]exprRef, error) {
	tree, err := parser.ParseWithConfig(src, exprConfig())
	if err != nil {
		return nil, toExprError(src, err)
	}
	w := &refWalker{src: src}
	w.visit(tree.Node)
	if w.err != nil {
		return nil, w.err
	}
	// Walk order is AST order, which is not always source order (a | f()).
	slices.SortStableFunc(w.refs, func(a, b exprRef) int { return a.from - b.from })
	seen := make(map[string]bool, len(w.refs))
	out := w.refs[:0]
	for _, r := range w.refs {
		if !seen[r.path] {
			seen[r.path] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// checkExpr compiles src as the compiler will, but with every variable of
// unknown type, so syntax errors and type errors between constants
// ("a" + 1, a filter of 1 + 2) are found at start-up. asBool requires a
// boolean (or unknown-typed) result, for filters.
func checkExpr(src string, asBool bool) ([]exprRef, error) {
	if len(src) > MaxExprLen {
		return nil, &ExprError{Line: 1, Column: 1, Msg: fmt.Sprintf("expression is %d bytes long; at most %d are allowed", len(src), MaxExprLen)}
	}
	opts := []expr.Option{expr.AllowUndefinedVariables()}
	if asBool {
		opts = append(opts, expr.AsBool())
	}
	if _, err := expr.Compile(src, opts...); err != nil {
		return nil, toExprError(src, err)
	}
	return exprRefs(src)
}

// toExprError turns an expr-lang error into an ExprError with a 1-based
// column. expr-lang's own message carries a multi-line source snippet,
// which a one-line-per-problem list cannot show; the spec file's
// line and column point at the spot instead.
func toExprError(src string, err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		line, col := fe.Line, fe.Column+1
		if line == 0 { // not bound to the source; compute from the offset
			line, col = runePos(src, fe.From)
		}
		return &ExprError{Line: line, Column: col, Msg: fe.Message}
	}
	return &ExprError{Line: 1, Column: 1, Msg: err.Error()}
}

// runePos converts a rune offset into src to a 1-based line and column.
func runePos(src string, off int) (line, col int) {
	line, col = 1, 1
	i := 0
	for _, r := range src {
		if i == off {
			break
		}
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
		i++
	}
	return line, col
}

// refWalker collects field references. It keeps the let-bound names in
// scope so that "let x = a; x + b" reads a and b but not x.
type refWalker struct {
	src   string
	refs  []exprRef
	scope []string
	err   *ExprError
}

func (w *refWalker) fail(n ast.Node, format string, args ...any) {
	if w.err == nil {
		line, col := runePos(w.src, n.Location().From)
		w.err = &ExprError{Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
	}
}

func (w *refWalker) local(name string) bool { return slices.Contains(w.scope, name) }

func (w *refWalker) visit(n ast.Node) {
	if n == nil || w.err != nil {
		return
	}
	switch n := n.(type) {
	case *ast.IdentifierNode:
		if w.local(n.Value) {
			return
		}
		if n.Value == "$env" {
			w.fail(n, "$env must be followed by a field name, as in $env.temp")
			return
		}
		w.refs = append(w.refs, exprRef{path: n.Value, from: n.Location().From})
	case *ast.MemberNode, *ast.ChainNode:
		w.member(n)
	case *ast.CallNode:
		switch c := n.Callee.(type) {
		case *ast.IdentifierNode:
			w.fail(n, "unknown function %s (records have fields, not functions; see the expr-lang builtins)", c.Value)
		case *ast.MemberNode:
			w.fail(n, "method calls are not supported: record fields have no methods")
		default:
			w.fail(n, "only expr-lang builtin functions can be called")
		}
	case *ast.VariableDeclaratorNode:
		w.visit(n.Value)
		w.scope = append(w.scope, n.Name)
		w.visit(n.Expr)
		w.scope = w.scope[:len(w.scope)-1]
	case *ast.UnaryNode:
		w.visit(n.Node)
	case *ast.BinaryNode:
		w.visit(n.Left)
		w.visit(n.Right)
	case *ast.SliceNode:
		w.visit(n.Node)
		w.visit(n.From)
		w.visit(n.To)
	case *ast.BuiltinNode:
		if n.Name == "now" {
			// Results must not depend on when they were computed: a replay
			// after a crash has to produce the same outputs (and sequence
			// numbers) as the first run.
			w.fail(n, "now() reads the wall clock, so a replay would compute different results; use the event time field")
			return
		}
		for _, a := range n.Arguments {
			w.visit(a)
		}
	case *ast.PredicateNode:
		w.visit(n.Node)
	case *ast.ConditionalNode:
		w.visit(n.Cond)
		w.visit(n.Exp1)
		w.visit(n.Exp2)
	case *ast.SequenceNode:
		for _, s := range n.Nodes {
			w.visit(s)
		}
	case *ast.ArrayNode:
		for _, e := range n.Nodes {
			w.visit(e)
		}
	case *ast.MapNode:
		for _, p := range n.Pairs {
			w.visit(p)
		}
	case *ast.PairNode:
		// Map keys in a literal ({a: 1}) are names, not field reads; only a
		// computed key ({(a): 1}) reads a field.
		if _, ok := n.Key.(*ast.StringNode); !ok {
			w.visit(n.Key)
		}
		w.visit(n.Value)
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode,
		*ast.StringNode, *ast.BytesNode, *ast.ConstantNode, *ast.PointerNode:
	default:
		// A node kind added by a later expr-lang: refuse rather than miss
		// a field the compiler would then not extract.
		w.fail(n, "unsupported expression (%T)", n)
	}
}

// member renders a chain of member accesses on an identifier as a dotted
// path. Everything that is not part of the path (computed properties, the
// base when it is not a field) is visited for its own references.
func (w *refWalker) member(n ast.Node) {
	var chain []*ast.MemberNode // outermost first
	cur := n
walk:
	for {
		switch m := cur.(type) {
		case *ast.ChainNode:
			cur = m.Node
		case *ast.MemberNode:
			chain = append(chain, m)
			cur = m.Node
		default:
			break walk
		}
	}
	for _, m := range chain {
		if _, ok := m.Property.(*ast.StringNode); !ok {
			w.visit(m.Property)
		}
	}
	id, ok := cur.(*ast.IdentifierNode)
	if !ok || w.local(id.Value) {
		w.visit(cur)
		return
	}
	var segs []string
	if id.Value != "$env" {
		segs = append(segs, id.Value)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		s, ok := chain[i].Property.(*ast.StringNode)
		if !ok || chain[i].Method || s.Value == "" {
			break
		}
		if _, bad := badSegmentRune(s.Value); bad || strings.Contains(s.Value, ".") {
			break
		}
		segs = append(segs, s.Value)
	}
	if len(segs) == 0 {
		w.fail(cur, "$env must be followed by a field name, as in $env.temp")
		return
	}
	w.refs = append(w.refs, exprRef{path: strings.Join(segs, "."), from: cur.Location().From})
}
