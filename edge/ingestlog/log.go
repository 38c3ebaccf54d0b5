package ingestlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
)

// indexEvery is the spacing, in bytes, of the in-memory index from positions
// to frame offsets: a reader starting at an arbitrary position decodes at
// most this much (plus one block) to reach it, and the index costs 16 bytes
// per 64 KiB of log.
const indexEvery = 64 << 10

// Log is an open ingest log. Append, Durable, WaitDurable, NewReader, First,
// Size, DeleteBefore and Close are safe for concurrent use; the edge calls
// Append from one goroutine, the MQTT handler, and positions are handed out
// in the order Append calls take the log's lock.
type Log struct {
	dir  string
	fs   FS
	opts Options
	lock io.Closer

	// Owned by whoever holds commitMu once Open returns.
	active     File  // the last segment, open read-write
	written    int64 // bytes written to active; its durable size may lag
	activeFile int64 // active's length: more than written over a spare
	stale      int64 // max(activeFile-written, 0), counted in reserved
	enc        *zstd.Encoder
	zbuf       []byte

	kick  chan struct{}   // cap 1: "something to commit", never blocks Append
	seal  chan chan error // Seal's requests, answered by the committer
	stop  chan struct{}   // closed by Close
	done  chan struct{}   // closed when the committer has exited
	abort atomic.Bool     // Close's ctx expired: drop what is still buffered

	durable  atomic.Uint64 // one past the last durable record
	end      atomic.Uint64 // one past the last record appended
	size     atomic.Int64  // bytes in all segment files
	buffered atomic.Int64  // bytes of records appended, not written yet (Size counts them)
	reserved atomic.Int64  // bytes of spare files and of a spare's earlier contents in active

	mu        sync.Mutex
	pend      []byte        // the next block: frameHeaderSize reserved bytes, then records
	spare     []byte        // the other block buffer; nil while the committer writes it
	pendFirst Position      // position of pend's first record
	pendCount int           // records in pend
	pendSince time.Time     // when pend's first record arrived
	inflight  int           // record bytes of the block being committed
	err       error         // sticky: the write or fsync that failed
	closed    bool          // Close was called
	exited    bool          // the committer has exited
	closeErr  error         // what Close returns, set before done is closed
	wake      chan struct{} // closed and cleared at each state change; see wakeLocked
	segs      []*segment    // oldest first; the last is the active segment
	spares    []spare       // deleted segments' files, kept to be written over
	last      lastBlock     // the block the committer wrote last, while spare holds it

	// Frames Readers took from memory (the last block) and from the files.
	framesFromMemory, framesFromFile atomic.Uint64

	deleteMu sync.Mutex // serialises DeleteBefore

	// commitMu is held by whoever writes and fsyncs: the committer
	// goroutine, or an appender in Commit.
	commitMu sync.Mutex
	// callers counts the appenders between BeginCommit and Commit: the
	// records they append do not start the group delay.
	callers atomic.Int32
}

// lastBlock is where the committer's last block went: a Reader that
// needs that frame next copies its records from memory rather than read
// them back from the file. It is valid from the end of its commit until
// the next commit takes the buffer (spare) for Append to refill.
type lastBlock struct {
	valid   bool
	seg     *segment
	off     int64 // the frame's offset in seg
	length  int64 // the frame's stored length, header excluded
	first   Position
	count   int
	records []byte // the frame's records, uncompressed; aliases spare
}

// segment is what the log knows about one segment file. Guarded by Log.mu;
// the committer updates the last one after every commit.
type segment struct {
	name  string
	first Position // position of the first record (also in the file name)
	end   Position // one past the last durable record
	size  int64    // durable bytes, header included
	hdr   int64    // header bytes: the first frame's offset
	seed  uint32   // the seed of its frame header CRCs
	index []indexEntry
}

// spare is a deleted segment's file, renamed to <segment name>.free, that
// the next new segment is written over instead of a new file: overwriting
// blocks a file already has spares the file system the allocation and the
// journal commit that each fsync of a growing file costs, in CPU and in
// writes to the card.
type spare struct {
	name string
	size int64
}

