package ingestlog

// The on-disk format, apart from the code that runs the log. The byte layout
// is written up in docs/formats/ingest-log.md; keep the two in step.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Position orders every record ever appended to a log: the first record has
// Position 0 and each record the next integer. Positions survive restarts and
// segment deletion, and a record inside a compressed block has its own
// Position like any other.
type Position uint64

const (
	segMagic = "RNIL"
	// formatVersion is the version the log writes. Version 1 segments
	// (a 20-byte header, frame header CRCs without a salt) are still read.
	formatVersion   = 2
	segHeaderSize   = 24 // version 2
	segHeaderSizeV1 = 20
	frameHeaderSize = 32

	// segFlagRecycled marks a segment written over a spare file: the bytes
	// after its last frame are the spare's earlier contents.
	segFlagRecycled byte = 1

	// MaxBlockSize bounds a frame's stored and uncompressed payload. The
	// writer never builds a larger block (Options.Validate keeps MaxUnsynced
	// below it) and the decoder calls a larger length damage, so a flipped
	// bit cannot make a reader allocate gigabytes.
	MaxBlockSize = 64 << 20

	frameTypePlain byte = 1
	frameTypeZstd  byte = 2

	segSuffix   = ".seg"
	tmpSuffix   = ".tmp"
	spareSuffix = ".free"
	lockName    = "LOCK"
	// segNameLen is the length of a segment file name: 20 decimal digits,
	// enough for any uint64, then ".seg".
	segNameLen = 20 + len(segSuffix)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// segmentName is the file name of the segment whose first record is first.
// Zero-padded so that names sort like positions.
func segmentName(first Position) string {
	return fmt.Sprintf("%020d%s", uint64(first), segSuffix)
}

// parseSegmentName reports whether name is a segment file name, and its
// first position. ok is false for every other name; bad is true for a name
// that ends in ".seg" but is not one the log writes.
func parseSegmentName(name string) (first Position, ok, bad bool) {
	if !strings.HasSuffix(name, segSuffix) {
		return 0, false, false
	}
	if len(name) != segNameLen {
		return 0, false, true
	}
	digits := name[:20]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false, true
		}
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false, true
	}
	return Position(v), true, false
}

// segHeader is what a segment header says beyond its first position.
type segHeader struct {
	size     int64  // header bytes: where the first frame starts
	seed     uint32 // the frame header CRCs' seed: the CRC of the salt (0 in version 1)
	recycled bool
}

// putSegmentHeader writes the version 2 segment header into b.
func putSegmentHeader(b []byte, first Position, salt uint32, recycled bool) {
	_ = b[segHeaderSize-1]
	copy(b[0:4], segMagic)
	b[4] = formatVersion
	b[5], b[6], b[7] = 0, 0, 0
	if recycled {
		b[5] = segFlagRecycled
	}
	binary.LittleEndian.PutUint64(b[8:16], uint64(first))
	binary.LittleEndian.PutUint32(b[16:20], salt)
	binary.LittleEndian.PutUint32(b[20:24], crc(b[0:20]))
}

// saltSeed is the CRC state after a salt's four little-endian bytes: frame
// header CRCs of a version 2 segment continue from it.
func saltSeed(salt uint32) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], salt)
	return crc(b[:])
}

// checkSegmentHeader verifies the segment header b of the file name, whose
// name says its first position is first. b holds the header's bytes, at
// least segHeaderSizeV1 and as many as its version lays out.
func checkSegmentHeader(b []byte, name string, first Position) (segHeader, error) {
	if string(b[0:4]) != segMagic {
		return segHeader{}, corrupt(name, 0, "not an ingest log segment: magic %q, want %q", b[0:4], segMagic)
	}
	// The version is read before the CRC: a later version may lay out (and
	// checksum) the rest of the header differently.
	var h segHeader
	switch b[4] {
	case 1:
		h.size = segHeaderSizeV1
		if got, want := binary.LittleEndian.Uint32(b[16:20]), crc(b[0:16]); got != want {
			return h, corrupt(name, 0, "segment header CRC %08x, computed %08x", got, want)
		}
		if b[5] != 0 || b[6] != 0 || b[7] != 0 {
			return h, corrupt(name, 0, "reserved header bytes %x, want zero", b[5:8])
		}
	case formatVersion:
		h.size = segHeaderSize
		if len(b) < segHeaderSize {
			return h, corrupt(name, 0, "file of %d bytes is shorter than the %d-byte segment header", len(b), segHeaderSize)
		}
		if got, want := binary.LittleEndian.Uint32(b[20:24]), crc(b[0:20]); got != want {
			return h, corrupt(name, 0, "segment header CRC %08x, computed %08x", got, want)
		}
		if b[5]&^segFlagRecycled != 0 || b[6] != 0 || b[7] != 0 {
			return h, corrupt(name, 0, "reserved header bytes %x, want zero", b[5:8])
		}
		h.recycled = b[5]&segFlagRecycled != 0
		h.seed = saltSeed(binary.LittleEndian.Uint32(b[16:20]))
	default:
		return h, fmt.Errorf("ingestlog: segment %s: format version %d, this build reads 1 and %d: %w", name, b[4], formatVersion, ErrVersion)
	}
	if p := Position(binary.LittleEndian.Uint64(b[8:16])); p != first {
		return h, corrupt(name, 0, "header says first position %d, file name says %d", p, first)
	}
	return h, nil
}

