package archive

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Parquet file layout (docs/formats/archive.md): one flat row per result
// version, columns as Schema.columns names them; the schema's encoding
// (hex) in the key-value metadata under metaSchema, so that a file names
// its own columns' meaning and compaction can merge it without the hub.

const (
	metaSchema = "runnel.schema" // hex of Schema.AppendEncode
	createdBy  = "runnel-hub"
)

// newZstd returns the codec of a file's pages: the fastest zstd level (the
// default costs a fifth of the write path for a few percent of size), one
// encoder (a writer is one goroutine's). A codec a writer: the codec pools
// its encoders, which hold channels, and a pool shared by every writer
// would tie them to whichever goroutine group (a testing/synctest bubble)
// made them first.
func newZstd() *zstd.Codec { return &zstd.Codec{Level: zstd.SpeedFastest, Concurrency: 1} }

// rowGroupRows bounds a row group: the writer buffers one in memory.
const rowGroupRows = 64 << 10

// fileSchema is a Schema with its Parquet schema and column layout.
type fileSchema struct {
	s   *Schema
	id  uint64
	enc []byte
	pq  *parquet.Schema
	// order lists the logical columns in Parquet leaf order (the Group's
	// alphabetical order); leaf[i] is the leaf index of column i of
	// s.columns().
	order []column
	leaf  []int
	// fixed leaf indexes, for reading
	keyLeaf, startLeaf, endLeaf, versionLeaf, classLeaf int
	pipeline                                            []byte
}

func newFileSchema(s *Schema) (*fileSchema, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	fs := &fileSchema{s: s, enc: s.AppendEncode(nil), pipeline: []byte(s.Pipeline)}
	fs.id = s.ID()
	dict := func(n parquet.Node) parquet.Node { return parquet.Encoded(n, &parquet.RLEDictionary) }
	g := parquet.Group{}
	cols := s.columns()
	for _, c := range cols {
		var n parquet.Node
		switch c.kind {
		case colPipeline, colKeyField:
			n = dict(parquet.String())
		case colKey:
			n = parquet.String()
		case colClass, colVersion, colEdges, colAggInt:
			n = parquet.Int(64)
		case colRevisions:
			n = parquet.List(parquet.Int(64))
		case colStart, colEnd, colEmitted:
			n = parquet.Timestamp(parquet.Millisecond)
		case colAggFloat:
			n = parquet.Optional(parquet.Leaf(parquet.DoubleType))
		}
		g[c.name] = n
	}
	fs.pq = parquet.NewSchema("result", g)
	byName := map[string]int{}
	for i, c := range cols {
		byName[c.name] = i
	}
	fs.leaf = make([]int, len(cols))
	for li, path := range fs.pq.Columns() {
		i, ok := byName[path[0]]
		if !ok {
			return nil, fmt.Errorf("archive: schema of %s: leaf %v: %w", s.Pipeline, path, ErrInvalid)
		}
		fs.order = append(fs.order, cols[i])
		fs.leaf[i] = li
	}
	fs.classLeaf = fs.leaf[colClass]
	fs.keyLeaf = fs.leaf[colKey]
	fs.startLeaf = fs.leaf[colStart]
	fs.endLeaf = fs.leaf[colEnd]
	fs.versionLeaf = fs.leaf[colVersion]
	return fs, nil
}

// rowBuilder turns Rows into Parquet rows of one schema. Byte values
// point into arena, which is reset by reset (after the rows were written).
type rowBuilder struct {
	fs     *fileSchema
	fields []keyField
	json   []byte
	arena  [][]byte // chunks; a chunk is never grown past its capacity, so values stay valid
	cur    int
}

const arenaChunk = 64 << 10

func (b *rowBuilder) reset() { b.cur = 0; clearChunks(b.arena) }

func clearChunks(cs [][]byte) {
	for i := range cs {
		cs[i] = cs[i][:0]
	}
}

// room returns the current chunk with room for n more bytes.
func (b *rowBuilder) room(n int) []byte {
	for {
		if b.cur == len(b.arena) {
			b.arena = append(b.arena, make([]byte, 0, max(arenaChunk, n)))
		}
		c := b.arena[b.cur]
		if cap(c)-len(c) >= n {
			return c
		}
		b.cur++
	}
}

// keep copies v into the arena and returns the copy.
func (b *rowBuilder) keep(v []byte) []byte {
	c := b.room(len(v))
	at := len(c)
	c = append(c, v...)
	b.arena[b.cur] = c
	return c[at:len(c):len(c)]
}

// check reports what keeps r from being a row of fs's files: the value
// count, a key not in the operators' encoding, a value of the wrong type.
// Errors match ErrInvalid.
func (fs *fileSchema) check(r *Row) error {
	s := fs.s
	if len(r.Values) != len(s.Aggregates) {
		return fmt.Errorf("archive: row of %s: %d values, the schema has %d aggregates: %w", s.Pipeline, len(r.Values), len(s.Aggregates), ErrInvalid)
	}
	var buf [8]keyField
	if _, err := splitKey(buf[:0], r.Key, len(s.Keys)); err != nil {
		return fmt.Errorf("archive: row of %s: key %x: %v: %w", s.Pipeline, r.Key, err, ErrInvalid)
	}
	for i, a := range s.Aggregates {
		if k := r.Values[i].Kind; k != Null && k != a.Type {
			return fmt.Errorf("archive: row of %s: aggregate %s is of type %d, the value of %d: %w", s.Pipeline, a.Name, a.Type, k, ErrInvalid)
		}
	}
	return nil
}

