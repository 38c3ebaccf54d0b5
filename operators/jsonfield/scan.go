package jsonfield

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is the single pass over one document. Every method takes the
// index of the byte it starts at and returns the index just past what it
// consumed, or -1 after recording the first error in err. Returning a bare
// int keeps the hot loops free of interface values.
type scanner struct {
	doc     []byte
	nodes   []node
	out     []Value
	scratch []byte // unescaped string values, reset per document
	keybuf  []byte // the current unescaped key, reset per key
	err     *SyntaxError
}

func (s *scanner) fail(i int, msg string) int {
	s.err = &SyntaxError{Offset: i, Msg: msg}
	return -1
}

// failAt reports the byte at i as unexpected, or the end of input.
func (s *scanner) failAt(i int, context string) int {
	if i >= len(s.doc) {
		return s.fail(len(s.doc), msgEOF)
	}
	return s.fail(i, "invalid "+describe(s.doc, i)+" "+context)
}

func (s *scanner) eof() int { return s.fail(len(s.doc), msgEOF) }

// isSpace holds the four RFC 8259 whitespace bytes.
var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// skipSpace returns the index of the first non-whitespace byte at or after
// i. Payloads are mostly compact, so the no-space case is inlined at every
// call site and the loop lives in skipSpaceLoop.
func skipSpace(doc []byte, i int) int {
	if i < len(doc) && doc[i] > ' ' {
		return i
	}
	return skipSpaceLoop(doc, i)
}

func skipSpaceLoop(doc []byte, i int) int {
	for i < len(doc) && isSpace[doc[i]] {
		i++
	}
	return i
}

// document checks the whole input and extracts along the way.
func (s *scanner) document() int {
	doc := s.doc
	i := skipSpace(doc, 0)
	if i >= len(doc) {
		return s.eof()
	}
	var end int
	if doc[i] == '{' {
		end = s.object(0, i, 1)
	} else {
		end = s.value(-1, i, 0)
	}
	if end < 0 {
		return -1
	}
	if end = skipSpace(doc, end); end < len(doc) {
		return s.failAt(end, "after top-level value")
	}
	if doc[i] != '{' {
		// Checked last, so that a malformed document is reported as such
		// and only a well-formed one as having the wrong type.
		return s.fail(i, msgNotObj+kindOf(doc[i]).String())
	}
	return end
}

func kindOf(c byte) Kind {
	switch c {
	case '{':
		return Object
	case '[':
		return Array
	case '"':
		return String
	case 't', 'f':
		return Bool
	case 'n':
		return Null
	}
	return Number
}

// object scans the object at doc[i] == '{', at nesting depth. Its keys are
// looked up in trie node ni; ni < 0, or a node without children, means
// nothing below is wanted and the object is only validated.
func (s *scanner) object(ni int32, i, depth int) int {
	if depth > MaxDepth {
		return s.fail(i, msgDepth)
	}
	doc := s.doc
	var n *node
	if ni >= 0 && len(s.nodes[ni].kids) > 0 {
		n = &s.nodes[ni]
	}
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return s.failAt(i, "looking for beginning of object key string")
		}
		// Most keys are short plain ASCII: find the closing quote in one
		// eight-byte load, and reuse that load as the lookup key.
		child, end := int32(-1), -1
		if i+9 <= len(doc) {
			x := binary.LittleEndian.Uint64(doc[i+1:])
			if m := plainMask(x); m != 0 {
				if k := bits.TrailingZeros64(m) >> 3; doc[i+1+k] == '"' {
					end = i + 2 + k
					if n != nil {
						if n.index == nil {
							child = n.lookupShort(x&(1<<(8*k)-1) | uint64(k)<<56)
						} else {
							child = n.lookup(doc[i+1 : end-1])
						}
					}
				}
			}
		}
		if end < 0 {
			var escaped bool
			if end, escaped = s.scanString(i + 1); end < 0 {
				return -1
			}
			if n != nil {
				key := doc[i+1 : end-1]
				if escaped {
					s.keybuf = appendUnescaped(s.keybuf[:0], key)
					key = s.keybuf
				}
				child = n.lookup(key)
			}
		}
		i = skipSpace(doc, end)
		if i >= len(doc) || doc[i] != ':' {
			return s.failAt(i, "after object key")
		}
		if i = s.value(child, skipSpace(doc, i+1), depth); i < 0 {
			return -1
		}
		i = skipSpace(doc, i)
		if i >= len(doc) {
			return s.eof()
		}
		switch doc[i] {
		case ',':
			i = skipSpace(doc, i+1)
		case '}':
			return i + 1
		default:
			return s.failAt(i, "after object key:value pair")
		}
	}
}