// indexEntry says that the frame at off starts with the record at pos.
type indexEntry struct {
	pos Position
	off int64
}

// Recovery says what Open found on disk and what it repaired.
type Recovery struct {
	Segments int      // segment files, after repair
	First    Position // the oldest record kept
	End      Position // one past the newest record: where appends continue
	Bytes    int64    // bytes in segment files, after repair

	// A torn tail of the last segment: the bytes from TruncatedOffset on
	// did not verify and nothing after them did, so they were cut off.
	// TruncatedRecords counts the records of the cut frame when its header
	// was still readable (0 otherwise). These records were never reported
	// durable, unless the policy is SyncNever or the disk lost synced data.
	TruncatedSegment string
	TruncatedOffset  int64
	TruncatedBytes   int64
	TruncatedRecords int
	TruncatedReason  string

	// RemovedTemp counts half-made segment files (*.seg.tmp) of a crash
	// while starting a segment, which Open removed.
	RemovedTemp int
}

// Open opens the log in dir, creating dir and an empty log if needed. It
// reads every segment and verifies every frame, truncates a torn tail of
// the last segment (reported in Recovery) and fails with an error wrapping
// ErrCorrupt on any other damage; see the package documentation for the
// policy. The returned Log owns a committer goroutine until Close.
//
// Open reads the whole log, which takes time on a slow card with a long
// backlog; ctx bounds it.
func Open(ctx context.Context, dir string, opts *Options) (*Log, Recovery, error) {
	if err := opts.Validate(); err != nil {
		return nil, Recovery{}, err
	}
	o := opts.withDefaults()
	l := &Log{
		dir:  dir,
		fs:   o.FS,
		opts: o,
		kick: make(chan struct{}, 1),
		seal: make(chan chan error),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if err := l.fs.MkdirAll(dir); err != nil {
		return nil, Recovery{}, fmt.Errorf("ingestlog: open %s: %w", dir, err)
	}
	lk, err := l.fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, Recovery{}, fmt.Errorf("ingestlog: open %s: %w", dir, err)
	}
	l.lock = lk
	rec, err := l.recover(ctx)
	if err != nil {
		if l.active != nil {
			l.active.Close()
		}
		lk.Close()
		return nil, Recovery{}, err
	}
	if o.Compression == CompressionZstd {
		// Fastest level: the gateways have slow cores and the block is
		// small. No zstd checksum: the frame CRC covers the stored bytes.
		l.enc, err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false),
			zstd.WithLowerEncoderMem(true))
		if err != nil {
			l.active.Close()
			lk.Close()
			return nil, Recovery{}, fmt.Errorf("ingestlog: open %s: zstd: %w", dir, err)
		}
	}
	// The block buffers grow to what the load needs and are then reused.
	bufCap := min(o.MaxUnsynced, o.GroupBytes, 64<<10) + frameHeaderSize
	l.pend = make([]byte, frameHeaderSize, bufCap)
	l.spare = make([]byte, frameHeaderSize, bufCap)
	if l.enc != nil {
		l.zbuf = make([]byte, 0, bufCap)
	}
	l.pendFirst = rec.End
	l.durable.Store(uint64(rec.End))
	l.end.Store(uint64(rec.End))
	go l.run()
	return l, rec, nil
}

// MaxRecordSize is the longest record Append takes (Options.MaxRecordSize
// with its default applied).
func (l *Log) MaxRecordSize() int { return l.opts.MaxRecordSize }

// Durable returns the durable end: every record with a position below it
// has been written and fsynced (written, under SyncNever).
func (l *Log) Durable() Position { return Position(l.durable.Load()) }

// End returns one past the last record appended, durable or not.
func (l *Log) End() Position { return Position(l.end.Load()) }

// First returns the position of the oldest record still in the log (the
// durable end when there is none). Records before it were deleted by
// DeleteBefore.
func (l *Log) First() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs[0].first
}

// Size returns the bytes of the log: in its segment files, and of the
// records appended and not written yet (at their uncompressed size), so
// that a disk cap checked against it holds however fast records come.
//
// Spare files and the earlier contents of a segment written over one count
// too: they hold the disk. DropSpares gives them back.
func (l *Log) Size() int64 { return l.size.Load() + l.buffered.Load() + l.reserved.Load() }

