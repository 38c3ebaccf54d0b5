package archive

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// An append takes the log entries (cursor, to], writes them as Parquet
// files (one or more per partition and schema) under their partitions,
// and publishes the next manifest generation of each partition it
// touched. In order, each step durable before the next:
//
//  1. plan: build the files in the staging directory and save the intent
//     (range, file names, generations) with the state;
//  2. upload each file (a key that exists is the interrupted attempt's);
//  3. publish each partition's manifest (one that exists must list the
//     same files);
//  4. save the state with the cursor at to and the log trimmed through it.
//
// A crash anywhere resumes at 1 with the saved intent's names and
// generations, so no file is published twice or under two names, and the
// cursor moves only after every manifest of the range is published.

// group is the file being written for one (partition, schema) of a range.
type group struct {
	fs    *fileSchema
	part  string
	file  *os.File
	buf   *bufio.Writer
	w     *parquet.Writer
	b     rowBuilder
	rows  []parquet.Row
	nrows int64 // rows in the current file
	path  string
}

// built is the outcome of a build: the files per partition, in order.
type built struct {
	parts   []intentPart
	expired uint64
	invalid uint64
}

// setAside counts a log entry that cannot be archived and logs the first
// ones of a build.
func (a *Archiver) setAside(b *built, seq uint64, err error) {
	b.invalid++
	if b.invalid <= 3 {
		a.o.Logger.Error("archive: a result cannot be archived; set aside", "log_seq", seq, "err", err)
	}
}

