package window

import (
	"fmt"
	"math"

	"github.com/runnel-io/runnel/window/aggregate"
)

// Config configures an Operator.
type Config struct {
	Assigner Assigner
	// Lateness is the allowed lateness in ms: how long after a window fired
	// (in watermark time) late events still update it.
	Lateness int64
	// Aggregates computes each window's values.
	Aggregates *aggregate.Set
	// Emit receives every window result. The Result, its Key and its State
	// are valid only during the call: copy or encode what must outlive it.
	Emit func(r *Result)

	// MaxResident, when positive and Store is set, bounds the keys kept in
	// memory: beyond it, clean keys whose windows have all fired are
	// evicted, and read back from Store on their next record (evict.go).
	// Session windows ignore it.
	MaxResident int
	// Store reads evicted keys back. The caller must report stored
	// checkpoints with Committed and snapshot with Checkpoint.
	Store KeyStore
}

// Result is one emitted window: version 1 when the watermark passes the
// window's end, 2, 3, … for each update by a late event within the allowed
// lateness.
type Result struct {
	Key        []byte
	Hash       uint64
	Start, End int64 // [Start, End) in Unix ms; for sessions, first event and last event + gap
	Version    uint32
	State      *aggregate.State
}

// Operator keeps the windows of many keys and fires them as the watermark
// advances. It is driven by one goroutine: Advance, then Add for each record
// in arrival order. It is not safe for concurrent use.
//
// Keys get dense indexes (keyIndex). Aligned windows keep their partial
// aggregates in one slab per slice, an array indexed by key, so firing a
// window streams through its slabs and needs no per-key timer; sessions keep
// a sorted list per key and one timer registration per key.
type Operator struct {
	emit     func(*Result)
	aggs     *aggregate.Set
	kind     Kind
	sl       slicing
	gap      int64
	lateness int64
	idleKeep int64 // how long a key without state is remembered, in watermark ms

	wm    int64
	index keyIndex
	names keyNames
	keys  []keyState
	sess  []sessionKey // session windows only: by key index, beside keys
	freeK []int32
	live  int

	// aligned windows
	slabs        []*slab // live slabs, ordered by end
	freeSlabs    []*slab
	freeChunks   []*chunk // recycle's pool for newChunk
	last         lastSlice
	blocks       []*slab // sliding: merged runs of blockLen/g slices, ordered by end
	blockLen     int64   // ms covered by one block; 0 when windows have too few slices
	firedThrough int64   // every window ending at or before this has fired
	nextWork     int64   // earliest watermark at which Advance has aligned work; MinTime for sessions
	nextSweep    int64   // when idle keys are next looked for

	// sessions
	timers timers
	free   []*aggregate.State

	// fired[idx] is the versions of key idx's aligned windows that had a
	// late update and are still within lateness, ordered by end; keys past
	// its length have none. Apart from keyState and grown only when a key
	// needs it: most keys never have a late update, and the slice header
	// would cost every key 24 bytes for nothing.
	fired [][]firedWindow

	scratch *aggregate.State
	acc     aggregate.States // a chunk of accumulators for firing sliding windows
	rows    []aggregate.Row  // scratch: the merges of one chunk into acc
	view    aggregate.State  // the partial being emitted, when it lives in a slab
	cover   []*slab          // scratch for blockCover
	res     Result
	stats   Stats

	// change tracking for SnapshotDirty
	changed []int32        // keys whose versions or sessions changed
	dropped []int64        // slice ends dropped past lateness
	deleted []deletedEntry // entries of forgotten keys
	enc     []byte         // scratch encoding

	// eviction (evict.go); wrote is nil without it
	maxResident   int
	store         KeyStore
	wrote         []uint64 // by key index: id of the checkpoint that last wrote the key; notStored
	snapID        uint64   // the checkpoint being snapshotted; notStored outside Checkpoint
	committed     uint64   // last checkpoint reported stored
	shedCommitted uint64   // committed, firedThrough and live after the last eviction pass
	shedFired     int64
	shedLive      int
	filter        evictedFilter // keys evicted, which may be in the store
	err           error
}

type deletedEntry struct {
	hash uint64
	key  []byte
}

// Stats counts what an Operator did.
type Stats struct {
	Added   uint64 // events accepted into at least one window
	Late    uint64 // events dropped: every window they belong to had closed
	Emitted uint64 // results emitted, all versions
	Updates uint64 // results with version > 1

	Evicted  uint64 // keys dropped from memory, clean, to be read back from the Store
	Reloaded uint64 // keys read back from the Store for a record
	Lookups  uint64 // Store reads for a key not in memory, found or not
}

