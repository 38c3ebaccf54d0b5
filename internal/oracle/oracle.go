package oracle

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
)

// Event is one input record. Run takes events as a slice whose order is the
// arrival order; an event is named by its index in that slice.
type Event struct {
	Key  string
	Time int64 // event time, ms
	// Advance makes the event a move of the watermark to Time, with no
	// record: what a source's idle advance does. It is never late and
	// never a member of a window.
	Advance bool
}

// Emission is one window result.
type Emission struct {
	// Step is the index of the event whose processing emitted this result,
	// or len(events) for the end of input.
	Step       int
	Key        string
	Start, End int64
	// Version is 1 for the first emission of a window, then 2, 3, ... A
	// session that absorbed others continues after the highest version
	// among them.
	Version int
	// Members are the indices into events of the records the window holds
	// at this emission, ascending.
	Members []int
}

// Run processes events in order under cfg and returns every emission, in
// the order the package comment defines, and the indices of the events
// dropped as late, ascending. It panics if cfg is invalid or an event's
// windows do not fit in int64.
func Run(events []Event, cfg Config) (emissions []Emission, late []int) {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	r := &runner{events: events, cfg: cfg, wm: math.MinInt64}
	for i, e := range events {
		if e.Advance {
			r.wm = max(r.wm, e.Time)
			r.fire(i)
			r.purge()
			continue
		}
		// Held at MinInt64 when it would go below: no window ends there.
		r.wm = max(r.wm, subFloor(e.Time, cfg.MaxOutOfOrder))
		r.fire(i)
		r.purge()
		var accepted bool
		if cfg.Kind == Session {
			accepted = r.assignSession(i)
		} else {
			accepted = r.assignAligned(i)
		}
		if !accepted {
			late = append(late, i)
		}
	}
	r.wm = math.MaxInt64
	r.fire(len(events))
	return r.out, late
}

// window is a live window: an aligned window of one key that holds at least
// one event, or a live session.
type window struct {
	key        string
	start, end int64
	members    []int // ascending
	version    int   // version of the last emission, 0 before the first
	changed    bool  // changed since the last emission (or never emitted)
}

type runner struct {
	events []Event
	cfg    Config
	wm     int64
	live   []*window // every live window of every key, in no particular order
	out    []Emission
}

func (r *runner) emit(w *window, step int) {
	w.version++
	w.changed = false
	r.out = append(r.out, Emission{
		Step: step, Key: w.key, Start: w.start, End: w.end,
		Version: w.version, Members: slices.Clone(w.members),
	})
}

// fire emits every changed window with End <= wm, by (End, Key, Start).
func (r *runner) fire(step int) {
	var due []*window
	for _, w := range r.live {
		if w.changed && w.end <= r.wm {
			due = append(due, w)
		}
	}
	slices.SortFunc(due, func(a, b *window) int {
		return cmp.Or(cmp.Compare(a.end, b.end), cmp.Compare(a.key, b.key), cmp.Compare(a.start, b.start))
	})
	for _, w := range due {
		r.emit(w, step)
	}
}

// purge forgets every window with End + Lateness <= wm.
func (r *runner) purge() {
	r.live = slices.DeleteFunc(r.live, func(w *window) bool {
		return sumAtMost(w.end, r.cfg.Lateness, r.wm)
	})
}

// assignAligned adds event i to those of its windows that still take
// events and reports whether there was any.
func (r *runner) assignAligned(i int) (accepted bool) {
	e := r.events[i]
	size := r.cfg.Size
	for _, start := range alignedStarts(i, e.Time, size, r.cfg.slide()) {
		end := start + size // cannot overflow: alignedStarts checked it
		if sumAtMost(end, r.cfg.Lateness, r.wm) {
			continue // purged, or would be purged at once
		}
		accepted = true
		var w *window
		for _, x := range r.live {
			if x.key == e.Key && x.start == start {
				if w != nil {
					panic(fmt.Sprintf("oracle: two live windows %q [%d, %d)", e.Key, start, end))
				}
				w = x
			}
		}
		if w == nil {
			w = &window{key: e.Key, start: start, end: end}
			r.live = append(r.live, w)
		}
		w.members = append(w.members, i) // i is the largest index so far
		w.changed = true
		if end <= r.wm {
			r.emit(w, i)
		}
	}
	return accepted
}

// alignedStarts returns, ascending, the starts of the windows that hold time
// t: k*slide for k from floor((t-size)/slide)+1 to floor(t/slide). It works
// in big integers, so that the formula can be written as it reads, and
// panics if a window does not fit in int64.
func alignedStarts(i int, t, size, slide int64) []int64 {
	one := big.NewInt(1)
	T, S, D := big.NewInt(t), big.NewInt(size), big.NewInt(slide)
	// big.Int.Div is Euclidean division, which is floor division for D > 0.
	lo := new(big.Int).Sub(T, S)
	lo.Div(lo, D).Add(lo, one)
	hi := new(big.Int).Div(T, D)
	var starts []int64
	for k := lo; k.Cmp(hi) <= 0; k.Add(k, one) {
		start := new(big.Int).Mul(k, D)
		end := new(big.Int).Add(start, S)
		if !start.IsInt64() || !end.IsInt64() {
			panic(fmt.Sprintf("oracle: event %d at %d: window [%s, %s) does not fit in int64", i, t, start, end))
		}
		starts = append(starts, start.Int64())
	}
	return starts
}

