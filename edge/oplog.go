package edge

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/state"
)

// Codecs of a pipeline's operator state in state.db
// (docs/formats/state-layout.md, "Operator state of the edge"): per key
// group, op records (one per checkpoint that touched the group, the
// snapshot operations in order) and a base (the group's entries as of the
// last compaction). The code that stores and compacts them is opstate.go.

// Operations, as checkpoint.Changes names them.
const (
	opPut          = checkpoint.OpPut
	opDelete       = checkpoint.OpDelete
	opDeletePrefix = checkpoint.OpDeletePrefix
)

// Format bytes of the payloads (the first byte of every chunk).
const (
	opRecordFormat = 1
	baseFormat     = 1
)

// chunkBytes is the size above which a record or base goes on in another
// chunk: bbolt copies a changed value whole, and big values make big
// overflow pages that must be freed and found again.
const chunkBytes = 1 << 20

// opLog records one pipeline's snapshot operations of one checkpoint,
// already split by key group: it is the checkpoint.ChangeWriter the
// stagingSink hands to Barrier.Changes. A key's group is its hash modulo
// the store's key group count (hash 0, runtime-wide entries: group 0).
// A DeletePrefix applies to every group: it is appended to a group's
// operations when the group's next operation comes, or by finish, so that
// in every group it stands exactly where it stood in the stream.
type opLog struct {
	groups []groupOps // by key group; nil chunks: untouched
	xs     [][]byte   // DeletePrefix prefixes, in order
	bytes  int64      // keys and values handed in
}

type groupOps struct {
	chunks [][]byte // encoded operations, each chunk at most ~chunkBytes
	nx     int      // how many of xs are in chunks
}

func newOpLog(groups int) *opLog { return &opLog{groups: make([]groupOps, groups)} }

func (l *opLog) Put(h uint64, k, v []byte) error {
	l.bytes += int64(len(k) + len(v))
	l.add(l.groupOf(h), opPut, k, v)
	return nil
}

func (l *opLog) Delete(h uint64, k []byte) error {
	l.bytes += int64(len(k))
	l.add(l.groupOf(h), opDelete, k, nil)
	return nil
}

func (l *opLog) DeletePrefix(p []byte) error {
	l.bytes += int64(len(p))
	l.xs = append(l.xs, slices.Clone(p))
	return nil
}

func (l *opLog) groupOf(h uint64) int { return int(h % uint64(len(l.groups))) }

func (l *opLog) add(g int, op byte, k, v []byte) {
	l.catchUp(g)
	l.appendOp(g, op, k, v)
}

// catchUp appends to group g the prefix deletions it has not got yet.
func (l *opLog) catchUp(g int) {
	gs := &l.groups[g]
	for ; gs.nx < len(l.xs); gs.nx++ {
		l.appendOp(g, opDeletePrefix, l.xs[gs.nx], nil)
	}
}

func (l *opLog) appendOp(g int, op byte, k, v []byte) {
	gs := &l.groups[g]
	if n := len(gs.chunks); n == 0 || len(gs.chunks[n-1]) >= chunkBytes {
		gs.chunks = append(gs.chunks, make([]byte, 0, 256))
	}
	c := &gs.chunks[len(gs.chunks)-1]
	*c = appendOp(*c, op, k, v)
}

// finish appends the pending prefix deletions to every group that has
// operations or, by has, stored state; afterwards group g's record is
// l.groups[g].chunks (none: no record).
func (l *opLog) finish(has func(g int) bool) {
	if len(l.xs) == 0 {
		return
	}
	for g := range l.groups {
		if l.groups[g].chunks != nil || has(g) {
			l.catchUp(g)
		}
	}
}

// appendOp encodes one operation: kind | uvarint len(key) | key, and for
// a put uvarint len(value) | value.
func appendOp(dst []byte, op byte, k, v []byte) []byte {
	dst = append(dst, op)
	dst = binary.AppendUvarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	if op == opPut {
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

// Keys. Op records: be16(group) | be64(checkpoint id) | be16(chunk), so a
// group's records are contiguous and in checkpoint order. Bases:
// be16(group) | be16(chunk).
func opKey(dst []byte, g int, id uint64, chunk int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(g))
	dst = binary.BigEndian.AppendUint64(dst, id)
	return binary.BigEndian.AppendUint16(dst, uint16(chunk))
}

func baseKey(dst []byte, g, chunk int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(g))
	return binary.BigEndian.AppendUint16(dst, uint16(chunk))
}

