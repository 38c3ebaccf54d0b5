package checkpoint

import (
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
)

// Sums are the sizes and checksums of a data object as written, for its
// manifest.
type Sums struct {
	StateSize int64  // bytes of the state file
	StateSum  uint64 // XXH64 of the state file
	DataSize  int64  // bytes of the data object
	DataSum   uint64 // XXH64 of the data object
}

// maxWindow bounds the zstd window a reader accepts (the writer uses at
// most 8 MiB), so a damaged or hostile frame header cannot make restore
// allocate gigabytes.
const maxWindow = 64 << 20

// WriteData writes a data object to w: h's header, then the state file,
// which src writes (exactly h.StateSize bytes, or WriteData fails), as one
// zstd frame at the fastest level on one goroutine (a gateway's other
// cores keep ingesting). It returns the sizes and checksums for the
// manifest.
func WriteData(w io.Writer, h *Header, src io.WriterTo) (Sums, error) {
	if h.Checkpoint == 0 || h.Epoch == 0 || h.EdgeID == "" || len(h.EdgeID) > maxNameBytes {
		return Sums{}, fmt.Errorf("checkpoint: write data object: header %+v: edge id of 1 to %d bytes, checkpoint id and epoch from 1", *h, maxNameBytes)
	}
	dw := &summer{w: w, h: xxhash.New()}
	if _, err := dw.Write(AppendHeader(nil, h)); err != nil {
		return Sums{}, fmt.Errorf("checkpoint: write data object: %w", err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true))
	if err != nil {
		return Sums{}, err
	}
	enc.ResetContentSize(dw, h.StateSize)
	sw := &summer{w: enc, h: xxhash.New()}
	_, err = src.WriteTo(sw)
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	switch {
	case dw.err != nil: // the destination's own error, through the encoder
		return Sums{}, fmt.Errorf("checkpoint: write data object: %w", dw.err)
	case err != nil:
		return Sums{}, fmt.Errorf("checkpoint: write data object: state: %w", err)
	case sw.n != h.StateSize:
		return Sums{}, fmt.Errorf("checkpoint: write data object: the state source wrote %d bytes, the header says %d", sw.n, h.StateSize)
	}
	return Sums{StateSize: sw.n, StateSum: sw.h.Sum64(), DataSize: dw.n, DataSum: dw.h.Sum64()}, nil
}

// ReadData reads the data object r of the snapshot m describes, verifies
// it, and writes the state file to dst. It fails with an error of the
// ErrCorrupt class saying what is wrong (the object is truncated or too
// long, its checksum differs from the manifest's, its header names another
// edge or checkpoint, the zstd stream does not decode, the state's size or
// checksum differs) unless every check passes; dst may then hold part of
// the state, which the caller discards. r is read to its end.
func ReadData(r io.Reader, m *Manifest, dst io.Writer) error {
	name := fmt.Sprintf("snapshot %d of edge %s", m.Checkpoint, m.EdgeID)
	cr := &countReader{r: io.LimitReader(r, m.DataSize+1), h: xxhash.New()}
	// The first problem found while decoding; the object's own size and
	// checksum, checked once it is read whole, explain it better when
	// they differ.
	var why error
	h, _, err := readHeader(cr)
	switch {
	case err != nil:
		why = err
	case h.EdgeID != m.EdgeID || h.Checkpoint != m.Checkpoint || h.Epoch != m.Epoch || h.StateSize != m.StateSize:
		why = corruptf("checkpoint: data header says edge %s, checkpoint %d, epoch %d, %d state bytes; the manifest says edge %s, checkpoint %d, epoch %d, %d",
			h.EdgeID, h.Checkpoint, h.Epoch, h.StateSize, m.EdgeID, m.Checkpoint, m.Epoch, m.StateSize)
	}
	sw := &summer{w: dst, h: xxhash.New()}
	if why == nil {
		why = decompress(cr, sw, m.StateSize)
	}
	if _, err := io.Copy(io.Discard, cr); err != nil && cr.err == nil {
		cr.err = err
	}
	switch {
	case cr.err != nil:
		return fmt.Errorf("checkpoint: read %s: %w", name, cr.err)
	case sw.err != nil:
		return fmt.Errorf("checkpoint: restore %s: write the state file: %w", name, sw.err)
	case cr.n < m.DataSize:
		return corruptf("checkpoint: %s: the data object is %d bytes, its manifest says %d: truncated", name, cr.n, m.DataSize)
	case cr.n > m.DataSize:
		return corruptf("checkpoint: %s: the data object is longer than the %d bytes its manifest says", name, m.DataSize)
	case cr.h.Sum64() != m.DataSum:
		msg := fmt.Sprintf("checkpoint: %s: the data object's XXH64 is %016x, its manifest says %016x: the object is damaged", name, cr.h.Sum64(), m.DataSum)
		if why != nil {
			msg += " (" + why.Error() + ")"
		}
		return corruptf("%s", msg)
	case why != nil:
		return fmt.Errorf("checkpoint: %s: %w", name, why)
	case sw.n != m.StateSize || sw.h.Sum64() != m.StateSum:
		return corruptf("checkpoint: %s: the state file is %d bytes with XXH64 %016x, the manifest says %d bytes, %016x",
			name, sw.n, sw.h.Sum64(), m.StateSize, m.StateSum)
	}
	return nil
}

// decompress writes the one zstd frame r holds, of exactly size bytes, to
// w. Errors of w are left in w (a summer); those of the stream are
// ErrCorrupt.
func decompress(r io.Reader, w *summer, size int64) error {
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(maxWindow))
	if err != nil {
		return err
	}
	defer dec.Close()
	n, err := io.Copy(w, io.LimitReader(dec, size+1))
	switch {
	case w.err != nil:
		return nil
	case errors.Is(err, errReader):
		return nil // r's own failure: the caller reports it
	case err != nil:
		return corruptf("checkpoint: zstd stream after %d state bytes: %v", n, err)
	case n > size:
		return corruptf("checkpoint: zstd stream holds more than the %d state bytes of its header", size)
	case n < size:
		return corruptf("checkpoint: zstd stream ends after %d of %d state bytes", n, size)
	}
	return nil
}

// summer is a writer that counts and hashes what it passes on, and keeps
// the first error of w.
type summer struct {
	w   io.Writer
	h   *xxhash.Digest
	n   int64
	err error
}

func (s *summer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	if err != nil {
		s.err = err
	}
	return n, err
}

// errReader stands for the underlying reader's failure inside the zstd
// decoder; countReader keeps the real error.
var errReader = errors.New("checkpoint: read failed")

// countReader counts and hashes what it reads and keeps the first error
// of r other than EOF.
type countReader struct {
	r   io.Reader
	h   *xxhash.Digest
	n   int64
	err error
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, errReader
	}
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
		return n, errReader
	}
	return n, err
}