// SpareBytes returns the part of Size that holds no record: the spare
// files (Options.SpareSegments), and the earlier bytes of the spare the
// active segment is written over, past its last frame.
func (l *Log) SpareBytes() int64 { return l.reserved.Load() }

// Append adds a copy of rec to the log and returns its position without
// waiting for it to be durable: watch OnDurable, Durable or WaitDurable for
// that, and only then acknowledge the message. When MaxUnsynced bytes are
// already waiting, Append blocks until the committer catches up or ctx is
// done.
//
// After a failed write or fsync every Append fails with ErrFailed. In steady
// state Append does not allocate.
func (l *Log) Append(ctx context.Context, rec []byte) (Position, error) {
	if len(rec) > l.opts.MaxRecordSize {
		return 0, fmt.Errorf("ingestlog: append: record of %d bytes: %w (limit %d)", len(rec), ErrTooLarge, l.opts.MaxRecordSize)
	}
	need := uvarintLen(uint64(len(rec))) + len(rec)
	l.mu.Lock()
	for {
		if err := l.unusableLocked(); err != nil {
			l.mu.Unlock()
			return 0, err
		}
		used := len(l.pend) - frameHeaderSize + l.inflight
		if used == 0 || used+need <= l.opts.MaxUnsynced {
			break
		}
		wake := l.wakeLocked()
		l.mu.Unlock()
		// The committer may not have been told of what waits (BeginCommit).
		select {
		case l.kick <- struct{}{}:
		default:
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, fmt.Errorf("ingestlog: append: %d bytes waiting for fsync: %w", used, ctx.Err())
		}
		l.mu.Lock()
	}
	kick := false
	if l.pendCount == 0 {
		l.pendSince = time.Now()
		kick = l.callers.Load() == 0
	}
	l.pend = binary.AppendUvarint(l.pend, uint64(len(rec)))
	l.pend = append(l.pend, rec...)
	l.buffered.Add(int64(need))
	pos := l.pendFirst + Position(l.pendCount)
	l.pendCount++
	l.end.Store(uint64(pos) + 1)
	if l.opts.Sync != SyncGroup || len(l.pend)-frameHeaderSize >= l.opts.GroupBytes {
		kick = true
	}
	l.mu.Unlock()
	if kick {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return pos, nil
}

// WaitDurable blocks until the record at pos is durable, ctx is done, or the
// log fails or closes before that. pos may lie beyond the last append: a
// Reader at the durable end waits for its next position this way.
func (l *Log) WaitDurable(ctx context.Context, pos Position) error {
	for l.Durable() <= pos {
		l.mu.Lock()
		err, exited := l.err, l.exited
		l.mu.Unlock()
		switch {
		case l.Durable() > pos:
			return nil
		case err != nil:
			return err
		case exited:
			return ErrClosed
		}
		select {
		case <-l.DurableSignal(pos):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// DurableSignal returns a channel that is closed once the record at pos is
// durable, or at the log's next change of state before that (a commit that
// ends below pos, a failure, the committer's exit): a select waits on it
// with other events, then looks at Durable again. It does not allocate
// when the record is durable already.
func (l *Log) DurableSignal(pos Position) <-chan struct{} {
	if l.Durable() > pos {
		return closedSignal
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Durable() > pos || l.err != nil || l.exited {
		return closedSignal
	}
	return l.wakeLocked()
}

var closedSignal = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// DeleteBefore removes the segments whose records all lie below pos, oldest
// first: call it once a checkpoint covers pos. The segment being written is
// never removed, so a log always keeps at least one segment. Readers that
// have a removed segment open keep reading it.
func (l *Log) DeleteBefore(pos Position) error {
	l.deleteMu.Lock()
	defer l.deleteMu.Unlock()
	for {
		l.mu.Lock()
		if len(l.segs) < 2 || l.segs[0].end > pos {
			l.mu.Unlock()
			return nil
		}
		s := l.segs[0]
		l.segs = l.segs[1:]
		keep := len(l.spares) < l.opts.SpareSegments
		l.mu.Unlock()
		// One directory sync per segment: were the removals reordered by a
		// crash, a hole in the middle of the log would look like lost data.
		path := filepath.Join(l.dir, s.name)
		var err error
		if keep {
			err = l.fs.Rename(path, path+spareSuffix)
		} else {
			err = l.fs.Remove(path)
		}
		if err == nil && l.opts.Sync != SyncNever {
			err = l.fs.SyncDir(l.dir)
		}
		if err != nil {
			// Keep it: the log stays contiguous and a later call retries.
			l.mu.Lock()
			l.segs = append([]*segment{s}, l.segs...)
			l.mu.Unlock()
			return fmt.Errorf("ingestlog: delete %s: %w", s.name, err)
		}
		l.size.Add(-s.size)
		if keep {
			l.reserved.Add(s.size)
			l.mu.Lock()
			l.spares = append(l.spares, spare{name: s.name + spareSuffix, size: s.size})
			l.mu.Unlock()
		}
	}
}

// DropSpares removes the spare segment files (Options.SpareSegments) and
// returns the bytes that frees: an edge short of disk gives them back
// before anything that holds data.
func (l *Log) DropSpares() (int64, error) {
	l.deleteMu.Lock()
	defer l.deleteMu.Unlock()
	l.mu.Lock()
	spares := l.spares
	l.spares = nil
	l.mu.Unlock()
	var freed int64
	var errs []error
	var kept []spare
	for _, sp := range spares {
		if err := l.fs.Remove(l.path(sp.name)); err != nil {
			errs = append(errs, fmt.Errorf("ingestlog: remove spare %s: %w", sp.name, err))
			kept = append(kept, sp)
			continue
		}
		freed += sp.size
	}
	l.reserved.Add(-freed)
	l.mu.Lock()
	l.spares = append(l.spares, kept...)
	l.mu.Unlock()
	if freed > 0 && l.opts.Sync != SyncNever {
		if err := l.fs.SyncDir(l.dir); err != nil {
			errs = append(errs, fmt.Errorf("ingestlog: sync %s: %w", l.dir, err))
		}
	}
	return freed, errors.Join(errs...)
}

// Seal ends the active segment once what is buffered is durable, so that
// the next record starts a new one and DeleteBefore can remove the sealed
// one when a checkpoint covers it: an edge that is held at its disk cap
// with a whole active segment behind its checkpoint frees it this way. A
// log whose active segment holds no record yet is left as it is.
func (l *Log) Seal(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case l.seal <- done:
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close commits what is buffered, stops the committer and closes the files.
// If ctx is done first, Close returns at once and the committer drops what
// it has not written yet and exits after its current write or fsync. Close
// returns the error that failed the log, if one did. Readers stay usable for
// what was durable and must be closed on their own.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.broadcastLocked() // blocked Appends return ErrClosed
	l.mu.Unlock()
	close(l.stop)
	select {
	case <-l.done:
		return l.closeErr
	case <-ctx.Done():
		l.abort.Store(true)
		return fmt.Errorf("ingestlog: close: records not yet durable are dropped: %w", ctx.Err())
	}
}

// unusableLocked returns why Append must not add to the log, or nil.
func (l *Log) unusableLocked() error {
	if l.err != nil {
		return l.err
	}
	if l.closed {
		return ErrClosed
	}
	return nil
}

// wakeLocked returns a channel closed at the next change of the durable end
// or of the log's state. Made only when someone waits, so that commits do not
// allocate when nobody does.
func (l *Log) wakeLocked() <-chan struct{} {
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return l.wake
}

func (l *Log) broadcastLocked() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// segmentForLocked returns the index of the segment holding pos: the last
// one whose first position is at most pos, or -1.
func (l *Log) segmentForLocked(pos Position) int {
	return sort.Search(len(l.segs), func(i int) bool { return l.segs[i].first > pos }) - 1
}

func (l *Log) path(name string) string { return filepath.Join(l.dir, name) }

// errFailed wraps the cause of a failed write or fsync.
func errFailed(op, name string, err error) error {
	return fmt.Errorf("%w: %s %s: %w", ErrFailed, op, name, err)
}