// chunkHeader starts every chunk of an op record (format, chunk count) and
// of a base (format, chunk count, uvarint id of the last checkpoint folded
// into it).
func chunkHeader(dst []byte, format byte, chunks int, through uint64, base bool) []byte {
	dst = append(dst, format)
	dst = binary.AppendUvarint(dst, uint64(chunks))
	if base {
		dst = binary.AppendUvarint(dst, through)
	}
	return dst
}

// errBadState makes a decoding error of the stored state: of the
// ErrCorrupt class, naming the file, the bucket and the key.
func errBadState(path, bucket string, key []byte, format string, args ...any) error {
	return fmt.Errorf("edge: %s: %s key %x: %s: %w", path, bucket, key, fmt.Sprintf(format, args...), state.ErrCorrupt)
}

// decodeOps plays the operations of one op record chunk body onto f.
// It returns a description of what was wrong, or "".
func decodeOps(b []byte, f *folder) string {
	for len(b) > 0 {
		op := b[0]
		if op != opPut && op != opDelete && op != opDeletePrefix {
			return fmt.Sprintf("unknown operation %#x", op)
		}
		k, rest, ok := cutBytes(b[1:])
		if !ok {
			return "truncated key"
		}
		b = rest
		switch op {
		case opPut:
			v, rest, ok := cutBytes(b)
			if !ok {
				return "truncated value"
			}
			b = rest
			f.put(k, v)
		case opDelete:
			f.del(k)
		default:
			f.delPrefix(k)
		}
	}
	return ""
}

// eachBase calls fn with the entries of a base's chunk bodies, in order;
// keys must increase strictly. A malformed body gives why != "" (and the
// chunk's index); an error of fn is returned as err.
func eachBase(bodies [][]byte, fn func(k, v []byte) error) (chunk int, why string, err error) {
	var prev []byte
	for i, b := range bodies {
		for len(b) > 0 {
			k, rest, ok := cutBytes(b)
			if !ok || len(k) == 0 {
				return i, "truncated or empty key", nil
			}
			v, rest, ok := cutBytes(rest)
			if !ok {
				return i, "truncated value", nil
			}
			if prev != nil && string(k) <= string(prev) {
				return i, fmt.Sprintf("key %x after %x", k, prev), nil
			}
			if err := fn(k, v); err != nil {
				return i, "", err
			}
			prev, b = k, rest
		}
	}
	return 0, "", nil
}

// cutBytes reads uvarint len | bytes.
func cutBytes(b []byte) (v, rest []byte, ok bool) {
	n, m := binary.Uvarint(b)
	if m <= 0 || uint64(len(b)-m) < n {
		return nil, nil, false
	}
	return b[m : m+int(n)], b[m+int(n):], true
}

// readHeader checks a chunk's header and returns its chunk count, its
// through id (bases) and its body.
func readHeader(p []byte, format byte, base bool) (chunks int, through uint64, body []byte, why string) {
	if len(p) == 0 || p[0] != format {
		return 0, 0, nil, "unknown format"
	}
	n, m := binary.Uvarint(p[1:])
	if m <= 0 || n == 0 || n > 1<<16 {
		return 0, 0, nil, "bad chunk count"
	}
	p = p[1+m:]
	if base {
		var k int
		if through, k = binary.Uvarint(p); k <= 0 {
			return 0, 0, nil, "bad checkpoint id"
		}
		p = p[k:]
	}
	return int(n), through, p, ""
}

// folder holds the operations of a group's op records, applied in order,
// to be laid over the group's base (whose entries come first). A key's
// last put or delete wins; a prefix deletion is not applied by walking
// the entries: it is remembered with a sequence number, and an entry
// survives only if no prefix deletion that covers it came after it (base
// entries come before every operation). So folding n operations over a
// base of m entries costs O(n + m·p), p the number of distinct prefix
// lengths (one, for window slices), not O(n·m), and the base, already in
// key order, is merged, never sorted or put into a map.
type folder struct {
	m   map[string]foldEntry
	px  map[int]map[string]int // prefix length -> prefix -> seq of its last deletion
	seq int
}

