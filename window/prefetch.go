package window

import (
	"unsafe"

	"github.com/runnel-io/runnel/internal/prefetch"
)

// PrefetchStep is how many records apart Prefetch is meant to be called;
// PrefetchAhead is how many records, from the next one to add, it wants to
// see.
const (
	PrefetchStep  = 8
	PrefetchAhead = 3 * PrefetchStep
)

// prefetchMinKeys is the key count below which Prefetch does nothing: the
// keys' state then fits in the CPU caches (measured: at 10^3 keys
// prefetching costs 10-25 ns per record, all loss).
const prefetchMinKeys = 1 << 14

// Prefetch is a hint: it asks the CPU to load, without changing anything,
// the memory that Add will need for coming records: their index slots,
// inline key names and current partials. It never affects results.
//
// Call it every PrefetchStep records with the hashes and event times of
// the records from the one to be added next (it looks at PrefetchAhead of
// them at most), then Add PrefetchStep of them as usual. It is a software pipeline in
// groups of PrefetchStep records, one level of memory per group:
//
//   - the first group is being added: its lines were requested by the call
//     before;
//   - the second group's index slots, requested by the call before, are
//     read to find the keys, and their names and partials are requested;
//   - the third group's index slots are requested.
//
// A level's addresses depend on the level before (a key's slot gives its
// index, which gives its name and partial), so each waits a call, by which
// time its lines have arrived, and the Adds run while the next ones are on
// their way. Few lines are requested per call on purpose: a burst of
// prefetches larger than the CPU's miss buffers is partly dropped (measured:
// 64-record batches requested a batch ahead were mostly not in cache when
// read), while a few per call all complete. On the first call for a run of
// records (a worker's batch) the first two groups get no or half a head
// start; that costs those records a miss, not a wrong result.
func (o *Operator) Prefetch(hashes []uint64, times []int64) {
	if len(o.keys) < prefetchMinKeys {
		return // the state fits in cache: nothing to gain
	}
	n := min(len(hashes), len(times), PrefetchAhead)
	x := &o.index
	mask := uint64(len(x.slots) - 1)
	var addrs [4 * PrefetchStep]uintptr // names, partials (two lines each), slots
	na := 0

	// The second group: find the keys, request their names and partials.
	var sb *slab
	lo, hi := MaxTime, MinTime // the slice [lo, hi) whose slab is sb
	aligned := o.kind != Session && len(o.slabs) > 0
	for i := PrefetchStep; i < min(n, 2*PrefetchStep); i++ {
		m := mix(hashes[i])
		k := -1
		for j := x.home(m); ; j = (j + 1) & mask {
			s := x.slots[j]
			if s.idx == 0 {
				break
			}
			if s.mix == m {
				k = int(s.idx - 1)
				break
			}
		}
		o.found.put(hashes[i], int32(k))
		if k < 0 {
			continue
		}
		addrs[na] = uintptr(unsafe.Pointer(&o.names.short[k]))
		na++
		if !aligned {
			continue
		}
		// Consecutive records mostly fall in one slice: its slab is looked
		// up when the slice changes, not per record.
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
		if c := k >> chunkBits; c < len(sb.chunks) && sb.chunks[c] != nil {
			ch := sb.chunks[c]
			if j := k & chunkMask; ch.bits[j>>6]&(1<<(j&63)) != 0 {
				first, last := ch.states.Lines(int(ch.slot[j]))
				addrs[na] = first
				na++
				if last>>6 != first>>6 { // a partial across two lines
					addrs[na] = last
					na++
				}
			}
		}
	}

	// The third group: request its slots.
	for i := 2 * PrefetchStep; i < n; i++ {
		addrs[na] = uintptr(unsafe.Pointer(&x.slots[x.home(mix(hashes[i]))]))
		na++
	}
	prefetch.Lines(addrs[:na])
}

// found passes the key indexes Prefetch's walk found to the Adds of those
// records, so that an Add whose key Prefetch found confirms it against the
// key's name (a line Prefetch requested) instead of probing the index
// again. It is a queue in record order: Prefetch walks each record once,
// one group ahead of its Add. An Add whose hash is not at the head (a record
// Prefetch did not see, as the first of a worker's batch) looks its key up
// as usual; a queue kept full by records never added loses its oldest. The
// indexes are hints: forget clears a key's name, so a key forgotten or
// replaced since the walk fails the confirmation.
type found struct {
	hash       [foundCap]uint64
	idx        [foundCap]int32
	head, size int
}

const foundCap = 4 * PrefetchStep // a power of two

func (f *found) put(hash uint64, idx int32) {
	if f.size == foundCap {
		f.head = (f.head + 1) % foundCap
		f.size--
	}
	i := (f.head + f.size) % foundCap
	f.hash[i], f.idx[i] = hash, idx
	f.size++
}

// take returns the index Prefetch found for the record with hash if it is
// the next in the queue, and -1 otherwise (as when the walk found none).
func (f *found) take(hash uint64) int32 {
	if f.size == 0 || f.hash[f.head] != hash {
		return -1
	}
	idx := f.idx[f.head]
	f.head = (f.head + 1) % foundCap
	f.size--
	return idx
}
