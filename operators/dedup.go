package operators

import (
	"bytes"
	"encoding/binary"
)

// Redelivery dedup. MQTT QoS 1 redelivers a message whose PUBACK was lost,
// for example when the edge crashed after the message was durable but before
// it acknowledged it. When the pipeline names event_id fields, the Runtime
// remembers the ids of the last DedupWindow records (in arrival order) and
// drops a record whose id it has seen. Redeliveries follow the original
// closely (they are the unacknowledged tail, bounded by the broker's Receive
// Maximum), so a window of some thousand records covers them; an id older
// than the window counts again. The remembered ids are part of every
// checkpoint, so dedup survives a restart: the ring is stored in chunks of
// dedupChunk ids, and a checkpoint writes the chunks that changed since the
// last committed one (a gateway taking a reading a second writes 2 KiB a
// checkpoint, not the whole 128 KiB ring), and a small header.

// DefaultDedupWindow is the number of event ids remembered.
const DefaultDedupWindow = 1 << 14

const keyDedup = 'd'

// dedupChunk is the number of ids a chunk entry of the ring holds.
const dedupChunk = 256

// The header entry ("d"): a magic, then the ring's length and its next
// position as 8-byte little-endian integers, then 1 if the ring is full.
// 20 bytes: never a multiple of 8, which the entry of checkpoints written
// before chunks is (every id, oldest first, 8 bytes each).
const (
	dedupMagic     = "DQ2"
	dedupHeaderLen = len(dedupMagic) + 8 + 8 + 1
)

// dedup is a FIFO of the last len(ring) ids with a hash index over it:
// an open-addressing table (linear probing, at most half full) of ring
// positions. Each record costs one probe sequence to look up, one to
// remove the oldest and one to insert, over two flat arrays, with no
// allocation; a Go map of the ids took 0.6 µs a record in the edge's
// profile, mostly cache misses of its larger footprint.
type dedup struct {
	ring  []uint64 // ids in arrival order; ring[next] is the oldest once full
	next  int
	full  bool
	slots []int32 // 0: free; else a ring position + 1
	shift uint    // 64 - log2(len(slots))

	// epoch is the last barrier injected; mod[c] the epoch in which chunk
	// c of the ring last changed. A chunk whose mod is at least the last
	// committed barrier has changes no committed checkpoint holds.
	epoch uint64
	mod   []uint64

	loaded *storedRing // what a restore read, until finishRestore
}

// storedRing is the ring as a checkpoint's entries describe it.
type storedRing struct {
	length, next int
	full         bool
	header       bool
	chunks       map[int][]byte
	legacy       []byte // a checkpoint written before chunks: every id, oldest first
}

func newDedup(n int) *dedup {
	bits := uint(1)
	for 1<<bits < 2*n {
		bits++
	}
	return &dedup{ring: make([]uint64, n), slots: make([]int32, 1<<bits), shift: 64 - bits,
		mod: make([]uint64, (n+dedupChunk-1)/dedupChunk)}
}

// home is id's first slot (Fibonacci hashing: ids that are not well mixed
// still spread).
func (d *dedup) home(id uint64) int { return int((id * 0x9E3779B97F4A7C15) >> d.shift) }

// check reports whether id was seen within the window, and remembers it.
func (d *dedup) check(id uint64) bool {
	mask := len(d.slots) - 1
	for i := d.home(id); d.slots[i] != 0; i = (i + 1) & mask {
		if d.ring[d.slots[i]-1] == id {
			return true
		}
	}
	if d.full {
		d.remove(d.next)
	}
	d.ring[d.next] = id
	d.mod[d.next/dedupChunk] = d.epoch
	i := d.home(id)
	for d.slots[i] != 0 {
		i = (i + 1) & mask
	}
	d.slots[i] = int32(d.next + 1)
	if d.next++; d.next == len(d.ring) {
		d.next, d.full = 0, true
	}
	return false
}