type foldEntry struct {
	v   []byte
	seq int
	del bool
}

func newFolder() *folder {
	return &folder{m: map[string]foldEntry{}, px: map[int]map[string]int{}}
}

func (f *folder) reset() {
	clear(f.m)
	clear(f.px)
	f.seq = 0
}

func (f *folder) put(k, v []byte) {
	f.seq++
	f.m[string(k)] = foldEntry{v: v, seq: f.seq}
}

func (f *folder) del(k []byte) {
	f.seq++
	f.m[string(k)] = foldEntry{seq: f.seq, del: true}
}

func (f *folder) delPrefix(p []byte) {
	f.seq++
	byLen := f.px[len(p)]
	if byLen == nil {
		byLen = map[string]int{}
		f.px[len(p)] = byLen
	}
	byLen[string(p)] = f.seq
}

// prefixDeleted reports whether a prefix deletion after seq covers k.
func (f *folder) prefixDeleted(k string, seq int) bool {
	for l, byLen := range f.px {
		if l <= len(k) {
			if s, ok := byLen[k[:l]]; ok && s > seq {
				return true
			}
		}
	}
	return false
}

// baseLive reports whether base entry k survives the operations.
func (f *folder) baseLive(k []byte) bool {
	if _, ok := f.m[string(k)]; ok {
		return false // an operation decides, see opsLive
	}
	return len(f.px) == 0 || !f.prefixDeleted(string(k), 0)
}

// opLive reports whether the operations leave key k with a value.
func (f *folder) opLive(k string, e foldEntry) bool {
	return !e.del && (len(f.px) == 0 || !f.prefixDeleted(k, e.seq))
}

// materialize calls fn with every entry of the base (its chunk bodies)
// with the operations applied, in no particular order.
func (f *folder) materialize(base [][]byte, fn func(k, v []byte) error) (chunk int, why string, err error) {
	chunk, why, err = eachBase(base, func(k, v []byte) error {
		if f.baseLive(k) {
			return fn(k, v)
		}
		return nil
	})
	if why != "" || err != nil {
		return chunk, why, err
	}
	var kb []byte
	for k, e := range f.m {
		if f.opLive(k, e) {
			kb = append(kb[:0], k...)
			if err := fn(kb, e.v); err != nil {
				return 0, "", err
			}
		}
	}
	return 0, "", nil
}

// fold returns the chunk bodies of the new base: the base with the
// operations applied, in key order, each entry uvarint len(key) | key |
// uvarint len(value) | value. No entries: no chunks. size is a hint of
// the bytes it will take.
func (f *folder) fold(base [][]byte, size int) (chunks [][]byte, chunk int, why string) {
	keys := make([]string, 0, len(f.m))
	for k, e := range f.m {
		if f.opLive(k, e) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, strings.Compare)
	c := make([]byte, 0, min(size, chunkBytes)+chunkBytes/16)
	add := func(k, v []byte) {
		if len(c) >= chunkBytes {
			chunks = append(chunks, c)
			c = make([]byte, 0, min(size, chunkBytes)+chunkBytes/16)
		}
		c = binary.AppendUvarint(c, uint64(len(k)))
		c = append(c, k...)
		c = binary.AppendUvarint(c, uint64(len(v)))
		c = append(c, v...)
	}
	chunk, why, _ = eachBase(base, func(k, v []byte) error {
		for len(keys) > 0 && keys[0] < string(k) {
			add([]byte(keys[0]), f.m[keys[0]].v)
			keys = keys[1:]
		}
		if f.baseLive(k) {
			add(k, v)
		}
		return nil
	})
	if why != "" {
		return nil, chunk, why
	}
	for _, k := range keys {
		add([]byte(k), f.m[k].v)
	}
	if len(c) > 0 {
		chunks = append(chunks, c)
	}
	return chunks, 0, ""
}
