package ingestlog_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// TestReaderTakesTheLastBlockFromMemory: a Reader at the durable end gets
// each newly committed frame from memory, as it was written, not from the
// file; a Reader behind reads the files.
func TestReaderTakesTheLastBlockFromMemory(t *testing.T) {
	for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
		t.Run(comp.String(), func(t *testing.T) {
			l, _ := mustOpen(t, logDir, ingestlog.Options{FS: memFS(), Compression: comp, SegmentSize: 4 << 10})
			defer mustClose(t, l)
			ctx := context.Background()
			tail, err := l.NewReader(0)
			if err != nil {
				t.Fatal(err)
			}
			defer tail.Close()
			const commits = 40 // of 3 records: the 4 KiB segments roll
			for c := range commits {
				var last ingestlog.Position
				for i := range 3 {
					if last, err = l.Append(ctx, fmt.Appendf(nil, "commit %d record %d %s", c, i, strings.Repeat("x", 60))); err != nil {
						t.Fatal(err)
					}
				}
				if err := l.WaitDurable(ctx, last); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					rec, pos, err := tail.Next()
					if want := fmt.Sprintf("commit %d record %d", c, i); err != nil || pos != ingestlog.Position(3*c+i) || !strings.HasPrefix(string(rec), want) {
						t.Fatalf("tail: %q at %d (%v), want %q at %d", rec, pos, err, want, 3*c+i)
					}
				}
				if _, _, err := tail.Next(); err != io.EOF {
					t.Fatalf("tail at the durable end: %v, want io.EOF", err)
				}
			}
			mem, file := l.FramesRead()
			// A frame that is the first of a new segment is read from the
			// file: the reader moves to the segment through its file. A
			// commit is one frame or, when the committer took its first
			// record before Append had the others, more.
			frames := mem + file
			if mem < frames*3/4 || frames < commits {
				t.Fatalf("frames read: %d from memory, %d from the files; want most of at least %d from memory", mem, file, commits)
			}
			behind, err := l.NewReader(0)
			if err != nil {
				t.Fatal(err)
			}
			defer behind.Close()
			for i := range 3 * commits {
				if rec, pos, err := behind.Next(); err != nil || pos != ingestlog.Position(i) || !strings.HasPrefix(string(rec), fmt.Sprintf("commit %d record %d", i/3, i%3)) {
					t.Fatalf("behind: %q at %d (%v), want position %d", rec, pos, err, i)
				}
			}
			if m, f := l.FramesRead(); m != mem+1 || f != file+frames-1 {
				t.Fatalf("a reader behind: %d more frames from memory, %d from the files; want the last only from memory", m-mem, f-file)
			}
		})
	}
}

// TestReaderNotFromARefilledBlock: once the next commit has begun, the
// last block's buffer is Append's again, refilled with newer records; a
// Reader that needs the last frame then reads it from the file.
func TestReaderNotFromARefilledBlock(t *testing.T) {
	fsys := memFS()
	l, _ := mustOpen(t, logDir, ingestlog.Options{FS: fsys, GroupBytes: 1})
	ctx := context.Background()
	a, _ := l.Append(ctx, []byte("record A: the frame the reader wants"))
	if err := l.WaitDurable(ctx, a); err != nil {
		t.Fatal(err)
	}
	// B's commit hangs in its fsync, after it has handed A's buffer back
	// to Append; C is appended into that buffer over A.
	var hung atomic.Bool
	gate := make(chan struct{})
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		if op == faultfs.OpSync && strings.Contains(name, ".seg") {
			hung.Store(true)
			<-gate
		}
		return nil
	})
	l.Append(ctx, []byte("record B"))
	for !hung.Load() {
		time.Sleep(time.Millisecond)
	}
	l.Append(ctx, []byte("record C overwrites the buffer that held A!!"))
	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	rec, pos, err := r.Next()
	close(gate)
	fsys.SetInjector(nil)
	if err != nil || pos != 0 || string(rec) != "record A: the frame the reader wants" {
		t.Fatalf("the last frame while the next commit runs: %q at %d (%v), want record A", rec, pos, err)
	}
	r.Close()
	mustClose(t, l)
}
