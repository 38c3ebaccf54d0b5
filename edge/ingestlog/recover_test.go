package ingestlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// The damage tests run on a log with a known layout: 30 records of 100
// bytes, each in its own frame of 32+1+100 bytes, 7 frames to a 1 KiB
// segment: segments 0, 7, 14, 21 full, segment 28 holds records 28 and 29.
const (
	dmgRecords  = 30
	dmgFrame    = frameHeaderSize + 1 + 100
	dmgPerSeg   = 7
	dmgLastSeg  = 28
	dmgSegBytes = segHeaderSize + dmgPerSeg*dmgFrame
)

func dmgOptions(fsys ingestlog.FS) ingestlog.Options {
	return ingestlog.Options{FS: fsys, SegmentSize: 1 << 10, Sync: ingestlog.SyncAlways}
}

func dmgRecord(i int) []byte { return fmt.Appendf(nil, "%03d%s", i, strings.Repeat("r", 97)) }

func dmgLog(t *testing.T) *faultfs.FS {
	t.Helper()
	fsys := memFS()
	l, _ := mustOpen(t, logDir, dmgOptions(fsys))
	for i := range dmgRecords {
		appendAll(t, l, [][]byte{dmgRecord(i)}) // wait for each: one frame per record
	}
	mustClose(t, l)
	for _, first := range []uint64{0, 7, 14, 21} {
		if b, err := fsys.ReadFile(segPath(first)); err != nil || len(b) != dmgSegBytes {
			t.Fatalf("layout: %s has %d bytes (%v), want %d", segName(first), len(b), err, dmgSegBytes)
		}
	}
	return fsys
}

func frameOff(k int) int64 { return segHeaderSize + int64(k)*dmgFrame }

func edit(t *testing.T, fsys *faultfs.FS, seg uint64, f func([]byte) []byte) {
	t.Helper()
	b, err := fsys.ReadFile(segPath(seg))
	if err != nil {
		t.Fatal(err)
	}
	fsys.WriteFile(segPath(seg), f(b))
}

func flip(off int64) func([]byte) []byte {
	return func(b []byte) []byte { b[off] ^= 0x40; return b }
}

