package ingestlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// The committer: the goroutine that writes and fsyncs, unless an appender
// commits its own batch (BeginCommit, Commit) under the same lock. It takes
// the whole pending block at once (Append keeps filling the other buffer
// meanwhile), so that one batch is one frame, one write and one fsync. That
// is what lets Open tell a torn tail from damage: only the last write can be
// torn, and it holds one frame.

// minCompress is the smallest block worth handing to zstd.
const minCompress = 256

func (l *Log) run() {
	defer l.finish()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-l.kick:
		case done := <-l.seal:
			l.commitMu.Lock()
			err := l.sealActive()
			l.commitMu.Unlock()
			done <- err
			if err != nil {
				<-l.stop
				return
			}
		case <-l.stop:
			l.commitMu.Lock()
			l.drain()
			l.commitMu.Unlock()
			return
		}
		for {
			ready, wait := l.ready(time.Now())
			if ready {
				l.commitMu.Lock()
				err := l.commit()
				l.commitMu.Unlock()
				if err != nil {
					<-l.stop // failed: nothing more to write, wait for Close
					return
				}
				continue
			}
			if wait == 0 {
				break // nothing buffered
			}
			timer.Reset(wait)
			select {
			case <-l.kick: // maybe the batch filled up; look again
			case <-timer.C:
			case <-l.stop:
				timer.Stop()
				l.commitMu.Lock()
				l.drain()
				l.commitMu.Unlock()
				return
			}
			timer.Stop()
		}
	}
}

// ready says whether the pending block should be committed now, and if not,
// how long until it must be (0: nothing is pending).
func (l *Log) ready(now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pendCount == 0 {
		return false, 0
	}
	if l.opts.Sync != SyncGroup || len(l.pend)-frameHeaderSize >= l.opts.GroupBytes {
		return true, 0
	}
	wait := l.pendSince.Add(l.opts.GroupDelay).Sub(now)
	if wait <= 0 {
		return true, 0
	}
	return false, wait
}

// sealActive commits what is buffered and starts a new segment after the
// active one, unless that holds no frame. Only the committer calls it.
func (l *Log) sealActive() error {
	for {
		l.mu.Lock()
		n, err := l.pendCount, l.err // closed: the records are still drained
		l.mu.Unlock()
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if err := l.commit(); err != nil {
			return err
		}
	}
	if l.written <= l.segsLast().hdr {
		return nil
	}
	l.mu.Lock()
	first := l.pendFirst // records appended from now on go to the new segment
	l.mu.Unlock()
	_, err := l.roll(first)
	if err != nil {
		l.mu.Lock()
		l.err = err
		l.broadcastLocked()
		l.mu.Unlock()
	}
	return err
}

// drain commits everything still buffered, as Close asks.
func (l *Log) drain() {
	for !l.abort.Load() {
		l.mu.Lock()
		n := l.pendCount
		l.mu.Unlock()
		if n == 0 || l.commit() != nil {
			return
		}
	}
}

// finish closes what the committer owns and tells Close and the waiters.
func (l *Log) finish() {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	var errs []error
	l.mu.Lock()
	failed := l.err != nil
	l.mu.Unlock()
	if l.active != nil && !failed {
		// A spare's earlier bytes go, so that the next Open finds the
		// log ending at its last frame rather than a tail to cut.
		if err := l.cutStale(l.segsLast()); err != nil {
			errs = append(errs, err)
		}
	}
	if l.active != nil {
		if err := l.active.Close(); err != nil {
			errs = append(errs, fmt.Errorf("ingestlog: close %s: %w", l.segsLast().name, err))
		}
	}
	if l.enc != nil {
		l.enc.Close()
	}
	if err := l.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("ingestlog: unlock %s: %w", l.dir, err))
	}
	l.mu.Lock()
	if l.err != nil {
		errs = append([]error{l.err}, errs...)
	}
	l.closeErr = errors.Join(errs...)
	l.exited = true
	l.broadcastLocked()
	l.mu.Unlock()
	close(l.done)
}

func (l *Log) segsLast() *segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs[len(l.segs)-1]
}

