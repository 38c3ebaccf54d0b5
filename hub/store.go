package hub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// The byte layout of the hub's bbolt file; docs/formats/hub-store.md is the
// reference. This file holds the codecs only: keys, values and the record
// frame, apart from the code that decides what to write.

// storeFormat is meta/format: the layout version of the whole file.
// Format 2 put a window's end before its start in partials keys, so that
// expiry and the resident load at Open are key ranges. Format 3 added the
// classes of managed revisions (stored as name@class, their partial and
// result values carrying revisions) and the revision in parked keys;
// every record of format 2 reads the same in it (as revision 0), so Open
// takes a format 2 store and marks it 3.
const (
	storeFormat    = 3
	oldStoreFormat = 2
)

// recordVersion is the leading byte of every value.
const recordVersion = 1

// Top-level buckets.
var (
	bucketMeta      = []byte("meta")
	bucketEdges     = []byte("edges")
	bucketPipelines = []byte("pipelines")
	bucketPartials  = []byte("partials") // one sub-bucket per key group
	bucketResults   = []byte("results")  // one sub-bucket per pipeline
	// bucketParked holds partials and watermarks of pipelines the hub does
	// not know (park.go). Created at Open when missing: older stores
	// read the same.
	bucketParked = []byte("parked")

	metaFormat    = []byte("format")
	metaKeyGroups = []byte("keygroups")
)

// Tags after the window prefix of a partials key.
const (
	tagWindow  = 0x00 // the window record: its last emitted version
	tagPartial = 0x01 // followed by the edge id: that edge's latest partial
)

const (
	maxEdgeID   = 255           // bytes
	maxKeyLen   = MaxKeyBytes   // bytes of an encoded key: what edges let through
	maxStateLen = MaxStateBytes // bytes of a partial's aggregate state
	maxPipeLen  = 255           // pipeline names are shorter (64), but the key has one length byte
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends the record frame around payload: version byte, then
// CRC-32C over uvarint(len(key)) || key || payload, then payload. Binding the
// CRC to the key catches a value copied under the wrong key.
func appendRecord(dst, key, payload []byte) []byte {
	var lenBuf [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(lenBuf[:], uint64(len(key)))
	crc := crc32.Update(0, crcTable, lenBuf[:n])
	crc = crc32.Update(crc, crcTable, key)
	crc = crc32.Update(crc, crcTable, payload)
	dst = append(dst, recordVersion)
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	return append(dst, payload...)
}

// recordHeader is the length of the frame before the payload.
const recordHeader = 5

// openRecord checks the frame of a value read under key and returns its
// payload. Errors wrap ErrCorrupt.
func openRecord(key, value []byte) ([]byte, error) {
	if len(value) < recordHeader {
		return nil, fmt.Errorf("hub: store: record of %d bytes under key %x: %w", len(value), key, ErrCorrupt)
	}
	if value[0] != recordVersion {
		return nil, fmt.Errorf("hub: store: record version %d under key %x: %w", value[0], key, ErrCorrupt)
	}
	payload := value[recordHeader:]
	var lenBuf [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(lenBuf[:], uint64(len(key)))
	crc := crc32.Update(0, crcTable, lenBuf[:n])
	crc = crc32.Update(crc, crcTable, key)
	crc = crc32.Update(crc, crcTable, payload)
	if crc != binary.LittleEndian.Uint32(value[1:]) {
		return nil, fmt.Errorf("hub: store: CRC mismatch under key %x: %w", key, ErrCorrupt)
	}
	return payload, nil
}

// kgBucket is the name of a key group's bucket in partials: u32 big endian,
// so a key-group range is a contiguous range of bucket names.
func kgBucket(kg uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, kg)
}

// appendTime appends t so that byte order is numeric order: big endian with
// the sign bit flipped.
func appendTime(dst []byte, t int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t)^(1<<63))
}

func readTime(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
}

// appendEscaped appends key so that the result sorts like key and no result
// is a prefix of another: 0x00 becomes 0x00 0xFF, and 0x00 0x01 ends it.
func appendEscaped(dst, key []byte) []byte {
	for {
		i := bytes.IndexByte(key, 0)
		if i < 0 {
			break
		}
		dst = append(dst, key[:i+1]...)
		dst = append(dst, 0xFF)
		key = key[i+1:]
	}
	dst = append(dst, key...)
	return append(dst, 0x00, 0x01)
}

// readEscaped decodes an escaped key at the start of b, appending it to dst,
// and returns the rest of b.
func readEscaped(dst, b []byte) (key, rest []byte, err error) {
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 || i+1 >= len(b) {
			return nil, nil, errors.New("unterminated key")
		}
		dst = append(dst, b[:i]...)
		switch b[i+1] {
		case 0xFF:
			dst = append(dst, 0)
			b = b[i+2:]
		case 0x01:
			return dst, b[i+2:], nil
		default:
			return nil, nil, fmt.Errorf("bad escape 0x00 0x%02x", b[i+1])
		}
	}
}