// array scans (validates) the array at doc[i] == '[' at nesting depth.
// Paths do not index into arrays, so nothing inside is wanted.
func (s *scanner) array(i, depth int) int {
	if depth > MaxDepth {
		return s.fail(i, msgDepth)
	}
	doc := s.doc
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == ']' {
		return i + 1
	}
	for {
		if i = s.value(-1, i, depth); i < 0 {
			return -1
		}
		i = skipSpace(doc, i)
		if i >= len(doc) {
			return s.eof()
		}
		switch doc[i] {
		case ',':
			i = skipSpace(doc, i+1)
		case ']':
			return i + 1
		default:
			return s.failAt(i, "after array element")
		}
	}
}

// Literals as little-endian words, compared in one load.
const (
	wordTrue = 't' | 'r'<<8 | 'u'<<16 | 'e'<<24
	wordAlse = 'a' | 'l'<<8 | 's'<<16 | 'e'<<24 // false after its 'f'
	wordNull = 'n' | 'u'<<8 | 'l'<<16 | 'l'<<24
	lenTrue  = 4
	lenFalse = 5
	lenNull  = 4
)

// value scans the value at doc[i] inside a container at depth. ni is the
// trie node the value was reached through, or -1 when it is not wanted. A
// wanted value is stored in out; a node with children is descended into.
func (s *scanner) value(ni int32, i, depth int) int {
	doc := s.doc
	if i >= len(doc) {
		return s.eof()
	}
	var n *node
	if ni >= 0 {
		n = &s.nodes[ni]
		if len(n.kids) > 0 {
			// A repeated key replaces the whole earlier value: forget
			// what was found under it before.
			for _, o := range n.sub {
				s.out[o] = Value{}
			}
		}
	}
	var (
		kind Kind
		end  int
		raw  []byte
	)
	switch c := doc[i]; c {
	case '"':
		kind = String
		escaped := false
		if end = quickString(doc, i+1); end < 0 {
			if end, escaped = s.scanString(i + 1); end < 0 {
				return -1
			}
		}
		if n == nil || n.out < 0 {
			return end
		}
		raw = doc[i+1 : end-1 : end-1]
		if escaped {
			at := len(s.scratch)
			s.scratch = appendUnescaped(s.scratch, raw)
			raw = s.scratch[at:len(s.scratch):len(s.scratch)]
		}
	case '{':
		kind, end = Object, s.object(ni, i, depth+1)
	case '[':
		kind, end = Array, s.array(i, depth+1)
	case 't':
		kind, end = Bool, i+lenTrue
		if end > len(doc) || binary.LittleEndian.Uint32(doc[i:]) != wordTrue {
			return s.badLiteral(i, "true")
		}
	case 'f':
		kind, end = Bool, i+lenFalse
		if end > len(doc) || binary.LittleEndian.Uint32(doc[i+1:]) != wordAlse {
			return s.badLiteral(i, "false")
		}
	case 'n':
		kind, end = Null, i+lenNull
		if end > len(doc) || binary.LittleEndian.Uint32(doc[i:]) != wordNull {
			return s.badLiteral(i, "null")
		}
	default:
		if c != '-' && !isDigit(c) {
			return s.failAt(i, "looking for beginning of value")
		}
		kind, end = Number, s.number(i)
	}
	if end < 0 || n == nil || n.out < 0 {
		return end
	}
	if raw == nil {
		raw = doc[i:end:end]
	}
	s.out[n.out] = Value{Kind: kind, Raw: raw}
	return end
}

// badLiteral reports where the literal lit starting at doc[i] went wrong.
func (s *scanner) badLiteral(i int, lit string) int {
	doc := s.doc
	for k := 1; k < len(lit); k++ {
		if i+k >= len(doc) {
			return s.eof()
		}
		if doc[i+k] != lit[k] {
			return s.failAt(i+k, "in literal "+lit+" (expecting '"+lit[k:k+1]+"')")
		}
	}
	return s.failAt(i, "looking for beginning of value") // not reached: lit was bad
}

