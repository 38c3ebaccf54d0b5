package settings

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runnel-io/runnel/operators/spec"
)

// Kind is the syntax of a setting's value. It names the type in --help and
// the docs, and decides what the loader does beyond parsing: a path from
// the config file is resolved against the file's directory, a bool flag
// may be given bare, a list collects repeated flags.
type Kind string

const (
	KindString   Kind = "string"
	KindPath     Kind = "path"    // a string naming a file or directory
	KindPaths    Kind = "paths"   // a list of paths or globs
	KindStrings  Kind = "strings" // a list of strings
	KindBool     Kind = "bool"
	KindInt      Kind = "int"
	KindDuration Kind = "duration" // spec.ParseDuration's syntax
	KindBytes    Kind = "bytes"    // a size: 64MiB, 1.5GB, 4096
	KindEnum     Kind = "enum"
)

// Value is how one setting's text becomes a typed field of the config
// struct C. The same parser reads the YAML scalar, the environment
// variable, the flag and the default in the table, so the four can never
// disagree on syntax. The constructors below (String, Path, Paths, Bool,
// Int, Duration, Size, Enum) make every Value there is.
type Value[C any] interface {
	// Kind names the syntax.
	Kind() Kind
	// Parse turns one text (for a list: one item) into a value, checking
	// it on its own (range, enum). The error says what is wrong with the
	// text without naming the setting: the caller knows where it was.
	Parse(text string) (any, error)
	// Set stores v, a result of Parse (for a list: a []any of them), in c.
	Set(c *C, v any)
	// Check applies Parse's rules to the field as it is in c, for a
	// config built in code.
	Check(c *C) error
	// Show renders the field's value in c for messages.
	Show(c *C) string
	// Choices lists the values of an enum, default first; nil otherwise.
	Choices() []string
	// Field returns a pointer to the field in c, so that a test can check
	// that every field of C has exactly one setting.
	Field(c *C) any
}

// scalar is a Value of one Go type T.
type scalar[C, T any] struct {
	kind   Kind
	parseT func(string) (T, error)
	checkT func(T) error // nil: any value that parses
	showT  func(T) string
	field  func(*C) *T
	enum   []string // the values of an enum, default first
}

func (s scalar[C, T]) Kind() Kind        { return s.kind }
func (s scalar[C, T]) Choices() []string { return s.enum }
func (s scalar[C, T]) Field(c *C) any    { return s.field(c) }
func (s scalar[C, T]) Set(c *C, v any)   { *s.field(c) = v.(T) }

