package window

import (
	"unsafe"

	"github.com/runnel-io/runnel/internal/prefetch"
)

// PrefetchMax is the most records one Prefetch call looks at.
const PrefetchMax = 64

// prefetchMinKeys is the key count below which Prefetch does nothing: the
// keys' state then fits in the CPU caches (measured: at 10^3 keys prefetching
// costs ~10 ns per record, at 10^5 it saves ~140 ns).
const prefetchMinKeys = 1 << 14

// Prefetch is a hint: it asks the CPU to load, without changing anything,
// the memory that Add will need for the next records: their index slots,
// inline key names and current partials. Call it with up to PrefetchMax
// records' hashes and event times, then Add them as usual; it never affects
// results.
//
// Each level's addresses depend on the level before (a key's index slot
// gives its index, which gives its name and partial), so it goes level by
// level across all the records, and within a level requests every record's
// line before reading any: the misses overlap instead of queueing behind
// one another. The slots are requested, then walked (which waits about one
// memory latency for the whole batch, not one per record); the names and
// partials are requested and still on their way when Prefetch returns, so
// the first Adds overlap with them. (Requesting the next batch's slots a
// batch ahead measured no better here, so the API stays one batch at a
// time.)
func (o *Operator) Prefetch(hashes []uint64, times []int64) {
	if len(o.keys) < prefetchMinKeys {
		return // the state fits in cache: nothing to gain
	}
	n := min(len(hashes), len(times), PrefetchMax)
	x := &o.index
	mask := uint64(len(x.slots) - 1)
	var mixes [PrefetchMax]uint32
	var addrs [3 * PrefetchMax]uintptr // names, then partials (two lines each)
	for i := range n {
		mixes[i] = mix(hashes[i])
		addrs[i] = uintptr(unsafe.Pointer(&x.slots[x.home(mixes[i])]))
	}
	prefetch.Lines(addrs[:n])

	var idx [PrefetchMax]int32
	na := 0
	for i := range n {
		m := mixes[i]
		idx[i] = -1
		for j := x.home(m); ; j = (j + 1) & mask {
			s := x.slots[j]
			if s.idx == 0 {
				break
			}
			if s.mix == m {
				idx[i] = s.idx - 1
				addrs[na] = uintptr(unsafe.Pointer(&o.names.short[s.idx-1]))
				na++
				break
			}
		}
	}

	if o.kind != Session && len(o.slabs) > 0 {
		// Consecutive records mostly fall in one slice: its slab is looked
		// up when the slice changes, not per record.
		var sb *slab
		lo, hi := MaxTime, MinTime // the slice [lo, hi) whose slab is sb
		for i := range n {
			if idx[i] < 0 {
				continue
			}
			if t := times[i]; t < lo || t >= hi {
				hi = o.sl.sliceEnd(t)
				lo = hi - o.sl.g
				sb = nil
				for j := len(o.slabs) - 1; j >= 0 && o.slabs[j].end >= hi; j-- {
					if o.slabs[j].end == hi {
						sb = o.slabs[j]
						break
					}
				}
			}
			if sb == nil {
				continue
			}
			c := int(idx[i] >> chunkBits)
			if c < len(sb.chunks) && sb.chunks[c] != nil {
				ch := sb.chunks[c]
				if j := idx[i] & chunkMask; ch.bits[j>>6]&(1<<(j&63)) != 0 {
					addrs[na], addrs[na+1] = ch.states.Lines(int(ch.slot[j]))
					na += 2
				}
			}
		}
	}
	prefetch.Lines(addrs[:na])
}