// assignSession adds event i to its key's sessions, merging those it
// touches, and reports whether it was accepted.
func (r *runner) assignSession(i int) (accepted bool) {
	e := r.events[i]
	t, gap := e.Time, r.cfg.Gap
	if t > math.MaxInt64-gap {
		panic(fmt.Sprintf("oracle: event %d at %d: session end %d + gap %d does not fit in int64", i, t, t, gap))
	}

	// The rule: the sessions whose span the event's own window [t, t+gap)
	// overlaps.
	var touched, untouched []*window
	for _, w := range r.live {
		if w.key != e.Key {
			continue
		}
		if t < w.end && t+gap > w.start {
			touched = append(touched, w)
		} else {
			untouched = append(untouched, w)
		}
	}
	if len(touched) == 0 && sumAtMost(t+gap, r.cfg.Lateness, r.wm) {
		return false
	}

	// The definition: sessions are the chains of the key's live events in
	// which neighbours are less than gap apart. Recompute them from scratch
	// and check that they agree with the rule.
	all := []int{i}
	for _, w := range touched {
		all = append(all, w.members...)
	}
	for _, w := range untouched {
		all = append(all, w.members...)
	}
	groups := r.chains(all)
	var u []int
	for _, g := range groups {
		if slices.Contains(g, i) {
			u = g
			continue
		}
		// Every other chain must be an untouched session, unchanged.
		n := 0
		for _, w := range untouched {
			if slices.Equal(w.members, g) {
				n++
			}
		}
		if n != 1 {
			panic(fmt.Sprintf("oracle: event %d: chain %v is not exactly one live session", i, g))
		}
	}
	// With every other chain matched to a distinct untouched session, the
	// count check leaves u = {i} + touched: the rule and the definition agree.
	if len(groups) != len(untouched)+1 {
		panic(fmt.Sprintf("oracle: event %d: %d chains for %d untouched sessions", i, len(groups), len(untouched)))
	}

	// U inherits the highest version its parts were emitted with, so its
	// next emission supersedes all of them.
	merged := &window{key: e.Key, members: u, changed: true}
	merged.start, merged.end = r.span(u)
	wantStart, wantEnd := t, t+gap
	for _, w := range touched {
		merged.version = max(merged.version, w.version)
		wantStart, wantEnd = min(wantStart, w.start), max(wantEnd, w.end)
	}
	if merged.start != wantStart || merged.end != wantEnd {
		panic(fmt.Sprintf("oracle: event %d: merged session [%d, %d), rule says [%d, %d)",
			i, merged.start, merged.end, wantStart, wantEnd))
	}
	r.live = slices.DeleteFunc(r.live, func(w *window) bool { return slices.Contains(touched, w) })
	r.live = append(r.live, merged)
	if merged.end <= r.wm {
		r.emit(merged, i)
	}
	return true
}

// chains splits events (indices) into sessions: sorted by time, cut wherever
// neighbours are gap or more apart. Each chain is returned ascending by index.
func (r *runner) chains(idx []int) [][]int {
	byTime := slices.Clone(idx)
	slices.SortFunc(byTime, func(a, b int) int {
		return cmp.Or(cmp.Compare(r.events[a].Time, r.events[b].Time), cmp.Compare(a, b))
	})
	var out [][]int
	var cur []int
	for n, j := range byTime {
		// Subtract in uint64: neighbours are sorted, so the difference is
		// non-negative and fits even when the times are far apart.
		if n > 0 && uint64(r.events[j].Time)-uint64(r.events[byTime[n-1]].Time) >= uint64(r.cfg.Gap) {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, j)
	}
	out = append(out, cur)
	for _, c := range out {
		slices.Sort(c)
	}
	return out
}

// span is [min time, max time + gap) of a session's events.
func (r *runner) span(members []int) (start, end int64) {
	start, last := int64(math.MaxInt64), int64(math.MinInt64)
	for _, j := range members {
		start, last = min(start, r.events[j].Time), max(last, r.events[j].Time)
	}
	return start, last + r.cfg.Gap // assignSession checked every t + gap
}

// sumAtMost reports whether a + b <= c, exactly, for b >= 0.
func sumAtMost(a, b, c int64) bool {
	// For a <= c, c - a is in [0, 2^64) and uint64 subtraction gets it right.
	return a <= c && uint64(b) <= uint64(c)-uint64(a)
}

// subFloor is a - b for b >= 0, held at MinInt64 instead of wrapping.
func subFloor(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
