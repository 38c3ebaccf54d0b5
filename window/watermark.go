package window

// Watermarks tracks the event-time watermark of a set of inputs: for each
// input, the largest event time it has delivered minus the allowed
// out-of-orderness; combined, the minimum over the inputs that are not
// idle. The combined watermark never goes backwards.
//
// Idleness is judged in processing time, which the caller supplies through
// Tick as a number (Unix ms): the edge takes it from the clock records of
// its ingest log, so a replay after a crash sees the same clock at the same
// records and gives the same results. Observe is on the hot path and reads
// no clock; it notes the last Tick's time as the input's last arrival.
//
// An input is idle once no event arrived from it for the idle timeout; an
// idle input stops holding the watermark back. When every input that has
// delivered something is idle, nothing holds it back: the watermark then
// advances with the processing clock, as if event time went on at its pace
// after the last event of each input — to the largest over the idle inputs
// of (largest event time + time since its last event) minus the allowed
// out-of-orderness. So the last windows of a sensor that went quiet fire
// about idle timeout after they would have with data still coming. An
// input that has delivered nothing holds the watermark back until it turns
// idle, and never advances it.
//
// A Watermarks is not safe for concurrent use.
type Watermarks struct {
	maxOOO   int64
	idle     int64 // ms; 0: inputs never turn idle
	clock    int64 // processing time of the last Tick (Unix ms); 0 before one
	inputs   []input
	combined int64
}

type input struct {
	max  int64 // largest event time seen, MinTime before the first
	seen int64 // clock at its last event; 0: not known yet (before any Tick)
	idle bool
}

// NewWatermarks tracks n inputs (n >= 1). maxOutOfOrder and idleTimeout
// are in ms; idleTimeout 0 means inputs never turn idle.
func NewWatermarks(n int, maxOutOfOrder, idleTimeout int64) *Watermarks {
	w := &Watermarks{maxOOO: maxOutOfOrder, idle: max(idleTimeout, 0), inputs: make([]input, max(n, 1)), combined: MinTime}
	for i := range w.inputs {
		w.inputs[i] = input{max: MinTime}
	}
	return w
}

// Observe records an event time from input i and returns the combined
// watermark, which already accounts for t.
func (w *Watermarks) Observe(i int, t int64) int64 {
	in := &w.inputs[i]
	in.seen = w.clock
	if in.idle {
		in.idle = false
		if t <= in.max {
			w.recompute() // it holds the watermark back again
		}
	}
	if t > in.max {
		in.max = t
		w.recompute()
	}
	return w.combined
}

// Tick advances the processing clock to now (Unix ms; a smaller value than
// the last is ignored): inputs silent for the idle timeout turn idle, and
// while every input is idle the watermark advances with the clock. It
// returns the combined watermark.
func (w *Watermarks) Tick(now int64) int64 {
	if now <= w.clock {
		return w.combined
	}
	w.clock = now
	if w.idle == 0 {
		return w.combined
	}
	changed := false
	for i := range w.inputs {
		in := &w.inputs[i]
		if in.seen == 0 {
			in.seen = now // its last event came before the clock was known
		}
		if !in.idle && now-in.seen >= w.idle {
			in.idle = true
			changed = true
		}
		changed = changed || in.idle
	}
	if changed {
		w.recompute()
	}
	return w.combined
}

// Current returns the combined watermark.
func (w *Watermarks) Current() int64 { return w.combined }

// Clock returns the processing time of the last Tick (Unix ms), 0 before
// the first.
func (w *Watermarks) Clock() int64 { return w.clock }

// Idle reports whether input i is idle.
func (w *Watermarks) Idle(i int) bool { return w.inputs[i].idle }

func (w *Watermarks) recompute() {
	m, active := MaxTime, false
	advance := MinTime // while every input is idle
	for i := range w.inputs {
		in := &w.inputs[i]
		if in.idle {
			if in.max != MinTime {
				advance = max(advance, addSat(in.max, w.clock-in.seen))
			}
			continue
		}
		active = true
		m = min(m, in.max)
	}
	switch {
	case active:
		m = addSat(m, -w.maxOOO)
	case advance != MinTime:
		m = addSat(advance, -w.maxOOO)
	default:
		return
	}
	if m > w.combined {
		w.combined = m
	}
}

// State is what a checkpoint keeps of a single-input Watermarks: with it,
// Restore brings a new Watermarks to the same point, so that the events
// and Ticks after the checkpoint give the same watermarks as they did.
type State struct {
	MaxSeen  int64 // largest event time seen (MinTime before the first)
	Combined int64
	Clock    int64 // the last Tick's time (0: none)
	Seen     int64 // the clock at the last event (0: not known)
}

// State returns input 0's state and the combined watermark.
func (w *Watermarks) State() State {
	in := w.inputs[0]
	return State{MaxSeen: in.max, Combined: w.combined, Clock: w.clock, Seen: in.seen}
}

// Restore sets input 0 and the combined watermark to s. Idleness follows
// from the clock at the next Tick.
func (w *Watermarks) Restore(s State) {
	in := &w.inputs[0]
	in.max, in.seen, in.idle = s.MaxSeen, s.Seen, false
	w.clock = max(w.clock, s.Clock)
	w.combined = max(w.combined, s.Combined)
}