func (s scalar[C, T]) Parse(text string) (any, error) {
	v, err := s.parseT(text)
	if err != nil {
		return nil, err
	}
	if s.checkT != nil {
		if err := s.checkT(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (s scalar[C, T]) Check(c *C) error {
	if s.checkT == nil {
		return nil
	}
	return s.checkT(*s.field(c))
}

func (s scalar[C, T]) Show(c *C) string {
	if s.showT != nil {
		return s.showT(*s.field(c))
	}
	return fmt.Sprint(*s.field(c))
}

// stringList is a list of strings, each checked on its own.
type stringList[C any] struct {
	kind   Kind // KindPaths or KindStrings
	checkT func(string) error
	field  func(*C) *[]string
}

func (s stringList[C]) Kind() Kind        { return s.kind }
func (s stringList[C]) Choices() []string { return nil }
func (s stringList[C]) Field(c *C) any    { return s.field(c) }

func (s stringList[C]) Parse(text string) (any, error) {
	if s.checkT != nil {
		if err := s.checkT(text); err != nil {
			return nil, err
		}
	}
	return text, nil
}

func (s stringList[C]) Set(c *C, v any) {
	var out []string // an empty list is nil, as in a zero config
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	*s.field(c) = out
}

func (s stringList[C]) Check(c *C) error {
	for i, x := range *s.field(c) {
		if s.checkT != nil {
			if err := s.checkT(x); err != nil {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
		}
	}
	return nil
}

func (s stringList[C]) Show(c *C) string { return strings.Join(*s.field(c), ",") }

// --- constructors, one per kind ---

// String is a string; check (nil: any) applies to every value.
func String[C any](field func(*C) *string, check func(string) error) Value[C] {
	return scalar[C, string]{kind: KindString, parseT: func(s string) (string, error) { return s, nil }, checkT: check, showT: strconv.Quote, field: field}
}

// Path is a string that names a file or directory: Load resolves a
// relative one against the config file's directory when the file sets it.
func Path[C any](field func(*C) *string, check func(string) error) Value[C] {
	v := String(field, check).(scalar[C, string])
	v.kind = KindPath
	return v
}

// Paths is a list of paths or globs, each checked by check: a sequence
// (or a single scalar) in YAML, comma-separated in a variable, a
// repeatable flag.
func Paths[C any](field func(*C) *[]string, check func(string) error) Value[C] {
	return stringList[C]{kind: KindPaths, checkT: check, field: field}
}

// Strings is a list of strings, each checked by check, given as Paths
// are but never resolved as paths.
func Strings[C any](field func(*C) *[]string, check func(string) error) Value[C] {
	return stringList[C]{kind: KindStrings, checkT: check, field: field}
}

// isList reports whether values of kind k are lists.
func isList(k Kind) bool { return k == KindPaths || k == KindStrings }

// Bool is true or false; a flag may be given bare.
func Bool[C any](field func(*C) *bool) Value[C] {
	return scalar[C, bool]{kind: KindBool, parseT: parseBool, field: field}
}

// Int is a whole number from lo to hi.
func Int[C any](field func(*C) *int, lo, hi int) Value[C] {
	return scalar[C, int]{kind: KindInt, parseT: parseInt, field: field, checkT: func(v int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%d is out of range; must be %d to %d", v, lo, hi)
		}
		return nil
	}}
}

// Duration is a non-negative duration in spec.ParseDuration's syntax.
func Duration[C any](field func(*C) *time.Duration, check func(time.Duration) error) Value[C] {
	return scalar[C, time.Duration]{kind: KindDuration, parseT: parseDuration, checkT: check, showT: ShowDuration, field: field}
}

// Size is a number of bytes, written with or without a unit (ParseBytes).
func Size[C any](field func(*C) *int64, check func(int64) error) Value[C] {
	return scalar[C, int64]{kind: KindBytes, parseT: ParseBytes, checkT: check, showT: ShowBytes, field: field}
}

// Enum is a string type with a fixed set of values. The first is listed
// first in messages and docs, so put the default first.
func Enum[C any, T ~string](field func(*C) *T, values ...T) Value[C] {
	names := make([]string, len(values))
	for i, x := range values {
		names[i] = string(x)
	}
	return scalar[C, T]{
		kind: KindEnum,
		parseT: func(s string) (T, error) {
			return T(s), nil // checked below, so Check applies the same rule
		},
		checkT: func(v T) error {
			if slices.Contains(values, v) {
				return nil
			}
			hint := ""
			if s := suggestValue(string(v), names); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
			return fmt.Errorf("unknown value %q%s; use %s", string(v), hint, orList(names))
		},
		field: field,
		enum:  names,
	}
}

// --- syntax ---

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("expected true or false, got %q", s)
}

func parseInt(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return 0, fmt.Errorf("expected a whole number, got %q", s)
	}
	return v, nil
}

// parseDuration is spec.ParseDuration: Go's syntax plus d for days, whole
// milliseconds, so that a duration reads the same in a pipeline spec and
// in a config. Negative durations are refused here, since no setting
// takes one.
func parseDuration(s string) (time.Duration, error) {
	d, err := spec.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		// spec explains its millisecond resolution by event time, which
		// would puzzle a user setting a sync delay.
		msg := strings.Replace(err.Error(), " (event time resolution is 1ms)", "", 1)
		return 0, errors.New(msg)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s is negative; no setting takes a negative duration", strings.TrimSpace(s))
	}
	return d.Std(), nil
}

// ShowDuration renders d in the syntax a Duration setting reads, largest
// units first ("1m30s", "1d", "250ms").
func ShowDuration(d time.Duration) string {
	if d%time.Millisecond != 0 {
		return d.String()
	}
	return spec.Duration(d / time.Millisecond).String()
}

// byteUnits are the suffixes of byte sizes. Binary and decimal units are
// both accepted because both are common; they mean what they say.
var byteUnits = []struct {
	name string
	n    int64
}{
	{"B", 1},
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
}

// maxBytesLen bounds the text of a byte size: exact arithmetic on a
// megabyte of digits is slow, and no real size is that long.
const maxBytesLen = 32

// ParseBytes reads a byte size: a whole number of bytes, or a number (may
// have a fraction) followed by a unit, as "64MiB", "1.5GB", "4096". Units
// are case-sensitive, since "Mb" would be megabits; a unit in the wrong
// case gets a hint. Sizes are never negative.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty; expected a size such as 64MiB")
	}
	if len(t) > maxBytesLen {
		return 0, fmt.Errorf("invalid size %.20q...: longer than %d characters", t, maxBytesLen)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" || num == "." || strings.Count(num, ".") > 1 {
		if strings.HasPrefix(t, "-") {
			return 0, fmt.Errorf("invalid size %q: must not be negative", s)
		}
		return 0, fmt.Errorf("invalid size %q: expected a number such as 64MiB", s)
	}
	mult := int64(1)
	if unit != "" {
		var names []string
		found := false
		for _, u := range byteUnits {
			names = append(names, u.name)
			if u.name == unit {
				mult, found = u.n, true
			}
		}
		if !found {
			hint := ""
			for _, n := range names {
				if strings.EqualFold(n, unit) {
					hint = fmt.Sprintf(" (did you mean %s? units are case-sensitive)", n)
				}
			}
			if hint == "" {
				hint = "; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
			}
			return 0, fmt.Errorf("invalid size %q: unknown unit %q%s", s, unit, hint)
		}
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q: bad number %q", s, num)
	}
	v.Mul(v, new(big.Rat).SetInt64(mult))
	if !v.IsInt() {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	if !v.Num().IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return v.Num().Int64(), nil
}

// ShowBytes renders n in the largest binary unit that divides it, so that
// it reads like the defaults ("64MiB", "1GiB"), or in bytes.
func ShowBytes(n int64) string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// orList renders ["a", "b", "c"] as "a, b or c".
func orList(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
