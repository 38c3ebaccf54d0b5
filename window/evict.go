package window

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Eviction. With Config.MaxResident set and a KeyStore to read from, the
// operator keeps at most about that many keys in memory: when more are
// resident, it drops the clean keys whose last checkpoint write is oldest,
// and a record for a key it does not hold reads the key's entries back from
// the store before it is added.
//
// Invariants:
//
//   - Only a clean key is evicted: none of its partials and neither its
//     versions changed since the snapshot that last wrote them, and that
//     snapshot was taken at a checkpoint the caller has reported stored
//     (Committed). So the store holds exactly the key's state, and a reload
//     (from the last committed checkpoint, or a later one) gets it back.
//   - Only a key whose windows have all fired is evicted: every slice it has
//     data in ends windows at or before firedThrough. Firing a window
//     therefore never needs an evicted key, and no timer of one is pending;
//     what remains of it in the store is read only by a late record of that
//     key (a reload), or deleted by the prefix deletion of its slice when
//     the slice passes its lateness. A merged block that holds an evicted
//     key's data is, for the same reason, never read again.
//   - A key with remembered versions (a late update within lateness) stays:
//     its 'v' entry would otherwise outlive it in the store.
//   - Session operators never evict (their keys have timers of their own).
//
// Between a key's eviction and its reload nothing changes it, but slices
// past their lateness are dropped: a reload ignores stored slices that are
// no longer live, and versions past lateness.

// KeyStore reads the entries stored for one record key: the state of the
// last committed checkpoint (or of a later one), as a full Snapshot followed
// by the SnapshotDirty operations up to it would have left them. It is
// declared here, by its one consumer; the edge implements it over its op
// log and bases. Load may be called from several operators' goroutines at
// once.
type KeyStore interface {
	// Load calls fn with every stored entry (as Snapshot wrote it) whose
	// record key is key, in any order; hash is the key's hash as Add got
	// it. Entry key and value are valid only during the call.
	Load(hash uint64, key []byte, fn func(entryKey, value []byte) error) error
}

// notStored tags a key whose state no snapshot has written yet.
const notStored = math.MaxUint64

// shedLow is the share of MaxResident an eviction pass goes down to, in
// eighths: passes come once per MaxResident/8 new keys at most.
const shedLow = 7

// Checkpoint is SnapshotDirty as checkpoint id: the keys it writes may be
// evicted once Committed reports id (or a later id) stored. Ids must
// increase. Without eviction it is SnapshotDirty.
func (o *Operator) Checkpoint(id uint64, w SnapshotWriter) error {
	o.snapID = id
	defer func() { o.snapID = notStored }()
	return o.snapshot(w, false)
}

// Committed tells the operator that the snapshots of checkpoints up to id
// are in the store its KeyStore reads. It may run eviction.
func (o *Operator) Committed(id uint64) {
	o.committed = max(o.committed, id)
}

// Err returns the first error of a reload from the KeyStore. Once it is
// set, the operator's results are no longer complete: the caller must
// stop.
func (o *Operator) Err() error { return o.err }

// Resident returns how many keys the operator holds in memory (Keys).
func (o *Operator) Resident() int { return o.live }

// wrote notes that key idx's state was written by the snapshot in progress.
func (o *Operator) noteWrote(idx int32) {
	if o.wrote != nil {
		o.wrote[idx] = o.snapID
	}
}

// evictable reports whether key idx may leave memory (see the invariants
// above).
func (o *Operator) evictable(idx int32) bool {
	k := &o.keys[idx]
	if !k.live || k.changed || k.stored || len(o.firedView(idx)) > 0 || o.wrote[idx] > o.committed {
		return false
	}
	for _, sb := range o.slabs {
		ch, i := sb.chunkOf(idx)
		if ch == nil {
			continue
		}
		w, b := i>>6, uint64(1)<<(i&63)
		if ch.bits[w]&b == 0 {
			continue
		}
		if ch.dirty[w]&b != 0 || o.sl.lastEnd(sb.end) > o.firedThrough {
			return false
		}
	}
	return true
}

