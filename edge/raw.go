package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/sync/rawarchive"
)

// The raw archive lane: sealed ingest-log segments go to object storage
// (sync/rawarchive) before the checkpoint writer deletes them, so that a
// pipeline can be re-run over what the gateway received (`runnel-edge
// replay --input s3://…`). It is the lowest lane:
//
//   - it uploads only while the outbox holds at most YieldOutboxBytes, so
//     aggregates go first on a constrained link;
//   - it never makes the node hold messages at the broker: the segments it
//     has not archived yet are kept past their checkpoint only while they
//     are at most MaxBytes and, under a disk cap, while the disk has room
//     for two more segments. Past that the oldest are given up — deleted
//     unarchived, counted (runnel_edge_raw_skipped_*) and logged — and the
//     archive shows the gap.
//
// Its cursor (one past the last position archived or given up) is kept in
// a small file in the data directory, written without fsync: a cursor lost
// in a power cut only makes the lane upload a segment again, which finds
// its objects and changes nothing (rawarchive.Archive.Upload is
// idempotent).

// RawArchive turns on the raw archive lane.
type RawArchive struct {
	// Archive is where segments go; its Edge is set to the node's id.
	Archive *rawarchive.Archive
	// Interval is how often the lane looks for sealed segments (and
	// retries after a failure). Default 10s.
	Interval time.Duration
	// YieldOutboxBytes: the lane waits while the outbox holds more than
	// this. Default 256 KiB.
	YieldOutboxBytes int64
	// MaxBytes bounds the sealed segments kept only for the lane (already
	// covered by a checkpoint). Default 1 GiB.
	MaxBytes int64
	// Topics, when set, are MQTT topic filters: the lane archives only the
	// messages whose topic matches one (and the clock records), in a
	// segment re-written to hold just them. Empty: every message.
	Topics []string
}

func (r *RawArchive) withDefaults() RawArchive {
	c := *r
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.YieldOutboxBytes <= 0 {
		c.YieldOutboxBytes = 256 << 10
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 1 << 30
	}
	return c
}

// rawLane is the lane's state; counters are read at scrape time.
type rawLane struct {
	cfg        RawArchive
	cursorPath string
	// to is one past the last position archived or given up.
	to atomic.Uint64

	segments, bytes, failures atomic.Uint64
	skipped, skippedBytes     atomic.Uint64
	yielding                  atomic.Bool
	lastErr                   atomic.Value // string
	lastOK                    atomic.Int64 // Unix ms of the last upload
	skippedAt                 atomic.Int64 // Unix ms of the last give-up
}

const rawCursorFile = "raw-archive.pos"

func newRawLane(cfg *RawArchive, dataDir, edgeID string, first ingestlog.Position) (*rawLane, error) {
	c := cfg.withDefaults()
	if c.Archive == nil || c.Archive.Store == nil {
		return nil, errors.New("edge: raw archive: no store")
	}
	a := *c.Archive
	a.Edge = edgeID
	c.Archive = &a
	l := &rawLane{cfg: c, cursorPath: filepath.Join(dataDir, rawCursorFile)}
	l.lastErr.Store("")
	to, err := readRawCursor(l.cursorPath)
	if err != nil {
		return nil, err
	}
	l.to.Store(max(to, uint64(first)))
	return l, nil
}

func readRawCursor(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("edge: raw archive cursor: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		// Only costs a re-upload of what is still on disk: say so, go on.
		return 0, nil
	}
	return v, nil
}

// advance moves the cursor to pos (never back) and stores it.
func (l *rawLane) advance(pos uint64) {
	for {
		old := l.to.Load()
		if pos <= old {
			return
		}
		if l.to.CompareAndSwap(old, pos) {
			break
		}
	}
	tmp := l.cursorPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(pos, 10)+"\n"), 0o644); err == nil {
		_ = os.Rename(tmp, l.cursorPath)
	}
}

// runRawLane uploads sealed segments until ctx ends.
func (n *node) runRawLane(ctx context.Context) error {
	l := n.raw
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		n.rawStep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// rawStep uploads the sealed segments past the cursor, oldest first,
// until one fails, the outbox fills past the yield mark, or ctx ends.
func (n *node) rawStep(ctx context.Context) {
	l := n.raw
	for _, s := range n.log.Sealed() {
		if uint64(s.End) <= l.to.Load() {
			continue
		}
		if n.status.outboxBytes.Load() > l.cfg.YieldOutboxBytes {
			l.yielding.Store(true)
			return
		}
		l.yielding.Store(false)
		if ctx.Err() != nil {
			return
		}
		fi, err := os.Stat(s.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // given up and deleted meanwhile
		}
		if err != nil {
			l.fail(n, s, err)
			return
		}
		path, dir := s.Path, ""
		if len(l.cfg.Topics) > 0 {
			if dir, err = n.selectTopics(ctx, s); err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					l.fail(n, s, err)
					return
				}
				continue
			}
			path = filepath.Join(dir, s.Name)
		}
		m, err := l.cfg.Archive.Upload(ctx, rawarchive.Segment{Name: s.Name, Path: path, First: uint64(s.First), End: uint64(s.End), SealedAt: fi.ModTime(),
			Check: func(raw []byte) error { return checkSegment(ctx, s.Name, raw) }})
		if dir != "" {
			os.RemoveAll(dir)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			l.fail(n, s, err)
			return
		}
		l.advance(uint64(s.End))
		l.segments.Add(1)
		l.bytes.Add(uint64(m.ObjectBytes))
		l.lastOK.Store(time.Now().UnixMilli())
		l.lastErr.Store("")
	}
	l.yielding.Store(false)
}

