package ingestlog

import (
	"context"
	"fmt"
	"io"
)

// Reading segments back: the sequential window both Open's scan and Reader
// use, the scan that verifies a segment, and the search that tells a torn
// tail from damage in the middle.

// scanAhead is how much a scan reads per system call.
const scanAhead = 1 << 20

// window reads a file front to back through one buffer, so that a small
// frame costs a copy rather than a system call.
type window struct {
	f     io.ReaderAt
	start int64  // file offset of data[0]
	data  []byte // file bytes [start, start+len(data))
	ahead int
}

// bytes returns the file's bytes [off, off+n), which the caller knows lie
// below limit, the length it trusts. The slice is valid until the next call.
// A file shorter than that gives io.ErrUnexpectedEOF.
func (w *window) bytes(off int64, n int, limit int64) ([]byte, error) {
	if off >= w.start && off+int64(n) <= w.start+int64(len(w.data)) {
		i := off - w.start
		return w.data[i : i+int64(n) : i+int64(n)], nil
	}
	m := int64(max(n, w.ahead))
	if rem := limit - off; m > rem {
		m = rem
	}
	if m < int64(n) {
		return nil, io.ErrUnexpectedEOF
	}
	if int64(cap(w.data)) < m {
		w.data = make([]byte, m)
	}
	w.data = w.data[:m]
	k, err := w.f.ReadAt(w.data, off)
	if k < n {
		w.start, w.data = 0, w.data[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	w.start, w.data = off, w.data[:k]
	return w.data[:n:n], nil
}

// scanned is what a scan learned about one segment.
type scanned struct {
	hdr   segHeader
	end   Position // one past the last good record
	size  int64    // bytes up to the end of the last good frame
	index []indexEntry
	torn  *torn // only for the last segment
}

// torn describes a torn tail: the bytes from off on are to be cut.
type torn struct {
	off     int64
	records int
	reason  string
}

// scanSegment reads and verifies one segment of fileSize bytes. For the
// last segment, bad bytes followed by no verifiable frame are a torn tail,
// returned in scanned.torn rather than as an error.
func scanSegment(ctx context.Context, w *window, name string, first Position, fileSize int64, last bool) (scanned, error) {
	sc := scanned{end: first}
	if fileSize < segHeaderSizeV1 {
		return sc, corrupt(name, 0, "file of %d bytes is shorter than the %d-byte segment header", fileSize, segHeaderSizeV1)
	}
	hb, err := w.bytes(0, int(min(fileSize, segHeaderSize)), fileSize)
	if err != nil {
		return sc, fmt.Errorf("ingestlog: read %s: %w", name, err)
	}
	if sc.hdr, err = checkSegmentHeader(hb, name, first); err != nil {
		return sc, err
	}
	sc.size = sc.hdr.size
	seed := sc.hdr.seed
	off, pos := sc.hdr.size, first
	for frames := 0; off < fileSize; frames++ {
		if frames%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return sc, err
			}
		}
		h, reason, hdrOK, err := readFrame(w, off, fileSize, seed)
		if err != nil {
			return sc, fmt.Errorf("ingestlog: read %s at offset %d: %w", name, off, err)
		}
		if reason == "" && h.first < pos && last && sc.hdr.recycled {
			// The frame of an earlier use of a spare file, whose salt
			// happened to be this one's: the end, as a torn write is.
			reason = fmt.Sprintf("frame of an earlier use of the file (position %d, expected %d)", h.first, pos)
		}
		if reason == "" && h.first != pos {
			// A verified frame in the wrong place is not a torn write.
			return sc, corrupt(name, off, "frame starts at position %d, expected %d", h.first, pos)
		}
		if reason != "" {
			if !last {
				return sc, corrupt(name, off, "%s", reason)
			}
			// Look for a good frame after the bad one: past its payload when
			// its header is sound, else anywhere after its first byte.
			from := off + 1
			if hdrOK && off+frameHeaderSize+int64(h.length) <= fileSize {
				from = off + frameHeaderSize + int64(h.length)
			}
			at, err := findFrame(w, from, fileSize, pos, seed)
			if err != nil {
				return sc, fmt.Errorf("ingestlog: read %s: %w", name, err)
			}
			if at >= 0 {
				return sc, corrupt(name, off, "%s, and a valid frame follows at offset %d", reason, at)
			}
			t := &torn{off: off, reason: reason}
			if hdrOK {
				t.records = int(h.count)
			}
			sc.torn = t
			return sc, nil
		}
		if len(sc.index) == 0 || off-sc.index[len(sc.index)-1].off >= indexEvery {
			sc.index = append(sc.index, indexEntry{pos: pos, off: off})
		}
		pos += Position(h.count)
		off += frameHeaderSize + int64(h.length)
		sc.end, sc.size = pos, off
	}
	return sc, nil
}

// readFrame verifies the frame at off: header and payload CRC. reason is
// empty for a good frame; hdrOK says whether at least the header verified.
// err is only for read errors other than a short file.
func readFrame(w *window, off, fileSize int64, seed uint32) (h frameHeader, reason string, hdrOK bool, err error) {
	if fileSize-off < frameHeaderSize {
		return h, fmt.Sprintf("%d bytes left, too few for a frame header", fileSize-off), false, nil
	}
	b, err := w.bytes(off, frameHeaderSize, fileSize)
	if err != nil {
		return h, "", false, err
	}
	if h, reason = parseFrameHeader(b, seed); reason != "" {
		return h, reason, false, nil
	}
	if rem := fileSize - off - frameHeaderSize; int64(h.length) > rem {
		return h, fmt.Sprintf("frame payload of %d bytes runs past the end of the file (%d left)", h.length, rem), true, nil
	}
	p, err := w.bytes(off+frameHeaderSize, int(h.length), fileSize)
	if err != nil {
		return h, "", true, err
	}
	if got := crc(p); got != h.crc {
		return h, fmt.Sprintf("payload CRC %08x, header says %08x", got, h.crc), true, nil
	}
	return h, "", true, nil
}

// findFrame returns the offset of the first verifiable frame at or after
// from whose records start at or after minPos, or -1. It tries every byte
// offset, so it is only run on the damaged tail of the last segment; the
// header CRC keeps each try cheap. The CRC's seed, the segment's random
// salt, means that neither a recycled segment's earlier frames nor a frame
// a publisher hid in its payload can pass for one.
func findFrame(w *window, from, fileSize int64, minPos Position, seed uint32) (int64, error) {
	for off := from; off+frameHeaderSize <= fileSize; off++ {
		b, err := w.bytes(off, frameHeaderSize, fileSize)
		if err != nil {
			return -1, err
		}
		if !plausibleFrameHeader(b) {
			continue
		}
		h, reason, _, err := readFrame(w, off, fileSize, seed)
		if err != nil {
			return -1, err
		}
		if reason == "" && h.first >= minPos {
			return off, nil
		}
	}
	return -1, nil
}
