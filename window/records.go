package window

import (
	"unsafe"

	"github.com/runnel-io/runnel/internal/prefetch"
	"github.com/runnel-io/runnel/window/aggregate"
)

// Records is a run of records in arrival order, in columns, as a worker
// receives them. Record i has the key Keys[KeyEnds[i-1]:KeyEnds[i]] (the
// first starts at 0) with hash Hashes[i] (as Add's), the event time
// Times[i], the numeric inputs Nums[i*n:(i+1)*n] (n = Set.NumInputs()) and
// the hash inputs InputHashes[i*h:(i+1)*h] (h = Set.HashInputs()); Marks[i]
// is the watermark it arrived under. Every column holds Len() records.
type Records struct {
	Keys        []byte
	KeyEnds     []int
	Hashes      []uint64
	Times       []int64
	Marks       []int64
	Nums        []float64
	InputHashes []uint64
}

// Len returns the number of records.
func (r *Records) Len() int { return len(r.Times) }

// PipelineGroup is how many records AddRecords looks up together: the step
// of its pipeline.
const PipelineGroup = 8

// pipelineMinKeys is the key count below which AddRecords does not request
// memory ahead: the keys' state then fits in the CPU caches (measured: at
// 10^3 keys prefetching cost 10-25 ns per record, all loss).
const pipelineMinKeys = 1 << 14

// AddRecords adds the records of r in order, each as Advance(r.Marks[i])
// then Add would, with the same results, and calls late(i, watermark) for
// each record too late for every window it belongs to.
//
// With many keys each record's lookups (its key's index slot, then its name
// and its partial) are a chain of cache misses, so AddRecords runs them as
// a software pipeline in groups of PipelineGroup records, one level of the
// chain per group: while it adds one group, whose names and partials were
// requested a group earlier, it walks the next group's index slots
// (requested a group earlier too) to find their keys, requests those keys'
// names and partials, and requests the index slots of the group after. The
// requests are prefetch instructions: they retire at once, where loads
// would hold up the instructions after them. Few lines are requested at a
// time on purpose: a burst larger than the CPU's miss buffers is partly
// dropped (measured: 64 records' lines requested 64 records ahead were
// mostly not in cache when read; 8 records' all were). The first two groups
// of a run get no or half a head start.
//
// The key indexes found by the walk are hints: the add confirms each
// against the key's name, and looks the key up as usual when it differs (a
// key forgotten since the walk has its name cleared) or when the walk found
// none (a key that a record before it created).
func (o *Operator) AddRecords(r *Records, late func(i int, watermark int64)) {
	n := r.Len()
	nn, nh := o.aggs.NumInputs(), o.aggs.HashInputs()
	ahead := len(o.keys) >= pipelineMinKeys
	// hints[g&1] is group g's key indexes, found while group g-1 was
	// added; -1: none.
	var hints [2][PipelineGroup]int32
	for i := range hints {
		for j := range hints[i] {
			hints[i][j] = -1
		}
	}
	if ahead {
		o.requestSlots(r.Hashes[:min(n, PipelineGroup)])
		o.requestSlots(r.Hashes[min(n, PipelineGroup):min(n, 2*PipelineGroup)])
		o.lookAhead(r, 0, &hints[0])
	}
	var in aggregate.Input
	start := 0
	keys, keyEnds, hashes, times, marks, nums := r.Keys, r.KeyEnds[:n], r.Hashes[:n], r.Times[:n], r.Marks[:n], r.Nums
	for g := 0; g < n; g += PipelineGroup {
		end := min(g+PipelineGroup, n)
		cur := &hints[g/PipelineGroup&1]
		if ahead {
			o.lookAhead(r, end, &hints[g/PipelineGroup&1^1])
			o.requestSlots(r.Hashes[min(end+PipelineGroup, n):min(end+2*PipelineGroup, n)])
		}
		for i := g; i < end; i++ {
			o.Advance(marks[i])
			keyEnd := keyEnds[i]
			key := keys[start:keyEnd]
			start = keyEnd
			in.Time = times[i]
			in.Nums = nums[i*nn : i*nn+nn]
			if nh > 0 {
				in.Hashes = r.InputHashes[i*nh : i*nh+nh]
			}
			idx := cur[i-g]
			if idx < 0 || !o.names.equal(idx, key) {
				if idx = o.index.find(hashes[i], key, &o.names); idx < 0 {
					// A key not in memory may have been evicted.
					if o.stats.Evicted > 0 && o.mayBeStored(hashes[i]) {
						idx = o.reload(key, hashes[i], in.Time)
					}
					if idx < 0 {
						if !o.addNewKey(key, hashes[i], &in) {
							late(i, o.wm)
						}
						continue
					}
				}
			}
			// Most records on aligned windows fall on time in the slice of
			// the record before: that case is done here in full, without
			// the calls and checks of the general path (addAligned). A
			// sliding window's merged block never holds an on-time slice
			// (blocks are merged for windows that fired), so blocks need no
			// look.
			if c := &o.last; o.inLastSlice(in.Time) && c.fe > o.wm {
				ch, j := c.sb.chunkOf(idx)
				if w, b := j>>6, uint64(1)<<(j&63); ch == nil || ch.bits[w]&b == 0 {
					ch, j = o.slabChunk(c.sb, idx) // the key's first record in the slice
				} else {
					ch.dirty[w] |= b
				}
				o.aggs.AddAt(&ch.states, int(ch.slot[j]), &in)
				o.stats.Added++
				continue
			}
			if !o.add(idx, &in) {
				late(i, o.wm)
			}
		}
	}
	if o.maxResident > 0 && o.live > o.maxResident {
		o.shed()
	}
}

// requestSlots requests the index slots of hashes.
func (o *Operator) requestSlots(hashes []uint64) {
	var addrs [PipelineGroup]uintptr
	x := &o.index
	for i, h := range hashes[:min(len(hashes), PipelineGroup)] {
		addrs[i] = uintptr(unsafe.Pointer(&x.slots[x.home(mix(h))]))
	}
	prefetch.Lines(addrs[:min(len(hashes), PipelineGroup)])
}

// lookAhead walks the index slots of the group of r from record g on,
// writes the keys it finds (-1: none) to hints, and requests their names
// and, for records in the slice of the last record added (most are; a key's
// first record in a new slice has no partial yet), their partials.
func (o *Operator) lookAhead(r *Records, g int, hints *[PipelineGroup]int32) {
	hashes := r.Hashes[min(g, len(r.Hashes)):min(g+PipelineGroup, len(r.Hashes))]
	times := r.Times[min(g, len(r.Times)):]
	var addrs [3 * PipelineGroup]uintptr // names, partials (two lines each)
	na := 0
	sb, hi := o.last.sb, o.last.se // sb is nil for sessions
	lo := hi - o.sl.g
	for i, h := range hashes {
		k := o.index.walk(h)
		hints[i] = k
		if k < 0 {
			continue
		}
		addrs[na] = uintptr(unsafe.Pointer(&o.names.short[k]))
		na++
		if t := times[i]; sb == nil || t < lo || t >= hi {
			continue
		}
		if ch, j := sb.chunkOf(k); ch != nil && ch.bits[j>>6]&(1<<(j&63)) != 0 {
			first, last := ch.states.Lines(int(ch.slot[j]))
			addrs[na] = first
			na++
			if last>>6 != first>>6 { // a partial across two lines
				addrs[na] = last
				na++
			}
		}
	}
	prefetch.Lines(addrs[:na])
}
