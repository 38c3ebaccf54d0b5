package archive

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Compaction merges the files of a closed partition into one per schema,
// sorted by (class, key, window_start, window_end, version), and
// publishes them as the partition's next manifest generation, which lists
// them instead of the files they merge: a reader that takes the highest
// generation sees either the small files or the merged ones, never both.
// The superseded files and manifest are deleted after Options.Grace.
//
// The sort is external: rows are read into a buffer of at most
// Options.CompactionMemory bytes (as estimated from their values), which
// is sorted and spilled to a run file in the staging directory when full;
// the runs are then merged, at most mergeFanIn at a time (more runs are
// merged in passes). Memory is the buffer, plus mergeFanIn run readers of
// runBuffer bytes, plus the Parquet reader's pages of one input and the
// writer's row group (rowGroupRows rows).

const (
	mergeFanIn = 64
	runBuffer  = 64 << 10
	// rowOverhead is what a buffered row costs beyond its values: the
	// slice headers, its sort key's, the buffer's entry.
	rowOverhead = 96
)

// compactionDue returns the first partition whose hour ended
// CompactionDelay ago and that has more than one file, "" when none.
func (a *Archiver) compactionDue() string {
	now := a.o.Now().UnixMilli()
	st := a.state()
	for _, k := range st.partitionKeys() {
		ps := st.Partitions[k]
		p, _ := parsePartition(k)
		if len(ps.Files) >= 2 && p.End()+a.o.CompactionDelay.Milliseconds() <= now {
			return k
		}
	}
	return ""
}

// compact plans and runs the compaction of partition k.
func (a *Archiver) compact(ctx context.Context, k string) error {
	st := a.state()
	ps := st.Partitions[k]
	in := &intent{Cause: causeCompact, Created: a.o.Now().UnixMilli(), Partition: k, Gen: ps.Gen + 1, Inputs: ps.Files}
	seen := map[string]bool{}
	for _, f := range ps.Files {
		if seen[f.Schema] {
			continue
		}
		seen[f.Schema] = true
		in.Outputs = append(in.Outputs, File{Path: fmt.Sprintf("%s/compact-%s-%s-%04d.parquet", k, st.LogID, name(in.Gen), len(in.Outputs)),
			Schema: f.Schema, Class: f.Class, Sorted: true})
	}
	next := st.clone()
	next.Intent = in
	if err := a.save(next, 0); err != nil {
		return err
	}
	return a.runCompact(ctx, in)
}

// runCompact builds, uploads, publishes and commits the compaction in.
func (a *Archiver) runCompact(ctx context.Context, in *intent) error {
	outputs := slices.Clone(in.Outputs)
	var rowsIn int64
	for i := range outputs {
		o := &outputs[i]
		var inputs []File
		for _, f := range in.Inputs {
			if f.Schema == o.Schema {
				inputs = append(inputs, f)
				rowsIn += f.Rows
			}
		}
		n, err := a.merge(ctx, inputs, a.stagePath(o.Path))
		if err != nil {
			return err
		}
		st, err := os.Stat(a.stagePath(o.Path))
		if err != nil {
			return err
		}
		o.Rows, o.Bytes = n, st.Size()
		err = a.upload(ctx, *o)
		os.Remove(a.stagePath(o.Path))
		if err != nil {
			return err
		}
	}
	st := a.state()
	ps := st.Partitions[in.Partition]
	if ps.Gen+1 != in.Gen {
		return fmt.Errorf("archive: compaction publishes generation %d of %s, the state holds %d: %w", in.Gen, in.Partition, ps.Gen, ErrCorrupt)
	}
	replaced := map[string]bool{}
	for _, f := range in.Inputs {
		replaced[f.Path] = true
	}
	files := slices.Clone(outputs)
	for _, f := range ps.Files {
		if !replaced[f.Path] {
			files = append(files, f)
		}
	}
	part, _ := parsePartition(in.Partition)
	m := &Manifest{Format: manifestFormat, Pipeline: part.Pipeline, Date: part.Date, Hour: part.Hour,
		Generation: in.Gen, Log: st.LogID, Cause: causeCompact, Created: in.Created, Files: files}
	if err := a.publish(ctx, m); err != nil {
		return err
	}
	now := a.o.Now().UnixMilli()
	after := now + a.o.Grace.Milliseconds()
	next := st.clone()
	for _, f := range in.Inputs {
		next.GC = append(next.GC, gcItem{Key: f.Path, After: after})
	}
	if ps.Gen > 0 {
		next.GC = append(next.GC, gcItem{Key: ManifestKey(part, ps.Gen), After: after})
	}
	key := ManifestKey(part, in.Gen)
	next.Partitions[in.Partition] = &partState{Gen: in.Gen, Files: files, Compacted: in.Gen}
	next.Intent = nil
	next.Last.Manifest, next.Last.ManifestAt = key, now
	next.Last.Compaction, next.Last.CompactionAt = key, now
	next.Last.CompactedIn, next.Last.CompactedRow = len(in.Inputs), rowsIn
	next.Totals.Compactions++
	next.Totals.Manifests++
	if err := a.save(next, 0); err != nil {
		return err
	}
	a.mu.Lock()
	a.stats.compactedRows += uint64(rowsIn)
	a.mu.Unlock()
	a.o.Logger.Info("archive: compacted a partition", "partition", in.Partition, "generation", in.Gen, "files", len(in.Inputs), "rows", rowsIn)
	return nil
}

