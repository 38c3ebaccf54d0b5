// Package checkpoint is what runnel's checkpoints are made of, apart from
// the edge and the operators that run them: the parts a barrier gathers,
// the checkpoint record, and snapshots — a checkpoint's whole state file,
// compressed, with a manifest, in a store — from which a gateway whose
// disk died is rebuilt (`runnel-edge restore`).
//
// # Checkpoints
//
// A checkpoint is a consistent cut. The edge's pump injects barrier n into
// every pipeline's runtime (operators.Runtime.Barrier) and notes the
// ingest log position it stands at; each worker hands on its state
// changes since barrier n-1 as Changes; the runtime gathers its source's
// part and every worker's (Parts) and gives its sink a Barrier, whose
// Changes replay all of them onto a ChangeWriter; the edge's writer
// gathers every pipeline's Barrier and the pump's position (Parts again)
// and commits them in one state transaction, with the outbox entries and
// the checkpoint record (Meta: id, log position, next outbox sequence;
// LoadMeta, StoreMeta). A crash leaves checkpoint n-1 or n, never a mix.
//
// Invariants:
//
//   - Checkpoint ids only grow, across restarts and across restores: a
//     restored edge continues past every snapshot id its store holds.
//   - Parts returns a checkpoint once, with every part, whatever order
//     the parts (and the checkpoints) arrive in.
//   - Changes replays exactly what it recorded, in order.
//
// # Snapshots
//
// A snapshot of checkpoint n is two objects under
// <edge-id>/snapshots/<n, 20 digits>/ in a Store (Snapshots):
//
//   - data: a Header (edge id, checkpoint id, epoch, state size; CRC-32C)
//     followed by the state file as of checkpoint n (state.Tx.WriteTo of a
//     read transaction: consistent while checkpoints go on), as one zstd
//     frame (WriteData);
//   - manifest: the Manifest (edge, checkpoint, epoch, log position, next
//     sequence, the state file's size and XXH64, the data object's size
//     and XXH64, when, which runnel; CRC-32C), written after the data
//     object.
//
// The byte layouts are in docs/formats/snapshot.md.
//
// Invariants:
//
//   - A snapshot with a manifest is complete: its data object was stored
//     whole before the manifest was put. List shows only those; a data
//     object without a manifest is an upload in progress or one that
//     failed, which Prune deletes once a later snapshot is complete.
//   - Stores never overwrite (ErrExists): an object, once there, is the
//     one the manifest describes, or damaged.
//   - ReadData accepts a data object only if its size and XXH64 equal the
//     manifest's, its header names the manifest's edge, checkpoint, epoch
//     and state size, its zstd frame decodes, and the state file it yields
//     has the manifest's size and XXH64. Anything else is ErrCorrupt with
//     the reason (truncated, damaged, another snapshot's); Snapshots.Restore
//     then removes what it wrote.
//   - Prune deletes a manifest before its data object, so a listing never
//     finds a manifest without its data.
//
// # Stores
//
// Store is four methods of object storage (Put that never overwrites,
// Get, List, Delete); FilePutter adds a file upload, which a store may do
// in parts. DirStore is a local directory (atomic: temporary file, fsync,
// link into place, fsync the directory). OpenStore builds a Store from a
// URL: file:///path or a plain path is a DirStore; other schemes (s3://)
// come from the Openers the caller passes, so this package imports no
// object storage client. An adapter maps its backend's "no such key" and
// "already exists" to ErrNotFound and ErrExists.
//
// # Caveats
//
//   - The checksums are XXH64 (not cryptographic): they find damage, not
//     tampering. Whoever can write the store can forge a snapshot.
//   - A snapshot is only as recent as its checkpoint. What the edge took
//     in after it (readings acknowledged to MQTT, results sent to the hub)
//     is not in it; docs/object-storage.md says what a restore therefore
//     does and does not count.
//   - One writer per edge: two processes with one edge id would race for
//     the same keys (the loser gets ErrExists) and diverge.
//   - DirStore falls back to rename (after a check for the key) where the
//     filesystem has no hard links; two writers of one key could then both
//     succeed, the second replacing the first.
package checkpoint
