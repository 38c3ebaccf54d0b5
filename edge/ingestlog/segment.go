package ingestlog

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
)

// Sealed segments: what the raw archive lane uploads before a segment is
// deleted, and how an archived copy is read back without a Log.

// Segment describes a sealed segment: one the committer no longer writes.
type Segment struct {
	Name  string   // file name, e.g. 00000000000000004096.seg
	Path  string   // full path
	First Position // position of its first record
	End   Position // one past its last record
	Size  int64    // bytes, header included
}

// Sealed returns the segments below the active one, oldest first. Their
// files do not change again; DeleteBefore may remove them at any time, so
// a caller that reads one must cope with its file vanishing.
func (l *Log) Sealed() []Segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) < 2 {
		return nil
	}
	out := make([]Segment, 0, len(l.segs)-1)
	for _, s := range l.segs[:len(l.segs)-1] {
		out = append(out, Segment{Name: s.name, Path: filepath.Join(l.dir, s.name), First: s.first, End: s.end, Size: s.size})
	}
	return out
}

// ReadSegment reads a whole sealed segment from r (size bytes, named name as
// the log names its files, which gives its first position): it verifies
// the header and every frame first — CRCs, lengths, positions that follow
// on, nothing after the last frame — and only then passes each record to
// fn in position order (rec aliases a buffer valid during the call). So a
// damaged segment is refused with an error wrapping ErrCorrupt before fn
// has seen any of it. It returns the position after the last record; an
// error from fn stops the walk and is returned as it is.
func ReadSegment(ctx context.Context, r io.ReaderAt, size int64, name string, fn func(pos Position, rec []byte) error) (Position, error) {
	first, ok, bad := parseSegmentName(name)
	if !ok || bad {
		return 0, fmt.Errorf("ingestlog: %q is not a segment file name: %w", name, ErrCorrupt)
	}
	w := window{f: r, ahead: scanAhead}
	sc, err := scanSegment(ctx, &w, name, first, size, false)
	if err != nil {
		return 0, err
	}
	var (
		inf   inflater
		it    blockIter
		off   = sc.hdr.size
		pos   = first
		count = 0
	)
	defer inf.close()
	for off < sc.size {
		if count++; count%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		h, reason, _, err := readFrame(&w, off, size, sc.hdr.seed)
		switch {
		case err != nil:
			return 0, fmt.Errorf("ingestlog: read %s at offset %d: %w", name, off, err)
		case reason != "":
			return 0, corrupt(name, off, "%s", reason) // changed since the scan
		}
		block, err := w.bytes(off+frameHeaderSize, int(h.length), size)
		if err != nil {
			return 0, fmt.Errorf("ingestlog: read %s at offset %d: %w", name, off, err)
		}
		if h.typ == frameTypeZstd {
			if block, err = inf.decompress(block, int(h.rawLen)); err != nil {
				return 0, corrupt(name, off, "zstd block: %v", err)
			}
		}
		it = blockIter{rest: block, left: h.count}
		for it.left > 0 {
			rec, reason := it.next()
			if reason != "" {
				return 0, corrupt(name, off, "record %d: %s", pos, reason)
			}
			if err := fn(pos, rec); err != nil {
				return 0, err
			}
			pos++
		}
		if len(it.rest) != 0 {
			return 0, corrupt(name, off, "%d bytes left in the block after its last record", len(it.rest))
		}
		off += frameHeaderSize + int64(h.length)
	}
	return pos, nil
}