// keyState is what the operator keeps per key besides its key bytes
// (keyNames) and window contents. Add on aligned windows does not touch it.
type keyState struct {
	hash uint64

	// aligned windows
	lastSlice int64 // latest slice end holding data of this key among the slabs dropped so far

	live    bool
	changed bool // versions or sessions changed since the last snapshot
	stored  bool // a snapshot holds a 'v' or 'x' entry of this key
}

// sessionKey is what session windows keep per key besides keyState, in
// Operator.sess by key index: aligned operators, usually the ones with
// most keys, do not carry it.
type sessionKey struct {
	due      int64     // time of the key's live timer registration; unregistered when none
	gcAt     int64     // when a key without sessions is forgotten; MinTime while it has some
	sessions []session // ordered by start, never overlapping
}

const unregistered = MaxTime

type firedWindow struct {
	end     int64
	version uint32
}

// NewOperator returns an Operator for cfg.
func NewOperator(cfg Config) (*Operator, error) {
	if err := cfg.Assigner.Validate(); err != nil {
		return nil, err
	}
	if cfg.Lateness < 0 {
		return nil, fmt.Errorf("%w: negative allowed lateness %d", ErrInvalid, cfg.Lateness)
	}
	if cfg.Aggregates == nil || cfg.Emit == nil {
		return nil, fmt.Errorf("%w: Aggregates and Emit are required", ErrInvalid)
	}
	o := &Operator{
		emit:         cfg.Emit,
		aggs:         cfg.Aggregates,
		kind:         cfg.Assigner.Kind,
		gap:          cfg.Assigner.Gap,
		lateness:     cfg.Lateness,
		wm:           MinTime,
		index:        newKeyIndex(),
		firedThrough: MinTime,
		nextWork:     MaxTime,
		nextSweep:    MinTime,
		timers:       newTimers(),
	}
	if o.kind == Session {
		o.idleKeep = cfg.Assigner.Gap
		o.nextWork = MinTime // every Advance goes to advanceSessions
	} else {
		o.sl = newSlicing(cfg.Assigner)
		o.idleKeep = cfg.Assigner.Size
		if n := o.sl.size / o.sl.g; n >= minBlockedSlices {
			o.blockLen = int64(math.Round(math.Sqrt(float64(n)))) * o.sl.g
		}
	}
	o.scratch = o.aggs.New()
	o.snapID = notStored
	if cfg.MaxResident > 0 && cfg.Store != nil && o.kind != Session {
		o.maxResident, o.store = cfg.MaxResident, cfg.Store
		o.wrote = []uint64{}
		o.filter.genLen = max(o.lateness, o.sl.size, 1)
		o.filter.end = MinTime
	}
	return o, nil
}

// Watermark returns the operator's watermark.
func (o *Operator) Watermark() int64 { return o.wm }

// Keys returns how many keys the operator remembers.
func (o *Operator) Keys() int { return o.live }

// Stats returns counters since the Operator was made.
func (o *Operator) Stats() Stats { return o.stats }

// Advance moves the watermark to wm (a smaller wm is ignored), firing every
// window that ends at or before it and dropping state that is past its
// allowed lateness. Results of one key come out in window order.
func (o *Operator) Advance(wm int64) {
	if wm <= o.wm {
		return
	}
	if wm < o.nextWork { // never for sessions: theirs is MinTime
		o.wm, o.firedThrough = wm, wm // no window with data ends in between
		return
	}
	o.advance(wm)
}

// advance is Advance when there may be work: apart so that Advance, called
// for every record, inlines.
func (o *Operator) advance(wm int64) {
	o.wm = wm
	if o.kind == Session {
		o.advanceSessions()
		return
	}
	o.advanceAligned()
}

// Add adds one event of key. hash must be a well-mixed 64-bit hash of key
// (the runtime's xxhash), equal for equal keys. Add reports false when the
// event was too late for every window it belongs to; the caller sends it to
// the late output. Add must follow the Advance to the watermark that
// includes this event. It is AddRecords of one record, without advancing.
func (o *Operator) Add(key []byte, hash uint64, in *aggregate.Input) bool {
	ends, hashes, times, marks := [1]int{len(key)}, [1]uint64{hash}, [1]int64{in.Time}, [1]int64{o.wm}
	r := Records{Keys: key, KeyEnds: ends[:], Hashes: hashes[:], Times: times[:], Marks: marks[:],
		Nums: in.Nums[:o.aggs.NumInputs()], InputHashes: in.Hashes[:o.aggs.HashInputs()]}
	ok := true
	o.AddRecords(&r, func(int, int64) { ok = false })
	return ok
}

