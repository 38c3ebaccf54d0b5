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

type dedup struct {
	ring []uint64 // ids in arrival order, ring[next] is the oldest
	next int
	seen map[uint64]int32 // id -> how many times in ring
}

func newDedup(n int) *dedup {
	return &dedup{ring: make([]uint64, n), seen: make(map[uint64]int32, n)}
}

// check reports whether id was seen within the window, and remembers it.
func (d *dedup) check(id uint64) bool {
	if d.seen[id] > 0 {
		return true
	}
	if old := d.ring[d.next]; old != 0 {
		if d.seen[old]--; d.seen[old] <= 0 {
			delete(d.seen, old)
		}
	}
	d.ring[d.next] = id
	d.seen[id]++
	d.next = (d.next + 1) % len(d.ring)
	return false
}

// appendSnapshot encodes the ids oldest first.
func (d *dedup) appendSnapshot(b []byte) []byte {
	for i := range d.ring {
		if id := d.ring[(d.next+i)%len(d.ring)]; id != 0 {
			b = binary.LittleEndian.AppendUint64(b, id)
		}
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
