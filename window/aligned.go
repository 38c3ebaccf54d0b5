package window

import (
	"math/bits"

	"github.com/runnel-io/runnel/window/aggregate"
)

// Aligned windows (tumbling and sliding) keep one partial aggregate per
// (key, slice). A tumbling window is one slice; a sliding window of size S
// and slide D is S/g consecutive slices of length g = gcd(S, D), so each
// event is added to exactly one partial however many windows overlap it,
// and firing a window merges its slices.
//
// The partials of one slice form a slab, cut in chunks of chunkSize key
// indexes, allocated on first use, each with a bitmap of the keys that have
// data. A chunk keeps its partials compact, in first-use order, found
// through a table of 2-byte slots by key: a slice that only some keys reach
// (a 1 s window of devices reporting every 10 s holds a tenth of them) takes
// memory for those keys only, where an array indexed by key would take it
// for all of them in every live slice. Firing walks the bitmaps in key order
// and dropping a slice past its lateness recycles the whole slab, chunks and
// their grown partials included.

const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

type slab struct {
	end    int64
	first  int64    // blocks: end of the first slice merged in; slices: end
	chunks []*chunk // chunk c holds key indexes [c*chunkSize, (c+1)*chunkSize)
}

type chunk struct {
	states aggregate.States       // partials in first-use order; states[slot[i]] is key i's when bit i is set
	slot   [chunkSize]uint16      // valid where bits is set
	bits   [chunkSize / 64]uint64 // keys with data
	dirty  [chunkSize / 64]uint64 // keys changed since the last snapshot
	n      int                    // bits set = partials in use, slots 0..n-1
}

// minChunkStates is how many partials a new chunk has room for; it doubles
// as keys arrive, up to chunkSize.
const minChunkStates = 64

// at returns key i's partial; bit i must be set.
func (ch *chunk) at(i int) aggregate.State { return ch.states.At(int(ch.slot[i])) }

// slabState returns key idx's partial in the slab, marking it as holding
// data.
func (o *Operator) slabState(sb *slab, idx int32) aggregate.State {
	ch, i := o.slabChunk(sb, idx)
	return ch.at(int(i))
}

// slabChunk returns the chunk of key idx's partial in the slab and idx's
// place in it, marking the partial as holding data.
func (o *Operator) slabChunk(sb *slab, idx int32) (*chunk, int32) {
	ch, i := sb.chunkOf(idx)
	if ch == nil {
		ch = o.newChunk(sb, int(idx>>chunkBits))
	}
	w, b := i>>6, uint64(1)<<(i&63)
	if ch.bits[w]&b == 0 {
		if ch.n == ch.states.Len() {
			o.aggs.GrowStates(&ch.states, min(2*ch.n, chunkSize))
		}
		ch.bits[w] |= b
		ch.slot[i] = uint16(ch.n)
		ch.n++
	}
	ch.dirty[w] |= b
	return ch, i
}

// newChunk gives sb its chunk c. It is slabChunk's slow path, apart so that
// slabChunk stays small.
func (o *Operator) newChunk(sb *slab, c int) *chunk {
	for len(sb.chunks) <= c {
		sb.chunks = append(sb.chunks, nil)
	}
	var ch *chunk
	if n := len(o.freeChunks); n > 0 {
		ch = o.freeChunks[n-1]
		o.freeChunks[n-1] = nil
		o.freeChunks = o.freeChunks[:n-1]
	} else {
		ch = &chunk{states: o.aggs.NewStates(minChunkStates)}
	}
	sb.chunks[c] = ch
	return ch
}

// chunkOf returns the chunk holding key idx and idx's place in it; ch is
// nil when the slab has no such chunk yet.
func (sb *slab) chunkOf(idx int32) (ch *chunk, i int32) {
	if c := int(idx >> chunkBits); c < len(sb.chunks) {
		ch = sb.chunks[c]
	}
	return ch, idx & chunkMask
}

// has returns key idx's partial in the slab; ok is false when it has no
// data.
func (sb *slab) has(idx int32) (st aggregate.State, ok bool) {
	c := int(idx >> chunkBits)
	if c >= len(sb.chunks) || sb.chunks[c] == nil {
		return st, false
	}
	ch := sb.chunks[c]
	i := idx & chunkMask
	if ch.bits[i>>6]&(1<<(i&63)) == 0 {
		return st, false
	}
	return ch.at(int(i)), true
}