// shed evicts clean keys, those written longest ago first, until at most
// shedLow/8 of MaxResident are resident or none is left to evict. A pass
// that could not reach the budget is not retried before a checkpoint is
// committed or windows fire.
func (o *Operator) shed() {
	if o.maxResident <= 0 || o.live <= o.maxResident || o.kind == Session {
		return
	}
	if o.shedCommitted == o.committed && o.shedFired == o.firedThrough && o.live < o.shedLive+o.maxResident/8 {
		return // nothing became evictable since the last pass fell short
	}
	target := o.maxResident * shedLow / 8
	need := o.live - target
	// Ages in checkpoints since the key was last written, capped: the
	// histogram gives the oldest age to evict from.
	var ages [64]int
	age := func(idx int32) int {
		return int(min(o.committed-o.wrote[idx], uint64(len(ages)-1))) // evictable: wrote <= committed
	}
	for i := range o.keys {
		if o.keys[i].live && o.evictable(int32(i)) {
			ages[age(int32(i))]++
		}
	}
	floor, n := 0, 0
	for a := len(ages) - 1; a >= 0; a-- {
		n += ages[a]
		if n >= need {
			floor = a
			break
		}
	}
	for i := range o.keys {
		if need <= 0 {
			break
		}
		if o.keys[i].live && age(int32(i)) >= floor && o.evictable(int32(i)) {
			o.evict(int32(i))
			need--
		}
	}
	o.shedCommitted, o.shedFired, o.shedLive = o.committed, o.firedThrough, o.live
}

// evict drops clean key idx from memory; its state stays in the store.
func (o *Operator) evict(idx int32) {
	for _, sb := range o.slabs {
		o.dropPartial(sb, idx)
	}
	for _, sb := range o.blocks {
		o.dropPartial(sb, idx)
	}
	o.filter.add(o.wm, o.keys[idx].hash)
	o.release(idx)
	o.stats.Evicted++
}

// dropPartial removes key idx's partial from sb, moving the chunk's last
// partial into its place so that the chunk's partials stay compact.
func (o *Operator) dropPartial(sb *slab, idx int32) {
	ch, i := sb.chunkOf(idx)
	if ch == nil {
		return
	}
	w, b := i>>6, uint64(1)<<(i&63)
	if ch.bits[w]&b == 0 {
		return
	}
	s, last := int(ch.slot[i]), ch.n-1
	if s != last {
		// Find the key holding the last partial (a walk of the chunk's
		// bitmap, 1024 keys at most) and move its partial.
	find:
		for wj, x := range ch.bits {
			for x != 0 {
				j := wj<<6 | bits.TrailingZeros64(x)
				x &= x - 1
				if int(ch.slot[j]) == last {
					dst, src := ch.states.At(s), ch.states.At(last)
					o.aggs.CopyTo(&dst, &src)
					ch.slot[j] = uint16(s)
					break find
				}
			}
		}
	}
	st := ch.states.At(last)
	o.aggs.Reset(&st)
	ch.bits[w] &^= b
	ch.dirty[w] &^= b
	ch.n--
	// Evicted keys leave fired slabs mostly empty: their memory goes with
	// them (a chunk holds 2 KiB of slots besides its partials).
	switch c := int(idx >> chunkBits); {
	case ch.n == 0:
		sb.chunks[c] = nil
	case ch.n <= ch.states.Len()/4 && ch.states.Len() > minChunkStates:
		ss := o.aggs.NewStates(max(minChunkStates, 2*ch.n))
		for j := range ch.n {
			dst, src := ss.At(j), ch.states.At(j)
			o.aggs.CopyTo(&dst, &src)
		}
		ch.states = ss
	}
}

// reload reads key's stored entries back and returns its new index, or -1
// when the store holds nothing live of it (a new key). A record at t that
// is too late for every window reloads nothing.
func (o *Operator) reload(key []byte, hash uint64, t int64) int32 {
	if o.err != nil || o.tooLate(t) {
		return -1
	}
	o.stats.Lookups++
	idx := int32(-1)
	err := o.store.Load(hash, key, func(ek, v []byte) error {
		if len(ek) == 0 {
			return fmt.Errorf("%w: empty entry key", ErrCorrupt)
		}
		switch ek[0] {
		case 's':
			if len(ek) < 9 || string(ek[9:]) != string(key) {
				return fmt.Errorf("%w: entry %q loaded for key %q", ErrCorrupt, ek, key)
			}
			end := int64(binary.BigEndian.Uint64(ek[1:9]) ^ 1<<63)
			if end == MinTime || addSat(o.sl.lastEnd(end), o.lateness) <= o.wm {
				return nil // dropped since: its deletion is on its way to the store
			}
		case 'v':
			if string(ek[1:]) != string(key) {
				return fmt.Errorf("%w: entry %q loaded for key %q", ErrCorrupt, ek, key)
			}
		default:
			return fmt.Errorf("%w: entry %q in an aligned operator's key store", ErrCorrupt, ek)
		}
		if idx < 0 {
			idx = o.newKey(key, hash)
		}
		return o.Restore(hash, ek, v)
	})
	if err != nil {
		o.err = fmt.Errorf("window: reload of key %q: %w", key, err)
		if idx >= 0 {
			o.evict(idx) // half loaded: not a state to go on with
			o.stats.Evicted--
		}
		return -1
	}
	if idx < 0 {
		return -1
	}
	// What was loaded is what the store holds: not dirty, stored as of the
	// last committed checkpoint.
	for _, sb := range o.slabs {
		if ch, i := sb.chunkOf(idx); ch != nil {
			ch.dirty[i>>6] &^= 1 << (i & 63)
		}
	}
	if o.kind != Session {
		// Versions past lateness (of a key forgotten since, whose deletion
		// is not stored yet) are dropped; the entry is then rewritten.
		if fired := o.firedView(idx); len(fired) > 0 {
			n := 0
			for _, f := range fired {
				if addSat(f.end, o.lateness) > o.wm {
					fired[n] = f
					n++
				}
			}
			if n < len(fired) {
				o.fired[idx] = fired[:n]
				o.touch(idx)
			}
		}
	}
	o.wrote[idx] = 0
	o.stats.Reloaded++
	return idx
}

