package archive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Schema is what the hub knows of one pipeline's results (a local
// pipeline, or one class of managed revisions): the names of its key
// fields and the name and type of each aggregate, in spec order. The
// Parquet columns follow from it (docs/formats/archive.md).
type Schema struct {
	Pipeline   string
	Class      uint32 // 0: the local pipeline
	Keys       []string
	Aggregates []Aggregate
}

// Aggregate is one aggregate column.
type Aggregate struct {
	Name string
	Type ValueKind // Int or Float
}

// ValueKind is the type of an aggregate's value.
type ValueKind uint8

const (
	Null  ValueKind = iota // no value (an aggregate that saw no input)
	Int                    // int64: count, distinct
	Float                  // float64: every other function
)

// Value is one aggregate's result.
type Value struct {
	Kind  ValueKind
	Int   int64
	Float float64
}

// schemaVersion leads an encoded Schema.
const schemaVersion = 1

// Limits of what a schema may hold; a decoder refuses more.
const (
	maxName    = 1 << 10
	maxColumns = 1 << 12
)

// AppendEncode appends the binary encoding of s: u8 version (1) |
// uvarint len | pipeline | u32be class | uvarint n | n × (uvarint len |
// key field) | uvarint m | m × (u8 type | uvarint len | name).
func (s *Schema) AppendEncode(dst []byte) []byte {
	dst = append(dst, schemaVersion)
	dst = appendString(dst, s.Pipeline)
	dst = binary.BigEndian.AppendUint32(dst, s.Class)
	dst = binary.AppendUvarint(dst, uint64(len(s.Keys)))
	for _, k := range s.Keys {
		dst = appendString(dst, k)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Aggregates)))
	for _, a := range s.Aggregates {
		dst = append(dst, byte(a.Type))
		dst = appendString(dst, a.Name)
	}
	return dst
}

// ID is the schema's identity: xxhash64 of its encoding. Two pipes with
// equal schemas share an ID, and a spec that changes its aggregates gets
// another.
func (s *Schema) ID() uint64 { return xxhash.Sum64(s.AppendEncode(nil)) }

// Check reports what makes s unfit to be archived.
func (s *Schema) Check() error {
	var errs []error
	if !validPipeline(s.Pipeline) {
		errs = append(errs, fmt.Errorf("pipeline name %q is not [a-z0-9][a-z0-9_-]*", s.Pipeline))
	}
	if len(s.Keys)+len(s.Aggregates) > maxColumns {
		errs = append(errs, fmt.Errorf("%d columns, at most %d", len(s.Keys)+len(s.Aggregates), maxColumns))
	}
	seen := map[string]bool{}
	for _, c := range s.columns() {
		switch {
		case c.name == "" || len(c.name) > maxName:
			errs = append(errs, fmt.Errorf("column name of %d bytes", len(c.name)))
		case seen[c.name]:
			errs = append(errs, fmt.Errorf("column %q twice", c.name))
		}
		seen[c.name] = true
	}
	for _, a := range s.Aggregates {
		if a.Type != Int && a.Type != Float {
			errs = append(errs, fmt.Errorf("aggregate %q: type %d", a.Name, a.Type))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("archive: schema of %s: %w: %w", s.Pipeline, errors.Join(errs...), ErrInvalid)
	}
	return nil
}

// DecodeSchema decodes AppendEncode's bytes. Errors match ErrCorrupt.
func DecodeSchema(b []byte) (*Schema, error) {
	r := reader{b: b}
	bad := func(what string) (*Schema, error) {
		return nil, fmt.Errorf("archive: schema: %s at byte %d: %w", what, r.off, ErrCorrupt)
	}
	if v := r.u8(); v != schemaVersion || r.err {
		return bad("version")
	}
	s := &Schema{Pipeline: r.str()}
	s.Class = r.u32()
	n := r.uvarint()
	if r.err || n > maxColumns {
		return bad("key count")
	}
	for range n {
		s.Keys = append(s.Keys, r.str())
	}
	m := r.uvarint()
	if r.err || m+n > maxColumns {
		return bad("aggregate count")
	}
	for range m {
		t := ValueKind(r.u8())
		s.Aggregates = append(s.Aggregates, Aggregate{Type: t, Name: r.str()})
	}
	if r.err {
		return bad("truncated")
	}
	if r.off != len(b) {
		return bad("trailing bytes")
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrCorrupt)
	}
	return s, nil
}

func validPipeline(p string) bool {
	if p == "" || len(p) > 255 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Fixed columns, before the key fields and aggregates. A key field or an
// aggregate named like one of these gets the prefix key_ or agg_.
var fixedColumns = []string{"pipeline", "class", "revisions", "key", "window_start", "window_end", "version", "edges", "emitted_at"}

// column is one logical column of a schema's Parquet files.
type column struct {
	name string
	kind colKind
	at   int // key field or aggregate index
}

type colKind uint8

const (
	colPipeline colKind = iota
	colClass
	colRevisions
	colKey
	colStart
	colEnd
	colVersion
	colEdges
	colEmitted
	colKeyField
	colAggInt
	colAggFloat
)

// KeyColumn and AggregateColumn are the Parquet column names of a key
// field and of an aggregate.
func KeyColumn(field string) string {
	if slices.Contains(fixedColumns, field) {
		return "key_" + field
	}
	return field
}

// AggregateColumn: see KeyColumn.
func AggregateColumn(name string) string {
	if slices.Contains(fixedColumns, name) {
		return "agg_" + name
	}
	return name
}

func (s *Schema) columns() []column {
	cs := make([]column, 0, len(fixedColumns)+len(s.Keys)+len(s.Aggregates))
	for i, n := range fixedColumns {
		cs = append(cs, column{name: n, kind: colKind(i)})
	}
	for i, k := range s.Keys {
		cs = append(cs, column{name: KeyColumn(k), kind: colKeyField, at: i})
	}
	for i, a := range s.Aggregates {
		k := colAggFloat
		if a.Type == Int {
			k = colAggInt
		}
		cs = append(cs, column{name: AggregateColumn(a.Name), kind: k, at: i})
	}
	return cs
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// reader decodes the package's binary encodings; err sticks.
type reader struct {
	b   []byte
	off int
	err bool
}

func (r *reader) need(n int) bool {
	if r.err || n < 0 || len(r.b)-r.off < n {
		r.err = true
		return false
	}
	return true
}

func (r *reader) u8() byte {
	if !r.need(1) {
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	r.off += 4
	return binary.BigEndian.Uint32(r.b[r.off-4:])
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	r.off += 8
	return binary.BigEndian.Uint64(r.b[r.off-8:])
}

func (r *reader) uvarint() uint64 {
	if r.err {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || n != uvarintLen(v) { // the shortest form only: one encoding per value
		r.err = true
		return 0
	}
	r.off += n
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err || n > uint64(len(r.b)-r.off) {
		r.err = true
		return nil
	}
	r.off += int(n)
	return r.b[r.off-int(n) : r.off]
}

func (r *reader) str() string {
	b := r.bytes()
	if len(b) > maxName {
		r.err = true
		return ""
	}
	return string(b)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
