package spec

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every error that says a pipeline spec
// is wrong: Problems returned by Parse and Load, and ExprError. I/O errors
// from Load (missing file, permission) do not match it.
var ErrInvalid = errors.New("spec: invalid pipeline spec")

// Pos is a position in the spec file. Line and Column are 1-based; a zero
// Line means "no position" (the problem is about the file as a whole).
// Columns count characters, not bytes, as editors do.
type Pos struct{ Line, Column int }

// IsZero reports whether p carries no position.
func (p Pos) IsZero() bool { return p.Line == 0 }

// String renders p as "line:col", "line" when the column is unknown, or ""
// when p is zero.
func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return ""
	case p.Column == 0:
		return strconv.Itoa(p.Line)
	}
	return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column)
}

// Problem is one thing wrong with a spec: where it is, which field, and what
// is wrong with it. Field is a path in the spec such as "window.sliding.slide",
// "aggregates.p95_temp" or "outputs[1].mqtt.topic"; it is empty when the
// problem belongs to the document itself (YAML syntax, an unknown top-level
// field).
type Problem struct {
	File  string
	Pos   Pos
	Field string
	Msg   string
}

// Error renders the problem as "file:line:col: field: msg", leaving out the
// parts that are unknown.
func (p Problem) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteByte(':')
	}
	if !p.Pos.IsZero() {
		b.WriteString(p.Pos.String())
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Unwrap makes a single Problem match ErrInvalid too.
func (p Problem) Unwrap() error { return ErrInvalid }

// Problems is every problem found in a spec. Parse returns all of them at
// once so that a user fixes a spec in one round trip, not one per start-up.
type Problems []Problem

// Error lists the problems one per line, sorted by position (see Sort).
func (ps Problems) Error() string {
	sorted := slices.Clone(ps)
	sorted.Sort()
	var b strings.Builder
	for i, p := range sorted {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap makes Problems match ErrInvalid.
func (ps Problems) Unwrap() error { return ErrInvalid }

// Sort orders ps by file, line and column; problems without a position come
// first. The sort is stable, so problems at the same place keep the order in
// which they were found, which follows the order of fields in a spec.
func (ps Problems) Sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
		)
	})
}

// Err returns ps, sorted, as an error, or nil when there are no problems. It
// avoids the typed-nil trap of returning an empty Problems as a non-nil
// error.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	ps.Sort()
	return ps
}

// Problemf makes a problem in p's file, in the same format as Parse's own,
// so that later stages (the compiler, the hub's admission checks) can refuse
// a spec with messages that look like the parser's. Use Where to find pos.
func (p *Pipeline) Problemf(pos Pos, field, format string, args ...any) Problem {
	return Problem{File: p.File, Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Where returns the position of the value of field (a path as in
// Problem.Field, e.g. "window.sliding.size", "key[0]", "aggregates.avg_temp").
// When the field itself was not written in the spec (a default), it returns
// the position of its nearest written parent, and the zero Pos when nothing
// is known (a Pipeline built in code rather than parsed).
func (p *Pipeline) Where(field string) Pos {
	for {
		if pos, ok := p.pos[field]; ok || field == "" {
			return pos // the document itself is recorded as ""
		}
		field = parentPath(field)
	}
}

// parentPath strips the last element off a field path: "a.b[2]" -> "a.b",
// "a.b" -> "a", "a" -> "". Aggregate and computed names never contain '.' or
// '[' (see nameRE), so the last separator is a path separator.
func parentPath(field string) string {
	i := strings.LastIndexAny(field, ".[")
	if i < 0 {
		return ""
	}
	return field[:i]
}
