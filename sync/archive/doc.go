// Package archive writes the hub's results to object storage as Parquet,
// exactly once, and keeps that archive compacted and within its
// retention. It is the cold tier of the results (DESIGN.md, Cold tier).
//
// # Model
//
// The hub's group commit appends every result version it emits to a
// durable archive log, in the same bbolt transaction as the result itself
// (hub.ArchiveLog; the log and this package's state are beside the hub's
// store, docs/formats/hub-store.md). So after any crash the log holds
// exactly the results the hub's store holds that were not yet archived:
// nothing emitted can be lost on the way, nothing can be logged twice.
//
// An Archiver takes the log from its cursor, in ranges of at most
// MaxRowsPerFlush entries, and for each range (an append):
//
//  1. builds the Parquet files of the range in the local staging
//     directory, one or more per partition (pipeline, day, hour of the
//     window's start, UTC) and schema, with names unique to the range:
//     <partition>/part-<log id>-<first seq>-<n>.parquet;
//  2. saves, with its state, the intent: the range, the files, and the
//     manifest generation of each partition it will publish;
//  3. uploads the files (Put never overwrites; a key that exists is the
//     interrupted attempt's upload of the same rows);
//  4. publishes each partition's next manifest generation,
//     <partition>/_manifest/<generation>.json, listing the partition's
//     files so far plus the new ones (a manifest that exists must list
//     the same files: ErrConflict otherwise);
//  5. saves the state with the cursor past the range, and the log is
//     trimmed through it.
//
// A crash anywhere resumes at the saved intent with the same names and
// generations, so a range is published once, under one set of files;
// the cursor moves only after every manifest of the range is published.
// The two phases: files are staged (uploaded, invisible) until a manifest
// that names them is published, and a manifest names only files of
// results the hub had durably committed.
//
// Readers list a partition's manifests and read the files of the highest
// generation: never a partial file (an object is whole or absent), never
// a file twice, never a superseded one. docs/object-storage.md (Results
// archive) gives the layout and the SQL for DuckDB and Spark.
//
// Compaction merges the files of a closed partition (its hour ended
// CompactionDelay ago) into one file per schema sorted by (class, key,
// window, version), with an external merge sort bounded by
// CompactionMemory, and publishes the next generation listing it instead
// of the files it merged: one Put switches readers from the small files
// to the merged one. A partition that late results add files to is
// compacted again. Superseded files and manifests are deleted Grace
// after they were superseded. Retention deletes whole partitions whose
// hour ended Retention ago on the hub's clock: manifests first, oldest
// first, then the files.
//
// # Invariants
//
//   - Every log entry at or below the state's cursor is in exactly one
//     published manifest generation's file list, and stays in every later
//     generation of its partition (in a compacted file or its own) until
//     retention deletes the partition.
//   - A manifest generation is written once and lists only files that
//     were uploaded whole before it was published.
//   - One unit of work at a time (an append, a compaction); its intent is
//     durable before any object of it is written.
//
// # Caveats
//
//   - The store must be written by one archiver: two hubs sharing an
//     archive URL would publish generations over each other
//     (ErrConflict stops the second, it does not merge them). Use a
//     prefix per hub.
//   - A results row's partition is the hour its window starts in: the
//     versions of a window share a partition, and late corrections land
//     in old partitions (which compaction merges again).
//   - Key fields are string columns: the pipeline spec does not type
//     them (a number key is written in its shortest form, 21 not 21.0).
//     The key column holds the whole key as the hub's API renders it.
//   - Readers must go through manifests: files of an interrupted run
//     with lost state, and superseded ones within their grace, are in
//     the partition directories too.
//   - The archiver's state holds every partition's file list; with very
//     long retentions of many pipelines it is rewritten (a few hundred
//     KB) at each flush.
//   - Rows of partitions already past Retention when they are flushed
//     are not archived (counted: Totals.Expired, logged).
//   - A row that cannot be a row of its files (a key not in the
//     operators' encoding: the hub takes keys as opaque bytes; a value
//     that does not fit the schema) is set aside, counted
//     (Totals.Invalid, runnel_hub_archive_invalid_rows_total) and logged
//     with its log sequence, rather than stall the rows behind it.
package archive
