// Package edge is runnel's edge node: what `runnel-edge` runs on a
// gateway (Run), and the drivers of its other commands: Replay (a
// recorded stream through a pipeline), Restore (a gateway rebuilt from a
// snapshot) and the outbox's readers. docs/design.md, "The edge node",
// has the whole picture; this is the map.
//
// # The path of a reading
//
//   - The MQTT source (edge/mqtt, or the embedded broker's in-process
//     intake, edge/broker) hands batches of messages to the node's
//     handler, which appends them to the ingest log (edge/ingestlog),
//     commits the batch (write and fsync) on the source's goroutine, and
//     only then acknowledges them: an acknowledged reading is durable.
//   - The pump reads the log from the last checkpoint's position (the
//     block just committed from memory, older frames from the files) and
//     feeds every pipeline's runtime (operators): replay after a crash
//     and live intake are the same loop, driven by the logged clock, so a
//     replay gives the live run's results.
//   - Every checkpoint interval the pump injects a barrier; the writer
//     commits, in one bbolt transaction (state), what the runtimes
//     changed, the results into the outbox with their sequence numbers,
//     the side outputs and the log position; then deletes the log the
//     checkpoint covers. An idle edge commits nothing.
//   - The outbox's readers send what is committed: the uplink to the hub
//     (sync/uplink), MQTT outputs, the raw archive lane; each keeps a
//     cursor that the next checkpoint stores.
//   - With a hub, the fleet agent keeps the control stream: a desired
//     set is compiled first and applied at a barrier (managed.go), and the
//     edge reports its status.
//
// # Invariants
//
//   - Exactly once within the edge: each log record affects committed
//     state once (state and position commit together); each outbox entry
//     has one sequence number, the same after any replay.
//   - Nothing is acknowledged before it is durable; at the disk cap or the
//     ingest lag bound the handler holds, and the broker keeps the data.
//   - A reading that cannot be processed is set aside with its reason
//     (dead letters, late records, the uplink's quarantine), counted and
//     bounded (side_outputs); it never blocks what comes behind it.
//
// # Replay's output
//
// `runnel-edge replay` runs a pipeline over a recorded JSON-lines file,
// one payload per line in arrival order, and writes one JSON object per
// line:
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
//   - Without event_id in a pipeline, an MQTT redelivery after a crash
//     between fsync and acknowledgement counts again (at-least-once).
//   - Replay reads the whole input as fast as it can: processing time, and
//     so idle detection, plays no part; the results are those of the event
//     times and the arrival order alone. A line longer than
//     ReplayConfig.MaxLine (default 1 MiB) is a dead letter holding its
//     first KiB.
//   - docs/design.md, "Known limits", lists the rest: eviction's bound,
//     the disk cap's overshoot, the memory figures.
package edge