// sortRow is one buffered row with its sort key.
type sortRow struct {
	key []byte
	row parquet.Row
}

// sortKey appends the compaction order of row (of fs): u32be class | key
// JSON | 0x00 | time start | time end | u32be version. JSON holds no raw
// 0x00, so the terminator keeps keys prefix-free.
func (fs *fileSchema) sortKey(dst []byte, row parquet.Row) []byte {
	var class, start, end, version int64
	var key []byte
	for _, v := range row {
		switch v.Column() {
		case fs.classLeaf:
			class = v.Int64()
		case fs.keyLeaf:
			key = v.ByteArray()
		case fs.startLeaf:
			start = v.Int64()
		case fs.endLeaf:
			end = v.Int64()
		case fs.versionLeaf:
			version = v.Int64()
		}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(class))
	dst = append(dst, key...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(start)^(1<<63))
	dst = binary.BigEndian.AppendUint64(dst, uint64(end)^(1<<63))
	return binary.BigEndian.AppendUint32(dst, uint32(version))
}

// cloneRow copies row and makes its sort key, in two allocations: the
// values, and one buffer for the key and every byte array.
func cloneRow(fs *fileSchema, row parquet.Row) sortRow {
	n := 0
	for _, v := range row {
		if v.Kind() == parquet.ByteArray {
			n += len(v.ByteArray())
		}
	}
	buf := make([]byte, 0, n+64)
	out := make(parquet.Row, len(row))
	for i, v := range row {
		if v.Kind() == parquet.ByteArray && !v.IsNull() {
			at := len(buf)
			buf = append(buf, v.ByteArray()...)
			nv := parquet.ByteArrayValue(buf[at:len(buf):len(buf)])
			nv.SetColumnIndex(v.Column())
			nv.SetRepetitionLevel(v.RepetitionLevel())
			nv.SetDefinitionLevel(v.DefinitionLevel())
			out[i] = nv
			continue
		}
		out[i] = v
	}
	at := len(buf)
	buf = fs.sortKey(buf, out)
	return sortRow{key: buf[at:], row: out}
}

func rowBytes(r sortRow) int64 {
	n := int64(rowOverhead + len(r.key) + 24*len(r.row))
	for _, v := range r.row {
		if v.Kind() == parquet.ByteArray {
			n += int64(len(v.ByteArray()))
		}
	}
	return n
}

// merge sorts the rows of the input files (of one schema) into the
// Parquet file out and returns how many it wrote.
func (a *Archiver) merge(ctx context.Context, inputs []File, out string) (int64, error) {
	if len(inputs) == 0 {
		return 0, fmt.Errorf("archive: compaction without inputs: %w", ErrCorrupt)
	}
	var fs *fileSchema
	var buf []sortRow
	var used int64
	var runs []string
	defer func() {
		for _, r := range runs {
			os.Remove(r)
		}
	}()
	spill := func() error {
		if len(buf) == 0 {
			return nil
		}
		sortRows(buf)
		path := fmt.Sprintf("%s.run%d", out, len(runs))
		runs = append(runs, path)
		if err := writeRun(path, buf); err != nil {
			return err
		}
		clear(buf)
		buf, used = buf[:0], 0
		return nil
	}
	for _, f := range inputs {
		local := out + ".in"
		if err := a.download(ctx, f.Path, local); err != nil {
			return 0, err
		}
		err := readRows(local, f.Path, func(ffs *fileSchema, row parquet.Row) error {
			if fs == nil {
				fs = ffs
			} else if ffs.id != fs.id {
				return fmt.Errorf("archive: compaction: %s has schema %016x, not %016x: %w", f.Path, ffs.id, fs.id, ErrCorrupt)
			}
			r := cloneRow(fs, row)
			buf = append(buf, r)
			if used += rowBytes(r); used >= a.o.CompactionMemory {
				return spill()
			}
			return nil
		})
		os.Remove(local)
		if err != nil {
			return 0, err
		}
	}
	if len(runs) == 0 {
		sortRows(buf)
		return writeSorted(out, fs, &sliceSource{rows: buf})
	}
	if err := spill(); err != nil {
		return 0, err
	}
	// Merge passes until mergeFanIn runs or fewer are left.
	for pass := 0; len(runs) > mergeFanIn; pass++ {
		var next []string
		for i := 0; i < len(runs); i += mergeFanIn {
			group := runs[i:min(i+mergeFanIn, len(runs))]
			path := fmt.Sprintf("%s.pass%d-%d", out, pass, len(next))
			if err := mergeRuns(group, func(src rowSource) error { return writeRunFrom(path, src) }); err != nil {
				return 0, err
			}
			for _, r := range group {
				os.Remove(r)
			}
			next = append(next, path)
		}
		runs = next
	}
	var n int64
	err := mergeRuns(runs, func(src rowSource) error {
		var err error
		n, err = writeSorted(out, fs, src)
		return err
	})
	return n, err
}