// slab returns the slab of the slice ending at se, creating it.
func (o *Operator) slab(se int64) *slab {
	i := len(o.slabs)
	for i > 0 && o.slabs[i-1].end >= se {
		if o.slabs[i-1].end == se {
			return o.slabs[i-1]
		}
		i--
	}
	var sb *slab
	if n := len(o.freeSlabs); n > 0 {
		sb = o.freeSlabs[n-1]
		o.freeSlabs = o.freeSlabs[:n-1]
	} else {
		sb = &slab{}
	}
	sb.end, sb.first = se, se
	o.slabs = append(o.slabs, nil)
	copy(o.slabs[i+1:], o.slabs[i:])
	o.slabs[i] = sb
	o.planAligned()
	return sb
}

// sliceOf returns the slab and the window bounds of the slice holding t.
// Consecutive events mostly fall in the same slice, so the last answer is
// kept: the divisions of the slice arithmetic are paid once per slice, not
// once per event.
func (o *Operator) sliceOf(t int64) (sb *slab, se, fe, le int64) {
	if o.inLastSlice(t) {
		c := &o.last
		return c.sb, c.se, c.fe, c.le
	}
	se = o.sl.sliceEnd(t)
	le = o.sl.lastEnd(se)
	if addSat(le, o.lateness) <= o.wm {
		return nil, se, 0, le // every window holding this slice has closed
	}
	sb = o.slab(se)
	fe = o.sl.firstEnd(se)
	o.last = lastSlice{sb: sb, se: se, fe: fe, le: le}
	return sb, se, fe, le
}

// lastSlice caches sliceOf's last answer; recycle clears it.
type lastSlice struct {
	sb         *slab
	se, fe, le int64
}

// inLastSlice reports whether an event at t falls in the slice of sliceOf's
// last answer.
func (o *Operator) inLastSlice(t int64) bool {
	c := &o.last
	return c.sb != nil && t >= c.se-o.sl.g && t < c.se
}

func (o *Operator) addAligned(idx int32, in *aggregate.Input) bool {
	sb, se, fe, le := o.sliceOf(in.Time)
	if sb == nil || addSat(le, o.lateness) <= o.wm {
		return false // every window holding this slice has closed
	}
	var had bool // the key had data in the slice before this record
	if fe <= o.wm {
		_, had = sb.has(idx)
	}
	ch, i := o.slabChunk(sb, idx)
	o.aggs.AddAt(&ch.states, int(ch.slot[i]), in)
	if o.blockLen > 0 {
		if blk := o.blockOf(se); blk != nil {
			ch, i := o.slabChunk(blk, idx)
			o.aggs.AddAt(&ch.states, int(ch.slot[i]), in) // a late record into a merged block
		}
	}
	if fe > o.wm {
		return true // its windows fire when the watermark reaches them
	}
	// Late: windows of this slice that already fired (or were complete
	// without data) and are still within lateness emit their next version
	// now; the ones still open fire later.
	for e := fe; e <= le && e <= o.wm; e += o.sl.slide {
		if addSat(e, o.lateness) > o.wm {
			o.emitAligned(idx, e, se, had)
		}
	}
	return true
}

// planAligned computes nextWork: the earliest watermark at which a window
// with data ends or a slab passes its lateness.
func (o *Operator) planAligned() {
	o.nextWork = MaxTime
	if len(o.slabs) == 0 {
		return
	}
	o.nextWork = addSat(o.sl.lastEnd(o.slabs[0].end), o.lateness)
	if o.firedThrough == MaxTime {
		return
	}
	for _, sb := range o.slabs {
		e := o.sl.firstEnd(sb.end)
		if e <= o.firedThrough {
			e = o.sl.endAtOrAfter(o.firedThrough + 1)
		}
		if e <= o.sl.lastEnd(sb.end) {
			o.nextWork = min(o.nextWork, e)
			return
		}
	}
}

