// Package window assigns events to event-time windows, tracks watermarks and
// fires window results, with mergeable partial aggregates (package
// window/aggregate) as the state.
//
// # Event time, watermark, lateness
//
// Event time is when a reading was taken, as the payload says, in Unix
// milliseconds (1 ms resolution). Arrival order is the order the edge
// received the readings; it is what the ingest log records and what replay
// reproduces.
//
// The watermark of an input is the largest event time it has delivered minus
// the pipeline's max_out_of_order: the edge's claim that readings older than
// that have all arrived. With several inputs the watermark is the minimum over
// the inputs that are not idle (silent for idle_timeout in processing time);
// it never goes backwards. When every input is idle the watermark advances
// with processing time from each input's last event (Watermarks), so the
// last windows of a source that went quiet fire. The watermark moves record by record in arrival
// order, so the same input gives the same results however it is batched, which
// deterministic replay after a crash relies on.
//
// Windows are half-open, [start, end). Tumbling and sliding windows start at
// multiples of the slide since the epoch. A window fires, emitting version 1,
// when the watermark reaches its end (wm >= end). An event that arrives after
// its window fired but while wm < end + allowed_lateness is added and the
// window is emitted again at once as the next version (2, 3, …); each version
// holds everything the window has accepted so far, so a later version
// supersedes the earlier ones. Once wm >= end + allowed_lateness the window is
// forgotten; an event whose windows are all forgotten is late and goes to the
// late output.
//
// Precisely, for each event in arrival order: (1) the watermark takes the
// event into account; (2) windows ending at or before it fire; (3) windows
// past their lateness are dropped; (4) the event is assigned, and a window it
// updates that had already ended emits its next version. At end of input the
// watermark becomes MaxTime and every window fires.
//
// # Sessions
//
// A session holds the events of one key that are chained by gaps shorter than
// the session gap: it starts at its first event time and ends at its last
// event time plus the gap. An event merges every live session that its own
// span [t, t+gap) overlaps. A merged session continues the highest version any
// of its parts had emitted. Caveat: a late event can move a session's bounds,
// so a newer version may have a different start and end than the one it
// supersedes; consumers key session results by (key, window) and treat an
// overlapping newer version as the replacement.
//
// # Slices
//
// A sliding window of size S and slide D is made of S/g slices of length
// g = gcd(S, D). Each event updates one slice's partial aggregate; firing a
// window merges its slices. A 1 h window sliding by 1 min therefore adds each
// event once, not 60 times.
//
// # Timers
//
// The Operator keeps one timer registration per key at the time it next has
// work (a window end, a lateness expiry, forgetting an idle key). Aligned
// windows of many keys share a timer bucket per window end; sessions get
// buckets per end time. Timers run on watermark time only; processing time
// enters through Watermarks.Tick (idle detection and the idle advance) as a
// number the caller gives, never through a clock read inside the package.
//
// # Eviction
//
// With Config.MaxResident and a KeyStore, keys whose windows have all fired
// and whose state a committed checkpoint holds leave memory, and a record
// of one reads it back first (evict.go states the invariants). Results are
// the same as without.
//
// # Caveats
//
//   - Results of one key come out in window order for first versions; a late
//     update of an older window may follow a newer window's result.
//   - Without an idle timeout the watermark holds when input stops: windows
//     of a silent input fire when data resumes or at end of input.
//   - A late update re-emits the whole window (all versions are complete
//     values, not deltas), so each accepted late event costs one result.
package window