func TestDamage(t *testing.T) {
	type want struct {
		corruptSeg string // ErrCorrupt naming this segment...
		corruptOff int64  // ...at this offset
		version    bool   // ErrVersion
		otherErr   string // another error containing this
		// Otherwise Open succeeds with:
		end        ingestlog.Position
		truncOff   int64 // 0: nothing truncated
		truncRecs  int
		removedTmp int
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, fsys *faultfs.FS)
		want   want
	}{
		{"intact", func(*testing.T, *faultfs.FS) {}, want{end: dmgRecords}},
		{"payload flip in old segment", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 7, flip(frameOff(3)+frameHeaderSize+50))
		}, want{corruptSeg: segName(7), corruptOff: frameOff(3)}},
		{"header flip in old segment", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 14, flip(frameOff(2)+13)) // the length field
		}, want{corruptSeg: segName(14), corruptOff: frameOff(2)}},
		{"last frame of old segment", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 21, flip(frameOff(6)+frameHeaderSize+99))
		}, want{corruptSeg: segName(21), corruptOff: frameOff(6)}},
		{"old segment cut short", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 0, func(b []byte) []byte { return b[:len(b)-10] })
		}, want{corruptSeg: segName(0), corruptOff: frameOff(6)}},
		{"trailing garbage in old segment", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 0, func(b []byte) []byte { return append(b, 1, 2, 3) })
		}, want{corruptSeg: segName(0), corruptOff: frameOff(7)}},
		{"segment header flip", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 7, flip(10))
		}, want{corruptSeg: segName(7), corruptOff: 0}},
		{"bad magic", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, flip(0))
		}, want{corruptSeg: segName(28), corruptOff: 0}},
		{"newer version", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, func(b []byte) []byte { copy(b, segHeader(dmgLastSeg, 3)); return b })
		}, want{version: true}},
		{"header names another position", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 14, func(b []byte) []byte { copy(b, segHeader(15, 1)); return b })
		}, want{corruptSeg: segName(14), corruptOff: 0}},
		{"missing segment", func(t *testing.T, fsys *faultfs.FS) {
			if err := fsys.Remove(segPath(14)); err != nil {
				t.Fatal(err)
			}
		}, want{corruptSeg: segName(21), corruptOff: 0}},
		{"payload flip mid last segment", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, flip(frameOff(0)+frameHeaderSize+3))
		}, want{corruptSeg: segName(28), corruptOff: frameOff(0)}},
		{"header flip mid last segment", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, flip(frameOff(0)+21)) // the position field
		}, want{corruptSeg: segName(28), corruptOff: frameOff(0)}},
		{"frame out of place", func(t *testing.T, fsys *faultfs.FS) {
			// A verifiable frame with the wrong positions is not a torn write.
			edit(t, fsys, 28, func(b []byte) []byte {
				return append(b[:frameOff(1)], frameIn(saltOf(b), 1, 1, 101, 40, plainBlock(dmgRecord(40)))...)
			})
		}, want{corruptSeg: segName(28), corruptOff: frameOff(1)}},
		{"flip in last frame", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, flip(frameOff(1)+frameHeaderSize+7))
		}, want{end: dmgRecords - 1, truncOff: frameOff(1), truncRecs: 1}},
		{"zeros after the last frame", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, func(b []byte) []byte { return append(b, make([]byte, 4096)...) })
		}, want{end: dmgRecords, truncOff: frameOff(2)}},
		{"torn header, then zeros", func(t *testing.T, fsys *faultfs.FS) {
			edit(t, fsys, 28, func(b []byte) []byte {
				clear(b[frameOff(1)+5:])
				return b
			})
		}, want{end: dmgRecords - 1, truncOff: frameOff(1)}},
		{"stale frame behind a torn one", func(t *testing.T, fsys *faultfs.FS) {
			// Only frames at or past the expected position make a tear damage.
			edit(t, fsys, 28, func(b []byte) []byte {
				b = b[:frameOff(1)+40]
				return append(b, frameIn(saltOf(b), 1, 1, 101, 3, plainBlock(dmgRecord(3)))...)
			})
		}, want{end: dmgRecords - 1, truncOff: frameOff(1), truncRecs: 1}},
		{"frame hidden in a record behind a torn one", func(t *testing.T, fsys *faultfs.FS) {
			// A publisher can put a whole frame, CRCs and all, in its
			// payload; without the segment's salt it cannot pass for one
			// of the log's, so a tear before it stays a tear.
			edit(t, fsys, 28, func(b []byte) []byte {
				b = b[:frameOff(1)+10] // a torn header: searched byte by byte
				b = append(b, frame(1, 1, 101, 1<<40, plainBlock(dmgRecord(3)))...)
				return append(b, frameIn(saltOf(b)+1, 1, 1, 101, 1<<40, plainBlock(dmgRecord(3)))...)
			})
		}, want{end: dmgRecords - 1, truncOff: frameOff(1)}},
		{"leftover temp segment", func(t *testing.T, fsys *faultfs.FS) {
			fsys.WriteFile(segPath(30)+".tmp", segHeader(30, 1)[:7])
		}, want{end: dmgRecords, removedTmp: 1}},
		{"foreign segment name", func(t *testing.T, fsys *faultfs.FS) {
			fsys.WriteFile(logDir+"/backup.seg", nil)
		}, want{otherErr: "unexpected file backup.seg"}},
		{"other files are left alone", func(t *testing.T, fsys *faultfs.FS) {
			fsys.WriteFile(logDir+"/README", []byte("hi"))
		}, want{end: dmgRecords}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := dmgLog(t)
			tt.damage(t, fsys)
			l, rec, err := ingestlog.Open(context.Background(), logDir, ptr(dmgOptions(fsys)))
			w := tt.want
			switch {
			case w.corruptSeg != "":
				ce, ok := isCorrupt(err)
				if !ok {
					t.Fatalf("Open: %v, want ErrCorrupt", err)
				}
				if ce.Segment != w.corruptSeg || ce.Offset != w.corruptOff {
					t.Fatalf("Open: %v\nwant segment %s offset %d", err, w.corruptSeg, w.corruptOff)
				}
				if !strings.Contains(err.Error(), w.corruptSeg) {
					t.Errorf("message does not name the segment: %v", err)
				}
				return
			case w.version:
				if !errors.Is(err, ingestlog.ErrVersion) || errors.Is(err, ingestlog.ErrCorrupt) {
					t.Fatalf("Open: %v, want ErrVersion and not ErrCorrupt", err)
				}
				return
			case w.otherErr != "":
				if err == nil || !strings.Contains(err.Error(), w.otherErr) {
					t.Fatalf("Open: %v, want %q", err, w.otherErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer mustClose(t, l)
			if rec.End != w.end || rec.TruncatedOffset != w.truncOff || rec.TruncatedRecords != w.truncRecs || rec.RemovedTemp != w.removedTmp {
				t.Fatalf("Recovery %+v\nwant End %d, TruncatedOffset %d, TruncatedRecords %d, RemovedTemp %d", rec, w.end, w.truncOff, w.truncRecs, w.removedTmp)
			}
			if w.truncOff != 0 && (rec.TruncatedSegment != segName(dmgLastSeg) || rec.TruncatedBytes <= 0 || rec.TruncatedReason == "") {
				t.Fatalf("Recovery %+v: truncation not described", rec)
			}
			got, err := readAll(l, 0)
			if err != nil {
				t.Fatal(err)
			}
			var want [][]byte
			for i := range int(w.end) {
				want = append(want, dmgRecord(i))
			}
			checkRecords(t, got, want, 0)
			// The repaired log takes appends at the cut.
			appendAll(t, l, [][]byte{[]byte("after")})
			if got, err := readAll(l, w.end); err != nil || len(got) != 1 || string(got[0]) != "after" {
				t.Fatalf("append after repair: %q, %v", got, err)
			}
		})
	}
}

