// Package state is a bbolt file of checksummed system buckets, verified
// whole before it is used: where the edge node keeps its operator state (op
// records and bases per key group, edge/opstate.go), outbox entries and
// checkpoint metadata, each checkpoint written in one transaction.
//
// # Model
//
// A Store is one bbolt file, locked by the process that opened it. Its data
// is in system buckets, named by the caller ("outbox", "oplog/<pipeline>"),
// reached through the Tx of View (read-only) or Update (read-write). An
// Update commits everything its function wrote, then fsyncs (unless
// Options.NoSync): a crash leaves the file as of the last Update that
// returned, never a mix. If the function returns an error, nothing of it is
// written.
//
// The file also stores a key group count (Options.KeyGroups, default 128,
// fixed when the file is created; Store.KeyGroups). The package does not use
// it: it is the caller's partition of its keys (the edge puts a key's
// operations in group hash modulo the count), kept with the data so that it
// cannot change under them. The byte layout is in
// docs/formats/state-layout.md.
//
// # Ownership
//
//   - Tx and Bucket slices point into bbolt's mapping and are valid until
//     the transaction ends; they must not be modified.
//   - Bucket.Put copies its arguments.
//   - ForEach's key and value are valid until the transaction ends.
//
// # Concurrency
//
// View and Update may be called from any number of goroutines; bbolt runs
// one Update at a time, concurrently with Views. A Tx, and the Buckets it
// returns, are used only by the goroutine running the function they were
// passed to. The function must not call View or Update, which would wait
// for the transaction it runs in. Close waits for transactions in progress;
// every method called after it returns ErrClosed.
//
// # Integrity
//
// bbolt checksums only its two meta pages. This package adds: a CRC-32C on
// every stored value, over the bucket name, key and value (a flipped bit, a
// value under the wrong key, or in the wrong bucket, fails it); and a digest
// per bucket (record count and XOR of the CRCs, kept in bbolt's bucket
// sequence) that catches records lost to a damaged page.
//
// Open verifies the file before bbolt maps it (Options.Verify). VerifyFull,
// the default, walks every page from the raw bytes: page ids and types,
// element bounds, key order, no page reached twice, reached and free, or
// lost, and every checksum and digest. VerifyQuick checks the meta pages,
// the file length and the freelist. Either reports damage as an error
// wrapping ErrCorrupt, naming the file and the page, bucket or key; a file
// of another layout version, or not written by this package, is ErrFormat.
//
// bbolt panics, or faults on its mapping, when it meets a damaged page.
// Every call into bbolt, including those the caller's function makes
// through Tx and Bucket, is guarded: the panic is recovered (with
// debug.SetPanicOnFault, so a fault becomes a panic too) and returned as an
// ErrCorrupt error. After such a panic in an Update, further Updates fail
// fast with that error instead of writing into a damaged file. A panic
// raised by the caller's own function is not converted: it rolls the
// transaction back and propagates.
//
// # Caveats
//
//   - An Update costs about one page write per changed key when the keys
//     are spread out, since bbolt copies every page it changes. The edge
//     therefore writes a few large values per key group (op records of
//     about 1 MiB at most), not a value per key.
//   - VerifyFull reads the whole file at Open. VerifyQuick does not look at
//     tree pages; a damaged branch page that points back to an ancestor
//     then makes bbolt recurse until the stack overflows, which is fatal
//     and cannot be recovered. Use VerifyQuick only for files known good.
//   - If the newest meta page is damaged, bbolt silently uses the other,
//     one commit older: the file opens as the previous checkpoint. Callers
//     that delete inputs once a checkpoint covers them should keep what the
//     previous checkpoint needs, too.
//   - If bbolt panics inside Open, the file is closed but bbolt's mapping of
//     it is leaked (bbolt offers no way to unmap it).
//   - A memory fault while the caller's own code reads a returned slice
//     (which points into the mapping) is the caller's panic, not an
//     ErrCorrupt error. The value has passed its checksum, so this takes a
//     file truncated or damaged under the open transaction.
//   - Tx.WriteTo copies the whole file as one transaction sees it (the
//     edge's snapshots). A read transaction held open meanwhile keeps the
//     pages later Updates free from being reused, so the file grows by
//     what they write until it ends, and an Update that must grow the
//     mapping beyond Options.MmapBytes waits for it: copy to a fast local
//     file, not to a network.
//   - bbolt reuses free pages but never shrinks its file. With
//     Options.CompactFree, Open rewrites a file that is mostly free pages
//     into a new one beside it (PATH.compact, renamed over PATH once
//     fsynced): that takes the disk and the time of what the file holds,
//     at Open only, and a crash in it leaves either file whole at PATH.
//   - The key group count is fixed when the file is created (ErrKeyGroups).
//   - Layout version 1 files (operator state in namespaces, removed) are
//     refused with ErrFormat; there is no migration.
package state
