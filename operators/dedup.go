package operators

import "encoding/binary"

// Redelivery dedup. MQTT QoS 1 redelivers a message whose PUBACK was lost,
// for example when the edge crashed after the message was durable but before
// it acknowledged it. When the pipeline names event_id fields, the Runtime
// remembers the ids of the last DedupWindow records (in arrival order) and
// drops a record whose id it has seen. Redeliveries follow the original
// closely (they are the unacknowledged tail, bounded by the broker's Receive
// Maximum), so a window of some thousand records covers them; an id older
// than the window counts again. The remembered ids are part of every
// checkpoint, so dedup survives a restart.

// DefaultDedupWindow is the number of event ids remembered.
const DefaultDedupWindow = 1 << 14

const keyDedup = 'd'

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
}

func newDedup(n int) *dedup {
	bits := uint(1)
	for 1<<bits < 2*n {
		bits++
	}
	return &dedup{ring: make([]uint64, n), slots: make([]int32, 1<<bits), shift: 64 - bits}
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

// appendSnapshot encodes the ids oldest first.
func (d *dedup) appendSnapshot(b []byte) []byte {
	if d.full {
		b = appendIDs(b, d.ring[d.next:])
	}
	return appendIDs(b, d.ring[:d.next])
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
