package window

import "time"

// Watermarks tracks the event-time watermark of a set of inputs: for each
// input, the largest event time it has delivered minus the allowed
// out-of-orderness; combined, the minimum over inputs that are not idle.
// The combined watermark never goes backwards.
//
// Idleness is judged in processing time, which the caller supplies through
// Tick; Observe is on the hot path and reads no clock. An input is idle when
// no Observe happened between Ticks spanning the idle timeout. An input that
// has delivered nothing yet holds the watermark back until it turns idle. When
// every input is idle the watermark holds where it is.
//
// A Watermarks is not safe for concurrent use.
type Watermarks struct {
	maxOOO   int64
	idle     time.Duration
	inputs   []input
	combined int64
}

type input struct {
	max      int64 // largest event time seen, MinTime before the first
	active   bool  // observed since the last Tick
	idle     bool
	lastSeen time.Time
}

// NewWatermarks tracks n inputs (n >= 1). maxOutOfOrder is in ms;
// idleTimeout 0 means inputs never turn idle. now starts the idle clocks.
func NewWatermarks(n int, maxOutOfOrder int64, idleTimeout time.Duration, now time.Time) *Watermarks {
	w := &Watermarks{maxOOO: maxOutOfOrder, idle: idleTimeout, inputs: make([]input, max(n, 1)), combined: MinTime}
	for i := range w.inputs {
		w.inputs[i] = input{max: MinTime, lastSeen: now}
	}
	return w
}

// Observe records an event time from input i and returns the combined
// watermark, which already accounts for t.
func (w *Watermarks) Observe(i int, t int64) int64 {
	in := &w.inputs[i]
	in.active = true
	if in.idle {
		in.idle = false
	}
	if t > in.max {
		in.max = t
		w.recompute()
	}
	return w.combined
}

// Tick advances the processing-time clock to now: inputs silent for the idle
// timeout turn idle and stop holding the watermark back. It returns the
// combined watermark.
func (w *Watermarks) Tick(now time.Time) int64 {
	changed := false
	for i := range w.inputs {
		in := &w.inputs[i]
		if in.active {
			in.active = false
			in.lastSeen = now
			continue
		}
		if w.idle > 0 && !in.idle && now.Sub(in.lastSeen) >= w.idle {
			in.idle = true
			changed = true
		}
	}
	if changed {
		w.recompute()
	}
	return w.combined
}

// Current returns the combined watermark.
func (w *Watermarks) Current() int64 { return w.combined }

// Idle reports whether input i is idle.
func (w *Watermarks) Idle(i int) bool { return w.inputs[i].idle }

func (w *Watermarks) recompute() {
	m, any := MaxTime, false
	for i := range w.inputs {
		in := &w.inputs[i]
		if in.idle {
			continue
		}
		any = true
		if v := addSat(in.max, -w.maxOOO); v < m {
			m = v
		}
	}
	if any && m > w.combined {
		w.combined = m
	}
}

// MaxSeen returns the largest event time input i has delivered (MinTime
// before its first event). With the combined watermark it is the state a
// checkpoint keeps.
func (w *Watermarks) MaxSeen(i int) int64 { return w.inputs[i].max }

// Restore sets input i's largest event time seen and the combined
// watermark, as a checkpoint recorded them. Idleness restarts from scratch.
func (w *Watermarks) Restore(i int, maxSeen, combined int64) {
	w.inputs[i].max = maxSeen
	w.combined = max(w.combined, combined)
}
