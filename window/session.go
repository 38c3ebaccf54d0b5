package window

import "github.com/runnel-io/runnel/window/aggregate"

// Session windows are kept per key as a sorted list of disjoint sessions.
// An event at t proposes the session [t, t+gap); every live session it
// overlaps merges with it. A merged session keeps the highest version any of
// its parts emitted, so its next emission supersedes them all. Each key has
// one timer registration, at the earliest of its sessions' end (to fire) or
// end + lateness (to drop).

type session struct {
	start, end int64
	st         *aggregate.State
	version    uint32 // last emitted version
	dirty      bool   // changed since last emitted
}

func (o *Operator) addSession(idx int32, in *aggregate.Input) bool {
	k := &o.sess[idx]
	defer o.touch(idx)
	t := in.Time
	end := addSat(t, o.gap)
	ss := k.sessions
	lo := 0
	for lo < len(ss) && ss[lo].end <= t {
		lo++
	}
	hi := lo
	for hi < len(ss) && ss[hi].start < end {
		hi++
	}
	if lo == hi {
		if addSat(end, o.lateness) <= o.wm {
			return false
		}
		k.sessions = append(k.sessions, session{})
		ss = k.sessions
		copy(ss[lo+1:], ss[lo:])
		ss[lo] = session{start: t, end: end, st: o.getState()}
	} else {
		s := &ss[lo]
		for j := lo + 1; j < hi; j++ {
			o.aggs.Merge(s.st, ss[j].st)
			o.putState(ss[j].st)
			s.end = max(s.end, ss[j].end)
			s.version = max(s.version, ss[j].version)
		}
		if hi > lo+1 {
			n := copy(ss[lo+1:], ss[hi:])
			clear(ss[lo+1+n:])
			k.sessions = ss[:lo+1+n]
			ss = k.sessions
		}
		s.start = min(s.start, t)
		s.end = max(s.end, end)
	}
	k.gcAt = MinTime
	s := &ss[lo]
	o.aggs.Add(s.st, in)
	s.dirty = true
	if s.end <= o.wm {
		s.version++
		s.dirty = false
		o.emitResult(idx, s.start, s.end, s.version, s.st)
		o.want(idx, addSat(s.end, o.lateness))
	} else {
		o.want(idx, s.end)
	}
	return true
}

// want makes sure key idx is processed no later than t.
func (o *Operator) want(idx int32, t int64) {
	if k := &o.sess[idx]; t < k.due {
		k.due = t
		o.timers.add(t, idx)
	}
}

func (o *Operator) advanceSessions() {
	for {
		t, ok := o.timers.next()
		if !ok || t > o.wm {
			return
		}
		_, b := o.timers.pop()
		for _, idx := range b.keys {
			k := &o.sess[idx]
			if !o.keys[idx].live || k.due != t {
				continue // moved earlier and already handled, or forgotten
			}
			k.due = unregistered
			o.processSessions(idx)
		}
		o.timers.release(b)
	}
}

// processSessions fires key idx's changed sessions that end at or before
// wm, drops the ones past lateness and registers the key for its next work;
// a key without sessions is forgotten after idleKeep.
func (o *Operator) processSessions(idx int32) {
	o.touch(idx)
	k := &o.sess[idx]
	n := 0
	next := MaxTime
	for i := range k.sessions {
		s := &k.sessions[i]
		if s.dirty && s.end <= o.wm {
			s.version++
			s.dirty = false
			o.emitResult(idx, s.start, s.end, s.version, s.st)
		}
		if addSat(s.end, o.lateness) <= o.wm {
			o.putState(s.st)
			continue
		}
		if s.dirty {
			next = min(next, s.end)
		} else {
			next = min(next, addSat(s.end, o.lateness))
		}
		k.sessions[n] = *s
		n++
	}
	clear(k.sessions[n:])
	k.sessions = k.sessions[:n]
	if n == 0 {
		// Keep the key (its index slot and buffers) for a while, so a key
		// that reports in every session does not allocate in every one.
		if k.gcAt == MinTime {
			k.gcAt = addSat(o.wm, o.idleKeep)
		}
		if o.wm >= k.gcAt || k.gcAt == MaxTime {
			o.forget(idx)
			return
		}
		next = k.gcAt
	}
	o.want(idx, next)
}
