// Package oracle is a brute-force reference of runnel's event-time windowing
// semantics. It exists to be obviously right, not fast: property tests feed
// the same random out-of-order stream to the window operator and to Run, and
// compare what each emits. Run reports, for every emitted window result,
// which events the window holds, so a test can aggregate them itself and
// check any aggregate, and which events were dropped as late.
//
// The rest of this comment is the definition of the semantics, written for
// users; window/doc.go carries the same text.
//
// # Time and windows
//
// Event time is int64 milliseconds. Windows are half-open, [Start, End).
//
// Aligned windows (tumbling and sliding) start at multiples of Slide counted
// from the Unix epoch, for negative times too (floor division), and are Size
// long. An event at time t belongs to every window with Start <= t < End,
// that is Start = k*Slide for k from floor((t-Size)/Slide)+1 to
// floor(t/Slide). A tumbling window has Slide == Size, so every event
// belongs to exactly one window; with sliding windows it belongs to about
// Size/Slide of them, and Size need not be a multiple of Slide. Windows are
// kept per key.
//
// A session is a set of events of one key. Its Start is the smallest event
// time and its End is the largest event time plus Gap. Two events of a key
// are in the same session when a chain of that key's events links them in
// which successive times (sorted) differ by less than Gap. Sessions of a key
// therefore never overlap: the last event of one and the first event of the
// next are at least Gap apart, and events exactly Gap apart are in
// different sessions.
//
// # Watermark
//
// The watermark wm says "no more events before wm are expected". Before any
// event wm is -inf. When an event arrives, wm becomes the largest event time
// seen so far, that event included, minus MaxOutOfOrder; it never goes back.
// At the end of input wm is +inf. An event with Advance set is no record: it
// sets wm to max(wm, its time), then windows fire and are purged as in steps
// 2 and 3 below (a source's idle advance; the test that uses it computes the
// advances itself).
//
// A window is complete when End <= wm. It is emitted then, and again, with
// the next version, every time a late event changes it, for as long as
// End + Lateness > wm. Once End + Lateness <= wm the window is forgotten
// (purged); an event that would belong to it afterwards is not added to it.
//
// # Processing one event
//
// Events are processed one at a time in arrival order. For event i:
//
//  1. Watermark: wm = max(wm, time of event i - MaxOutOfOrder).
//  2. Fire: every window that holds at least one event, has End <= wm and
//     has not been emitted since it last changed is emitted. Its version is
//     the version of its previous emission plus one (1 the first time).
//  3. Purge: every window with End + Lateness <= wm is forgotten, with its
//     events and its version count.
//  4. Assign: event i is added to its windows, as below. An event added to
//     no window at all is late and goes to the late output.
//
// At the end of input wm becomes +inf and every window that changed since
// its last emission is emitted (step 2). Nothing is late after that.
//
// Aligned windows. For each window W of the event (in its key): if
// W.End + Lateness <= wm the event is not added to W. Otherwise it is, and
// if W.End <= wm (W has fired already, or is complete now) W is emitted at
// once with its next version, holding all its events. A sliding-window
// event can be added to some of its windows and refused by older ones; it
// is late only if every one of its windows refused it.
//
// Sessions. Let M be the live (not purged) sessions of the event's key that
// the event touches: those with t < S.End and t + Gap > S.Start, i.e. the
// event's own window [t, t+Gap) overlaps [S.Start, S.End). If M is empty
// and t + Gap + Lateness <= wm, the event is late. Otherwise it is added,
// and the sessions of M together with the event become one session U, with
// U.Start = min(t, starts of M) and U.End = max(t+Gap, ends of M). U
// carries on the largest version any session of M was emitted with, so its
// next emission has a higher version than all of them. If U.End <= wm, U
// is emitted at once; otherwise it waits for the watermark (step 2). A
// session emitted once can thus come back with a new version and a
// different Start or End: it was extended or merged. A purged session is
// never brought back: an event that would bridge it to another session
// joins only the live one, or is late.
//
// # Order of emissions
//
// Emissions are ordered by step. Within a step, the emissions of the fire
// phase come first, ordered by (End, Key, Start), then those of the assign
// phase, ordered by Start. (In fact a step has only one kind: an event
// that advances the watermark lies in windows ending after it, so it
// causes no immediate emission, and an event that does not advance it
// makes no new window complete.) The operator under test promises order per
// key only; the oracle's total order is there to make it deterministic.
//
// # Invariants
//
//   - Each emission of a window holds every event added to it so far; the
//     events of successive versions only grow, strictly.
//   - A window is emitted only when End <= wm, and at most once per step.
//   - A late event is in no emission.
//   - With Lateness 0 and MaxOutOfOrder at least the spread of the event
//     times, no event is late.
//   - Live sessions of a key never overlap.
//
// # How the oracle computes it
//
// Run simulates the steps literally, without timers, slices or
// incremental aggregates. Sessions are not kept as intervals: after every
// accepted event the live events of the key are sorted by time and split
// wherever two neighbours are Gap or more apart, and the result is checked
// against the set M found by the rule above (a mismatch panics). A session
// is identified across steps by its set of events, which only grows by
// merging until the session is purged. Every lookup is a scan of the live
// windows and every session step re-sorts the key's live events, so Run is
// slow on principle; a thousand events still take a few milliseconds
// (BenchmarkRun), which is plenty for property tests. An event belongs to
// about Size/Slide aligned windows, so keep that ratio small in tests.
//
// # Caveats
//
//   - Run has no error result: it panics when the Config is invalid (see
//     Config.Validate) or when a window of an event does not fit in int64
//     (aligned: Start < MinInt64 or End > MaxInt64; sessions:
//     t + Gap > MaxInt64). The operator may clamp such windows; the oracle
//     does not define them.
//   - Slide 0 means Slide = Size, for tumbling and sliding windows alike.
//     Slide > Size (hopping windows with holes) is rejected: an event in a
//     hole would belong to no window and the rule above would call it late.
//   - A watermark below MinInt64 (an early event minus a large
//     MaxOutOfOrder) is held at MinInt64; no window can end there, so no
//     result changes. Comparisons such as End + Lateness <= wm are exact,
//     they do not overflow.
//   - Windows with no event do not exist: they are never emitted.
//   - A session result is not identified by (Key, Start, End): a later
//     version of the same session may have other bounds, and the earlier
//     result is superseded without a retraction. Its identity is its set
//     of events (an emission supersedes every earlier one of its key that
//     shares an event with it).
//   - For aligned windows purging is not observable, since the assign rule
//     checks End + Lateness itself; it only frees memory. For sessions it
//     is: a purged session can no longer be joined or bridged.
//   - There is one input. The min-over-inputs and idle rules of the real
//     watermark are out of scope.
package oracle