// commit writes the pending block as one frame, fsyncs it and publishes the
// new durable end. An error fails the log for good.
func (l *Log) commit() error {
	l.mu.Lock()
	if l.pendCount == 0 {
		l.mu.Unlock()
		return nil
	}
	block, first, n := l.pend, l.pendFirst, l.pendCount
	l.pend, l.spare = l.spare[:frameHeaderSize], nil
	l.last.valid = false // Append refills its buffer from now on
	l.pendFirst += Position(n)
	l.pendCount = 0
	l.inflight = len(block) - frameHeaderSize
	l.mu.Unlock()

	frame := l.encodeFrame(block, first, n)
	seg, off, err := l.writeFrame(frame, first, len(block)-frameHeaderSize)

	l.mu.Lock()
	l.spare = block[:0]
	l.inflight = 0
	if err == nil {
		l.last = lastBlock{valid: true, seg: seg, off: off, length: int64(len(frame) - frameHeaderSize),
			first: first, count: n, records: block[frameHeaderSize:]}
	}
	if err != nil {
		l.err = err
		l.broadcastLocked()
		l.mu.Unlock()
		return err
	}
	end := first + Position(n)
	if len(seg.index) == 0 || off-seg.index[len(seg.index)-1].off >= indexEvery {
		seg.index = append(seg.index, indexEntry{pos: first, off: off})
	}
	seg.end = end
	seg.size = l.written
	l.durable.Store(uint64(end))
	l.broadcastLocked()
	l.mu.Unlock()
	if l.opts.OnDurable != nil {
		l.opts.OnDurable(end)
	}
	return nil
}

// encodeFrame fills in the frame header reserved at the front of block,
// compressing the records when that is on and pays. The result aliases
// block or l.zbuf.
func (l *Log) encodeFrame(block []byte, first Position, n int) []byte {
	raw := block[frameHeaderSize:]
	h := frameHeader{typ: frameTypePlain, count: uint32(n), length: uint32(len(raw)), rawLen: uint32(len(raw)), first: first}
	frame := block
	if l.enc != nil && len(raw) >= minCompress {
		z := l.enc.EncodeAll(raw, l.zbuf[:frameHeaderSize])
		l.zbuf = z[:0]
		if stored := len(z) - frameHeaderSize; stored <= len(raw)-len(raw)/8 {
			h.typ, h.length, frame = frameTypeZstd, uint32(stored), z
		}
	}
	h.crc = crc(frame[frameHeaderSize:])
	h.put(frame[:frameHeaderSize])
	return frame
}

// writeFrame appends frame to the active segment, starting a new segment
// first when it would not fit, and fsyncs. It returns the segment and the
// frame's offset in it. raw is the bytes of records the frame holds: Size
// stops counting them as buffered as it counts the frame as written.
func (l *Log) writeFrame(frame []byte, first Position, raw int) (*segment, int64, error) {
	defer func() { l.buffered.Add(-int64(raw)) }() // on a failure before the write: lost with the log
	seg := l.segsLast()
	if l.written > seg.hdr && l.written+int64(len(frame)) > l.opts.SegmentSize {
		var err error
		if seg, err = l.roll(first); err != nil {
			return nil, 0, err
		}
	}
	sealFrameHeader(frame, seg.seed)
	off := l.written
	n, err := l.active.WriteAt(frame, off)
	l.written += int64(n)
	l.size.Add(int64(n))
	l.buffered.Add(-int64(raw))
	l.setStale(l.activeFile - l.written)
	raw = 0
	if err != nil {
		return nil, 0, errFailed("write", seg.name, err)
	}
	if l.opts.Sync != SyncNever {
		if err := l.active.Sync(); err != nil {
			return nil, 0, errFailed("fsync", seg.name, err)
		}
	}
	return seg, off, nil
}

// roll ends the active segment, which the last commit left synced, and
// starts the one whose first record is first. A segment written over a
// spare file is cut to its last frame first, so that every segment but the
// last ends exactly at its last frame.
func (l *Log) roll(first Position) (*segment, error) {
	old := l.segsLast()
	err := l.cutStale(old)
	if cerr := l.active.Close(); err == nil && cerr != nil {
		err = errFailed("close", old.name, cerr)
	}
	l.active = nil
	if err != nil {
		return nil, err
	}
	f, seg, size, err := l.createSegment(first)
	if err != nil {
		return nil, err
	}
	l.active, l.written, l.activeFile = f, seg.hdr, size
	l.size.Add(seg.hdr)
	l.setStale(size - seg.hdr)
	l.mu.Lock()
	l.segs = append(l.segs, seg)
	l.mu.Unlock()
	return seg, nil
}

// cutStale truncates the active segment, seg, to what was written to it
// when the file holds a spare's earlier bytes after that.
func (l *Log) cutStale(seg *segment) error {
	if l.activeFile <= l.written {
		return nil
	}
	err := l.active.Truncate(l.written)
	if err == nil && l.opts.Sync != SyncNever {
		err = l.active.Sync()
	}
	if err != nil {
		return errFailed("truncate", seg.name, err)
	}
	l.activeFile = l.written
	l.setStale(0)
	return nil
}

