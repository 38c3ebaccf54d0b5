package state

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"unicode/utf8"
)

// The layout of a state file inside bbolt, described byte by byte in
// docs/formats/state-layout.md. This file holds the codecs; nothing here
// touches bbolt.
//
//	meta/          format and key group count (records)
//	sys/<name>     system buckets written through Tx: key -> record(value)
//
// Layout version 1 also had state/<namespace>/<group> buckets of keyed
// operator state; version 2 dropped them with the namespaces, and Open
// refuses a version 1 file (ErrFormat).
//
// Every value is a record: a version byte, a CRC-32C and the payload. The
// CRC covers the bucket the record belongs in, the key and the payload, so a
// flipped bit in either, a value under the wrong key, or a page that ended up
// in the wrong bucket, all fail the check. bbolt itself checksums only its
// meta pages.
//
// Every record bucket keeps a digest of its records in its bbolt sequence
// number: the record count in the high 32 bits, the XOR of the records' CRCs
// in the low 32. Verification compares it with what the walk found, which
// catches records lost to a damaged page (a lower element count, say), a
// corruption that no per-record check can see.

// Top-level bucket names.
var (
	bucketMeta = []byte("meta")
	bucketSys  = []byte("sys")
)

// Keys in the meta bucket.
var (
	metaKeyFormat    = []byte("format")
	metaKeyKeyGroups = []byte("keygroups")
)

const (
	// layoutVersion is the version of the layout as a whole, stored under
	// meta/format. A change to it means a new version.
	layoutVersion = 2
	// recordVersion is the first byte of every record.
	recordVersion = 1
	// recordHeaderSize is version (1) + CRC-32C (4).
	recordHeaderSize = 5
)

// Domain bytes: the first byte the CRC of a record covers, which says what
// kind of bucket the record lives in.
const (
	domainSys  = 'y'
	domainMeta = 'm'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// nameSeed returns the CRC-32C of domain || uvarint(len(name)) || name: the
// running CRC a record's checksum continues from.
func nameSeed(domain byte, name string) uint32 {
	var b [1 + binary.MaxVarintLen64]byte
	b[0] = domain
	n := binary.PutUvarint(b[1:], uint64(len(name)))
	c := crc32.Update(0, castagnoli, b[:1+n])
	return crc32.Update(c, castagnoli, []byte(name))
}

// metaSeed is the seed of records in the meta bucket.
var metaSeed = nameSeed(domainMeta, "")

// recordCRC returns the checksum of a record with the given seed, key and
// payload: CRC-32C over seed's bytes || uvarint(len(key)) || key || payload.
// The key length makes the split between key and payload unambiguous.
func recordCRC(seed uint32, key, payload []byte) uint32 {
	var c uint32
	if len(key) < len(smallUvarints) {
		// A stack buffer would escape through crc32's function value;
		// the one-byte encodings of small lengths are a static table.
		c = crc32.Update(seed, castagnoli, smallUvarints[len(key):len(key)+1])
	} else {
		c = crc32.Update(seed, castagnoli, binary.AppendUvarint(nil, uint64(len(key))))
	}
	c = crc32.Update(c, castagnoli, key)
	return crc32.Update(c, castagnoli, payload)
}

// smallUvarints[i] is the uvarint encoding of i, for i < 128.
var smallUvarints = func() (t [128]byte) {
	for i := range t {
		t[i] = byte(i)
	}
	return t
}()

// appendRecord appends the record of payload under key to dst and returns
// the extended slice and the record's CRC.
func appendRecord(dst []byte, seed uint32, key, payload []byte) ([]byte, uint32) {
	c := recordCRC(seed, key, payload)
	dst = append(dst, recordVersion)
	dst = binary.LittleEndian.AppendUint32(dst, c)
	return append(dst, payload...), c
}

// recordSize is the encoded size of a record holding a payload of n bytes.
func recordSize(n int) int { return recordHeaderSize + n }

// decodeRecord checks a record read under key and returns its payload
// (aliasing rec) and stored CRC. The error is of the ErrCorrupt class; the
// caller adds where the record was.
func decodeRecord(seed uint32, key, rec []byte) (payload []byte, crc uint32, err error) {
	if len(rec) < recordHeaderSize {
		return nil, 0, corruptf("record of %d bytes is shorter than its %d-byte header", len(rec), recordHeaderSize)
	}
	if rec[0] != recordVersion {
		return nil, 0, corruptf("record version %d, want %d", rec[0], recordVersion)
	}
	crc = binary.LittleEndian.Uint32(rec[1:])
	payload = rec[recordHeaderSize:]
	if got := recordCRC(seed, key, payload); got != crc {
		return nil, 0, corruptf("record checksum %08x, computed %08x", crc, got)
	}
	return payload, crc, nil
}

// storedCRC returns the CRC field of a record without checking it, for the
// digest; a record too short to have one contributes zero (verification
// reports it separately).
func storedCRC(rec []byte) uint32 {
	if len(rec) < recordHeaderSize {
		return 0
	}
	return binary.LittleEndian.Uint32(rec[1:])
}

// digest is what a record bucket keeps in its bbolt sequence number.
type digest struct {
	count uint32
	xor   uint32
}

func (d *digest) add(crc uint32)    { d.count++; d.xor ^= crc }
func (d *digest) remove(crc uint32) { d.count--; d.xor ^= crc }
func (d digest) seq() uint64        { return uint64(d.count)<<32 | uint64(d.xor) }
func digestOf(seq uint64) digest    { return digest{count: uint32(seq >> 32), xor: uint32(seq)} }

// validName reports whether name may name a system bucket.
func validName(name string) bool {
	return name != "" && len(name) <= MaxNameSize && utf8.ValidString(name)
}

// encodeMetaFormat and decodeMetaFormat are the payload of meta/format: the
// layout version as one byte.
func encodeMetaFormat() []byte { return []byte{layoutVersion} }

func decodeMetaFormat(p []byte) (int, error) {
	if len(p) != 1 {
		return 0, corruptf("%d bytes, want 1", len(p))
	}
	return int(p[0]), nil
}

// formatVersionError is the error for a file of another layout version.
func formatVersionError(v int) error {
	if v == 1 {
		return fmt.Errorf("%w: layout version 1, which kept operator state in namespaces (bucket state); this build reads version %d only: start from an empty file", ErrFormat, layoutVersion)
	}
	return fmt.Errorf("%w: layout version %d, this build reads version %d", ErrFormat, v, layoutVersion)
}

// encodeMetaKeyGroups and decodeMetaKeyGroups are the payload of
// meta/keygroups: the key group count as a uvarint.
func encodeMetaKeyGroups(n int) []byte { return binary.AppendUvarint(nil, uint64(n)) }

func decodeMetaKeyGroups(p []byte) (int, error) {
	n, k := binary.Uvarint(p)
	switch {
	case k <= 0:
		return 0, corruptf("uvarint truncated or over 64 bits")
	case k != len(p):
		return 0, corruptf("%d trailing bytes after the uvarint", len(p)-k)
	case k > 1 && p[k-1] == 0:
		return 0, corruptf("uvarint not minimal")
	case n < 1 || n > MaxKeyGroups:
		return 0, corruptf("key group count %d is outside [1, %d]", n, MaxKeyGroups)
	}
	return int(n), nil
}