// number checks RFC 8259 number grammar at doc[i] (a '-' or a digit). What
// follows the number is the caller's business, so "01" fails there, on the
// '1', as encoding/json does.
func (s *scanner) number(i int) int {
	doc := s.doc
	if doc[i] == '-' {
		i++
		if i >= len(doc) {
			return s.eof()
		}
	}
	switch c := doc[i]; {
	case c == '0':
		i++
	case isDigit(c):
		for i++; i < len(doc) && isDigit(doc[i]); i++ {
		}
	default:
		return s.failAt(i, "in numeric literal")
	}
	if i < len(doc) && doc[i] == '.' {
		i++
		if i >= len(doc) || !isDigit(doc[i]) {
			return s.failAt(i, "after decimal point in numeric literal")
		}
		for i++; i < len(doc) && isDigit(doc[i]); i++ {
		}
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			i++
		}
		if i >= len(doc) || !isDigit(doc[i]) {
			return s.failAt(i, "in exponent of numeric literal")
		}
		for i++; i < len(doc) && isDigit(doc[i]); i++ {
		}
	}
	return i
}

// SWAR constants: lo has 0x01 in every byte, hi 0x80.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// plainMask flags (in the 0x80 bit of each byte) the bytes of x that need a
// closer look inside a string: '"', '\\', control bytes and non-ASCII. The
// lowest flagged byte is always a real hit; borrows can only produce false
// flags above a real one, and the byte loop rechecks anyway.
func plainMask(x uint64) uint64 {
	q := x ^ (lo * '"')
	b := x ^ (lo * '\\')
	return ((q-lo)&^q | (b-lo)&^b | (x - lo*0x20) | x) & hi
}

// quickString handles the common short string: when the contents starting
// at doc[i] are plain ASCII and the closing quote is within eight bytes, it
// returns the index past the quote. Otherwise it returns -1 and the caller
// takes scanString. It is small enough to inline, which saves a call on
// most keys and many values.
func quickString(doc []byte, i int) int {
	if i+8 <= len(doc) {
		if m := plainMask(binary.LittleEndian.Uint64(doc[i:])); m != 0 {
			if j := i + bits.TrailingZeros64(m)>>3; doc[j] == '"' {
				return j + 1
			}
		}
	}
	return -1
}

// scanString validates the string whose contents start at doc[i] (just
// past the opening quote). It returns the index past the closing quote and
// whether the string has escapes, which decides if it must be unescaped
// before use.
func (s *scanner) scanString(i int) (int, bool) {
	doc := s.doc
	escaped := false
	for {
		// Eight bytes at a time while they are plain ASCII.
		for i+8 <= len(doc) {
			if m := plainMask(binary.LittleEndian.Uint64(doc[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(doc) {
			return s.eof(), false
		}
		switch c := doc[i]; {
		case c == '"':
			return i + 1, escaped
		case c == '\\':
			escaped = true
			if i = s.escape(i); i < 0 {
				return -1, false
			}
		case c < 0x20:
			return s.failAt(i, "in string literal"), false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(doc[i:])
			if r == utf8.RuneError && size == 1 {
				if !utf8.FullRune(doc[i:]) { // cut short by the end of input
					return s.eof(), false
				}
				return s.fail(i, msgUTF8), false
			}
			i += size
		}
	}
}

// escape validates the escape sequence at doc[i] == '\\'.
func (s *scanner) escape(i int) int {
	doc := s.doc
	if i+1 >= len(doc) {
		return s.eof()
	}
	switch doc[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		for k := i + 2; k < i+6; k++ {
			if k >= len(doc) {
				return s.eof()
			}
			if unhex[doc[k]] < 0 {
				return s.failAt(k, `in \u hexadecimal character escape`)
			}
		}
		return i + 6
	}
	return s.failAt(i+1, "in string escape code")
}

// unhex maps hex digits to their value and everything else to -1.
var unhex = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = int8(c - 'a' + 10)
		t[c-'a'+'A'] = int8(c - 'a' + 10)
	}
	return t
}()

func hex4(b []byte) rune {
	return rune(unhex[b[0]])<<12 | rune(unhex[b[1]])<<8 | rune(unhex[b[2]])<<4 | rune(unhex[b[3]])
}

// appendUnescaped appends the decoded contents of a string that scanString
// accepted. A \u escape of an unpaired surrogate becomes U+FFFD, as in
// encoding/json.
func appendUnescaped(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		if src[i] != '\\' {
			j := i + 1
			for j < len(src) && src[j] != '\\' {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		c := src[i+1]
		i += 2
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(src[i:])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 <= len(src) && src[i] == '\\' && src[i+1] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(src[i+2:])); pair != utf8.RuneError {
						dst = utf8.AppendRune(dst, pair)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
	return dst
}