// setStale records n bytes (at least 0) of the active file past what was
// written to it: a spare's earlier contents, which Size counts as used.
func (l *Log) setStale(n int64) {
	n = max(n, 0)
	l.reserved.Add(n - l.stale)
	l.stale = n
}

// createSegment makes an empty segment atomically: header written and synced
// under a temporary name (or over a spare file, under its name), then
// renamed, then the directory synced. A crash leaves either no segment or a
// complete header, so a damaged header is never a torn write. The returned
// file is open read-write; size is its length, which is more than the header
// when it was a spare's.
func (l *Log) createSegment(first Position) (_ File, _ *segment, size int64, _ error) {
	name := segmentName(first)
	path := l.path(name)
	sync := l.opts.Sync != SyncNever
	from, f, size, err := l.takeSpare()
	if err != nil {
		return nil, nil, 0, err
	}
	recycled := f != nil
	if !recycled {
		from, size = path+tmpSuffix, segHeaderSize
		if f, err = l.fs.Create(from); err != nil {
			return nil, nil, 0, errFailed("create", name+tmpSuffix, err)
		}
	}
	salt := l.newSalt(f)
	var hdr [segHeaderSize]byte
	putSegmentHeader(hdr[:], first, salt, recycled)
	step, err := "write", error(nil)
	if _, err = f.WriteAt(hdr[:], 0); err == nil && sync {
		step, err = "fsync", f.Sync()
	}
	if err == nil {
		step, err = "rename", l.fs.Rename(from, path)
	}
	if err == nil && sync {
		step, err = "sync directory for", l.fs.SyncDir(l.dir)
	}
	if err != nil {
		f.Close()
		return nil, nil, 0, errFailed(step, name, err)
	}
	seg := &segment{
		name:  name,
		first: first,
		end:   first,
		size:  segHeaderSize,
		hdr:   segHeaderSize,
		seed:  saltSeed(salt),
		index: make([]indexEntry, 0, l.opts.SegmentSize/indexEvery+1),
	}
	return f, seg, max(size, segHeaderSize), nil
}

// takeSpare returns a spare segment file, open read-write, with its name and
// length, or a nil File when there is none. A spare that cannot be opened
// is removed: the segment is then made anew.
func (l *Log) takeSpare() (string, File, int64, error) {
	for {
		l.mu.Lock()
		if len(l.spares) == 0 {
			l.mu.Unlock()
			return "", nil, 0, nil
		}
		sp := l.spares[len(l.spares)-1]
		l.spares = l.spares[:len(l.spares)-1]
		l.mu.Unlock()
		l.reserved.Add(-sp.size)
		path := l.path(sp.name)
		f, err := l.fs.OpenReadWrite(path)
		if err == nil {
			return path, f, sp.size, nil
		}
		if err := l.fs.Remove(path); err != nil {
			return "", nil, 0, errFailed("remove spare", sp.name, err)
		}
	}
}

// newSalt draws the salt of a segment about to be written over f: random, so
// that a frame hidden in a record cannot pass for one of the log's, and
// other than the salt f's header holds, if any, so that a spare's earlier
// frames never verify in their new segment.
func (l *Log) newSalt(f File) uint32 {
	var b [segHeaderSize]byte
	n, _ := f.ReadAt(b[:], 0)
	old, v2 := uint32(0), n == segHeaderSize && string(b[:4]) == segMagic && b[4] == formatVersion
	if v2 {
		old = binary.LittleEndian.Uint32(b[16:20])
	}
	for {
		salt := rand.Uint32()
		// Seed 0 is version 1's: such frames would verify too.
		if (!v2 || salt != old) && saltSeed(salt) != 0 {
			return salt
		}
	}
}

// BeginCommit tells the log that the caller will commit what it appends
// next itself, with Commit: those records do not wake the committer to
// start the group delay. An appender that has a whole batch at once (the
// MQTT source's reader, after one read) saves the committer's two
// wake-ups a commit, and its acks leave from its own goroutine. Each
// BeginCommit is followed by one Commit.
func (l *Log) BeginCommit() { l.callers.Add(1) }

// Commit writes and fsyncs the records appended so far (anyone's), on the
// caller's goroutine, and returns once they are durable or the log has
// failed. Commits are serialised with the committer's, so only one write
// is ever unsynced. After Close it commits nothing: Close's drain has.
func (l *Log) Commit() error {
	defer l.callers.Add(-1)
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	l.mu.Lock()
	err, pending := l.err, l.pendCount > 0
	if l.exited && err == nil && pending {
		err = ErrClosed // dropped by a Close that timed out
	}
	l.mu.Unlock()
	if err != nil || !pending {
		return err
	}
	return l.commit()
}