// evictedFilter tells which keys not in memory may have state in the
// store: Bloom filters of the hashes of the keys evicted, in two
// generations. A key evicted at watermark w has stored state at most until
// the watermark passes w + lateness (its slices have all fired, and each
// is dropped past its lateness); a generation lasts at least that long
// (genLen) and a key stays in the filter for its own generation and the
// next, so a key that may be in the store always tests positive. Keys
// never evicted test negative but for false positives (about 1% per
// filter at its designed load), which cost a lookup that finds nothing:
// new keys, the common case, read nothing from the store. A generation
// that fills its filter adds one of twice the size; the next generation
// starts with one sized for all of them.
type evictedFilter struct {
	cur, prev []filterBits
	end       int64 // watermark at which cur's generation ends
	genLen    int64
}

type filterBits struct {
	bits []uint64 // a power of two of words
	n    int      // keys added
}

// filterProbes is the number of bits a key sets: with 10 bits per key,
// about a 1% false positive rate.
const filterProbes = 7

func (f *filterBits) has(h uint64) bool {
	if f.n == 0 {
		return false
	}
	mask := uint64(len(f.bits)*64 - 1)
	a, b := h, h>>32|h<<32|1
	for range filterProbes {
		if i := a & mask; f.bits[i>>6]&(1<<(i&63)) == 0 {
			return false
		}
		a += b
	}
	return true
}

func (f *filterBits) add(h uint64) {
	mask := uint64(len(f.bits)*64 - 1)
	a, b := h, h>>32|h<<32|1
	for range filterProbes {
		i := a & mask
		f.bits[i>>6] |= 1 << (i & 63)
		a += b
	}
	f.n++
}

func (f *filterBits) full() bool { return f.n*10 >= len(f.bits)*64 }

// filterWords returns the size of a filter for keys keys: 10 bits a key,
// a power of two of words, at least 1024 words (8 KiB).
func filterWords(keys int) int {
	w := 1024
	for w*64 < 10*keys {
		w *= 2
	}
	return w
}

// rotate starts a new generation at watermark wm if the current one is
// over, with one filter sized for what the last one took.
func (f *evictedFilter) rotate(wm int64) {
	if wm < f.end && len(f.cur) > 0 {
		return
	}
	n := 0
	for _, b := range f.cur {
		n += b.n
	}
	f.prev = f.cur
	f.cur = []filterBits{{bits: make([]uint64, filterWords(n))}}
	f.end = addSat(wm, f.genLen)
}

// add adds key hash h to the current generation.
func (f *evictedFilter) add(wm int64, h uint64) {
	f.rotate(wm)
	last := &f.cur[len(f.cur)-1]
	if last.full() {
		f.cur = append(f.cur, filterBits{bits: make([]uint64, 2*len(last.bits))})
		last = &f.cur[len(f.cur)-1]
	}
	last.add(h)
}

// mayBeStored reports whether key hash h, not in memory, may have state in
// the store.
func (o *Operator) mayBeStored(h uint64) bool {
	f := &o.filter
	f.rotate(o.wm)
	for _, gen := range [2][]filterBits{f.cur, f.prev} {
		for i := range gen {
			if gen[i].has(h) {
				return true
			}
		}
	}
	return false
}
