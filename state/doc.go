// Package state is keyed operator state on bbolt: namespaces split into key
// groups, a write-behind cache in memory, and a commit that writes the dirty
// state together with the checkpoint's own records in one transaction.
//
// # Model
//
// A Store is one bbolt file. A Namespace is the state of one operator or
// purpose ("window/line-temps"); its keys are partitioned into a fixed
// number of key groups (Options.KeyGroups, default 128, fixed when the file
// is created). The caller picks a key's group from its hash (Store.GroupOf),
// the same group the dataflow routes the key's records by, so that one
// worker owns a group and a range of groups can later move to another worker
// or host. In the file each (namespace, group) is its own bucket, so a group
// is scanned or moved without touching the others; the byte layout
// is in docs/formats/state-layout.md.
//
// Get, Put and Delete go through a cache. Put and Delete only mark the entry
// dirty; nothing reaches the file until a commit. A Get that misses reads the
// file and caches the answer (also "absent"). When the cache is over
// Options.CacheBytes, clean entries are evicted (CLOCK, per group, then
// round-robin across groups); dirty entries never are, so state larger than
// memory works, but the dirty set between two commits must fit in memory.
//
// A commit writes every dirty entry of the groups it covers, and whatever the
// caller's function writes into system buckets through Tx (outbox entries,
// ingest log positions, checkpoint metadata), in one bbolt read-write
// transaction, then fsyncs. A crash leaves the file as of the last commit
// that returned, never a mix. After a successful commit the entries are
// clean; after a failed one they are still dirty and the next commit retries
// them.
//
// # Checkpoints without a stall
//
// Store.Commit is the simple form. For checkpoints, BeginCommit (or
// BeginCommitGroups, for the groups a worker owns) hands the dirty set over
// in time proportional to the number of groups, not entries, and returns a
// Handoff; the worker goes on processing while some other goroutine runs
// Handoff.Write. Internally each group counts commit epochs: BeginCommit
// closes the open epoch and opens the next, and every entry carries two value
// slots, one for the epoch being written and one for the epoch being filled,
// so a Put during the write never touches what the writer reads. A later Put
// to the same key wins in the cache at once and on disk at the next commit.
// Several workers' handoffs are folded into one transaction with Join.
//
// # Ownership
//
//   - Put takes ownership of value: the caller must not modify it after the
//     call (it may keep reading it). Keys are copied.
//   - Get returns a slice the caller must not modify. It stays valid and
//     unchanged, because the store never writes into a value: a later Put
//     replaces the slice.
//   - Scan's key and value are valid only until fn returns.
//   - Tx and Bucket slices point into bbolt's mapping and are valid until
//     the transaction ends. Bucket.Put copies its arguments.
//
// # Concurrency
//
// Get, Put, Delete, Scan and ScanPrefix may be called from any number of
// goroutines; calls on the same key group serialize on the group's lock, so
// one worker per group sees no contention. A read-modify-write of a key is
// atomic only if one goroutine owns the key's group. Scan's fn may call Get,
// Put and Delete, on its own group too.
//
// BeginCommit and BeginCommitGroups may run concurrently with all of the
// above; they fail with ErrInFlight for a group whose previous Handoff has
// been neither written nor aborted. Handoff.Write may run on any goroutine,
// concurrently with Get, Put, Delete, Scan, BeginCommit of other groups,
// View and Update; bbolt serializes it with other writes. A Handoff itself is
// used by one goroutine at a time. Namespace, Stats, View and Update are
// safe for concurrent use. Close must not run concurrently with anything but
// a Handoff.Write, which it waits for.
//
// The fn given to Commit, Write, View or Update runs inside a bbolt
// transaction: it may use its Tx and the cache methods, but must not call
// Commit, Write, Update or View, which would wait for the transaction it
// runs in.
//
// # Integrity
//
// bbolt checksums only its two meta pages. This package adds: a CRC-32C on
// every stored value, over the namespace, group, key and value (a flipped
// bit, or a value under the wrong key or in the wrong bucket, fails it); and
// a digest per bucket (record count and XOR of the CRCs, kept in bbolt's
// bucket sequence) that catches records lost to a damaged page.
//
// Open verifies the file before bbolt maps it (Options.Verify). VerifyFull,
// the default, walks every page from the raw bytes: page ids and types,
// element bounds, key order, no page reached twice, reached and free, or
// lost, and every checksum and digest. VerifyQuick checks the meta pages,
// the file length and the freelist. Either reports damage as an error
// wrapping ErrCorrupt, naming the page, bucket or key.
//
// bbolt panics, or faults on its mapping, when it meets a damaged page.
// Every call into bbolt is guarded: the panic is recovered (with
// debug.SetPanicOnFault, so a fault becomes a panic too) and returned as an
// ErrCorrupt error. After such a panic in a write transaction, further
// commits fail fast with that error instead of writing into a damaged file.
// A panic raised by the caller's own fn is not converted: it rolls the
// transaction back and propagates.
//
// # Caveats
//
//   - The edge node no longer keeps operator state in namespaces: a B-tree
//     entry per (slice, key) made each checkpoint rewrite a page per dirty
//     key (the next caveat). It stores op records per key group in system
//     buckets (edge/opstate.go) and uses only Open, View, Update, the
//     system buckets and verification. Namespaces, the cache and
//     BeginCommit are kept until a decision on removing them (they have
//     no other user).
//   - A commit costs about one page write per dirty key when dirty keys are
//     spread out, since bbolt copies every page it changes: 1% of 10^6
//     random keys rewrites ~9000 pages. Keys that sort together (a
//     big-endian window end first) share pages and make commits cheap.
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
//   - Scan is not a snapshot: a key changed while it runs may be seen with
//     either value, or not at all; every other key is seen once.
//   - Delete of a key that is not cached does not read the file: it costs a
//     cache entry until the next commit.
//   - The key group count is fixed when the file is created (ErrKeyGroups).
//   - The cache budget counts keys, values and a fixed per-entry overhead;
//     Go's own heap overhead is not measured.
package state