// build writes the staged files of log range [from, to], rowsPerFile rows
// at most each, naming them as an intent does.
func (a *Archiver) build(from, to uint64, rowsPerFile int, logID string) (*built, error) {
	now := a.o.Now().UnixMilli()
	groups := map[string]*group{} // partition + schema
	counters := map[string]int{}  // files per partition
	var order []string            // partitions in order of first appearance
	files := map[string][]File{}
	var out built
	var row Row
	var closeErr error

	finish := func(g *group) error {
		if g.w == nil {
			return nil
		}
		if err := g.flushRows(); err != nil {
			return err
		}
		err := g.w.Close()
		if err == nil {
			err = g.buf.Flush()
		}
		if cerr := g.file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("archive: build %s: %w", g.path, err)
		}
		st, err := os.Stat(a.stagePath(g.path))
		if err != nil {
			return err
		}
		files[g.part] = append(files[g.part], File{Path: g.path, Rows: g.nrows, Bytes: st.Size(),
			Schema: fmt.Sprintf("%016x", g.fs.id), Class: g.fs.s.Class})
		g.w, g.file, g.nrows = nil, nil, 0
		return nil
	}
	defer func() {
		for _, g := range groups {
			if g.file != nil {
				g.file.Close()
			}
		}
	}()

	err := a.o.Log.Scan(from-1, to, func(seq uint64, entry []byte) error {
		if err := DecodeEntry(entry, &row); err != nil {
			return fmt.Errorf("archive: log entry %d: %w", seq, err)
		}
		fs, err := a.schema(row.Schema)
		if errors.Is(err, ErrInvalid) {
			a.setAside(&out, seq, err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("log entry %d: %w", seq, err)
		}
		p := PartitionOf(fs.s.Pipeline, row.Start)
		if a.o.Retention > 0 && p.End()+a.o.Retention.Milliseconds() <= now {
			out.expired++
			return nil
		}
		if err := fs.check(&row); err != nil {
			// A row the archive cannot hold (a key not in the operators'
			// encoding, values that do not fit the schema) is set aside
			// rather than stall every result behind it.
			a.setAside(&out, seq, err)
			return nil
		}
		ps := p.String()
		gk := ps + "\x00" + strconv.FormatUint(fs.id, 16)
		g := groups[gk]
		if g == nil {
			g = &group{fs: fs, part: ps, b: rowBuilder{fs: fs}}
			groups[gk] = g
		}
		if _, ok := counters[ps]; !ok {
			order = append(order, ps)
			counters[ps] = 0
		}
		if g.w != nil && g.nrows >= int64(rowsPerFile) {
			if err := finish(g); err != nil {
				return err
			}
		}
		if g.w == nil {
			g.path = fmt.Sprintf("%s/part-%s-%s-%04d.parquet", ps, logID, name(from), counters[ps])
			counters[ps]++
			f, err := os.Create(a.stagePath(g.path))
			if err != nil {
				return fmt.Errorf("archive: build: %w", err)
			}
			g.file, g.buf = f, bufio.NewWriterSize(f, 256<<10)
			g.w = newWriter(g.buf, fs)
		}
		var r parquet.Row
		if n := len(g.rows); n < cap(g.rows) {
			r = g.rows[:n+1][n][:0]
		}
		r, err = g.b.build(r, &row)
		if err != nil {
			return fmt.Errorf("log entry %d: %w", seq, err) // check passed it
		}
		g.rows = append(g.rows, r)
		g.nrows++
		if len(g.rows) == writeBatch {
			return g.flushRows()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	gks := make([]string, 0, len(groups))
	for k := range groups {
		gks = append(gks, k)
	}
	slices.Sort(gks)
	for _, k := range gks {
		if err := finish(groups[k]); err != nil && closeErr == nil {
			closeErr = err
		}
	}
	if closeErr != nil {
		return nil, closeErr
	}
	slices.Sort(order)
	for _, ps := range order {
		fl := files[ps]
		slices.SortFunc(fl, func(x, y File) int { return cmpString(x.Path, y.Path) })
		out.parts = append(out.parts, intentPart{Partition: ps, Files: fl})
	}
	return &out, nil
}

// writeBatch is how many rows a group buffers before it writes them.
const writeBatch = 1024

func (g *group) flushRows() error {
	if len(g.rows) == 0 {
		return nil
	}
	if _, err := g.w.WriteRows(g.rows); err != nil {
		return fmt.Errorf("archive: build %s: %w", g.path, err)
	}
	g.rows = g.rows[:0]
	g.b.reset()
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendRange plans and runs the append of [from, to].
func (a *Archiver) appendRange(ctx context.Context, from, to uint64) error {
	st := a.state()
	b, err := a.build(from, to, a.o.MaxRowsPerFile, st.LogID)
	if err != nil {
		return err
	}
	next := st.clone()
	in := &intent{Cause: causeAppend, Created: a.o.Now().UnixMilli(), From: from, To: to,
		RowsPerFile: a.o.MaxRowsPerFile, Expired: b.expired, Invalid: b.invalid}
	for _, p := range b.parts {
		ps, err := a.adopt(ctx, next, p.Partition)
		if err != nil {
			return err
		}
		p.Gen = ps.Gen + 1
		in.Parts = append(in.Parts, p)
	}
	next.Intent = in
	if err := a.save(next, 0); err != nil {
		return err
	}
	return a.runAppend(ctx, in, b)
}

// runAppend uploads, publishes and commits the append in; b is its build
// when this process made it (nil: build it again, as planned).
func (a *Archiver) runAppend(ctx context.Context, in *intent, b *built) error {
	st := a.state()
	if b == nil {
		var err error
		if b, err = a.build(in.From, in.To, in.RowsPerFile, st.LogID); err != nil {
			return err
		}
		if len(b.parts) != len(in.Parts) {
			return fmt.Errorf("archive: log range [%d, %d] builds %d partitions, the intent names %d: %w", in.From, in.To, len(b.parts), len(in.Parts), ErrCorrupt)
		}
		for i, p := range b.parts {
			if p.Partition != in.Parts[i].Partition || !samePaths(p.Files, in.Parts[i].Files) {
				return fmt.Errorf("archive: log range [%d, %d] builds other files in %s than its intent names: %w", in.From, in.To, p.Partition, ErrCorrupt)
			}
		}
	}
	defer func() {
		for _, p := range b.parts {
			for _, f := range p.Files {
				os.Remove(a.stagePath(f.Path))
			}
		}
	}()
	for _, p := range b.parts {
		for _, f := range p.Files {
			if err := a.upload(ctx, f); err != nil {
				return err
			}
		}
	}
	next := st.clone()
	now := a.o.Now().UnixMilli()
	var rows, bytes, nfiles uint64
	for i, p := range b.parts {
		ps := next.Partitions[p.Partition]
		if ps == nil || ps.Gen+1 != in.Parts[i].Gen {
			return fmt.Errorf("archive: intent publishes generation %d of %s, the state holds %v: %w", in.Parts[i].Gen, p.Partition, ps, ErrCorrupt)
		}
		part, _ := parsePartition(p.Partition)
		m := &Manifest{Format: manifestFormat, Pipeline: part.Pipeline, Date: part.Date, Hour: part.Hour,
			Generation: in.Parts[i].Gen, Log: st.LogID, Cause: causeAppend, LogFrom: in.From, LogTo: in.To,
			Created: in.Created, Files: append(slices.Clone(ps.Files), p.Files...)}
		if err := a.publish(ctx, m); err != nil {
			return err
		}
		if ps.Gen > 0 {
			next.GC = append(next.GC, gcItem{Key: ManifestKey(part, ps.Gen), After: now + a.o.Grace.Milliseconds()})
		}
		next.Partitions[p.Partition] = &partState{Gen: m.Generation, Files: m.Files, Compacted: ps.Compacted}
		next.Last.Manifest, next.Last.ManifestAt = ManifestKey(part, m.Generation), now
		for _, f := range p.Files {
			rows += uint64(f.Rows)
			bytes += uint64(f.Bytes)
			nfiles++
		}
	}
	next.Cursor = in.To
	next.Intent = nil
	next.Totals.Rows += rows
	next.Totals.Files += nfiles
	next.Totals.Bytes += bytes
	next.Totals.Manifests += uint64(len(b.parts))
	next.Totals.Expired += in.Expired
	next.Totals.Invalid += in.Invalid
	if in.Expired > 0 {
		a.o.Logger.Warn("archive: results of partitions past the archive's retention were not archived", "rows", in.Expired, "log_from", in.From, "log_to", in.To)
	}
	return a.save(next, in.To)
}