func (l *rawLane) fail(n *node, s ingestlog.Segment, err error) {
	l.failures.Add(1)
	msg := err.Error()
	if l.lastErr.Swap(msg) != msg {
		n.lg.Warn("edge: raw archive: upload failed; retried", "segment", s.Name, "err", err)
	}
}

// deleteBound is where the checkpoint writer may delete the log up to,
// given that a checkpoint allows up to pos: below the lane's cursor, unless
// the segments kept for it pass MaxBytes or the disk cap's margin, in which
// case the oldest are given up (counted, logged).
func (n *node) rawDeleteBound(pos ingestlog.Position) ingestlog.Position {
	l := n.raw
	to := l.to.Load()
	if uint64(pos) <= to {
		return pos
	}
	var held int64
	segs := n.log.Sealed()
	for _, s := range segs {
		if s.End <= pos && uint64(s.End) > to {
			held += s.Size
		}
	}
	// What the disk will hold once the writer deletes up to the bound.
	used, seg := n.diskUsed(), n.cfg.IngestLog.SegmentSize
	if seg <= 0 {
		seg = ingestlog.DefaultSegmentSize
	}
	// Room for two segments more, not one: the next checkpoints' results
	// take the state file's pages too, as fast as the log fills.
	room := func() bool {
		return held <= l.cfg.MaxBytes && (n.cfg.DiskCap <= 0 || used+2*seg < n.cfg.DiskCap)
	}
	if !room() && n.cfg.DiskCap > 0 {
		// The log's spare segment goes before any data does.
		n.dropSpares()
		used = n.diskUsed()
	}
	var gaveUp, gaveUpBytes uint64
	for _, s := range segs {
		if room() {
			break
		}
		if s.End > pos || uint64(s.End) <= to {
			continue
		}
		to = uint64(s.End)
		held -= s.Size
		used -= s.Size
		gaveUp++
		gaveUpBytes += uint64(s.Size)
	}
	if gaveUp > 0 {
		l.advance(to)
		l.skipped.Add(gaveUp)
		l.skippedBytes.Add(gaveUpBytes)
		l.skippedAt.Store(time.Now().UnixMilli())
		n.lg.Warn("edge: raw archive: segments deleted unarchived to keep the disk for aggregates",
			"segments", gaveUp, "bytes", gaveUpBytes, "archived_to", to)
	}
	return min(pos, ingestlog.Position(to))
}

// rawPending is what the lane has still to upload: bytes of sealed
// segments past its cursor and the age of the oldest (by its file's time).
func (n *node) rawPending(now time.Time) (bytes int64, age time.Duration) {
	to := n.raw.to.Load()
	for _, s := range n.log.Sealed() {
		if uint64(s.End) <= to {
			continue
		}
		bytes += s.Size
		if age == 0 {
			if fi, err := os.Stat(s.Path); err == nil {
				age = max(now.Sub(fi.ModTime()), time.Nanosecond)
			}
		}
	}
	return bytes, age
}

// selectTopics writes, in a temporary directory of the data directory, a
// segment holding the clock records and the messages of s whose topic
// matches raw_archive.topics, in order, under s's name; it returns the
// directory. The records keep their order but not their positions: the
// selected segment numbers them from s.First on.
func (n *node) selectTopics(ctx context.Context, s ingestlog.Segment) (string, error) {
	raw, err := os.ReadFile(s.Path)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(n.cfg.DataDir, "raw-select-")
	if err != nil {
		return "", err
	}
	// One segment, one commit at Close: no fsync (the file is made again
	// after a crash), no roll.
	l, _, err := ingestlog.Open(ctx, dir, &ingestlog.Options{First: s.First, Sync: ingestlog.SyncNever,
		SegmentSize: max(2*s.Size, ingestlog.MinSegmentSize), MaxRecordSize: n.maxRecord,
		Compression: n.cfg.IngestLog.Compression})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	_, err = ingestlog.ReadSegment(ctx, bytes.NewReader(raw), int64(len(raw)), s.Name, func(_ ingestlog.Position, rec []byte) error {
		r, derr := decodeRecord(rec, "")
		if derr == nil && r.kind != recordClock && !slices.ContainsFunc(n.raw.cfg.Topics, func(f string) bool { return mqtt.Match(f, r.topic) }) {
			return nil
		}
		_, err := l.Append(ctx, rec)
		return err
	})
	if cerr := l.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("edge: raw archive: select topics of %s: %w", s.Name, err)
	}
	return dir, nil
}

// checkSegment verifies a sealed segment's bytes, read whole, before they
// are archived.
func checkSegment(ctx context.Context, name string, raw []byte) error {
	_, err := ingestlog.ReadSegment(ctx, bytes.NewReader(raw), int64(len(raw)), name,
		func(ingestlog.Position, []byte) error { return nil })
	return err
}
