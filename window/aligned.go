package window

import "github.com/runnel-io/runnel/window/aggregate"

// Aligned windows (tumbling and sliding) keep one partial aggregate per
// (key, slice). A tumbling window is one slice; a sliding window of size S
// and slide D is S/g consecutive slices of length g = gcd(S, D), so each
// event is added to exactly one partial however many windows overlap it,
// and firing a window merges its slices.

func (o *Operator) addAligned(k *keyState, in *aggregate.Input) bool {
	se := o.sl.sliceEnd(in.Time)
	le := o.sl.lastEnd(se)
	if addSat(le, o.lateness) <= o.wm {
		return false // every window holding this slice has closed
	}
	fe := o.sl.firstEnd(se)
	// Advance has fired every window of this key that ends at or before wm.
	k.firedThrough = max(k.firedThrough, o.wm)
	st, created := o.sliceState(k, se)
	o.aggs.Add(st, in)
	if fe > o.wm {
		if created {
			o.want(k, fe) // its first window is the earliest new work
		}
		return true
	}
	// Late: windows of this slice that already fired (or were complete
	// without data) and are still within lateness emit their next version
	// now; the ones still open fire later.
	next := addSat(le, o.lateness) // the slice's purge
	if le > o.wm {
		next = min(next, o.sl.endAtOrAfter(o.wm+1)) // its first open window
	}
	for e := fe; e <= le && e <= o.wm; e += o.sl.slide {
		if addSat(e, o.lateness) > o.wm {
			o.emitAligned(k, e)
			next = min(next, addSat(e, o.lateness)) // forgetting its version
		}
	}
	o.want(k, next)
	return true
}

// sliceState returns k's partial for the slice ending at se, creating it.
func (o *Operator) sliceState(k *keyState, se int64) (*aggregate.State, bool) {
	i := len(k.slices)
	for i > 0 && k.slices[i-1].end >= se {
		if k.slices[i-1].end == se {
			return k.slices[i-1].st, false
		}
		i--
	}
	st := o.getState()
	k.slices = append(k.slices, slice{})
	copy(k.slices[i+1:], k.slices[i:])
	k.slices[i] = slice{end: se, st: st}
	return st, true
}

// processAligned fires k's windows that end in (firedThrough, wm], drops
// what is past lateness and registers k for its next work.
func (o *Operator) processAligned(k *keyState) {
	hi := o.wm
	if len(k.slices) > 0 && k.firedThrough < hi {
		e := o.sl.firstEnd(k.slices[0].end)
		if k.firedThrough >= e {
			e = o.sl.endAtOrAfter(k.firedThrough + 1)
		}
		i := 0
		for e <= hi {
			for i < len(k.slices) && k.slices[i].end <= e-o.sl.size {
				i++
			}
			if i == len(k.slices) {
				break
			}
			if k.slices[i].end > e {
				e = o.sl.firstEnd(k.slices[i].end) // no data in window e: skip ahead
				continue
			}
			o.emitAligned(k, e)
			if e > MaxTime-o.sl.slide {
				break
			}
			e += o.sl.slide
		}
	}
	k.firedThrough = hi
	// Purge: slices whose last window is past lateness, then versions.
	n := 0
	for n < len(k.slices) && addSat(o.sl.lastEnd(k.slices[n].end), o.lateness) <= o.wm {
		o.putState(k.slices[n].st)
		n++
	}
	if n > 0 {
		m := copy(k.slices, k.slices[n:])
		clear(k.slices[m:])
		k.slices = k.slices[:m]
	}
	n = 0
	for n < len(k.fired) && addSat(k.fired[n].end, o.lateness) <= o.wm {
		n++
	}
	if n > 0 {
		k.fired = k.fired[:copy(k.fired, k.fired[n:])]
	}
	o.reschedule(k)
}

// emitAligned emits k's window ending at e with its next version.
func (o *Operator) emitAligned(k *keyState, e int64) {
	var version uint32 = 1
	if addSat(e, o.lateness) > o.wm {
		// The window can still change: remember its version.
		i := len(k.fired)
		for i > 0 && k.fired[i-1].end >= e {
			i--
		}
		if i < len(k.fired) && k.fired[i].end == e {
			k.fired[i].version++
			version = k.fired[i].version
		} else {
			k.fired = append(k.fired, firedWindow{})
			copy(k.fired[i+1:], k.fired[i:])
			k.fired[i] = firedWindow{end: e, version: 1}
		}
	}
	start := e - o.sl.size
	var st *aggregate.State
	if o.sl.g == o.sl.size { // tumbling: the window is its one slice
		for _, s := range k.slices {
			if s.end == e {
				st = s.st
				break
			}
		}
	} else {
		st = o.scratch
		o.aggs.Reset(st)
		for _, s := range k.slices {
			if s.end > start && s.end <= e {
				o.aggs.Merge(st, s.st)
			}
		}
	}
	o.emitResult(k, start, e, version, st)
}