// appendPipePrefix appends the partials-bucket prefix of a pipeline's
// windows: u8 len(pipeline) | pipeline. No pipeline's prefix is a prefix
// of another's.
func appendPipePrefix(dst []byte, pipeline string) []byte {
	dst = append(dst, byte(len(pipeline)))
	return append(dst, pipeline...)
}

// appendWindowPrefix appends the partials-bucket prefix of a window:
// pipe prefix | end | start | escaped key. Within a pipeline, windows sort
// by end, so the windows ending before a bound are one key range.
func appendWindowPrefix(dst []byte, pipeline string, start, end int64, key []byte) []byte {
	dst = appendPipePrefix(dst, pipeline)
	dst = appendTime(dst, end)
	dst = appendTime(dst, start)
	return appendEscaped(dst, key)
}

// partialKey is a decoded key of a key group bucket.
type partialKey struct {
	pipeline   []byte
	start, end int64
	key        []byte
	tag        byte
	edge       []byte // tagPartial only
}

func parsePartialKey(k []byte) (partialKey, error) {
	var pk partialKey
	if len(k) < 1 || len(k) < 1+int(k[0])+16 {
		return pk, errors.New("short key")
	}
	n := int(k[0])
	pk.pipeline = k[1 : 1+n]
	pk.end = readTime(k[1+n:])
	pk.start = readTime(k[1+n+8:])
	key, rest, err := readEscaped(nil, k[1+n+16:])
	if err != nil {
		return pk, err
	}
	pk.key = key
	if len(rest) < 1 {
		return pk, errors.New("missing tag")
	}
	pk.tag = rest[0]
	switch {
	case pk.tag == tagWindow && len(rest) == 1:
	case pk.tag == tagPartial && len(rest) > 1:
		pk.edge = rest[1:]
	default:
		return pk, fmt.Errorf("bad tag 0x%02x with %d bytes", pk.tag, len(rest)-1)
	}
	return pk, nil
}

// Partial value payload: u64 epoch | u64 seq | u32 version | state; in a
// class of managed revisions (managed), u32 revision follows the version.
func appendPartialValue(dst []byte, epoch, seq uint64, version uint32, managed bool, revision uint32, state []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint32(dst, version)
	if managed {
		dst = binary.BigEndian.AppendUint32(dst, revision)
	}
	return append(dst, state...)
}

func parsePartialValue(p []byte, managed bool) (epoch, seq uint64, version, revision uint32, state []byte, err error) {
	n := 20
	if managed {
		n = 24
	}
	if len(p) < n {
		return 0, 0, 0, 0, nil, errors.New("short partial value")
	}
	if managed {
		if revision = binary.BigEndian.Uint32(p[20:]); revision == 0 {
			return 0, 0, 0, 0, nil, errors.New("revision 0 in a class of managed revisions")
		}
	}
	return binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), binary.BigEndian.Uint32(p[16:]), revision, p[n:], nil
}

// Window value payload: u32 last emitted version.
func parseWindowValue(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, errors.New("window value not 4 bytes")
	}
	return binary.BigEndian.Uint32(p), nil
}

// appendResultKey appends a key of a results/<pipeline> bucket:
// start | end | escaped key | u32 version. The versions of one window are
// adjacent and in order, windows sort by (start, end, key).
func appendResultKey(dst []byte, start, end int64, key []byte, version uint32) []byte {
	dst = appendTime(dst, start)
	dst = appendTime(dst, end)
	dst = appendEscaped(dst, key)
	return binary.BigEndian.AppendUint32(dst, version)
}

func parseResultKey(k []byte) (start, end int64, key []byte, version uint32, err error) {
	if len(k) < 16+2+4 {
		return 0, 0, nil, 0, errors.New("short result key")
	}
	start, end = readTime(k), readTime(k[8:])
	key, rest, err := readEscaped(nil, k[16:len(k)-4])
	if err != nil {
		return 0, 0, nil, 0, err
	}
	if len(rest) != 0 {
		return 0, 0, nil, 0, errors.New("bytes between key and version")
	}
	if key == nil {
		key = []byte{}
	}
	return start, end, key, binary.BigEndian.Uint32(k[len(k)-4:]), nil
}

// Result value payload: u32 edges | i64 emitted (Unix ms) | state; in a
// class of managed revisions (managed), uvarint n | n × u32 revision
// (ascending, distinct) before the state. revs is ignored otherwise.
func appendResultValue(dst []byte, edges uint32, emitted int64, managed bool, revs []uint32, state []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, edges)
	dst = binary.BigEndian.AppendUint64(dst, uint64(emitted))
	if managed {
		dst = binary.AppendUvarint(dst, uint64(len(revs)))
		for _, r := range revs {
			dst = binary.BigEndian.AppendUint32(dst, r)
		}
	}
	return append(dst, state...)
}