// advanceAligned fires every window with data that ends in
// (firedThrough, wm], in window order, then drops slabs past lateness and
// forgets idle keys.
func (o *Operator) advanceAligned() {
	hi := o.wm
	if len(o.slabs) > 0 && o.firedThrough < hi {
		e := o.sl.firstEnd(o.slabs[0].end)
		if o.firedThrough >= e {
			e = o.sl.endAtOrAfter(o.firedThrough + 1)
		}
		i := 0
		for e <= hi {
			for i < len(o.slabs) && o.slabs[i].end <= e-o.sl.size {
				i++
			}
			if i == len(o.slabs) {
				break
			}
			if o.slabs[i].end > e {
				e = o.sl.firstEnd(o.slabs[i].end) // no data in window e: skip ahead
				continue
			}
			o.fireWindow(e, i)
			if e > MaxTime-o.sl.slide {
				break
			}
			e += o.sl.slide
		}
	}
	o.firedThrough = hi
	n := 0
	for n < len(o.slabs) && addSat(o.sl.lastEnd(o.slabs[n].end), o.lateness) <= o.wm {
		o.dropped = append(o.dropped, o.slabs[n].end)
		o.noteLastSlice(o.slabs[n], o.slabs[n+1:])
		o.recycle(o.slabs[n])
		n++
	}
	if n > 0 {
		m := copy(o.slabs, o.slabs[n:])
		clear(o.slabs[m:])
		o.slabs = o.slabs[:m]
	}
	n = 0
	for n < len(o.blocks) && addSat(o.sl.lastEnd(o.blocks[n].first), o.lateness) <= o.wm {
		o.recycle(o.blocks[n])
		n++
	}
	if n > 0 {
		m := copy(o.blocks, o.blocks[n:])
		clear(o.blocks[m:])
		o.blocks = o.blocks[:m]
	}
	if o.wm >= o.nextSweep {
		o.sweepAligned()
	}
	o.planAligned()
}

// fireWindow emits, for every key with data in it, the window ending at e.
// Its slabs start at o.slabs[first]. A sliding window merges its slabs chunk
// by chunk into an accumulator chunk, so every slab is read sequentially.
func (o *Operator) fireWindow(e int64, first int) {
	last := first
	for last+1 < len(o.slabs) && o.slabs[last+1].end <= e {
		last++
	}
	cover := o.slabs[first : last+1]
	if o.blockLen > 0 {
		cover = o.blockCover(e, cover)
	}
	nchunks := 0
	for _, sb := range cover {
		nchunks = max(nchunks, len(sb.chunks))
	}
	for c := range nchunks {
		var union [chunkSize / 64]uint64
		for _, sb := range cover {
			if c < len(sb.chunks) && sb.chunks[c] != nil && sb.chunks[c].n > 0 {
				for w, x := range sb.chunks[c].bits {
					union[w] |= x
				}
			}
		}
		var acc *aggregate.States
		if len(cover) > 1 {
			if o.acc.Len() == 0 {
				o.acc = o.aggs.NewStates(chunkSize)
			}
			acc = &o.acc
			for _, sb := range cover {
				if c >= len(sb.chunks) || sb.chunks[c] == nil || sb.chunks[c].n == 0 {
					continue
				}
				ch := sb.chunks[c]
				rows := o.rows[:0]
				for w, x := range ch.bits {
					for x != 0 {
						i := w<<6 | bits.TrailingZeros64(x)
						x &= x - 1
						rows = append(rows, aggregate.Row{Dst: int32(i), Src: int32(ch.slot[i])})
					}
				}
				o.aggs.MergeRows(acc, &ch.states, rows)
				o.rows = rows
			}
		}
		for w, x := range union {
			for x != 0 {
				i := w<<6 | bits.TrailingZeros64(x)
				x &= x - 1
				// A window's first emission is version 1; nothing is
				// remembered of it: a late update finds out from the data
				// whether there was one (emitAligned).
				idx := int32(c<<chunkBits | i)
				if acc != nil {
					o.view = acc.At(i)
					o.emitResult(idx, e-o.sl.size, e, 1, &o.view)
					o.aggs.Reset(&o.view)
				} else {
					o.view = cover[0].chunks[c].at(i)
					o.emitResult(idx, e-o.sl.size, e, 1, &o.view)
				}
			}
		}
	}
}