// build appends r as a Parquet row to dst. r's schema must be b's.
func (b *rowBuilder) build(dst parquet.Row, r *Row) (parquet.Row, error) {
	s := b.fs.s
	if len(r.Values) != len(s.Aggregates) {
		return dst, fmt.Errorf("archive: row of %s: %d values, the schema has %d aggregates: %w", s.Pipeline, len(r.Values), len(s.Aggregates), ErrInvalid)
	}
	var err error
	if b.fields, err = splitKey(b.fields, r.Key, len(s.Keys)); err != nil {
		return dst, fmt.Errorf("archive: row of %s: key %x: %v: %w", s.Pipeline, r.Key, err, ErrInvalid)
	}
	// The key column is the hub API's rendering of the raw key (invalid
	// UTF-8 as \ufffd escapes); a key field column holds valid UTF-8.
	b.json = appendKeyJSON(b.json[:0], s.Keys, b.fields)
	keyJSON := b.keep(b.json)
	for i := range b.fields {
		if f := &b.fields[i]; f.kind == 's' && !utf8.Valid(f.v) {
			f.v = b.keep([]byte(strings.ToValidUTF8(string(f.v), "\uFFFD")))
		}
	}
	// Values get their levels in place (Value.Level copies and is not
	// inlined: a tenth of the write path).
	put := func(v parquet.Value, def, li int) {
		dst = append(dst, v)
		p := &dst[len(dst)-1]
		p.SetColumnIndex(li)
		if def != 0 {
			p.SetDefinitionLevel(def)
		}
	}
	for li, c := range b.fs.order {
		switch c.kind {
		case colPipeline:
			put(parquet.ByteArrayValue(b.fs.pipeline), 0, li)
		case colClass:
			put(parquet.Int64Value(int64(s.Class)), 0, li)
		case colRevisions:
			if len(r.Revisions) == 0 {
				put(parquet.Value{}, 0, li)
				continue
			}
			for j, rev := range r.Revisions {
				put(parquet.Int64Value(int64(rev)), 1, li)
				if j > 0 {
					dst[len(dst)-1].SetRepetitionLevel(1)
				}
			}
		case colKey:
			put(parquet.ByteArrayValue(keyJSON), 0, li)
		case colStart:
			put(parquet.Int64Value(r.Start), 0, li)
		case colEnd:
			put(parquet.Int64Value(r.End), 0, li)
		case colVersion:
			put(parquet.Int64Value(int64(r.Version)), 0, li)
		case colEdges:
			put(parquet.Int64Value(int64(r.Edges)), 0, li)
		case colEmitted:
			put(parquet.Int64Value(r.Emitted), 0, li)
		case colKeyField:
			put(parquet.ByteArrayValue(b.fields[c.at].v), 0, li)
		case colAggInt:
			switch x := r.Values[c.at]; x.Kind {
			case Int:
				put(parquet.Int64Value(x.Int), 0, li)
			case Null:
				put(parquet.Int64Value(0), 0, li)
			default:
				return dst, fmt.Errorf("archive: row of %s: aggregate %s is an int, got %v: %w", s.Pipeline, s.Aggregates[c.at].Name, x.Kind, ErrInvalid)
			}
		case colAggFloat:
			switch x := r.Values[c.at]; x.Kind {
			case Float:
				put(parquet.DoubleValue(x.Float), 1, li)
			case Null:
				put(parquet.Value{}, 0, li)
			default:
				return dst, fmt.Errorf("archive: row of %s: aggregate %s is a float, got an int: %w", s.Pipeline, s.Aggregates[c.at].Name, ErrInvalid)
			}
		}
	}
	return dst, nil
}

// newWriter returns a Parquet writer of fs's files onto w.
func newWriter(w io.Writer, fs *fileSchema) *parquet.Writer {
	opts := []parquet.WriterOption{
		fs.pq,
		parquet.Compression(newZstd()),
		parquet.CreatedBy(createdBy, "", ""),
		parquet.MaxRowsPerRowGroup(rowGroupRows),
		parquet.KeyValueMetadata(metaSchema, hex.EncodeToString(fs.enc)),
	}
	return parquet.NewWriter(w, opts...)
}

// Record is one row of an archive Parquet file, decoded: what a Go reader
// (the tests, the compaction) sees. Key is the key column (JSON), Fields
// the key field columns in Schema.Keys order.
type Record struct {
	Pipeline   string
	Class      uint32
	Revisions  []uint32
	Key        string
	Fields     []string
	Start, End int64
	Version    uint32
	Edges      uint32
	Emitted    int64
	Values     []Value
}

