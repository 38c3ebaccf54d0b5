package window

// PrefetchMax is the most records one Prefetch call looks at.
const PrefetchMax = 64

// prefetchMinKeys is the key count below which Prefetch does nothing: the
// keys' state then fits in the CPU caches (measured: at 10^3 keys prefetching
// costs ~10 ns per record, at 10^5 it saves ~140 ns).
const prefetchMinKeys = 1 << 14

// Prefetch is a hint: it reads, without changing anything, the memory that
// Add will need for the next records (their index slots, inline key names,
// long key bytes and current partials), one level at a time across all of
// them.
// Loads that do not depend on each other overlap in the CPU, so a run of
// records with keys scattered over a large state pays roughly one memory
// latency per level instead of one per level per record. Call it with up to
// PrefetchMax records' hashes and event times, then Add them as usual; it
// never affects results.
func (o *Operator) Prefetch(hashes []uint64, times []int64) {
	if len(o.keys) < prefetchMinKeys {
		return // the state fits in cache: nothing to gain
	}
	n := min(len(hashes), len(times), PrefetchMax)
	var idx [PrefetchMax]int32
	var sink uint64
	x := &o.index
	mask := uint64(len(x.slots) - 1)
	var mixes [PrefetchMax]uint32
	for i := range n {
		mixes[i] = mix(hashes[i])
		sink += uint64(x.slots[x.home(mixes[i])].mix)
	}
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
				sink += uint64(o.names.short[s.idx-1].n)
				break
			}
		}
	}
	for i := range n {
		if idx[i] >= 0 && o.names.short[idx[i]].n > inlineKey {
			sink += uint64(o.names.long[idx[i]][0]) // long keys live apart
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
					sink += ch.states.Touch(int(ch.slot[j]))
				}
			}
		}
	}
	o.sink += sink
}