func sortRows(buf []sortRow) {
	slices.SortFunc(buf, func(x, y sortRow) int { return bytes.Compare(x.key, y.key) })
}

// download copies the object key into the file path.
func (a *Archiver) download(ctx context.Context, key, path string) error {
	rc, err := a.o.Store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("archive: %s is in the partition's manifest and not in the store: %w", key, ErrCorrupt)
		}
		return &stepError{"store", fmt.Errorf("archive: get %s: %w", key, err)}
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &stepError{"store", fmt.Errorf("archive: get %s: %w", key, err)}
	}
	return nil
}

// readRows calls fn with each row of the archive Parquet file at path
// (named key in messages); the row is valid during the call only.
func readRows(path, key string, fn func(*fileSchema, parquet.Row) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, fs, err := openFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	rd := parquet.NewReader(pf, fs.pq)
	defer rd.Close()
	rows := make([]parquet.Row, 512)
	for {
		n, err := rd.ReadRows(rows)
		for _, r := range rows[:n] {
			if ferr := fn(fs, r); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("archive: read %s: %v: %w", key, err, ErrCorrupt)
		}
	}
}

// rowSource yields sorted rows; next returns false at the end.
type rowSource interface {
	next() (sortRow, bool, error)
}

type sliceSource struct {
	rows []sortRow
	i    int
}

func (s *sliceSource) next() (sortRow, bool, error) {
	if s.i == len(s.rows) {
		return sortRow{}, false, nil
	}
	s.i++
	return s.rows[s.i-1], true, nil
}

// writeSorted writes src's rows as the Parquet file path.
func writeSorted(path string, fs *fileSchema, src rowSource) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 256<<10)
	w := newWriter(bw, fs)
	batch := make([]parquet.Row, 0, writeBatch)
	var n int64
	for {
		r, ok, err := src.next()
		if err != nil {
			return 0, err
		}
		if ok {
			batch = append(batch, r.row)
			n++
		}
		if len(batch) == cap(batch) || !ok && len(batch) > 0 {
			if _, err := w.WriteRows(batch); err != nil {
				return 0, fmt.Errorf("archive: write %s: %w", path, err)
			}
			batch = batch[:0]
		}
		if !ok {
			break
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	return n, f.Close()
}

// Run files hold sorted rows: per row uvarint len | sort key | uvarint n
// | n values, each uvarint column | u8 repetition | u8 definition | u8
// tag (0 null, 1 int64, 2 double, 3 bytes) | payload (8 bytes, or
// uvarint len | bytes).
const (
	tagNull = iota
	tagInt64
	tagDouble
	tagBytes
)

func writeRun(path string, rows []sortRow) error {
	return writeRunFrom(path, &sliceSource{rows: rows})
}

func writeRunFrom(path string, src rowSource) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, runBuffer)
	var b []byte
	for {
		r, ok, err := src.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if b, err = appendRunRow(b[:0], r); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

func appendRunRow(b []byte, r sortRow) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(r.key)))
	b = append(b, r.key...)
	b = binary.AppendUvarint(b, uint64(len(r.row)))
	for _, v := range r.row {
		b = binary.AppendUvarint(b, uint64(v.Column()))
		b = append(b, byte(v.RepetitionLevel()), byte(v.DefinitionLevel()))
		switch {
		case v.IsNull():
			b = append(b, tagNull)
		case v.Kind() == parquet.Int64:
			b = append(b, tagInt64)
			b = binary.BigEndian.AppendUint64(b, uint64(v.Int64()))
		case v.Kind() == parquet.Double:
			b = append(b, tagDouble)
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(v.Double()))
		case v.Kind() == parquet.ByteArray:
			b = append(b, tagBytes)
			b = binary.AppendUvarint(b, uint64(len(v.ByteArray())))
			b = append(b, v.ByteArray()...)
		default:
			return nil, fmt.Errorf("archive: compaction: value of kind %v: %w", v.Kind(), ErrCorrupt)
		}
	}
	return b, nil
}

