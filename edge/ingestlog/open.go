package ingestlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// recover lists the directory, verifies every segment, cuts a torn tail and
// opens the last segment for appending. It fills l.segs, l.active,
// l.written and l.size.
func (l *Log) recover(ctx context.Context) (Recovery, error) {
	var rec Recovery
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return rec, fmt.Errorf("ingestlog: open %s: %w", l.dir, err)
	}
	var firsts []Position
	var spares []string
	for _, name := range names {
		if base, ok := strings.CutSuffix(name, spareSuffix); ok {
			if _, ok, _ := parseSegmentName(base); ok {
				spares = append(spares, name)
				continue
			}
		}
		if base, ok := strings.CutSuffix(name, tmpSuffix); ok && strings.HasSuffix(base, segSuffix) {
			// A segment whose creation a crash interrupted before the
			// rename: it never held a record.
			if err := l.fs.Remove(l.path(name)); err != nil {
				return rec, fmt.Errorf("ingestlog: open %s: remove %s: %w", l.dir, name, err)
			}
			rec.RemovedTemp++
			continue
		}
		first, ok, bad := parseSegmentName(name)
		if bad {
			return rec, fmt.Errorf("ingestlog: open %s: unexpected file %s: segment files are named by 20 decimal digits", l.dir, name)
		}
		if ok {
			firsts = append(firsts, first)
		}
	}
	// Spares beyond the number kept (the setting went down) go.
	slices.Sort(spares)
	removed := rec.RemovedTemp > 0
	for len(spares) > l.opts.SpareSegments {
		if err := l.fs.Remove(l.path(spares[0])); err != nil {
			return rec, fmt.Errorf("ingestlog: open %s: remove %s: %w", l.dir, spares[0], err)
		}
		spares = spares[1:]
		removed = true
	}
	for _, name := range spares {
		f, err := l.fs.Open(l.path(name))
		if err != nil {
			return rec, fmt.Errorf("ingestlog: open %s: %w", name, err)
		}
		size, err := f.Size()
		f.Close()
		if err != nil {
			return rec, fmt.Errorf("ingestlog: stat %s: %w", name, err)
		}
		l.spares = append(l.spares, spare{name: name, size: size})
		l.reserved.Add(size)
	}
	if removed && l.opts.Sync != SyncNever {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return rec, fmt.Errorf("ingestlog: open %s: sync directory: %w", l.dir, err)
		}
	}
	slices.Sort(firsts)

	if len(firsts) == 0 {
		f, seg, size, err := l.createSegment(l.opts.First)
		if err != nil {
			return rec, fmt.Errorf("ingestlog: open %s: %w", l.dir, err)
		}
		l.active, l.written, l.activeFile, l.segs = f, seg.hdr, size, []*segment{seg}
		l.size.Store(seg.hdr)
		l.setStale(size - seg.hdr)
		return Recovery{Segments: 1, First: l.opts.First, End: l.opts.First, Bytes: seg.hdr, RemovedTemp: rec.RemovedTemp}, nil
	}

	w := &window{ahead: scanAhead}
	var size int64
	for i, first := range firsts {
		name := segmentName(first)
		last := i == len(firsts)-1
		if i > 0 {
			if prev := l.segs[i-1]; prev.end != first {
				return rec, corrupt(name, 0, "segment starts at position %d but %s ends at %d: records missing or repeated", first, prev.name, prev.end)
			}
		}
		sc, fileSize, err := l.scanFile(ctx, w, name, first, last)
		if err != nil {
			return rec, err
		}
		idx := sc.index
		if last {
			idx = slices.Grow(idx, int(l.opts.SegmentSize/indexEvery)+1-len(idx))
		}
		l.segs = append(l.segs, &segment{name: name, first: first, end: sc.end, size: sc.size,
			hdr: sc.hdr.size, seed: sc.hdr.seed, index: idx})
		size += sc.size
		if sc.torn != nil {
			rec.TruncatedSegment = name
			rec.TruncatedOffset = sc.torn.off
			rec.TruncatedBytes = fileSize - sc.torn.off
			rec.TruncatedRecords = sc.torn.records
			rec.TruncatedReason = sc.torn.reason
			if sc.hdr.recycled {
				rec.TruncatedReason += "; the segment was written over a spare file, whose earlier contents follow its last frame"
			}
		}
	}
	w.data = nil

	last := l.segs[len(l.segs)-1]
	f, err := l.fs.OpenReadWrite(l.path(last.name))
	if err != nil {
		return rec, fmt.Errorf("ingestlog: open %s: %w", last.name, err)
	}
	if rec.TruncatedSegment != "" {
		err := f.Truncate(last.size)
		if err == nil && l.opts.Sync != SyncNever {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return rec, fmt.Errorf("ingestlog: open: truncate torn tail of %s at offset %d: %w", last.name, last.size, err)
		}
	}
	l.active, l.written, l.activeFile = f, last.size, last.size
	l.size.Store(size)
	rec.Segments = len(l.segs)
	rec.First = l.segs[0].first
	rec.End = last.end
	rec.Bytes = size
	return rec, nil
}

// scanFile opens and scans one segment file.
func (l *Log) scanFile(ctx context.Context, w *window, name string, first Position, last bool) (scanned, int64, error) {
	f, err := l.fs.Open(l.path(name))
	if err != nil {
		return scanned{}, 0, fmt.Errorf("ingestlog: open %s: %w", name, err)
	}
	defer f.Close()
	fileSize, err := f.Size()
	if err != nil {
		return scanned{}, 0, fmt.Errorf("ingestlog: stat %s: %w", name, err)
	}
	w.f, w.start, w.data = f, 0, w.data[:0]
	sc, err := scanSegment(ctx, w, name, first, fileSize, last)
	return sc, fileSize, err
}
