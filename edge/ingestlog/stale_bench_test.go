package ingestlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// BenchmarkOpenAfterCrashOverSpare: the Open after a crash whose last
// segment was written over a spare of 64 MiB (the default segment size):
// the search for a frame after the last good one tries every byte offset of
// the spare's earlier bytes. It reports the Open's time.
func BenchmarkOpenAfterCrashOverSpare(b *testing.B) {
	fsys := memFS()
	o := ingestlog.Options{FS: fsys, Sync: ingestlog.SyncAlways}
	l, _, err := ingestlog.Open(context.Background(), logDir, &o)
	if err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, 200)
	for i := range rec {
		rec[i] = byte('a' + i%26)
	}
	ctx := context.Background()
	for l.Size() < 64<<20-(1<<20) {
		var p ingestlog.Position
		for range 300 {
			if p, err = l.Append(ctx, rec); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.WaitDurable(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Seal(ctx); err != nil {
		b.Fatal(err)
	}
	p, _ := l.Append(ctx, rec) // the next segment: over nothing yet
	l.WaitDurable(ctx, p)
	if err := l.DeleteBefore(l.Durable()); err != nil { // the full one becomes the spare
		b.Fatal(err)
	}
	if err := l.Seal(ctx); err != nil {
		b.Fatal(err)
	}
	p, _ = l.Append(ctx, rec) // written over the spare
	l.WaitDurable(ctx, p)
	fsys.Crash(faultfs.DropUnsynced)
	l.Close(ctx)
	fsys.Reboot()
	var took time.Duration
	for b.Loop() {
		began := time.Now()
		l, r, err := ingestlog.Open(ctx, logDir, &ingestlog.Options{FS: fsys, Sync: ingestlog.SyncNever})
		took = time.Since(began)
		if err != nil {
			b.Fatal(err)
		}
		if r.TruncatedBytes < 60<<20 {
			b.Fatalf("cut %d bytes, want the spare's 64 MiB", r.TruncatedBytes)
		}
		l.Close(ctx)
		b.StopTimer()
		fsys.Crash(faultfs.DropUnsynced) // undo the cut: the truncate was not synced
		fsys.Reboot()
		b.StartTimer()
	}
	b.ReportMetric(took.Seconds(), "open-s")
}