// runReader reads a run file.
type runReader struct {
	f   *os.File
	r   *bufio.Reader
	cur sortRow
}

func (rr *runReader) next() (sortRow, bool, error) {
	n, err := binary.ReadUvarint(rr.r)
	if errors.Is(err, io.EOF) {
		return sortRow{}, false, nil
	}
	bad := func(err error) (sortRow, bool, error) {
		return sortRow{}, false, fmt.Errorf("archive: compaction run %s: %v: %w", rr.f.Name(), err, ErrCorrupt)
	}
	if err != nil || n > maxKeyBytes+64 {
		return bad(fmt.Errorf("key length: %v", err))
	}
	var r sortRow
	buf := make([]byte, n, 2*n+64) // the key, then the row's byte arrays
	if _, err := io.ReadFull(rr.r, buf); err != nil {
		return bad(err)
	}
	r.key = buf[:n:n]
	nv, err := binary.ReadUvarint(rr.r)
	if err != nil || nv > maxColumns+maxRevisions {
		return bad(fmt.Errorf("value count: %v", err))
	}
	r.row = make(parquet.Row, 0, nv)
	for range nv {
		col, err := binary.ReadUvarint(rr.r)
		if err != nil || col > maxColumns+len64(fixedColumns) {
			return bad(fmt.Errorf("column: %v", err))
		}
		var lv [3]byte
		if _, err := io.ReadFull(rr.r, lv[:]); err != nil {
			return bad(err)
		}
		var v parquet.Value
		switch lv[2] {
		case tagNull:
		case tagInt64, tagDouble:
			var x [8]byte
			if _, err := io.ReadFull(rr.r, x[:]); err != nil {
				return bad(err)
			}
			u := binary.BigEndian.Uint64(x[:])
			if lv[2] == tagInt64 {
				v = parquet.Int64Value(int64(u))
			} else {
				v = parquet.DoubleValue(math.Float64frombits(u))
			}
		case tagBytes:
			l, err := binary.ReadUvarint(rr.r)
			if err != nil || l > 1<<24 {
				return bad(fmt.Errorf("bytes length: %v", err))
			}
			at := len(buf)
			if cap(buf)-at < int(l) {
				buf = make([]byte, 0, max(int(l), 256))
				at = 0
			}
			buf = buf[:at+int(l)]
			p := buf[at : at+int(l) : at+int(l)]
			if _, err := io.ReadFull(rr.r, p); err != nil {
				return bad(err)
			}
			v = parquet.ByteArrayValue(p)
		default:
			return bad(fmt.Errorf("tag %d", lv[2]))
		}
		r.row = append(r.row, v.Level(int(lv[0]), int(lv[1]), int(col)))
	}
	return r, true, nil
}

func len64(s []string) uint64 { return uint64(len(s)) }

// mergeRuns opens the run files and calls fn with a source that yields
// their rows merged in key order.
func mergeRuns(paths []string, fn func(rowSource) error) error {
	h := &runHeap{}
	defer func() {
		for _, rr := range h.all {
			rr.f.Close()
		}
	}()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		rr := &runReader{f: f, r: bufio.NewReaderSize(f, runBuffer)}
		h.all = append(h.all, rr)
		r, ok, err := rr.next()
		if err != nil {
			return err
		}
		if ok {
			rr.cur = r
			h.rs = append(h.rs, rr)
		}
	}
	heap.Init(h)
	return fn(h)
}

type runHeap struct {
	rs  []*runReader
	all []*runReader
}

func (h *runHeap) Len() int           { return len(h.rs) }
func (h *runHeap) Less(i, j int) bool { return bytes.Compare(h.rs[i].cur.key, h.rs[j].cur.key) < 0 }
func (h *runHeap) Swap(i, j int)      { h.rs[i], h.rs[j] = h.rs[j], h.rs[i] }
func (h *runHeap) Push(x any)         { h.rs = append(h.rs, x.(*runReader)) }
func (h *runHeap) Pop() any {
	x := h.rs[len(h.rs)-1]
	h.rs = h.rs[:len(h.rs)-1]
	return x
}

func (h *runHeap) next() (sortRow, bool, error) {
	if len(h.rs) == 0 {
		return sortRow{}, false, nil
	}
	top := h.rs[0]
	out := top.cur
	r, ok, err := top.next()
	if err != nil {
		return sortRow{}, false, err
	}
	if ok {
		top.cur = r
		heap.Fix(h, 0)
	} else {
		heap.Pop(h)
	}
	return out, true, nil
}

var _ = strings.TrimSpace