// remove takes ring position r out of the index, shifting back the
// entries after it in its probe run that would otherwise be cut off from
// their home slot (deletion without tombstones).
func (d *dedup) remove(r int) {
	mask := len(d.slots) - 1
	i := d.home(d.ring[r])
	for d.slots[i] != int32(r+1) {
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		s := d.slots[j]
		if s == 0 {
			break
		}
		// The entry at j stays if its home lies cyclically in (i, j].
		k := d.home(d.ring[s-1])
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		d.slots[i] = s
		i = j
	}
	d.slots[i] = 0
}

// putChanges hands put the entries a checkpoint needs of the ring, given
// the last committed barrier: the header, and each chunk changed since
// that barrier (every chunk in use before the first commit).
func (d *dedup) putChanges(put func(key, value []byte), committed uint64) {
	hdr := make([]byte, 0, dedupHeaderLen)
	hdr = append(hdr, dedupMagic...)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(d.ring)))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(d.next))
	full := byte(0)
	if d.full {
		full = 1
	}
	put([]byte{keyDedup}, append(hdr, full))
	var buf []byte
	for c, m := range d.mod {
		if m < committed || !d.full && c*dedupChunk >= d.next {
			continue // unchanged, or not used yet (restore reads up to next)
		}
		buf = appendIDs(buf[:0], d.ring[c*dedupChunk:min(len(d.ring), (c+1)*dedupChunk)])
		put(dedupChunkKey(c), buf)
	}
}

func dedupChunkKey(c int) []byte { return []byte{keyDedup, byte(c >> 8), byte(c)} }

// load takes one of the ring's checkpoint entries (key starts with
// keyDedup); finishRestore applies them once all are read. It keeps copies:
// a restore's values are valid during its call only.
func (d *dedup) load(key, value []byte) bool {
	if d.loaded == nil {
		d.loaded = &storedRing{chunks: map[int][]byte{}}
	}
	st := d.loaded
	switch {
	case len(key) == 3:
		st.chunks[int(key[1])<<8|int(key[2])] = bytes.Clone(value)
	case len(key) != 1:
		return false
	case len(value) == dedupHeaderLen && string(value[:len(dedupMagic)]) == dedupMagic:
		n := binary.LittleEndian.Uint64(value[3:])
		next := binary.LittleEndian.Uint64(value[11:])
		if n == 0 || n > 1<<30 || next >= n || value[19] > 1 {
			return false
		}
		st.header, st.length, st.next, st.full = true, int(n), int(next), value[19] == 1
	case len(value)%8 == 0:
		st.legacy = bytes.Clone(value)
	default:
		return false
	}
	return true
}

// finishRestore replays the ids the loaded entries hold, oldest first, into
// the ring (whatever its length now), which rebuilds the index. Every chunk
// is written again at the first checkpoint after.
func (d *dedup) finishRestore() bool {
	st := d.loaded
	d.loaded = nil
	if st == nil {
		return true
	}
	if !st.header {
		return len(st.chunks) == 0 && d.restore(st.legacy)
	}
	ring := make([]uint64, st.length)
	used := st.next
	if st.full {
		used = st.length
	}
	for c := 0; c*dedupChunk < used; c++ {
		b, ok := st.chunks[c]
		lo, hi := c*dedupChunk, min(st.length, (c+1)*dedupChunk)
		if !ok || len(b) != 8*(hi-lo) {
			return false
		}
		for i := lo; i < hi; i++ {
			ring[i] = binary.LittleEndian.Uint64(b[8*(i-lo):])
		}
	}
	if st.full {
		for _, id := range ring[st.next:] {
			d.check(id)
		}
	}
	for _, id := range ring[:st.next] {
		d.check(id)
	}
	return true
}

func appendIDs(b []byte, ids []uint64) []byte {
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return b
}

func (d *dedup) restore(b []byte) bool {
	if len(b)%8 != 0 {
		return false
	}
	for ; len(b) > 0; b = b[8:] {
		d.check(binary.LittleEndian.Uint64(b))
	}
	return true
}
