package settings

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/runnel-io/runnel/operators/spec"
)

// source is where a setting's value came from. The order is precedence:
// a later source overrides an earlier one.
type source uint8

const (
	fromDefault source = iota // the table, or a config built in code
	fromFile
	fromEnv
	fromFlag
)

// Origin is where one value came from, so that a problem names the file
// line, the variable or the flag a user has to fix. The zero Origin is
// the default (or a config built in code).
type Origin struct {
	src  source
	file string   // fromFile: the config file
	pos  spec.Pos // fromFile: the value's position
	name string   // fromEnv: the variable; fromFlag: the flag, without dashes ("" for an argument that is not a flag)
	arg  int      // fromFlag: the index of the argument, to list flags' problems in the order given
}

// InFile is the origin of something at pos in file: a config file, or a
// file a setting names (a tokens file), whose problems are then sorted
// with the config file's.
func InFile(file string, pos spec.Pos) Origin {
	return Origin{src: fromFile, file: file, pos: pos}
}

// IsDefault reports whether o is no source: the table's default, or a
// config built in code.
func (o Origin) IsDefault() bool { return o.src == fromDefault }

// problem places msg about field at o. A value from the file is named by
// file:line:col and field; a variable or flag by its own name, which is
// what the user typed; anything else by the field alone.
func (o Origin) problem(field, msg string) spec.Problem {
	switch o.src {
	case fromFile:
		return spec.Problem{File: o.file, Pos: o.pos, Field: field, Msg: msg}
	case fromEnv:
		return spec.Problem{File: "env " + o.name, Msg: msg}
	case fromFlag:
		if o.name == "" {
			return spec.Problem{Msg: msg}
		}
		return spec.Problem{File: "flag --" + o.name, Msg: msg}
	}
	return spec.Problem{Field: field, Msg: msg}
}

// String names o in a message about another setting: "edge.yaml:12:3",
// "env RUNNEL_X", "flag --x", "default".
func (o Origin) String() string {
	switch o.src {
	case fromFile:
		if o.pos.IsZero() {
			return o.file
		}
		return o.file + ":" + o.pos.String()
	case fromEnv:
		return "env " + o.name
	case fromFlag:
		return "flag --" + o.name
	}
	return "default"
}

// MaxProblems bounds the list. Past a hundred, the file is not a config
// someone wrote, and a longer list only buries the first lines.
const MaxProblems = 100

// problems collects problems with the source they belong to, and sorts
// them the way a user fixes them: file by position, then environment
// variables by name, then flags in the order given, then the rest.
type problems struct {
	list    []ranked
	dropped int
}

type ranked struct {
	o   Origin
	seq int // order found, for a stable sort
	p   spec.Problem
}

func (ps *problems) add(o Origin, field, format string, args ...any) {
	if len(ps.list) >= MaxProblems {
		ps.dropped++
		return
	}
	ps.list = append(ps.list, ranked{o: o, seq: len(ps.list), p: o.problem(field, fmt.Sprintf(format, args...))})
}

// err returns the problems as an *Error matching invalid, or nil when
// there are none.
func (ps *problems) err(invalid error) error {
	if len(ps.list) == 0 {
		return nil
	}
	rank := func(s source) int { // file, env, flag, then no source
		if s == fromDefault {
			return 4
		}
		return int(s)
	}
	list := slices.Clone(ps.list)
	slices.SortStableFunc(list, func(a, b ranked) int {
		if c := cmp.Compare(rank(a.o.src), rank(b.o.src)); c != 0 {
			return c
		}
		switch a.o.src {
		case fromFile:
			return cmp.Or(cmp.Compare(a.o.pos.Line, b.o.pos.Line), cmp.Compare(a.o.pos.Column, b.o.pos.Column), cmp.Compare(a.seq, b.seq))
		case fromEnv:
			return cmp.Or(cmp.Compare(a.o.name, b.o.name), cmp.Compare(a.seq, b.seq))
		case fromFlag:
			return cmp.Or(cmp.Compare(a.o.arg, b.o.arg), cmp.Compare(a.seq, b.seq))
		}
		return cmp.Compare(a.seq, b.seq)
	})
	e := &Error{Problems: make(spec.Problems, 0, len(list)+1), invalid: invalid}
	for _, r := range list {
		e.Problems = append(e.Problems, r.p)
	}
	if ps.dropped > 0 {
		e.Problems = append(e.Problems, spec.Problem{Msg: fmt.Sprintf("%d more problems not shown", ps.dropped)})
	}
	return e
}

// Error is a refused configuration: every problem found, one per line.
// Each config package names it as its own Error (a type alias), and it
// matches that package's sentinel (Table.Invalid) with errors.Is.
type Error struct {
	// Problems in the order a user fixes them: the config file's by
	// position, then environment variables, then flags, then the problems
	// that belong to no source (a config built in code, a bad hostname).
	Problems spec.Problems

	invalid error
}

// Error lists the problems one per line, in order.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap makes an *Error match the sentinel of the table that refused
// the config (edge/config.ErrInvalid, hub/config.ErrInvalid).
func (e *Error) Unwrap() error { return e.invalid }
