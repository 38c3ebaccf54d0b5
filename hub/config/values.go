package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runnel-io/runnel/operators/spec"
)

// value is how one setting's text becomes a typed Config field. The same
// parser reads the YAML scalar, the environment variable, the flag and the
// default in the table, so the four can never disagree on syntax.
type value interface {
	// typ names the syntax for --help and the docs: duration, bytes, ...
	typ() string
	// parse turns one text (a list: one item) into a value, checking it
	// on its own (range, enum). The error says what is wrong with the
	// text, without naming the setting: the caller knows where it was.
	parse(text string) (any, error)
	// list reports whether the setting holds a list of parsed items.
	list() bool
	// set stores v (for a list: a []any of parsed items) in c.
	set(c *Config, v any)
	// check applies parse's per-value rules to the field as it is in c,
	// for a Config built in code.
	check(c *Config) error
	// show renders the field's value in c for messages.
	show(c *Config) string
	// choices lists the values of an enum, for the docs; nil otherwise.
	choices() []string
}

// scalar is a value of one Go type T.
type scalar[T any] struct {
	name   string
	parseT func(string) (T, error)
	checkT func(T) error // nil: any value that parses
	showT  func(T) string
	field  func(*Config) *T
	enum   []string // the values of an enum, default first
}

func (s scalar[T]) typ() string { return s.name }
func (s scalar[T]) list() bool  { return false }

func (s scalar[T]) choices() []string { return s.enum }

func (s scalar[T]) parse(text string) (any, error) {
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

func (s scalar[T]) set(c *Config, v any) { *s.field(c) = v.(T) }

func (s scalar[T]) check(c *Config) error {
	if s.checkT == nil {
		return nil
	}
	return s.checkT(*s.field(c))
}

func (s scalar[T]) show(c *Config) string {
	if s.showT != nil {
		return s.showT(*s.field(c))
	}
	return fmt.Sprint(*s.field(c))
}

// stringList is a list of strings, each checked on its own.
type stringList struct {
	name   string
	checkT func(string) error
	field  func(*Config) *[]string
}

func (s stringList) typ() string { return s.name }
func (s stringList) list() bool  { return true }

func (s stringList) choices() []string { return nil }

func (s stringList) parse(text string) (any, error) {
	if s.checkT != nil {
		if err := s.checkT(text); err != nil {
			return nil, err
		}
	}
	return text, nil
}

func (s stringList) set(c *Config, v any) {
	var out []string // an empty list is nil, as in Default
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	*s.field(c) = out
}

func (s stringList) check(c *Config) error {
	for i, x := range *s.field(c) {
		if s.checkT != nil {
			if err := s.checkT(x); err != nil {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
		}
	}
	return nil
}

func (s stringList) show(c *Config) string { return strings.Join(*s.field(c), ",") }

// --- constructors, one per kind of setting ---

func strVal(field func(*Config) *string, check func(string) error) value {
	return scalar[string]{name: "string", parseT: func(s string) (string, error) { return s, nil }, checkT: check, showT: strconv.Quote, field: field}
}

// path is a string that names a file or directory: Load resolves it
// against the config file's directory when the file sets it.
func pathVal(field func(*Config) *string, check func(string) error) value {
	v := strVal(field, check).(scalar[string])
	v.name = "path"
	return v
}

func boolVal(field func(*Config) *bool) value {
	return scalar[bool]{name: "bool", parseT: parseBool, field: field}
}

func intVal(field func(*Config) *int, lo, hi int) value {
	return scalar[int]{name: "int", parseT: parseInt, field: field, checkT: func(v int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%d is out of range; must be %d to %d", v, lo, hi)
		}
		return nil
	}}
}

func durVal(field func(*Config) *time.Duration, check func(time.Duration) error) value {
	return scalar[time.Duration]{name: "duration", parseT: parseDuration, checkT: check, showT: showDuration, field: field}
}

// enum is a string type with a fixed set of values; the first is listed
// first in messages and docs, so put the default first.
func enumVal[T ~string](field func(*Config) *T, values ...T) value {
	names := make([]string, len(values))
	for i, x := range values {
		names[i] = string(x)
	}
	return scalar[T]{
		name: "enum",
		parseT: func(s string) (T, error) {
			return T(s), nil // checked below, so Validate sees the same rule
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

func pathsVal(field func(*Config) *[]string, check func(string) error) value {
	return stringList{name: "paths", checkT: check, field: field}
}

// --- per-value rules shared by several settings ---

func positive(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be greater than 0, got %s", showDuration(d))
	}
	return nil
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
// in the hub config. Negative durations are refused here, since no
// setting takes one.
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

// showDuration renders d in the syntax parseDuration reads, largest units
// first ("1m30s", "1d", "250ms").
func showDuration(d time.Duration) string {
	if d%time.Millisecond != 0 {
		return d.String()
	}
	return spec.Duration(d / time.Millisecond).String()
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
