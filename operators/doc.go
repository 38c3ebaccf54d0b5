// Package operators is runnel's dataflow runtime: it compiles a pipeline spec
// (package operators/spec) into a Pipeline, decodes payloads into Records and
// runs them through the window operators of package window.
//
// # The path of one record
//
//  1. Decode (the ingesting goroutine). The JSON payload is scanned once by
//     operators/jsonfield, which extracts only the fields the pipeline reads
//     (event time, key, aggregate inputs, expression inputs). compute
//     expressions run, then the filter; the record keeps its key (encoded,
//     see below), its xxhash, its event time in ms and the aggregate inputs
//     as float64s (nulls as NaN) and 64-bit hashes (distinct inputs). A
//     payload that cannot become a record goes to the dead-letter output with
//     the reason; it never stops the pipeline.
//  2. Watermark. window.Watermarks takes the record's event time; the record
//     carries the watermark that held right after it arrived.
//  3. Route. The key hash picks one of KeyGroups key groups (default 128),
//     and the group's worker: groups are split into contiguous ranges, one
//     per worker. Records travel in columnar batches over a bounded channel
//     per worker.
//  4. Window (the worker). For each record the worker advances its
//     window.Operator to the record's watermark, then adds the record. The
//     operator emits window results through the worker into an output batch.
//  5. Output (one goroutine). Batches of results, late records and dead
//     letters reach the Sink in the order each worker produced them.
//
// # Guarantees
//
//   - Results do not depend on batching or on the number of workers: every
//     record carries its own watermark (see package window).
//   - Results of one key come out in window order (first versions), because a
//     key always lives on one worker and a worker's outputs stay in order.
//   - Back-pressure: every channel is bounded, so a slow Sink blocks the
//     workers, which block Ingest; Ingest blocking is the signal a source
//     turns into "stop reading" (for MQTT: stop acknowledging).
//   - Every goroutine is started by Start and stopped by Close; every blocking
//     send or receive also watches the Runtime's context.
//
// # Key encoding
//
// A record's key is the concatenation, in spec order, of one entry per key
// field: a kind byte ('s' string, 'n' number, 'b' bool), a uvarint length and
// the bytes: strings unescaped, numbers in shortest float form (so 42 and
// 42.0 are one key), bools as true/false. AppendKeyJSON turns it back into
// the JSON object results show as "key". A key field that is missing, null,
// an object or an array is a dead letter.
//
// # Caveats
//
//   - Decoding runs on one goroutine per Runtime; with many workers it can
//     become the bottleneck (see the benchmarks in the README).
//   - Filter and compute expressions (expr-lang) box their inputs: a
//     pipeline with expressions allocates per record; one without does not.
//   - Ingestion from a file replays; MQTT delivery guarantees are the edge
//     node's business (package edge).
package operators
