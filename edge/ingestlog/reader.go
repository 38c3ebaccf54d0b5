package ingestlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/klauspost/compress/zstd"
)

// readAhead is how much a Reader reads per system call.
const readAhead = 256 << 10

// Reader reads records in position order from a starting position up to the
// durable end, and further as the log grows. It reads the files on its own
// handles, so it may run while Append and the committer carry on, and it
// keeps working after the Log is closed for what was durable by then; the
// frame the committer has just written it takes from memory. A Reader is
// not safe for concurrent use.
type Reader struct {
	l    *Log
	seg  *segment
	f    File
	win  window
	off  int64    // offset of the next frame in seg
	next Position // first record of the next frame
	skip Position // records below this are passed over

	it       blockIter
	pos      Position // position of the next record in it
	frameOff int64    // offset of the frame it reads, for errors

	inf inflater
	mem []byte // records of the last block, copied from memory
	err error  // sticky: damage or a read error
}

// NewReader returns a Reader whose first record is the one at from. from
// must lie between First and Durable (inclusive: a reader at the durable end
// waits for more); other positions fail with ErrOutOfRange.
func (l *Log) NewReader(from Position) (*Reader, error) {
	l.mu.Lock()
	first, durable := l.segs[0].first, l.Durable()
	if from < first || from > durable {
		l.mu.Unlock()
		return nil, fmt.Errorf("ingestlog: read from position %d: %w (log holds %d to %d)", from, ErrOutOfRange, first, durable)
	}
	seg := l.segs[l.segmentForLocked(from)]
	off, next := seg.hdr, seg.first
	if i := searchIndex(seg.index, from); i >= 0 {
		off, next = seg.index[i].off, seg.index[i].pos
	}
	l.mu.Unlock()
	f, err := l.fs.Open(l.path(seg.name))
	if err != nil {
		return nil, fmt.Errorf("ingestlog: read from position %d: %w", from, deletedErr(err))
	}
	return &Reader{l: l, seg: seg, f: f, win: window{f: f, ahead: readAhead}, off: off, next: next, skip: from, pos: next}, nil
}

// FramesRead returns how many frames the Log's Readers have taken from
// memory (the block the committer wrote last, which a Reader at the
// durable end gets without reading the file back) and from the files (a
// Reader behind: recovery, a replay, a pump that fell behind).
func (l *Log) FramesRead() (memory, file uint64) {
	return l.framesFromMemory.Load(), l.framesFromFile.Load()
}

// deletedErr marks a segment that vanished between the lookup and the open
// (DeleteBefore ran in between) as out of range.
func deletedErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrOutOfRange, err)
	}
	return err
}

