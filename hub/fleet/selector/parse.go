package selector

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// SyntaxError is why Parse refused a selector: where (Column, 1-based,
// in characters) and what was expected there.
type SyntaxError struct {
	Selector string
	Column   int
	Msg      string
}

// Error renders the error as: selector "…": column N: message.
func (e *SyntaxError) Error() string {
	return "selector " + strconv.Quote(e.Selector) + ": column " + strconv.Itoa(e.Column) + ": " + e.Msg
}

// token kinds of the lexer.
type kind uint8

const (
	tEOF kind = iota
	tIdent
	tNot   // !
	tEq    // =
	tEqEq  // ==
	tNotEq // !=
	tComma // ,
	tOpen  // (
	tClose // )
	tGtLt  // > or <: not supported, named in the error
)

type token struct {
	kind kind
	text string
	pos  int // byte offset
}

func (t token) describe() string {
	if t.kind == tEOF {
		return "the end"
	}
	return strconv.Quote(t.text)
}

// isSpecial reports whether c ends an identifier: the operator characters
// of the Kubernetes lexer.
func isSpecial(c byte) bool {
	switch c {
	case '!', '=', ',', '(', ')', '<', '>':
		return true
	}
	return false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

type parser struct {
	src string
	off int
	tok token // the current token (lookahead)
}

func (p *parser) next() {
	s := p.src
	for p.off < len(s) && isSpace(s[p.off]) {
		p.off++
	}
	start := p.off
	if p.off >= len(s) {
		p.tok = token{kind: tEOF, pos: start}
		return
	}
	c := s[p.off]
	two := func(k kind) {
		p.off += 2
		p.tok = token{kind: k, text: s[start:p.off], pos: start}
	}
	one := func(k kind) {
		p.off++
		p.tok = token{kind: k, text: s[start:p.off], pos: start}
	}
	switch {
	case c == '!' && p.off+1 < len(s) && s[p.off+1] == '=':
		two(tNotEq)
	case c == '!':
		one(tNot)
	case c == '=' && p.off+1 < len(s) && s[p.off+1] == '=':
		two(tEqEq)
	case c == '=':
		one(tEq)
	case c == ',':
		one(tComma)
	case c == '(':
		one(tOpen)
	case c == ')':
		one(tClose)
	case c == '<' || c == '>':
		one(tGtLt)
	default:
		for p.off < len(s) && !isSpace(s[p.off]) && !isSpecial(s[p.off]) {
			p.off++
		}
		p.tok = token{kind: tIdent, text: s[start:p.off], pos: start}
	}
}

func (p *parser) errorf(pos int, format string, args ...any) error {
	col := utf8.RuneCountInString(p.src[:pos]) + 1
	return &SyntaxError{Selector: p.src, Column: col, Msg: fmt.Sprintf(format, args...)}
}

// Parse parses a selector (see the package documentation for the
// syntax). The error is a *SyntaxError naming the column and what was
// expected there.
func Parse(s string) (Selector, error) {
	p := &parser{src: s}
	p.next()
	var sel Selector
	if p.tok.kind == tEOF {
		return sel, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return Selector{}, err
		}
		sel.reqs = append(sel.reqs, r)
		switch p.tok.kind {
		case tEOF:
			sel.canonicalize()
			return sel, nil
		case tComma:
			p.next()
		default:
			return Selector{}, p.errorf(p.tok.pos, "expected \",\" or the end after %s, found %s", r.String(), p.tok.describe())
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	if p.tok.kind == tNot {
		p.next()
		key, err := p.key("after \"!\"")
		if err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: key, Op: DoesNotExist}, nil
	}
	key, err := p.key("")
	if err != nil {
		return Requirement{}, err
	}
	t := p.tok
	switch t.kind {
	case tEOF, tComma:
		return Requirement{Key: key, Op: Exists}, nil
	case tEq, tEqEq, tNotEq:
		p.next()
		v, err := p.exactValue(t.text)
		if err != nil {
			return Requirement{}, err
		}
		op := Equals
		if t.kind == tNotEq {
			op = NotEquals
		}
		return Requirement{Key: key, Op: op, Values: []string{v}}, nil
	case tIdent:
		switch t.text {
		case "in", "notin":
			p.next()
			vs, err := p.list(t.text)
			if err != nil {
				return Requirement{}, err
			}
			op := In
			if t.text == "notin" {
				op = NotIn
			}
			return Requirement{Key: key, Op: op, Values: vs}, nil
		case "gt", "lt":
			return Requirement{}, p.errorf(t.pos, "operator %q is not supported (only =, ==, !=, in, notin, exists and !)", t.text)
		}
	case tGtLt:
		return Requirement{}, p.errorf(t.pos, "operator %q is not supported (only =, ==, !=, in, notin, exists and !)", t.text)
	}
	return Requirement{}, p.errorf(t.pos, "expected an operator (=, ==, !=, in, notin), \",\" or the end after key %q, found %s", key, t.describe())
}

// key reads a label key; ctx says where it was expected for the error.
func (p *parser) key(ctx string) (string, error) {
	t := p.tok
	if ctx != "" {
		ctx = " " + ctx
	}
	if t.kind != tIdent {
		return "", p.errorf(t.pos, "expected a label key%s, found %s", ctx, t.describe())
	}
	if err := ValidateKey(t.text); err != nil {
		return "", p.errorf(t.pos, "%v", err)
	}
	p.next()
	return t.text, nil
}

// exactValue reads the value after =, == or !=: an identifier, or
// nothing (the empty value) before "," or the end.
func (p *parser) exactValue(op string) (string, error) {
	t := p.tok
	switch t.kind {
	case tEOF, tComma:
		return "", nil
	case tIdent:
		if err := ValidateValue(t.text); err != nil {
			return "", p.errorf(t.pos, "%v", err)
		}
		p.next()
		return t.text, nil
	}
	return "", p.errorf(t.pos, "expected a value after %q, found %s", op, t.describe())
}

// list reads "(v1,v2,...)" after in or notin. Empty elements are the
// empty value, as in Kubernetes; "()" is refused.
func (p *parser) list(op string) ([]string, error) {
	if p.tok.kind != tOpen {
		return nil, p.errorf(p.tok.pos, "expected \"(\" after %q, found %s", op, p.tok.describe())
	}
	open := p.tok.pos
	p.next()
	if p.tok.kind == tClose {
		return nil, p.errorf(p.tok.pos, "expected at least one value in the list of %q", op)
	}
	var vs []string
	for {
		// One element: a value or nothing, then "," or ")".
		v := ""
		if p.tok.kind == tIdent {
			if err := ValidateValue(p.tok.text); err != nil {
				return nil, p.errorf(p.tok.pos, "%v", err)
			}
			v = p.tok.text
			p.next()
		}
		vs = append(vs, v)
		switch p.tok.kind {
		case tComma:
			p.next()
		case tClose:
			p.next()
			slices.Sort(vs)
			return slices.Compact(vs), nil
		case tEOF:
			return nil, p.errorf(p.tok.pos, "expected \")\" to close the list opened at column %d", utf8.RuneCountInString(p.src[:open])+1)
		default:
			return nil, p.errorf(p.tok.pos, "expected a value, \",\" or \")\" in the list of %q, found %s", op, p.tok.describe())
		}
	}
}