// emitAligned emits key idx's window ending at e, which has fired and is
// within lateness, with its next version: a late record of the slice
// ending at se was just added, and had tells whether the key had data in
// that slice before it.
//
// Versions are remembered from the first late update on. Before it, the
// window's data is what it was when the window fired, but for this record:
// the key was emitted then (version 1) if it had data in the window's
// slices, this one's before the record included, and this update is
// version 2; otherwise it is version 1.
func (o *Operator) emitAligned(idx int32, e, se int64, had bool) {
	st := o.scratch
	o.aggs.Reset(st)
	for _, sb := range o.slabs {
		if sb.end > e-o.sl.size && sb.end <= e {
			if s, ok := sb.has(idx); ok {
				o.aggs.Merge(st, &s)
				had = had || sb.end != se
			}
		}
	}
	o.emitResult(idx, e-o.sl.size, e, o.bumpVersion(idx, e, had), st)
}

// bumpVersion returns the next version of key idx's window ending at e and
// remembers it while the window can still change; versions past lateness
// are dropped on the way. emitted tells, for a window with no version
// remembered, whether it was emitted when it fired.
func (o *Operator) bumpVersion(idx int32, e int64, emitted bool) uint32 {
	o.touch(idx)
	fired := o.firedOf(idx)
	n := 0
	for n < len(*fired) && addSat((*fired)[n].end, o.lateness) <= o.wm {
		n++
	}
	if n > 0 {
		*fired = (*fired)[:copy(*fired, (*fired)[n:])]
	}
	fw := *fired
	i := len(fw)
	for i > 0 && fw[i-1].end >= e {
		i--
	}
	if i < len(fw) && fw[i].end == e {
		fw[i].version++
		return fw[i].version
	}
	var v uint32 = 1
	if emitted {
		v = 2
	}
	fw = append(fw, firedWindow{})
	copy(fw[i+1:], fw[i:])
	fw[i] = firedWindow{end: e, version: v}
	*fired = fw
	return v
}

// noteLastSlice records sb, a slice being dropped, as the lastSlice of its
// keys that have no data in the later slabs: lastSlice matters only to keys
// without data in a live slab (sweepAligned), so Add need not touch the
// key's bookkeeping per record, and keys that keep reporting are not
// touched here either.
func (o *Operator) noteLastSlice(sb *slab, later []*slab) {
	for c, ch := range sb.chunks {
		if ch == nil || ch.n == 0 {
			continue
		}
		held := heldIn(c, later)
		for w, x := range ch.bits {
			x &^= held[w]
			for x != 0 {
				k := &o.keys[c<<chunkBits|w<<6|bits.TrailingZeros64(x)]
				x &= x - 1
				k.lastSlice = max(k.lastSlice, sb.end)
			}
		}
	}
}

// heldIn returns the keys of chunk c with data in any of slabs.
func heldIn(c int, slabs []*slab) (held [chunkSize / 64]uint64) {
	for _, sb := range slabs {
		if c < len(sb.chunks) && sb.chunks[c] != nil && sb.chunks[c].n > 0 {
			for w, x := range sb.chunks[c].bits {
				held[w] |= x
			}
		}
	}
	return held
}

// recycle empties sb and keeps it for reuse. Its chunks go to a pool that
// any slab's next new chunk draws from, trimmed to as many as sb held: a
// chunk's place in the key space is no guide to its use in the next slice
// (eviction and reloads scatter keys), so chunks are reused wherever keys
// arrive, and one whose slice used a quarter of the room it had grown to
// comes back with room for twice what was used.
func (o *Operator) recycle(sb *slab) {
	if o.last.sb == sb {
		o.last = lastSlice{}
	}
	held := 0
	for c, ch := range sb.chunks {
		if ch == nil {
			continue
		}
		sb.chunks[c] = nil
		held++
		if ch.n*4 <= ch.states.Len() && ch.states.Len() > minChunkStates {
			ch.states = o.aggs.NewStates(max(minChunkStates, 2*ch.n))
		} else {
			for j := range ch.n { // the partials in use are slots 0..n-1: reset them in memory order
				st := ch.states.At(j)
				o.aggs.Reset(&st)
			}
		}
		ch.bits = [chunkSize / 64]uint64{}
		ch.dirty = [chunkSize / 64]uint64{}
		ch.n = 0
		o.freeChunks = append(o.freeChunks, ch)
	}
	if len(o.freeChunks) > held {
		clear(o.freeChunks[held:])
		o.freeChunks = o.freeChunks[:held]
	}
	o.freeSlabs = append(o.freeSlabs, sb)
}