// searchIndex returns the last entry at or before pos, or -1.
func searchIndex(idx []indexEntry, pos Position) int {
	lo, hi := 0, len(idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if idx[m].pos <= pos {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Next returns the next record and its position. rec aliases the Reader's
// buffers and is valid until the next call. At the durable end Next returns
// io.EOF; call it again once more is durable (Log.WaitDurable on the
// position after the last one read says when). Damage gives an error wrapping
// ErrCorrupt, which, like every error but io.EOF, is returned again by every
// later call.
func (r *Reader) Next() (rec []byte, pos Position, err error) {
	if r.err != nil {
		return nil, 0, r.err
	}
	for {
		for r.it.left > 0 {
			rec, reason := r.it.next()
			if reason != "" {
				r.err = corrupt(r.seg.name, r.frameOff, "record %d: %s", r.pos, reason)
				return nil, 0, r.err
			}
			p := r.pos
			r.pos++
			if p >= r.skip {
				return rec, p, nil
			}
		}
		if len(r.it.rest) != 0 {
			r.err = corrupt(r.seg.name, r.frameOff, "%d bytes left in the block after its last record", len(r.it.rest))
			return nil, 0, r.err
		}
		if err := r.loadFrame(); err != nil {
			if err != io.EOF {
				r.err = err
			}
			return nil, 0, err
		}
	}
}

// loadFrame reads, verifies and decodes the next durable frame, moving on to
// the next segment at the end of a sealed one.
func (r *Reader) loadFrame() error {
	l := r.l
	l.mu.Lock()
	if b := &l.last; b.valid && b.seg == r.seg && b.off == r.off && b.first == r.next {
		// The frame the committer has just written: its records are
		// still in memory, as written (no read, no check, no inflate).
		r.mem = append(r.mem[:0], b.records...)
		r.it = blockIter{rest: r.mem, left: uint32(b.count)}
		r.pos, r.frameOff = b.first, b.off
		r.off += frameHeaderSize + b.length
		r.next += Position(b.count)
		l.mu.Unlock()
		l.framesFromMemory.Add(1)
		return nil
	}
	limit := r.seg.size
	var nextSeg *segment
	if r.off >= limit {
		if r.next < l.segs[0].first {
			first := l.segs[0].first
			l.mu.Unlock()
			return fmt.Errorf("ingestlog: read position %d: %w: deleted, the log now starts at %d", r.next, ErrOutOfRange, first)
		}
		if i := l.segmentForLocked(r.next); i >= 0 && l.segs[i] != r.seg {
			nextSeg = l.segs[i]
		}
	}
	l.mu.Unlock()
	if r.off >= limit {
		if nextSeg == nil {
			return io.EOF
		}
		if nextSeg.first != r.next {
			return corrupt(nextSeg.name, 0, "segment starts at position %d, expected %d", nextSeg.first, r.next)
		}
		f, err := l.fs.Open(l.path(nextSeg.name))
		if err != nil {
			return fmt.Errorf("ingestlog: read position %d: %w", r.next, deletedErr(err))
		}
		r.f.Close()
		r.seg, r.f, r.off = nextSeg, f, nextSeg.hdr
		r.win = window{f: f, data: r.win.data[:0], ahead: readAhead}
		return r.loadFrame()
	}

	h, reason, _, err := readFrame(&r.win, r.off, limit, r.seg.seed)
	if reason == "" && err == nil && h.first != r.next {
		reason = fmt.Sprintf("frame starts at position %d, expected %d", h.first, r.next)
	}
	if (reason != "" || err != nil) && l.deleted(r.seg) {
		// DeleteBefore took the segment, and its file may have become a
		// spare and been written over since.
		return fmt.Errorf("ingestlog: read position %d: %w: its segment %s was deleted", r.next, ErrOutOfRange, r.seg.name)
	}
	if err != nil {
		return fmt.Errorf("ingestlog: read %s at offset %d: %w", r.seg.name, r.off, err)
	}
	if reason != "" {
		return corrupt(r.seg.name, r.off, "%s", reason)
	}
	// readFrame verified the payload through the window; it is still there.
	payload, err := r.win.bytes(r.off+frameHeaderSize, int(h.length), limit)
	if err != nil {
		return fmt.Errorf("ingestlog: read %s at offset %d: %w", r.seg.name, r.off, err)
	}
	block := payload
	if h.typ == frameTypeZstd {
		if block, err = r.inf.decompress(payload, int(h.rawLen)); err != nil {
			return corrupt(r.seg.name, r.off, "zstd block: %v", err)
		}
	}
	l.framesFromFile.Add(1)
	r.it = blockIter{rest: block, left: h.count}
	r.pos = h.first
	r.frameOff = r.off
	r.off += frameHeaderSize + int64(h.length)
	r.next += Position(h.count)
	return nil
}

// deleted reports whether seg is no longer one of the log's segments.
func (l *Log) deleted(seg *segment) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs) == 0 || seg.first < l.segs[0].first
}

// inflater decompresses zstd blocks into one reused buffer.
type inflater struct {
	dec *zstd.Decoder
	raw []byte // the last decompressed block
}

// decompress inflates a zstd block that must come to exactly rawLen bytes.
// The result is valid until the next call.
func (f *inflater) decompress(payload []byte, rawLen int) ([]byte, error) {
	if f.dec == nil {
		// Bounded by the block limit and by the buffer's capacity, so that
		// a frame that lies about its size cannot make us allocate more.
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(MaxBlockSize),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, err
		}
		f.dec = d
	}
	if cap(f.raw) < rawLen {
		f.raw = make([]byte, 0, rawLen)
	}
	out, err := f.dec.DecodeAll(payload, f.raw[:0:rawLen])
	if err != nil {
		return nil, err
	}
	if len(out) != rawLen {
		return nil, fmt.Errorf("inflated to %d bytes, header says %d", len(out), rawLen)
	}
	return out, nil
}

func (f *inflater) close() {
	if f.dec != nil {
		f.dec.Close()
		f.dec = nil
	}
}

// Close releases the Reader's file and decoder.
func (r *Reader) Close() error {
	r.inf.close()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if r.err == nil {
		r.err = ErrClosed
	}
	return err
}
