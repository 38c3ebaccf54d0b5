// Package rawarchive is the raw archive lane of the cold tier: sealed
// ingest-log segments, compressed, in object storage before the edge
// deletes them, so that a pipeline can be re-run over what a gateway
// received long after its disk let it go.
//
// # Model
//
// One segment becomes two objects under the edge's raw prefix, in the
// day it was sealed (UTC):
//
//	<edge>/raw/<yyyy>/<mm>/<dd>/<first>-<sum>.seg.zst   the segment file, zstd-compressed
//	<edge>/raw/<yyyy>/<mm>/<dd>/<first>.json            its manifest
//
// <first> is the position of the segment's first record, twenty digits;
// <sum> the first 16 hex digits of the compressed object's SHA-256. The
// manifest (Manifest, docs/formats/raw-archive.md) names the object, the
// segment's positions and record count, and the size and SHA-256 of the
// object and of the segment file it inflates to.
//
// # Invariants
//
//   - The data object is written before the manifest, and neither is ever
//     overwritten (the store's Put refuses an existing key). A listing that
//     finds a manifest finds a complete object: a crash between the two
//     leaves an object no manifest names, which Upload reuses on the retry.
//   - Upload is idempotent: the same segment gives the same keys (zstd at
//     a fixed level is deterministic, and the object's key carries its
//     checksum), so a retry after a crash finds what the first try stored
//     and returns its manifest.
//   - Fetch returns a segment's bytes only when the object's size and
//     SHA-256 and the inflated file's size and SHA-256 all match the
//     manifest; anything else is ErrCorrupt naming the key.
//
// # Caveats
//
//   - The lane is below the uplink of aggregates in priority and yields at
//     the disk cap (the edge decides both; see edge/raw.go): a segment the
//     edge had to delete unarchived leaves a gap between manifests, which
//     Catalog.Range reports rather than hides.
//   - An object no manifest names (a crash between the two puts of an
//     upload the edge then gave up on) is garbage; it is small and rare and
//     left to the bucket's lifecycle rules.
package rawarchive
