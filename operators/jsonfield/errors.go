package jsonfield

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// ErrSyntax marks every rejected document: malformed JSON, invalid UTF-8,
// nesting deeper than MaxDepth, or a top-level value that is not an object.
// Extract returns it as a *SyntaxError; test with errors.Is(err, ErrSyntax).
// Such a record belongs on the dead-letter output, whole.
var ErrSyntax = errors.New("jsonfield: invalid JSON document")

// ErrPath is wrapped by New for every path it refuses (empty path, empty
// segment, duplicate).
var ErrPath = errors.New("jsonfield: invalid path")

// ErrKind is wrapped by Value.Float, Value.Int and Value.Bool when the value
// has another kind (a string where a number was expected, or Missing).
var ErrKind = errors.New("jsonfield: wrong kind")

// ErrRange is wrapped by Value.Float when the number overflows float64, and
// by Value.Int when the integer does not fit in an int64.
var ErrRange = errors.New("jsonfield: number out of range")

// ErrNotInteger is wrapped by Value.Int when the number has a fractional
// part (1.5, 1e-3). 1.0 and 1.7e12 are integers.
var ErrNotInteger = errors.New("jsonfield: number is not an integer")

// SyntaxError says why and where a document was rejected. Offset is the
// byte offset of the offending byte, or len(doc) when the input ended early.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "json: offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Is makes every *SyntaxError match ErrSyntax.
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

// Messages that tests compare against; the rest are built by describe.
const (
	msgEOF     = "unexpected end of input"
	msgUTF8    = "invalid UTF-8 in string"
	msgDepth   = "nesting depth exceeds " + maxDepthText
	msgNotObj  = "top-level value must be an object, found "
	msgOutLen  = "jsonfield: Extract: len(out) = %d, want %d (one Value per path)"
	msgBadKind = "jsonfield: %w: %s value, want %s"
)

const maxDepthText = "256"

// describe names the byte at doc[i] for an error message: 'x' for ASCII,
// the rune for valid UTF-8, and the hex byte otherwise.
func describe(doc []byte, i int) string {
	c := doc[i]
	switch {
	case c == '\'':
		return `character '\''`
	case c == '"':
		return `character '"'`
	case c < utf8.RuneSelf:
		return "character " + strconv.QuoteRune(rune(c))
	}
	r, size := utf8.DecodeRune(doc[i:])
	if r == utf8.RuneError && size == 1 {
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return "character " + strconv.QuoteRune(r)
}
