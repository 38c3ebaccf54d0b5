package window

import "github.com/runnel-io/runnel/window/aggregate"

// Session windows are kept per key as a sorted list of disjoint sessions.
// An event at t proposes the session [t, t+gap); every live session it
// overlaps merges with it. A merged session keeps the highest version any of
// its parts emitted, so its next emission supersedes them all.

func (o *Operator) addSession(k *keyState, in *aggregate.Input) bool {
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
	s := &ss[lo]
	o.aggs.Add(s.st, in)
	s.dirty = true
	if s.end <= o.wm {
		s.version++
		s.dirty = false
		o.emitResult(k, s.start, s.end, s.version, s.st)
		o.want(k, addSat(s.end, o.lateness))
	} else {
		o.want(k, s.end)
	}
	return true
}

// processSessions fires k's changed sessions that end at or before wm,
// drops the ones past lateness and registers k for its next work.
func (o *Operator) processSessions(k *keyState) {
	n := 0
	for i := range k.sessions {
		s := &k.sessions[i]
		if s.dirty && s.end <= o.wm {
			s.version++
			s.dirty = false
			o.emitResult(k, s.start, s.end, s.version, s.st)
		}
		if addSat(s.end, o.lateness) <= o.wm {
			o.putState(s.st)
			continue
		}
		k.sessions[n] = *s
		n++
	}
	clear(k.sessions[n:])
	k.sessions = k.sessions[:n]
	o.reschedule(k)
}