// parseResultValue parses a result value; the revisions are appended to
// revs[:0] (nil when not managed).
func parseResultValue(p []byte, managed bool, revs []uint32) (edges uint32, emitted int64, outRevs []uint32, state []byte, err error) {
	if len(p) < 12 {
		return 0, 0, nil, nil, errors.New("short result value")
	}
	edges, emitted, p = binary.BigEndian.Uint32(p), int64(binary.BigEndian.Uint64(p[4:])), p[12:]
	if !managed {
		return edges, emitted, nil, p, nil
	}
	n, w := binary.Uvarint(p)
	if w <= 0 || w != uvarintLen(n) || n == 0 || n > uint64(len(p)-w)/4 {
		return 0, 0, nil, nil, errors.New("bad revision count")
	}
	p = p[w:]
	revs = revs[:0]
	for i := range int(n) {
		r := binary.BigEndian.Uint32(p[4*i:])
		if r == 0 || i > 0 && r <= revs[i-1] {
			return 0, 0, nil, nil, errors.New("revisions not ascending from 1")
		}
		revs = append(revs, r)
	}
	return edges, emitted, revs, p[4*n:], nil
}

// edgeRecord is the edges bucket's value for one edge.
type edgeRecord struct {
	epoch, acked uint64
	lastSeen     int64 // Unix ns
	watermarks   []pipelineWatermark
}

type pipelineWatermark struct {
	pipeline string
	wm       int64
}

// Edge value payload: u64 epoch | u64 acked | i64 last seen (Unix ns) |
// uvarint n | n × (uvarint len | pipeline | i64 watermark).
func appendEdgeValue(dst []byte, r *edgeRecord) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r.epoch)
	dst = binary.BigEndian.AppendUint64(dst, r.acked)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.lastSeen))
	dst = binary.AppendUvarint(dst, uint64(len(r.watermarks)))
	for _, w := range r.watermarks {
		dst = binary.AppendUvarint(dst, uint64(len(w.pipeline)))
		dst = append(dst, w.pipeline...)
		dst = binary.BigEndian.AppendUint64(dst, uint64(w.wm))
	}
	return dst
}

func parseEdgeValue(p []byte) (edgeRecord, error) {
	var r edgeRecord
	if len(p) < 24 {
		return r, errors.New("short edge value")
	}
	r.epoch = binary.BigEndian.Uint64(p)
	r.acked = binary.BigEndian.Uint64(p[8:])
	r.lastSeen = int64(binary.BigEndian.Uint64(p[16:]))
	p = p[24:]
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)) {
		return r, errors.New("bad watermark count")
	}
	p = p[w:]
	for range n {
		l, w := binary.Uvarint(p)
		if w <= 0 || l > uint64(len(p)-w) || len(p)-w-int(l) < 8 {
			return r, errors.New("truncated watermark")
		}
		name := string(p[w : w+int(l)])
		p = p[w+int(l):]
		r.watermarks = append(r.watermarks, pipelineWatermark{name, int64(binary.BigEndian.Uint64(p))})
		p = p[8:]
	}
	if len(p) != 0 {
		return r, errors.New("trailing bytes")
	}
	return r, nil
}

// Pipeline value payload: u8 flags (bit 0: has watermark) | i64 watermark |
// u64 result versions stored.
func appendPipelineValue(dst []byte, hasWM bool, wm int64, results uint64) []byte {
	var flags byte
	if hasWM {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(wm))
	return binary.BigEndian.AppendUint64(dst, results)
}

func parsePipelineValue(p []byte) (hasWM bool, wm int64, results uint64, err error) {
	if len(p) != 17 || p[0] > 1 {
		return false, 0, 0, errors.New("bad pipeline value")
	}
	return p[0] == 1, int64(binary.BigEndian.Uint64(p[1:])), binary.BigEndian.Uint64(p[9:]), nil
}

// Keys of the parked bucket: revision prefix | u8 len(edge) | edge | tag,
// and for a partial u64 epoch | u64 seq. The revision prefix is the pipe
// prefix of the pipeline's name for revision 0 (as format 2 wrote every
// key), 0x00 | pipe prefix | u32 revision for a managed revision: no pipe
// prefix begins with 0x00 (names are not empty). The records of one
// (pipeline, revision) are one key range, an edge's in it are adjacent,
// its watermark first and then its partials in (epoch, seq) order.
const (
	parkTagWatermark = 0x00
	parkTagPartial   = 0x01
	parkManaged      = 0x00 // leads the keys of managed revisions
)