// openFile opens an archive Parquet file and returns its schema.
func openFile(r io.ReaderAt, size int64) (*parquet.File, *fileSchema, error) {
	f, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: parquet: %v: %w", err, ErrCorrupt)
	}
	h, ok := f.Lookup(metaSchema)
	if !ok {
		return nil, nil, fmt.Errorf("archive: parquet: no %s metadata: %w", metaSchema, ErrCorrupt)
	}
	enc, err := hex.DecodeString(h)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: parquet: %s metadata: %v: %w", metaSchema, err, ErrCorrupt)
	}
	s, err := DecodeSchema(enc)
	if err != nil {
		return nil, nil, err
	}
	fs, err := newFileSchema(s)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", err, ErrCorrupt)
	}
	if !parquet.EqualNodes(f.Schema(), fs.pq) {
		return nil, nil, fmt.Errorf("archive: parquet: columns are not those of its %s metadata: %w", metaSchema, ErrCorrupt)
	}
	return f, fs, nil
}

// ReadFile reads every row of an archive Parquet file, in file order.
func ReadFile(r io.ReaderAt, size int64) (*Schema, []Record, error) {
	f, fs, err := openFile(r, size)
	if err != nil {
		return nil, nil, err
	}
	var out []Record
	rd := parquet.NewReader(f, fs.pq)
	defer rd.Close()
	buf := make([]parquet.Row, 256)
	for {
		n, err := rd.ReadRows(buf)
		for _, row := range buf[:n] {
			rec, derr := fs.decode(row)
			if derr != nil {
				return nil, nil, derr
			}
			out = append(out, rec)
		}
		if errors.Is(err, io.EOF) {
			return fs.s, out, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("archive: parquet: %v: %w", err, ErrCorrupt)
		}
	}
}

// decode turns one Parquet row of fs into a Record.
func (fs *fileSchema) decode(row parquet.Row) (Record, error) {
	s := fs.s
	rec := Record{Fields: make([]string, len(s.Keys)), Values: make([]Value, len(s.Aggregates))}
	for _, v := range row {
		li := v.Column()
		if li < 0 || li >= len(fs.order) {
			return rec, fmt.Errorf("archive: parquet: column %d: %w", li, ErrCorrupt)
		}
		c := fs.order[li]
		switch c.kind {
		case colPipeline:
			rec.Pipeline = v.String()
		case colClass:
			rec.Class = uint32(v.Int64())
		case colRevisions:
			if !v.IsNull() {
				rec.Revisions = append(rec.Revisions, uint32(v.Int64()))
			}
		case colKey:
			rec.Key = v.String()
		case colStart:
			rec.Start = v.Int64()
		case colEnd:
			rec.End = v.Int64()
		case colVersion:
			rec.Version = uint32(v.Int64())
		case colEdges:
			rec.Edges = uint32(v.Int64())
		case colEmitted:
			rec.Emitted = v.Int64()
		case colKeyField:
			rec.Fields[c.at] = v.String()
		case colAggInt:
			rec.Values[c.at] = Value{Kind: Int, Int: v.Int64()}
		case colAggFloat:
			if !v.IsNull() {
				rec.Values[c.at] = Value{Kind: Float, Float: v.Double()}
			}
		}
	}
	return rec, nil
}

// RecordOf is the Record a Row becomes in a file of schema s: what the
// archive holds of it. For tests and oracles.
func RecordOf(s *Schema, r *Row) (Record, error) {
	fields, err := splitKey(nil, r.Key, len(s.Keys))
	if err != nil {
		return Record{}, fmt.Errorf("archive: key %x: %v: %w", r.Key, err, ErrInvalid)
	}
	rec := Record{
		Pipeline: s.Pipeline, Class: s.Class, Revisions: append([]uint32(nil), r.Revisions...),
		Key: string(appendKeyJSON(nil, s.Keys, fields)), Start: r.Start, End: r.End,
		Version: r.Version, Edges: r.Edges, Emitted: r.Emitted, Values: append([]Value(nil), r.Values...),
	}
	for _, f := range fields {
		v := string(f.v)
		if f.kind == 's' {
			v = strings.ToValidUTF8(v, "\uFFFD")
		}
		rec.Fields = append(rec.Fields, v)
	}
	for i, a := range s.Aggregates {
		switch v := rec.Values[i]; {
		case a.Type == Int && v.Kind == Null:
			rec.Values[i] = Value{Kind: Int}
		case v.Kind == Int:
			rec.Values[i] = Value{Kind: Int, Int: v.Int}
		case v.Kind == Float:
			rec.Values[i] = Value{Kind: Float, Float: v.Float}
		default:
			rec.Values[i] = Value{}
		}
	}
	return rec, nil
}

// String renders a Value for messages.
func (v Value) String() string {
	switch v.Kind {
	case Int:
		return strconv.FormatInt(v.Int, 10)
	case Float:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	}
	return "null"
}

// sameFloat is float equality that takes NaN as equal to itself.
func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
