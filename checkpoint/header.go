package checkpoint

import (
	"encoding/binary"
	"hash/crc32"
	"io"
)

// Header opens a snapshot's data object: what it holds, so that a data
// object cannot pass for another edge's or another checkpoint's. The
// state file follows it, zstd-compressed. Byte layout:
// docs/formats/snapshot.md.
type Header struct {
	EdgeID     string
	Checkpoint uint64
	Epoch      uint64
	StateSize  int64 // bytes of the state file, uncompressed
}

// Data object framing.
const (
	dataMagic   = "RNLSNAPD"
	dataVersion = 1
	codecZstd   = 1
	// dataHead is magic, version, codec and the be16 length of the
	// header's body; a CRC-32C follows the body.
	dataHead    = len(dataMagic) + 1 + 1 + 2
	maxDataBody = 1024
	// minDataSize is the shortest a data object can be: framing, the
	// smallest body, CRC.
	minDataSize = dataHead + 4 + 4
)

// AppendHeader appends the encoding of h to dst.
func AppendHeader(dst []byte, h *Header) []byte {
	start := len(dst)
	dst = append(dst, dataMagic...)
	dst = append(dst, dataVersion, codecZstd, 0, 0)
	body := len(dst)
	dst = appendString(dst, h.EdgeID)
	dst = binary.AppendUvarint(dst, h.Checkpoint)
	dst = binary.AppendUvarint(dst, h.Epoch)
	dst = binary.AppendUvarint(dst, uint64(h.StateSize))
	binary.BigEndian.PutUint16(dst[body-2:], uint16(len(dst)-body))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// DecodeHeader decodes the header at the start of b and returns it with
// its length in bytes; b may go on past it (the compressed state). A
// header of another version or codec is ErrFormat; a short, damaged or
// malformed one ErrCorrupt.
func DecodeHeader(b []byte) (Header, int, error) {
	var h Header
	n, err := headPrefix(b)
	if err != nil {
		return h, 0, err
	}
	end := dataHead + n
	if len(b) < end+4 {
		return h, 0, corruptf("checkpoint: data header: body length %d, but only %d bytes follow the framing", n, len(b)-dataHead)
	}
	if want, got := binary.BigEndian.Uint32(b[end:]), crc32.Checksum(b[:end], castagnoli); want != got {
		return h, 0, corruptf("checkpoint: data header: CRC %08x, computed %08x", want, got)
	}
	if v := b[len(dataMagic)]; v != dataVersion {
		return h, 0, errorf(ErrFormat, "checkpoint: data object version %d (this build reads %d)", v, dataVersion)
	}
	if c := b[len(dataMagic)+1]; c != codecZstd {
		return h, 0, errorf(ErrFormat, "checkpoint: data object codec %d (this build reads %d, zstd)", c, codecZstd)
	}
	d := decoder{b: b[dataHead:end], what: "data header"}
	h.EdgeID = d.name("edge id")
	h.Checkpoint = d.uvarint("checkpoint id")
	h.Epoch = d.uvarint("epoch")
	h.StateSize = d.size("state size")
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last field", len(d.b))
	}
	if d.err == nil && (h.Checkpoint == 0 || h.Epoch == 0) {
		d.fail("checkpoint id %d, epoch %d: both start at 1", h.Checkpoint, h.Epoch)
	}
	if d.err != nil {
		return Header{}, 0, d.err
	}
	return h, end + 4, nil
}

// headPrefix checks the magic of a data header and returns the length of
// its body. The framing (magic, version, codec, be16 body length, body,
// CRC-32C) is the same in every version, so the CRC is checked before the
// version: a damaged version byte is corruption, not a newer format.
func headPrefix(b []byte) (int, error) {
	if len(b) < dataHead {
		return 0, corruptf("checkpoint: data header: %d bytes, shorter than its framing (%d)", len(b), dataHead)
	}
	if string(b[:len(dataMagic)]) != dataMagic {
		return 0, corruptf("checkpoint: data header: bad magic %q", b[:len(dataMagic)])
	}
	n := int(binary.BigEndian.Uint16(b[len(dataMagic)+2:]))
	if n > maxDataBody {
		return 0, corruptf("checkpoint: data header: body length %d (at most %d)", n, maxDataBody)
	}
	return n, nil
}

// readHeader reads a data header from r, byte-exact: nothing past it.
func readHeader(r io.Reader) (Header, []byte, error) {
	buf := make([]byte, dataHead, dataHead+maxDataBody+4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Header{}, nil, truncated("data header", err)
	}
	n, err := headPrefix(buf)
	if err != nil {
		return Header{}, nil, err
	}
	buf = buf[:dataHead+n+4]
	if _, err := io.ReadFull(r, buf[dataHead:]); err != nil {
		return Header{}, nil, truncated("data header", err)
	}
	h, _, err := DecodeHeader(buf)
	return h, buf, err
}

// truncated turns an early end of a stream into ErrCorrupt.
func truncated(what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return corruptf("checkpoint: %s: truncated", what)
	}
	return err
}
