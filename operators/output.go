package operators

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/runnel-io/runnel/window/aggregate"
)

// Result is one window result leaving the pipeline: the partial aggregate
// of (key, window) at one version, encoded with the pipeline's aggregate Set.
// This is what the edge ships to the hub and what Sinks render. Slices are
// valid only during the Sink call.
type Result struct {
	Key        []byte // encoded key fields
	Hash       uint64
	Start, End int64 // Unix ms, [Start, End)
	Version    uint32
	State      []byte // aggregate.Set encoding
	// Epoch is the id of the last checkpoint barrier its worker had passed
	// when it was emitted (0 before the first): it belongs to the
	// checkpoint of barrier Epoch+1 and later, never to an earlier one.
	Epoch uint64
}

// Late is an event that arrived after every window it belongs to had passed
// its allowed lateness.
type Late struct {
	Key       []byte
	Time      int64 // event time, Unix ms
	Watermark int64 // the watermark when it arrived
	Offset    int64 // source position (input line, ingest log offset)
	Epoch     uint64
}

// DeadLetter is a payload that could not become a record.
type DeadLetter struct {
	Offset  int64
	Topic   string
	Payload []byte
	Reason  string
	Epoch   uint64
}

// Sink receives a pipeline's outputs. The Runtime calls it from one
// goroutine; arguments are valid only during the call and must not be
// retained. An error stops the pipeline.
type Sink interface {
	Result(r *Result) error
	Late(l *Late) error
	Dead(d *DeadLetter) error
}

// AppendResultJSON appends r as one JSON object (no newline):
// {"pipeline","key","window_start","window_end","version","values"}.
// st is scratch state from p.Aggregates.New(), reused across calls.
func (p *Pipeline) AppendResultJSON(dst []byte, r *Result, st *aggregate.State) ([]byte, error) {
	if err := p.Aggregates.Decode(st, r.State); err != nil {
		return dst, err
	}
	dst = append(dst, `{"pipeline":`...)
	dst = appendJSONString(dst, p.Name)
	dst = append(dst, `,"key":`...)
	dst, err := p.AppendKeyJSON(dst, r.Key)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `,"window_start":`...)
	dst = strconv.AppendInt(dst, r.Start, 10)
	dst = append(dst, `,"window_end":`...)
	dst = strconv.AppendInt(dst, r.End, 10)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, uint64(r.Version), 10)
	dst = append(dst, `,"values":`...)
	dst = p.Aggregates.AppendJSON(dst, st)
	return append(dst, '}'), nil
}

// AppendLateJSON appends l as one JSON object with the reason it was dropped.
func (p *Pipeline) AppendLateJSON(dst []byte, l *Late) ([]byte, error) {
	dst = append(dst, `{"pipeline":`...)
	dst = appendJSONString(dst, p.Name)
	dst = append(dst, `,"key":`...)
	dst, err := p.AppendKeyJSON(dst, l.Key)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `,"event_time":`...)
	dst = strconv.AppendInt(dst, l.Time, 10)
	dst = append(dst, `,"watermark":`...)
	dst = strconv.AppendInt(dst, l.Watermark, 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, l.Offset, 10)
	dst = append(dst, `,"reason":`...)
	dst = appendJSONString(dst, fmt.Sprintf("late: event time %d is past the allowed lateness (%d ms) of every window it belongs to at watermark %d", l.Time, p.Lateness, l.Watermark))
	return append(dst, '}'), nil
}

// AppendDeadJSON appends d as one JSON object; the payload is kept as a
// string (invalid UTF-8 replaced) so nothing is lost for a human to inspect.
func (p *Pipeline) AppendDeadJSON(dst []byte, d *DeadLetter) []byte {
	dst = append(dst, `{"pipeline":`...)
	dst = appendJSONString(dst, p.Name)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, d.Offset, 10)
	if d.Topic != "" {
		dst = append(dst, `,"topic":`...)
		dst = appendJSONString(dst, d.Topic)
	}
	dst = append(dst, `,"reason":`...)
	dst = appendJSONString(dst, d.Reason)
	dst = append(dst, `,"payload":`...)
	dst = appendJSONString(dst, string(d.Payload))
	return append(dst, '}')
}

// AppendKeyJSON renders an encoded key as a JSON object of the key fields.
func (p *Pipeline) AppendKeyJSON(dst, key []byte) ([]byte, error) {
	dst = append(dst, '{')
	for i, f := range p.keyFields {
		if len(key) < 2 {
			return dst, fmt.Errorf("operators: corrupt key: field %d truncated", i)
		}
		kind := key[0]
		n, w := binary.Uvarint(key[1:])
		if w <= 0 || uint64(len(key)-1-w) < n {
			return dst, fmt.Errorf("operators: corrupt key: field %d length", i)
		}
		v := key[1+w : 1+w+int(n)]
		key = key[1+w+int(n):]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, p.fieldNames[f])
		dst = append(dst, ':')
		switch kind {
		case 's':
			dst = appendJSONString(dst, string(v))
		case 'n':
			if !isJSONNumber(v) {
				return dst, fmt.Errorf("operators: corrupt key: field %d: %q is not a number", i, v)
			}
			dst = append(dst, v...)
		case 'b':
			if string(v) != "true" && string(v) != "false" {
				return dst, fmt.Errorf("operators: corrupt key: field %d: %q is not a bool", i, v)
			}
			dst = append(dst, v...)
		default:
			return dst, fmt.Errorf("operators: corrupt key: field %d kind %q", i, kind)
		}
	}
	if len(key) != 0 {
		return dst, fmt.Errorf("operators: corrupt key: %d trailing bytes", len(key))
	}
	return append(dst, '}'), nil
}

// isJSONNumber reports whether b is a JSON number (RFC 8259 grammar).
func isJSONNumber(b []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
