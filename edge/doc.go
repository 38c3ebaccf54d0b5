// Package edge is runnel's edge node. Today it holds Replay, the driver of
// `runnel-edge replay`: it runs a pipeline over a recorded JSON-lines file,
// one payload per line in arrival order, and writes window results, late
// records and dead letters as JSON lines. Users test a pipeline with it
// before pushing it to a fleet, and tests compare it with the oracle.
//
// # Output
//
// One JSON object per line.
//
//	result:      {"pipeline","key":{field: value…},"window_start","window_end","version","values":{name: value…}}
//	late:        {"pipeline","key","event_time","watermark","offset","reason"}
//	dead letter: {"pipeline","offset","topic"?,"reason","payload"}
//
// Times are Unix milliseconds; offset is the input line number (from 1).
// Values are numbers, or null for an aggregate that saw no value. Results of
// one key are in window order; keys interleave in no fixed order.
//
// # Caveats
//
//   - Replay reads the whole input as fast as it can: processing time, and so
//     idle detection, plays no part; the results are those of the event
//     times and the arrival order alone.
//   - A line longer than ReplayConfig.MaxLine (default 1 MiB) is a dead
//     letter holding its first KiB.
package edge