// appendParkedRange appends the prefix of the parked records of
// (pipeline, revision).
func appendParkedRange(dst []byte, pipeline string, revision uint32) []byte {
	if revision == 0 {
		return appendPipePrefix(dst, pipeline)
	}
	dst = append(dst, parkManaged)
	dst = appendPipePrefix(dst, pipeline)
	return binary.BigEndian.AppendUint32(dst, revision)
}

// parkedRangeLen is len(appendParkedRange(nil, pipeline, revision)).
func parkedRangeLen(pipeline string, revision uint32) int {
	if revision == 0 {
		return 1 + len(pipeline)
	}
	return 1 + 1 + len(pipeline) + 4
}

func appendParkedPrefix(dst []byte, pipeline string, revision uint32, edge string, tag byte) []byte {
	dst = appendParkedRange(dst, pipeline, revision)
	dst = append(dst, byte(len(edge)))
	dst = append(dst, edge...)
	return append(dst, tag)
}

func appendParkedPartialKey(dst []byte, pipeline string, revision uint32, edge string, epoch, seq uint64) []byte {
	dst = appendParkedPrefix(dst, pipeline, revision, edge, parkTagPartial)
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// parkedKey is a decoded key of the parked bucket.
type parkedKey struct {
	pipeline, edge []byte
	revision       uint32
	tag            byte
	epoch, seq     uint64 // parkTagPartial only
}

func parseParkedKey(k []byte) (parkedKey, error) {
	var pk parkedKey
	managed := len(k) > 0 && k[0] == parkManaged
	if managed {
		k = k[1:]
	}
	if len(k) < 1 || k[0] == 0 || len(k) < 1+int(k[0])+1 {
		return pk, errors.New("short parked key")
	}
	n := int(k[0])
	pk.pipeline, k = k[1:1+n], k[1+n:]
	if managed {
		if len(k) < 4+1 {
			return pk, errors.New("short parked key")
		}
		if pk.revision, k = binary.BigEndian.Uint32(k), k[4:]; pk.revision == 0 {
			return pk, errors.New("managed revision 0")
		}
	}
	m := int(k[0])
	if len(k) < 1+m+1 {
		return pk, errors.New("short parked key")
	}
	pk.edge, k = k[1:1+m], k[1+m:]
	pk.tag, k = k[0], k[1:]
	switch {
	case pk.tag == parkTagWatermark && len(k) == 0:
	case pk.tag == parkTagPartial && len(k) == 16:
		pk.epoch, pk.seq = binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(k[8:])
	default:
		return pk, fmt.Errorf("bad parked tag 0x%02x with %d bytes", pk.tag, len(k))
	}
	return pk, nil
}

// Parked watermark payload: i64 parked at (Unix ms, hub clock) | i64
// watermark.
func appendParkedWatermark(dst []byte, at, wm int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(at))
	return binary.BigEndian.AppendUint64(dst, uint64(wm))
}

func parseParkedWatermark(p []byte) (at, wm int64, err error) {
	if len(p) != 16 {
		return 0, 0, errors.New("parked watermark not 16 bytes")
	}
	return int64(binary.BigEndian.Uint64(p)), int64(binary.BigEndian.Uint64(p[8:])), nil
}

// parkedPartial is a decoded parked partial payload: i64 parked at (Unix
// ms, hub clock) | i64 window start | i64 window end | u32 version |
// uvarint len(key) | key | state.
type parkedPartial struct {
	at, start, end int64
	version        uint32
	key, state     []byte
}

func appendParkedPartial(dst []byte, at, start, end int64, version uint32, key, state []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(at))
	dst = binary.BigEndian.AppendUint64(dst, uint64(start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(end))
	dst = binary.BigEndian.AppendUint32(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, state...)
}

func parseParkedPartial(p []byte) (parkedPartial, error) {
	var pp parkedPartial
	if len(p) < 28 {
		return pp, errors.New("short parked partial")
	}
	pp.at = int64(binary.BigEndian.Uint64(p))
	pp.start = int64(binary.BigEndian.Uint64(p[8:]))
	pp.end = int64(binary.BigEndian.Uint64(p[16:]))
	pp.version = binary.BigEndian.Uint32(p[24:])
	p = p[28:]
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return pp, errors.New("bad parked key length")
	}
	pp.key, pp.state = p[w:w+int(n)], p[w+int(n):]
	return pp, nil
}

// parkedAt reads the parked-at time that leads both parked payloads.
func parkedAt(p []byte) (int64, error) {
	if len(p) < 8 {
		return 0, errors.New("short parked value")
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

// addSat returns a+b for b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// subSat returns a-b, saturating at math.MinInt64.
func subSat(a int64, b int64) int64 {
	if b > 0 && a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