// TestTornAtEveryByte cuts the last frame at every length: always a torn
// tail, never an error, and the cut is durable.
func TestTornAtEveryByte(t *testing.T) {
	full := dmgLog(t)
	seg, err := full.ReadFile(segPath(dmgLastSeg))
	if err != nil {
		t.Fatal(err)
	}
	for cut := frameOff(1); cut < int64(len(seg)); cut++ {
		fsys := dmgLog(t)
		fsys.WriteFile(segPath(dmgLastSeg), seg[:cut])
		l, rec, err := ingestlog.Open(context.Background(), logDir, ptr(dmgOptions(fsys)))
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		mustClose(t, l)
		wantTrunc := cut - frameOff(1)
		if rec.End != dmgRecords-1 || rec.TruncatedBytes != wantTrunc || (wantTrunc > 0) != (rec.TruncatedOffset == frameOff(1)) {
			t.Fatalf("cut at %d: %+v", cut, rec)
		}
		if b, _ := fsys.ReadFile(segPath(dmgLastSeg)); int64(len(b)) != frameOff(1) {
			t.Fatalf("cut at %d: segment left with %d bytes, want %d", cut, len(b), frameOff(1))
		}
	}
}

// TestReaderFindsDamage: bit rot after Open is caught by the Reader's own
// CRC check, with segment and offset.
func TestReaderFindsDamage(t *testing.T) {
	fsys := dmgLog(t)
	l, _ := mustOpen(t, logDir, dmgOptions(fsys))
	defer mustClose(t, l)
	edit(t, fsys, 7, flip(frameOff(4)+frameHeaderSize+20))
	got, err := readAll(l, 2)
	ce, ok := isCorrupt(err)
	if !ok || ce.Segment != segName(7) || ce.Offset != frameOff(4) {
		t.Fatalf("read: %v, want ErrCorrupt in %s at %d", err, segName(7), frameOff(4))
	}
	if len(got) != 7+4-2 {
		t.Fatalf("read %d good records before the damage, want %d", len(got), 9)
	}
}

// TestBlockDamage: blocks whose CRCs verify but whose contents do not parse
// (a bug, or a forged file) are reported by the Reader, not trusted.
func TestBlockDamage(t *testing.T) {
	rec := []byte("hello")
	tests := []struct {
		name    string
		frame   []byte
		records int // good records before the error
	}{
		{"length past block", frame(1, 1, 3, 0, []byte{9, 'a', 'b'}), 0},
		{"broken varint", frame(1, 1, 2, 0, []byte{0xff, 0xff}), 0},
		{"fewer records than counted", frame(1, 3, 12, 0, plainBlock(rec, rec)), 2},
		{"trailing bytes", frame(1, 1, 8, 0, append(plainBlock(rec), 0, 0)), 1},
		{"zstd garbage", frame(2, 1, 10, 0, []byte("not zstd at all")), 0},
		{"zstd shorter than claimed", frame(2, 1, 50, 0, zstdFrame(plainBlock(rec))), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := memFS()
			fsys.WriteFile(segPath(0), append(segHeader(0, 1), tt.frame...))
			l, rec, err := ingestlog.Open(context.Background(), logDir, &ingestlog.Options{FS: fsys})
			if err != nil {
				t.Fatalf("Open: %v (only CRCs are checked at Open)", err)
			}
			defer mustClose(t, l)
			got, err := readAll(l, rec.First)
			if ce, ok := isCorrupt(err); !ok || ce.Offset != segHeaderSizeV1 {
				t.Fatalf("read: %v, want ErrCorrupt at offset %d", err, segHeaderSizeV1)
			}
			if len(got) != tt.records {
				t.Fatalf("%d records before the error, want %d", len(got), tt.records)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
