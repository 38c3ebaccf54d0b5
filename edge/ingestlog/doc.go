// Package ingestlog is the edge's write-ahead log of MQTT messages: every
// message is appended here, and acknowledged to the broker (PUBACK) only once
// it is durable. Its positions are the source offsets that MQTT does not
// have: a checkpoint records one, and after a crash the edge replays the log
// from it.
//
// # Model
//
// A log is a directory of segment files. Each segment is named by the
// position of its first record (00000000000000004096.seg) and holds a small
// header followed by frames. A frame is one block: the records of one group
// commit, stored plain or as one zstd frame, with a CRC-32C over its header
// and another over its payload. The byte layout is in
// docs/formats/ingest-log.md.
//
// Records are opaque byte strings (the edge encodes topic and payload
// itself). Each record has a Position: the first record ever appended has
// Position 0, the next 1, and so on, across segments, restarts and deletions.
// A record inside a compressed block is addressed like any other; a reader
// asked for it decodes its block and skips the records before it. An
// in-memory index of one frame offset per 64 KiB of segment bounds that work.
//
// Append copies the record into a buffer and returns its position at once.
// One committer goroutine, started by Open and stopped by Close, takes the
// whole buffer as one block, writes it as one frame with one write call,
// fsyncs, and publishes the new durable end through Durable, WaitDurable and
// Options.OnDurable. Under SyncGroup (the default) it commits when
// GroupBytes are buffered or the oldest buffered record has waited
// GroupDelay (2 ms); SyncAlways commits whenever anything is buffered;
// SyncNever never fsyncs (tests, benchmarks). An appender that has a whole
// batch at once commits it itself: BeginCommit, its Appends, Commit, which
// writes and fsyncs on the caller's goroutine under the lock the committer
// commits under, so the committer is not woken for it (the edge's MQTT
// handler does this after each read). When MaxUnsynced bytes are
// waiting, Append blocks: that is the back-pressure that stops the MQTT
// handler and so the acks.
//
// A segment is started, when the next frame would take the current one past
// SegmentSize, by writing its header under a temporary name, fsyncing,
// renaming, and fsyncing the directory. DeleteBefore removes whole segments
// once a checkpoint covers them, but keeps SpareSegments of their files
// (renamed *.seg.free) for the next segments to be written over: an fsync
// of blocks a file already has costs no allocation and no journal commit.
// Each segment has a random salt in its header that seeds its frame header
// CRCs, so that frames are recognised only in the segment they were
// written for: neither a spare's earlier frames nor a frame hidden in a
// record can pass for one. Frames are made durable with fdatasync.
//
// # Invariants
//
//   - Positions are dense and increase by one per record. Durable() = n means
//     records 0..n-1 have been fsynced and will be found by Open after a
//     power loss, byte for byte, in order.
//   - Only one write is ever unsynced: a commit's write is fsynced before the
//     next write or the next segment begins. Hence after a power loss only
//     the last frame of the last segment can be torn.
//   - A Reader returns durable records only, each once, in order. A frame
//     it reads from a file has its CRCs verified again; the frame the
//     committer wrote last, if the Reader needs it next, it copies from the
//     committer's block in memory instead (the records as they were written,
//     before compression), for as long as that block is not being refilled:
//     a reader that keeps up, such as the edge's pump, then never reads the
//     file back (FramesRead counts both).
//   - Nothing durable is ever overwritten: bytes are appended, cut off by
//     Open's repair of a torn tail, and written over only in a spare file,
//     whose contents are no longer part of the log. A segment written over
//     a spare is cut to its last frame when it ends (rolled, or the log
//     closed), so only a crashed log's last segment has the spare's earlier
//     bytes after its last frame.
//
// # Recovery policy
//
// Open reads every segment and verifies every frame.
//
//   - Damage in any segment but the last (bad CRC, impossible lengths,
//     trailing bytes, a frame whose positions do not follow on), a damaged
//     segment header, or a gap or overlap in positions between segments, is
//     an error wrapping ErrCorrupt that names the segment file and the byte
//     offset. Open repairs nothing then: what to do with damaged data that
//     may have been acknowledged is for an operator (or a restore from a
//     snapshot) to decide, not for a silent skip.
//   - Spares (*.seg.free) past SpareSegments are removed; the others are
//     kept, and Size counts them.
//   - In the last segment, Open finds the first frame that does not verify
//     and looks for any verifiable frame after it (past the bad frame's
//     payload when its header is sound, else at every byte offset). If there
//     is one, the bad frame is damage in the middle: ErrCorrupt. If there is
//     none, the bad bytes are the torn last write of a power loss: Open cuts
//     them off, fsyncs, and says so in Recovery (segment, offset, bytes, and
//     the records of the cut frame when its header could be read).
//   - A segment header with another version byte gives ErrVersion and is
//     never repaired: it may be a newer runnel's data.
//   - Leftover *.seg.tmp files (a crash while starting a segment) are
//     removed. Files with other names are left alone, except that a *.seg
//     name the log does not write is an error.
//
// # Caveats
//
//   - Damage confined to the last frame looks exactly like a torn write, so
//     it is cut off, not reported as corruption: on a card that loses synced
//     data, the records of the last commit can be lost with a Recovery
//     report rather than an error.
//   - Open's scan reads the whole log: seconds per GiB on an SD card, once
//     per start.
//   - The search for a frame after a bad one tries every byte offset of the
//     tail; after a crash in a segment written over a spare, that tail is
//     the spare's earlier bytes, up to SegmentSize (a fraction of a second
//     per 64 MiB here; longer on a slow card). It can be fooled only by
//     bytes that form a frame with both CRCs under the segment's salt (1 in
//     2^32 for random bytes); the answer is then ErrCorrupt, never lost
//     data. Segments of version 1 have no salt.
//   - Under SyncNever "durable" means "written": after a power loss Open may
//     cut records that were reported durable, or find damage it cannot call
//     a torn tail.
//   - After a failed write or fsync the Log stops (ErrFailed): the kernel may
//     have dropped the dirty pages, so a retried fsync proves nothing. Close
//     it and Open again; Open keeps what verifies.
//   - Records appended but not durable when the process dies are gone; the
//     broker, never acked, delivers them again.
//   - A Reader holds a segment open; on Linux a segment that DeleteBefore
//     removes stays readable through it, and a Reader that then needs the
//     next, also deleted, segment fails with ErrOutOfRange.
//   - The directory is locked with flock (ErrLocked); on systems without it
//     two logs on one directory are not detected.
package ingestlog
