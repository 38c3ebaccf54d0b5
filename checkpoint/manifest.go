package checkpoint

import (
	"encoding/binary"
	"hash/crc32"
	"time"
	"unicode/utf8"
)

// Manifest describes one snapshot: which edge and checkpoint it is of, and
// the size and checksum of the state file and of the data object that
// holds it. It is written after the data object, so a snapshot with a
// manifest is complete: a listing never sees half a snapshot. Byte layout:
// docs/formats/snapshot.md.
type Manifest struct {
	EdgeID     string
	Checkpoint uint64 // the checkpoint's id (Meta.ID); the snapshot's name
	Epoch      uint64 // the edge's uplink epoch in the state file
	LogPos     uint64 // Meta.LogPos
	NextSeq    uint64 // Meta.NextSeq

	StateSize int64  // bytes of the state file (uncompressed)
	StateSum  uint64 // XXH64 (seed 0) of the state file
	DataSize  int64  // bytes of the data object, header included
	DataSum   uint64 // XXH64 (seed 0) of the data object

	Created time.Time // when the snapshot was taken (millisecond precision)
	Runnel  string    // version of the runnel that wrote it
}

// Manifest framing.
const (
	manifestMagic   = "RNLSNAPM"
	manifestVersion = 1
	manifestHead    = len(manifestMagic) + 1 + 4 // magic, version, body length
	maxManifestBody = 4096
	maxNameBytes    = 255 // edge id, runnel version
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendManifest appends the encoding of m to dst.
func AppendManifest(dst []byte, m *Manifest) []byte {
	start := len(dst)
	dst = append(dst, manifestMagic...)
	dst = append(dst, manifestVersion, 0, 0, 0, 0)
	body := len(dst)
	dst = appendString(dst, m.EdgeID)
	dst = binary.AppendUvarint(dst, m.Checkpoint)
	dst = binary.AppendUvarint(dst, m.Epoch)
	dst = binary.AppendUvarint(dst, m.LogPos)
	dst = binary.AppendUvarint(dst, m.NextSeq)
	dst = binary.AppendUvarint(dst, uint64(m.StateSize))
	dst = binary.BigEndian.AppendUint64(dst, m.StateSum)
	dst = binary.AppendUvarint(dst, uint64(m.DataSize))
	dst = binary.BigEndian.AppendUint64(dst, m.DataSum)
	dst = binary.AppendVarint(dst, m.Created.UnixMilli())
	dst = appendString(dst, m.Runnel)
	binary.BigEndian.PutUint32(dst[body-4:], uint32(len(dst)-body))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeManifest decodes a manifest. It checks the framing and CRC, every
// field's bounds (an edge id of 1 to 255 bytes of UTF-8, a checkpoint id
// and epoch above 0, sizes that fit an int64, a data object at least as
// long as its header), and that nothing follows the last field. A manifest
// of another version is ErrFormat; anything else wrong is ErrCorrupt.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) < manifestHead+4 {
		return m, corruptf("checkpoint: manifest: %d bytes, shorter than its framing (%d)", len(b), manifestHead+4)
	}
	if string(b[:len(manifestMagic)]) != manifestMagic {
		return m, corruptf("checkpoint: manifest: bad magic %q", b[:len(manifestMagic)])
	}
	n := binary.BigEndian.Uint32(b[len(manifestMagic)+1:])
	if n > maxManifestBody || int(n) != len(b)-manifestHead-4 {
		return m, corruptf("checkpoint: manifest: body length %d, but %d bytes follow the header", n, len(b)-manifestHead)
	}
	end := manifestHead + int(n)
	if want, got := binary.BigEndian.Uint32(b[end:]), crc32.Checksum(b[:end], castagnoli); want != got {
		return m, corruptf("checkpoint: manifest: CRC %08x, computed %08x", want, got)
	}
	// The framing is the same in every version: a version byte that
	// passed the CRC is a newer format, not damage.
	if v := b[len(manifestMagic)]; v != manifestVersion {
		return m, errorf(ErrFormat, "checkpoint: manifest version %d (this build reads %d)", v, manifestVersion)
	}
	d := decoder{b: b[manifestHead:end], what: "manifest"}
	m.EdgeID = d.name("edge id")
	m.Checkpoint = d.uvarint("checkpoint id")
	m.Epoch = d.uvarint("epoch")
	m.LogPos = d.uvarint("log position")
	m.NextSeq = d.uvarint("next sequence")
	m.StateSize = d.size("state size")
	m.StateSum = d.be64("state checksum")
	m.DataSize = d.size("data size")
	m.DataSum = d.be64("data checksum")
	created := d.varint("created at")
	m.Runnel = d.string("runnel version")
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last field", len(d.b))
	}
	switch {
	case d.err != nil:
	case m.Checkpoint == 0:
		d.fail("checkpoint id 0")
	case m.Epoch == 0:
		d.fail("epoch 0")
	case m.DataSize < int64(minDataSize):
		d.fail("data size %d, shorter than a data object's framing", m.DataSize)
	}
	if d.err != nil {
		return Manifest{}, d.err
	}
	m.Created = time.UnixMilli(created).UTC()
	return m, nil
}

// decoder reads fields from b; the first problem sticks in err.
type decoder struct {
	b    []byte
	what string
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = corruptf("checkpoint: "+d.what+": "+format, args...)
	}
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("%s: truncated or overlong varint", field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("%s: truncated or overlong varint", field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) size(field string) int64 {
	v := d.uvarint(field)
	if v > 1<<62 {
		d.fail("%s %d is out of range", field, v)
		return 0
	}
	return int64(v)
}

func (d *decoder) be64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("%s: truncated", field)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// string reads a uvarint-prefixed string of at most maxNameBytes bytes of
// UTF-8.
func (d *decoder) string(field string) string {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return ""
	}
	if n > maxNameBytes || n > uint64(len(d.b)) {
		d.fail("%s: length %d (at most %d, %d bytes left)", field, n, maxNameBytes, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	if !utf8.ValidString(s) {
		d.fail("%s %q is not UTF-8", field, s)
		return ""
	}
	return s
}

// name is a string that must not be empty.
func (d *decoder) name(field string) string {
	s := d.string(field)
	if d.err == nil && s == "" {
		d.fail("%s is empty", field)
	}
	return s
}
