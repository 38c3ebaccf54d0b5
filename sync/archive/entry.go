package archive

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Row is one result version as the hub's commit logs it: the merged
// window of one key, its version, and each aggregate's value, under the
// schema of its pipe. Key is the key in the operators' encoding (per key
// field: a kind byte 's' string, 'n' number, 'b' bool, a uvarint length
// and the bytes).
type Row struct {
	Schema     uint64 // Schema.ID of its pipe
	Start, End int64  // window, Unix ms
	Version    uint32
	Edges      uint32
	Emitted    int64 // Unix ms, the hub's clock at its commit
	Revisions  []uint32
	Key        []byte
	Values     []Value // one per Schema.Aggregates
}

// entryVersion leads an encoded Row.
const entryVersion = 1

// Limits a decoded Row is held to.
const (
	maxKeyBytes  = 1 << 16
	maxRevisions = 1 << 16
)

// AppendEntry appends the log encoding of r (docs/formats/archive.md):
// u8 version (1) | u64be schema | i64be start | i64be end | u32be
// version | u32be edges | i64be emitted | uvarint n | n × u32be revision |
// uvarint len | key | uvarint m | m × (u8 kind | 8 bytes: i64be or
// float64 bits, zero for null).
func AppendEntry(dst []byte, r *Row) []byte {
	dst = append(dst, entryVersion)
	dst = binary.BigEndian.AppendUint64(dst, r.Schema)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.End))
	dst = binary.BigEndian.AppendUint32(dst, r.Version)
	dst = binary.BigEndian.AppendUint32(dst, r.Edges)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Emitted))
	dst = binary.AppendUvarint(dst, uint64(len(r.Revisions)))
	for _, v := range r.Revisions {
		dst = binary.BigEndian.AppendUint32(dst, v)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
	dst = append(dst, r.Key...)
	dst = binary.AppendUvarint(dst, uint64(len(r.Values)))
	for _, v := range r.Values {
		var bits uint64
		switch v.Kind {
		case Int:
			bits = uint64(v.Int)
		case Float:
			bits = math.Float64bits(v.Float)
		}
		dst = append(dst, byte(v.Kind))
		dst = binary.BigEndian.AppendUint64(dst, bits)
	}
	return dst
}

// DecodeEntry decodes AppendEntry's bytes into r, reusing r's slices; Key
// aliases b. Errors match ErrCorrupt.
func DecodeEntry(b []byte, r *Row) error {
	d := reader{b: b}
	bad := func(what string) error {
		return fmt.Errorf("archive: log entry: %s at byte %d: %w", what, d.off, ErrCorrupt)
	}
	if d.u8() != entryVersion || d.err {
		return bad("version")
	}
	r.Schema = d.u64()
	r.Start = int64(d.u64())
	r.End = int64(d.u64())
	r.Version = d.u32()
	r.Edges = d.u32()
	r.Emitted = int64(d.u64())
	n := d.uvarint()
	if d.err || n > maxRevisions || n > uint64(len(b)-d.off)/4 {
		return bad("revision count")
	}
	r.Revisions = r.Revisions[:0]
	for range n {
		r.Revisions = append(r.Revisions, d.u32())
	}
	r.Key = d.bytes()
	if d.err || len(r.Key) > maxKeyBytes {
		return bad("key")
	}
	m := d.uvarint()
	if d.err || m > maxColumns || m > uint64(len(b)-d.off)/9 {
		return bad("value count")
	}
	r.Values = r.Values[:0]
	for range m {
		k := ValueKind(d.u8())
		bits := d.u64()
		switch k {
		case Null:
			if bits != 0 {
				return bad("null value with bits")
			}
			r.Values = append(r.Values, Value{})
		case Int:
			r.Values = append(r.Values, Value{Kind: Int, Int: int64(bits)})
		case Float:
			r.Values = append(r.Values, Value{Kind: Float, Float: math.Float64frombits(bits)})
		default:
			return bad("value kind")
		}
	}
	if d.err {
		return bad("truncated")
	}
	if d.off != len(b) {
		return bad("trailing bytes")
	}
	return nil
}

// keyField is one field of an encoded key: its kind and raw value.
type keyField struct {
	kind byte
	v    []byte
}

// splitKey splits an encoded key into its n fields, appending them to
// dst[:0]. The values alias key.
func splitKey(dst []keyField, key []byte, n int) ([]keyField, error) {
	dst = dst[:0]
	for i := range n {
		if len(key) < 2 {
			return dst, fmt.Errorf("key field %d truncated", i)
		}
		kind := key[0]
		l, w := binary.Uvarint(key[1:])
		if w <= 0 || uint64(len(key)-1-w) < l {
			return dst, fmt.Errorf("key field %d length", i)
		}
		v := key[1+w : 1+w+int(l)]
		key = key[1+w+int(l):]
		switch kind {
		case 's':
		case 'n':
			if _, err := strconv.ParseFloat(string(v), 64); err != nil || !isJSONNumber(v) {
				return dst, fmt.Errorf("key field %d: %q is not a number", i, v)
			}
		case 'b':
			if string(v) != "true" && string(v) != "false" {
				return dst, fmt.Errorf("key field %d: %q is not a bool", i, v)
			}
		default:
			return dst, fmt.Errorf("key field %d kind %q", i, kind)
		}
		dst = append(dst, keyField{kind, v})
	}
	if len(key) != 0 {
		return dst, fmt.Errorf("%d bytes after the key fields", len(key))
	}
	return dst, nil
}

// appendKeyJSON appends the key as the hub's API renders it: a JSON object
// of the key fields in key order, {"device":"d1","line":3}.
func appendKeyJSON(dst []byte, names []string, fields []keyField) []byte {
	dst = append(dst, '{')
	for i, f := range fields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, names[i])
		dst = append(dst, ':')
		if f.kind == 's' {
			dst = appendJSONString(dst, string(f.v))
		} else {
			dst = append(dst, f.v...)
		}
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaped as the operators'
// key rendering does (so the key column equals the hub API's key).
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
