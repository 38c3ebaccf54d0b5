package window

import (
	"fmt"

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
	// Emit receives every window result. The Result and its State are valid
	// only during the call: copy or encode what must outlive it.
	Emit func(r *Result)
}

// Result is one emitted window: version 1 when the watermark passes the
// window's end, 2, 3, … for each update by a late event within the allowed
// lateness.
type Result struct {
	Key        string
	Hash       uint64
	Start, End int64 // [Start, End) in Unix ms; for sessions, first event and last event + gap
	Version    uint32
	State      *aggregate.State
}

// Operator keeps the windows of many keys and fires them as the watermark
// advances. It is driven by one goroutine: Advance, then Add for each record
// in arrival order. It is not safe for concurrent use.
type Operator struct {
	emit     func(*Result)
	aggs     *aggregate.Set
	kind     Kind
	sl       slicing
	gap      int64
	lateness int64
	idleKeep int64 // how long an empty key stays in the map, in watermark ms

	wm      int64
	keys    map[string]*keyState
	timers  timers
	free    []*aggregate.State
	freeK   []*keyState
	scratch *aggregate.State
	res     Result
	stats   Stats
}

// Stats counts what an Operator did.
type Stats struct {
	Added   uint64 // events accepted into at least one window
	Late    uint64 // events dropped: every window they belong to had closed
	Emitted uint64 // results emitted, all versions
	Updates uint64 // results with version > 1
}

// keyState is everything the operator keeps for one key.
type keyState struct {
	key  string
	hash uint64
	due  int64 // time of the key's live timer registration; unregistered when none

	// aligned windows
	slices      []slice       // ordered by end
	fired       []firedWindow // versions of emitted windows still within lateness, ordered by end
	firedThrough int64        // every window ending at or before this was fired for this key
	gcAt         int64        // when an empty key is forgotten; MinTime while it holds state

	// session windows
	sessions []session // ordered by start, never overlapping
}

const unregistered = MaxTime

type slice struct {
	end int64
	st  *aggregate.State
}

type firedWindow struct {
	end     int64
	version uint32
}

type session struct {
	start, end int64
	st         *aggregate.State
	version    uint32 // last emitted version
	dirty      bool   // changed since last emitted
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
		emit:     cfg.Emit,
		aggs:     cfg.Aggregates,
		kind:     cfg.Assigner.Kind,
		gap:      cfg.Assigner.Gap,
		lateness: cfg.Lateness,
		wm:       MinTime,
		keys:     make(map[string]*keyState),
		timers:   newTimers(),
	}
	if o.kind == Session {
		o.idleKeep = cfg.Assigner.Gap
	} else {
		o.sl = newSlicing(cfg.Assigner)
		o.idleKeep = cfg.Assigner.Size
	}
	o.scratch = o.aggs.New()
	return o, nil
}

// Watermark returns the operator's watermark.
func (o *Operator) Watermark() int64 { return o.wm }

// Keys returns how many keys the operator holds state or timers for.
func (o *Operator) Keys() int { return len(o.keys) }

// Stats returns counters since the Operator was made.
func (o *Operator) Stats() Stats { return o.stats }

// Advance moves the watermark to wm (a smaller wm is ignored), firing every
// window that ends at or before it and dropping state that is past its
// allowed lateness. Results of one key come out in window order.
func (o *Operator) Advance(wm int64) {
	if wm <= o.wm {
		return
	}
	o.wm = wm
	for {
		t, ok := o.timers.next()
		if !ok || t > wm {
			return
		}
		_, b := o.timers.pop()
		for _, k := range b.keys {
			if k.due != t {
				continue // moved earlier and already handled
			}
			k.due = unregistered
			if o.kind == Session {
				o.processSessions(k)
			} else {
				o.processAligned(k)
			}
		}
		o.timers.release(b)
	}
}

// Add adds one event of key (hash is the key's hash, kept for routing the
// results). It reports false when the event was too late for every window it
// belongs to; the caller sends it to the late output. Add must follow the
// Advance to the watermark that includes this event.
func (o *Operator) Add(key []byte, hash uint64, in *aggregate.Input) bool {
	k := o.keys[string(key)]
	if k == nil {
		k = o.newKey(key, hash)
	}
	var ok bool
	if o.kind == Session {
		ok = o.addSession(k, in)
	} else {
		ok = o.addAligned(k, in)
	}
	if ok {
		k.gcAt = MinTime
		o.stats.Added++
	} else {
		o.stats.Late++
		if k.due == unregistered && o.empty(k) {
			o.reschedule(k) // a key born late still needs forgetting
		}
	}
	return ok
}

func (o *Operator) newKey(key []byte, hash uint64) *keyState {
	var k *keyState
	if n := len(o.freeK); n > 0 {
		k = o.freeK[n-1]
		o.freeK = o.freeK[:n-1]
	} else {
		k = &keyState{}
	}
	k.key = string(key)
	k.hash = hash
	k.due = unregistered
	k.firedThrough = o.wm
	k.gcAt = MinTime
	o.keys[k.key] = k
	return k
}

// want makes sure k is processed no later than t.
func (o *Operator) want(k *keyState, t int64) {
	if t < k.due {
		k.due = t
		o.timers.add(t, k)
	}
}

func (o *Operator) empty(k *keyState) bool {
	return len(k.slices) == 0 && len(k.fired) == 0 && len(k.sessions) == 0
}

// reschedule registers an unregistered k at the next time it has work, or
// forgets it when it has been empty long enough.
func (o *Operator) reschedule(k *keyState) {
	next := MaxTime
	if o.kind == Session {
		for i := range k.sessions {
			s := &k.sessions[i]
			t := addSat(s.end, o.lateness)
			if s.dirty {
				t = s.end
			}
			next = min(next, t)
		}
	} else {
		if len(k.slices) > 0 {
			next = addSat(o.sl.lastEnd(k.slices[0].end), o.lateness)
			if o.wm != MaxTime {
				pending := o.sl.endAtOrAfter(o.wm + 1)
				for _, s := range k.slices {
					if e := max(o.sl.firstEnd(s.end), pending); e <= o.sl.lastEnd(s.end) {
						next = min(next, e)
						break
					}
				}
			}
		}
		if len(k.fired) > 0 {
			next = min(next, addSat(k.fired[0].end, o.lateness))
		}
	}
	if next == MaxTime {
		// Empty. Keep the key (its map slot and buffers) for a while, so a
		// key that reports in every window does not allocate in every window;
		// forget it once it has been empty for idleKeep.
		if k.gcAt == MinTime {
			k.gcAt = addSat(o.wm, o.idleKeep)
		}
		if o.wm >= k.gcAt || k.gcAt == MaxTime {
			o.forget(k)
			return
		}
		next = k.gcAt
	}
	o.want(k, next)
}

// forget drops k and keeps its memory for the next new key.
func (o *Operator) forget(k *keyState) {
	for _, s := range k.slices {
		o.putState(s.st)
	}
	for _, s := range k.sessions {
		o.putState(s.st)
	}
	delete(o.keys, k.key)
	k.slices = k.slices[:0]
	k.fired = k.fired[:0]
	k.sessions = k.sessions[:0]
	k.key = ""
	k.due = unregistered
	k.gcAt = MinTime
	o.freeK = append(o.freeK, k)
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

func (o *Operator) emitResult(k *keyState, start, end int64, version uint32, st *aggregate.State) {
	o.res = Result{Key: k.key, Hash: k.hash, Start: start, End: end, Version: version, State: st}
	o.stats.Emitted++
	if version > 1 {
		o.stats.Updates++
	}
	o.emit(&o.res)
}