// frameHeaderCRC is the CRC of a frame header's bytes 4–31, continued from
// its segment's seed.
func frameHeaderCRC(b []byte, seed uint32) uint32 {
	return crc32.Update(seed, castagnoli, b[4:frameHeaderSize])
}

// frameHeader is the fixed 32-byte header of a frame. A frame holds one
// block: the records of one group commit, plain or zstd-compressed.
type frameHeader struct {
	typ    byte
	count  uint32   // records in the block, >= 1
	length uint32   // stored payload bytes following the header
	rawLen uint32   // payload bytes after decompression (== length when plain)
	first  Position // position of the block's first record
	crc    uint32   // CRC-32C of the stored payload
}

// put writes h into b[:frameHeaderSize] but for the header CRC, which
// depends on the segment the frame goes to: sealFrameHeader writes it.
func (h *frameHeader) put(b []byte) {
	_ = b[frameHeaderSize-1]
	b[4] = h.typ
	b[5], b[6], b[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[8:12], h.count)
	binary.LittleEndian.PutUint32(b[12:16], h.length)
	binary.LittleEndian.PutUint32(b[16:20], h.rawLen)
	binary.LittleEndian.PutUint64(b[20:28], uint64(h.first))
	binary.LittleEndian.PutUint32(b[28:32], h.crc)
}

// sealFrameHeader writes the header CRC of the frame header b for a
// segment whose seed is seed.
func sealFrameHeader(b []byte, seed uint32) {
	binary.LittleEndian.PutUint32(b[0:4], frameHeaderCRC(b, seed))
}

// plausibleFrameHeader is a cheap filter applied before the header CRC when
// searching damaged bytes for a frame: type and reserved bytes.
func plausibleFrameHeader(b []byte) bool {
	return (b[4] == frameTypePlain || b[4] == frameTypeZstd) && b[5]|b[6]|b[7] == 0
}

// parseFrameHeader decodes and checks b[:frameHeaderSize], a frame header
// of a segment whose seed is seed. A non-empty reason
// says why the bytes are not a frame header; the payload is not looked at.
func parseFrameHeader(b []byte, seed uint32) (h frameHeader, reason string) {
	_ = b[frameHeaderSize-1]
	if got, want := binary.LittleEndian.Uint32(b[0:4]), frameHeaderCRC(b, seed); got != want {
		return h, "frame header CRC mismatch"
	}
	h = frameHeader{
		typ:    b[4],
		count:  binary.LittleEndian.Uint32(b[8:12]),
		length: binary.LittleEndian.Uint32(b[12:16]),
		rawLen: binary.LittleEndian.Uint32(b[16:20]),
		first:  Position(binary.LittleEndian.Uint64(b[20:28])),
		crc:    binary.LittleEndian.Uint32(b[28:32]),
	}
	switch {
	case h.typ != frameTypePlain && h.typ != frameTypeZstd:
		return h, fmt.Sprintf("unknown frame type %d", h.typ)
	case b[5]|b[6]|b[7] != 0:
		return h, "reserved frame header bytes not zero"
	case h.count == 0:
		return h, "frame with no records"
	case h.length > MaxBlockSize || h.rawLen > MaxBlockSize:
		return h, fmt.Sprintf("block length %d (raw %d) above the %d-byte limit", h.length, h.rawLen, MaxBlockSize)
	case h.typ == frameTypePlain && h.length != h.rawLen:
		return h, fmt.Sprintf("plain block of %d bytes claims %d raw bytes", h.length, h.rawLen)
	case h.count > h.rawLen:
		// Every record takes at least its one-byte length prefix.
		return h, fmt.Sprintf("%d records cannot fit in %d bytes", h.count, h.rawLen)
	case uint64(h.first)+uint64(h.count) < uint64(h.first):
		return h, "record positions overflow"
	}
	return h, ""
}

// blockIter walks the records of an uncompressed block: each record is a
// uvarint length followed by that many bytes.
type blockIter struct {
	rest []byte
	left uint32
}

// next returns the next record, aliasing the block. It fails when a length
// prefix is broken or runs past the block.
func (it *blockIter) next() ([]byte, string) {
	n, k := binary.Uvarint(it.rest)
	if k <= 0 {
		return nil, "broken record length prefix"
	}
	if n > uint64(len(it.rest)-k) {
		return nil, fmt.Sprintf("record of %d bytes runs past the block (%d left)", n, len(it.rest)-k)
	}
	rec := it.rest[k : k+int(n) : k+int(n)]
	it.rest = it.rest[k+int(n):]
	it.left--
	return rec, ""
}

// uvarintLen is the encoded length of v, as binary.AppendUvarint writes it.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