// addNewKey is Add for a key the operator does not know.
func (o *Operator) addNewKey(key []byte, hash uint64, in *aggregate.Input) bool {
	if o.tooLate(in.Time) {
		o.stats.Late++
		return false // do not remember a key for a late event
	}
	return o.add(o.newKey(key, hash), in)
}

// add is Add for key idx, whatever its windows.
func (o *Operator) add(idx int32, in *aggregate.Input) bool {
	var ok bool
	if o.kind == Session {
		ok = o.addSession(idx, in)
	} else {
		ok = o.addAligned(idx, in)
	}
	if ok {
		o.stats.Added++
	} else {
		o.stats.Late++
	}
	return ok
}

// tooLate reports whether an event at t is past every window it could
// join, without looking at any key (sessions: a new session's bound).
func (o *Operator) tooLate(t int64) bool {
	if o.kind == Session {
		return addSat(addSat(t, o.gap), o.lateness) <= o.wm
	}
	return addSat(o.sl.lastEnd(o.sl.sliceEnd(t)), o.lateness) <= o.wm
}

func (o *Operator) newKey(key []byte, hash uint64) int32 {
	var idx int32
	if n := len(o.freeK); n > 0 {
		idx = o.freeK[n-1]
		o.freeK = o.freeK[:n-1]
	} else {
		idx = int32(len(o.keys))
		o.keys = append(o.keys, keyState{})
	}
	o.names.set(idx, key)
	if o.wrote != nil {
		if int(idx) == len(o.wrote) {
			o.wrote = append(o.wrote, notStored)
		}
		o.wrote[idx] = notStored
	}
	k := &o.keys[idx]
	k.hash = hash
	k.live = true
	k.lastSlice = MinTime
	if o.kind == Session {
		if int(idx) == len(o.sess) {
			o.sess = append(o.sess, sessionKey{})
		}
		s := &o.sess[idx]
		s.due = unregistered
		s.gcAt = MinTime
	}
	o.index.insert(hash, idx)
	o.live++
	return idx
}

// forget drops key idx and keeps its memory for the next new key.
func (o *Operator) forget(idx int32) {
	k := &o.keys[idx]
	if k.stored {
		tag := byte('v')
		if o.kind == Session {
			tag = 'x'
		}
		o.deleted = append(o.deleted, deletedEntry{k.hash, append([]byte{tag}, o.names.get(idx)...)})
	}
	k.stored, k.changed = false, false
	if o.kind == Session {
		sk := &o.sess[idx]
		for _, s := range sk.sessions {
			o.putState(s.st)
		}
		clear(sk.sessions)
		sk.sessions = sk.sessions[:0]
		sk.due = unregistered
	}
	o.release(idx)
}

// release drops key idx from memory (forget, evict) and keeps its memory
// for the next new key.
func (o *Operator) release(idx int32) {
	k := &o.keys[idx]
	k.stored, k.changed = false, false
	if int(idx) < len(o.fired) {
		o.fired[idx] = o.fired[idx][:0]
	}
	k.live = false
	o.names.clear(idx) // so that no key AddRecords found before matches it
	o.index.remove(k.hash, idx)
	o.freeK = append(o.freeK, idx)
	o.live--
}

// firedOf returns key idx's fired windows, growing o.fired to hold them.
func (o *Operator) firedOf(idx int32) *[]firedWindow {
	for int(idx) >= len(o.fired) {
		o.fired = append(o.fired, nil)
	}
	return &o.fired[idx]
}

// firedView returns key idx's fired windows, without growing o.fired.
func (o *Operator) firedView(idx int32) []firedWindow {
	if int(idx) < len(o.fired) {
		return o.fired[idx]
	}
	return nil
}

func (o *Operator) getState() *aggregate.State {
	if n := len(o.free); n > 0 {
		st := o.free[n-1]
		o.free = o.free[:n-1]
		return st
	}
	return o.aggs.New()
}

func (o *Operator) putState(st *aggregate.State) {
	o.aggs.Reset(st)
	o.free = append(o.free, st)
}

func (o *Operator) emitResult(idx int32, start, end int64, version uint32, st *aggregate.State) {
	k := &o.keys[idx]
	o.res = Result{Key: o.names.get(idx), Hash: k.hash, Start: start, End: end, Version: version, State: st}
	o.stats.Emitted++
	if version > 1 {
		o.stats.Updates++
	}
	o.emit(&o.res)
}
