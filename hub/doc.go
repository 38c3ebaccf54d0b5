// Package hub is the hub node's core: it applies edge batches exactly once,
// merges the edges' partials per (pipeline, class, key, window), tracks the
// hub watermark, emits versioned results and keeps them durable in bbolt.
// The network side (gRPC, REST, auth) is hub/server; this package knows
// nothing of it beyond the batch message.
//
// # Model
//
// Every edge numbers its committed outbox entries 1, 2, 3, ... within an
// epoch; watermark markers take numbers too. A Partial is an edge's whole
// aggregate of one (pipeline, key, window) as of one entry; when late data
// reaches the edge it sends the window again, whole. The hub therefore
// keeps, per window, the latest partial of each edge (latest: highest
// (epoch, seq)) and the result is the aggregate merge of those, one per
// edge. Two versions of one edge's window are never added together.
//
// Apply validates a batch completely before it applies anything of it
// (Refusals, below), checks the epoch (Epochs, below) and the sequence
// (ErrGap when it starts past the next expected one, unless nothing of the
// epoch was applied yet), drops entries already applied, and stores each
// partial in memory if it is newer than the edge's stored one. Every
// CommitInterval one bbolt transaction writes the changed partials, the
// edges' epochs and applied sequences, and the results emitted by that
// commit. Only after it commits do the acked sequences advance (Acked) and
// the results reach subscribers.
//
// # Refusals
//
// A batch or a partial the hub cannot process is set aside with its reason,
// counted and visible; it is never retried for ever and never blocks what
// comes behind it. A batch malformed as a whole (edge id, first and last
// sequence, partials nil or out of order, more than MaxBatchPartials) is
// refused with ErrBadBatch. A partial the hub will never accept is named,
// with its reason and every other such partial of the batch, in a
// *RefusedError, which wraps ErrBadBatch: a key longer than MaxKeyBytes; an
// empty key for a pipeline with key fields, or a key for one without; a
// window whose end is not after its start, or that starts more than
// MaxFuture after the hub's clock; a state longer than MaxStateBytes, or
// one that does not decode with the pipeline's aggregates (the edge runs
// another spec); a pipeline name that is empty or longer than 255 bytes; a
// partial of a pipeline or revision the hub does not know once the edge's
// parking quota is full (Unknown pipelines and revisions, below). Nothing
// of such a batch is applied. The edge sets the named entries aside (its
// quarantine) and sends the batch again without them, their sequence
// numbers skipped, and that one applies. Refused batches and partials are counted (Status.BatchesRefused,
// PartialsRefused), reported per edge while the last is within
// IncidentWindow (Status.Refusals) and logged: an edge's first refusal,
// then at most one line a minute, with the count of those in between. The
// limits are exported (MaxKeyBytes, MaxStateBytes, MaxBatchPartials) so
// that hub/server announces them to edges, which then set such entries
// aside before sending them.
//
// # Revisions
//
// A partial carries the revision of the pipeline that produced it. Revision
// 0 is a pipeline of the edge's local files: it merges into the hub's
// pipeline of that name in Config.Pipelines (a local pipeline), as before
// revisions existed. A managed revision (1, 2, 3, ..., created through the
// fleet API) belongs to a class: the first revision of the run of
// consecutive revisions each operators.Compatible with its predecessor
// (same key, event time, window, computed fields and aggregates), as the
// fleet store assigns it. The hub learns revisions from Config.Revisions
// at Open and from Define while it runs, and merges the partials of every
// revision of one class into the same windows, per (name, class): an edge
// whose revision 1 becomes 2 keeps its window state (the edge does so
// across a compatible change), and a window half of whose edges run each
// merges them all. Partials of different classes, or of a class and the
// local pipeline of the same name, never meet: each is its own pipe, with
// its own windows, watermark, results and store records (stored as
// name@class, docs/formats/hub-store.md). Define refuses (ErrBadRevision)
// a revision it knows in another class, or whose spec is not Compatible
// with its class's; one it knows in its class is a no-op.
//
// Each result names the distinct revisions of the partials merged into
// it (Result.Revisions, ascending; nil for a local pipeline) and its class
// (Result.Class). Query.Revision picks the class a query reads: 0, that of
// the latest revision the hub knows of the pipeline (its local pipeline
// when it has none); another, the class holding it (unknown:
// ErrBadQuery). A query cursor keeps its class. Pipelines lists each local
// pipeline and each class with its revisions. A subscription reads the
// class a query with revision 0 reads when it begins, and is closed when
// Define makes a revision of another class the latest.
//
// An edge's watermark is of one (pipeline, revision), as its partials
// are: it is the edge's watermark of the pipe those merge into, so an edge
// running a revision of one class neither holds back nor moves another
// class's watermark. A revision that ends at the edge (replaced by an
// incompatible one, or removed) fires its open windows and sends the end
// of time (math.MaxInt64) as its last watermark: the hub takes it as it
// is, not as a clock error (Time, below), so the edge holds that class
// back no more while it runs the next one, and a class all of whose edges
// ended gets the clock's bound as its watermark, which emits its last
// windows.
//
// # Unknown pipelines and revisions
//
// A pipeline or revision the hub does not know parks only its own
// partials. Apply accepts the batch; the partials of (pipeline, revision)s
// the hub does not know (revision 0: a pipeline not in Config.Pipelines;
// another: a revision not defined; checked for what needs no spec: key
// length, bounds, state length) and each edge's latest watermark of them
// are parked: written by the commit that writes the edge's applied
// sequence, in the same transaction, to the parked bucket
// (docs/formats/hub-store.md), counted (Status.PartialsParked, and
// Status.Parked per pipeline with its revisions) and logged once per
// (edge, pipeline, revision). When the hub opens knowing such a (pipeline,
// revision), or Define makes it known while the hub runs, its parked
// partials are applied as if they had just arrived, in (edge, epoch, seq)
// order, under the per-edge replace-if-newer rule and expiry (an evicted
// window is reloaded first); a parked partial that does not decode with
// the pipeline's aggregates is dropped with a log line and counted in
// Status.PartialsRefused. Parked watermarks become the edges' watermarks
// of the pipeline (or class). The next commit writes the applied partials
// and deletes the revision's parked records, in one transaction: a crash
// before it parks them still, and the next Open that knows the revision
// applies them again, once. Each edge may have ParkedQuota bytes parked
// (default 64 MiB); beyond it its partials of unknown pipelines are
// refused per entry (RefusedError, the reason says the quota is full), so
// the edge sets them aside, while its other pipelines go on. Parked
// records older than Retention (by the hub's clock when parked; a parked
// watermark counts as parked again with each partial of its edge, pipeline
// and revision) are deleted by a sweep that runs once the oldest is past
// Retention by a sixteenth of it (Status.ParkedExpired), and are not
// applied at Open.
//
// # Epochs
//
// An edge's epoch grows when it finds the hub knows more of it than it
// remembers (restored from an older copy) or the hub holds a later one;
// the partials it then resends replace the old history's per window. A
// Hello with an epoch older than the hub's is answered with the hub's
// epoch (the edge starts the one after it), a batch of one is refused with
// ErrFenced. A later epoch is adopted only up to MaxEpochStep past the
// held one and never beyond MaxEpoch (an edge the hub holds no epoch for
// may start anywhere up to it): anything else is refused with ErrBadEpoch,
// counted (Status.EpochsRefused, EpochRefusals) and logged, so that a
// valid token cannot fence the real edge for good with epoch 2^64-1, and
// a fenced edge does not loop. A store written by an older hub may hold an
// edge at an epoch beyond MaxEpoch: Open logs it and holds the edge at
// epoch 0 (its next Hello is adopted, the bounded epoch written at the
// next commit), and reads a stored partial's epoch beyond MaxEpoch as 0,
// so the partials the edge resends under its new epoch replace them.
//
// # Exactly once
//
// An edge's sequence number is written in the same transaction as the
// partials it carried, so after any crash the hub's acked sequence and its
// merge state agree: the edge resends from acked+1, entries at or below the
// applied sequence are dropped, and a resent partial replaces rather than
// adds. Results are upserts keyed by (pipeline, class, window, key,
// version).
//
// # Archive log
//
// With Config.ArchiveMaxPending set, the commit that writes a result
// version also appends it, with its aggregates' values, to the archive
// log in the store (docs/formats/hub-store.md, bucket archive), in the
// same transaction: a crash loses or keeps both. The archiver
// (sync/archive, through ArchiveLog) takes the log to object storage and
// saves its cursor, up to which the log is then trimmed. The hub never
// waits for it; while it lags, the log grows, and at ArchiveMaxPending
// results not archived Apply refuses batches with ErrArchiveFull
// (Status.ArchiveRefused, logged at the 1st, 2nd, 4th, 8th, ... refusal),
// so that edges keep their data rather than the hub dropping results.
// ArchiveNotify tells the wiring after each commit that logged results.
//
// # Watermark and versions
//
// The hub watermark of a pipeline (a local one, or a class) is the
// minimum of the watermarks of the live edges that reported one for it
// (Revisions, above), and never moves backwards. An edge is live
// while it was heard from within EdgeTimeout; the hub's start counts as
// hearing from every edge it knows, so a restart gives the edges
// EdgeTimeout to come back. A silent edge stops holding the watermark back,
// and its partials, when it returns, are late. When no edge that reported a
// watermark is live any more, the hub watermark goes to the highest one any
// edge reported: each edge's windows were complete up to its own watermark,
// so a fleet that goes quiet still gets what its live edges sent emitted,
// and the others' later partials become new versions. At each commit every
// window ending at or before the watermark that was never emitted gets
// version 1; an emitted window whose partials changed gets the next
// version. Versions of a window are 1, 2, 3, ... without gaps.
//
// Windows (partials, results) ending more than Retention before the hub
// watermark or the hub's clock, whichever is earlier, are deleted at
// commit; partials for them are dropped and counted
// (Status.PartialsExpired). The expiry bound is min(hub watermark, hub
// clock) - Retention: a watermark far ahead of the clock expires nothing
// recent, and one far behind it expires nothing not yet emitted.
//
// # Time
//
// The hub's clock (Config.Now) bounds event time: an edge's watermark
// more than MaxFuture (default 1h) ahead of it is held at now + MaxFuture,
// counted (Status.WatermarksClamped, Status.Clamps) and logged at most
// once per edge per minute, so one edge with a wrong clock can rush the
// hub watermark by MaxFuture at most and never past it; the hub watermark
// itself never passes the clock + MaxFuture of the commit that sets it.
// A managed revision's end of time is the exception: it is kept as the
// edge's watermark of the class, not clamped, and bounds nothing.
// Open holds a stored watermark (a pipeline's or an edge's) beyond the
// bound at it too (an end of time excepted) and logs it, so a store written by an older hub keeps
// nothing poisoned after its next commit. Retention runs on the clock as
// well (above), so a wrong watermark can rush or delay results but never
// erase them.
//
// # Memory
//
// Memory holds the hot windows only: those not yet emitted, those with
// changes not yet written or emitted, and those ending within Resident
// (default 1h) of the hub watermark. After each commit the other windows
// leave memory (Status.WindowsEvicted); the store already holds each
// edge's latest partial of them and their last version. A partial for such
// a window reads its records back (one seek in its key group bucket, in
// Apply, before anything of the batch is applied) and the window goes on as
// if it had never left: the partial replaces its edge's if newer, and the
// next commit emits the next version (Status.WindowsReloaded). Open loads
// the windows ending within Resident of the stored hub watermark, which
// includes every window not yet emitted. Expiry deletes evicted windows
// from the store by key range, without loading them. So memory is bounded
// by keys × edges × the windows of about Resident plus the watermark's lag,
// whatever Retention is.
//
// # Key groups
//
// A key belongs to key group xxhash64(key) mod KeyGroups, as on the edge.
// Partials live in one bbolt bucket per key group and the in-memory index
// is split the same way, so that a range of key groups can later move to
// another hub worker (DESIGN.md, Scale). The count is stored and fixed.
// The byte layout is docs/formats/hub-store.md.
//
// # Caveats
//
//   - A late partial for an evicted window costs a read of the store under
//     the hub's lock; a stream of partials late by more than Resident
//     reloads (and after the next commit evicts) a window each time. Size
//     Resident to cover the usual lateness.
//   - Records of evicted windows are checked (CRC, decoding) when they are
//     reloaded, not at Open; a corrupt one fails every batch that needs
//     it with ErrCorrupt (nothing of the batch applied), so that edge's
//     uplink stalls until the store is repaired.
//   - The hub learns its local pipelines at Open: one deployed while it
//     runs is parked until the next start. Managed revisions it learns at
//     Open and from Define; Define is not persisted by the hub (the fleet
//     store is), so the next Open must get the revision in
//     Config.Revisions, or its class's records wait for the next Define.
//   - Define holds Apply back while it reads the revision's parked
//     records (at most ParkedQuota per edge) and, for a class new to this
//     run, the class's resident windows.
//   - A pipeline name that is both local and managed is queried and
//     subscribed as the managed one (Query.Revision 0 picks the latest
//     revision's class): its local results stay stored, but Query cannot
//     name them.
//   - An edge that stops sending a class's watermarks without the end of
//     time (its state was lost and it runs another class now, say) holds
//     that class's watermark at its last one while it is live.
//   - Open reads the whole parked bucket (at most ParkedQuota per edge)
//     to count it, and a parked-record sweep reads it whole too.
//   - One edge whose clock runs ahead can rush the hub watermark by up to
//     MaxFuture, and the others' partials of the windows it passed become
//     later versions.
//   - Session windows are merged by exact (start, end). Sessions of one key
//     that the edges cut differently (each edge saw other records) stay
//     separate results; the hub does not merge overlapping sessions.
//   - A local pipeline's partials (revision 0) name no version: a local
//     spec that changes its aggregates must get a new pipeline name (a
//     managed one gets a revision of a new class instead).
//   - A query with a key filter scans the pipeline's window range.
//   - A subscriber that falls 4096 results behind is dropped (its channel
//     closed) instead of slowing commits.
//   - A failing commit is retried with the next one; until one succeeds,
//     nothing more is acked and memory holds the unwritten changes.
//   - The archive log's bound is checked when a batch arrives, and one
//     commit may emit past it: the log can exceed ArchiveMaxPending by
//     the results of a commit's watermark advance.
package hub