// sweepAligned forgets keys whose data has all been dropped for idleKeep:
// keys without data in a live slab whose lastSlice is that old.
func (o *Operator) sweepAligned() {
	for c := 0; c*chunkSize < len(o.keys); c++ {
		held := heldIn(c, o.slabs)
		for i := c * chunkSize; i < min(len(o.keys), (c+1)*chunkSize); i++ {
			if held[i&chunkMask>>6]&(1<<(i&63)) != 0 {
				continue // checked first: keys that keep reporting are not read
			}
			k := &o.keys[i]
			if !k.live {
				continue
			}
			if o.wm == MaxTime || k.lastSlice == MinTime ||
				addSat(addSat(o.sl.lastEnd(k.lastSlice), o.lateness), o.idleKeep) <= o.wm {
				o.forget(int32(i))
			}
		}
	}
	o.nextSweep = addSat(o.wm, o.idleKeep)
}

// Blocks. A sliding window of n slices would merge n partials per key each
// time it fires. With blocks of about sqrt(n) slices, merged once and kept,
// a window is its first and last few slices plus the blocks in between:
// about 2*sqrt(n) merges per key and fire (a 1 h window sliding by 1 min:
// about 15 instead of 60), for 1/sqrt(n) more memory. A late record updates
// its slice and, if merged already, its block.

// minBlockedSlices is the number of slices per window from which blocks pay.
const minBlockedSlices = 16

// blockBounds returns the first and last slice ends of the block holding
// the slice ending at se. Blocks are aligned to multiples of blockLen.
func (o *Operator) blockBounds(se int64) (first, end int64) {
	end = floorDiv(se-o.sl.g, o.blockLen)*o.blockLen + o.blockLen
	return end - o.blockLen + o.sl.g, end
}

// blockOf returns the merged block holding the slice ending at se, or nil.
func (o *Operator) blockOf(se int64) *slab {
	_, end := o.blockBounds(se)
	for i := len(o.blocks) - 1; i >= 0 && o.blocks[i].end >= end; i-- {
		if o.blocks[i].end == end {
			return o.blocks[i]
		}
	}
	return nil
}

// blockCover replaces, in the slabs covering the window ending at e, every
// run of slabs that makes up a whole block inside the window by that block,
// merging the block first if needed. The result lives in o.cover.
func (o *Operator) blockCover(e int64, slabs []*slab) []*slab {
	o.cover = o.cover[:0]
	for i := 0; i < len(slabs); {
		first, end := o.blockBounds(slabs[i].end)
		if first <= e-o.sl.size || end > e {
			o.cover = append(o.cover, slabs[i]) // block not inside the window
			i++
			continue
		}
		j := i + 1
		for j < len(slabs) && slabs[j].end <= end {
			j++
		}
		blk := o.blockOf(slabs[i].end)
		if blk == nil {
			blk = o.mergeBlock(first, end, slabs[i:j])
		}
		o.cover = append(o.cover, blk)
		i = j
	}
	return o.cover
}

// mergeBlock merges the slabs of one block, chunk by chunk, into a new block.
func (o *Operator) mergeBlock(first, end int64, slabs []*slab) *slab {
	var blk *slab
	if n := len(o.freeSlabs); n > 0 {
		blk = o.freeSlabs[n-1]
		o.freeSlabs = o.freeSlabs[:n-1]
	} else {
		blk = &slab{}
	}
	blk.first, blk.end = first, end
	for _, sb := range slabs {
		for c, ch := range sb.chunks {
			if ch == nil || ch.n == 0 {
				continue
			}
			for w, x := range ch.bits {
				for x != 0 {
					i := w<<6 | bits.TrailingZeros64(x)
					x &= x - 1
					dc, di := o.slabChunk(blk, int32(c<<chunkBits|i))
					o.aggs.MergeAt(&dc.states, int(dc.slot[di]), &ch.states, int(ch.slot[i]))
				}
			}
		}
	}
	i := len(o.blocks)
	for i > 0 && o.blocks[i-1].end > end {
		i--
	}
	o.blocks = append(o.blocks, nil)
	copy(o.blocks[i+1:], o.blocks[i:])
	o.blocks[i] = blk
	return blk
}
