package ingestlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// Group commit timing runs under synctest: time passes only when every
// goroutine in the bubble is blocked, so "not yet after 1.999 ms, done at
// 2 ms" is observed, not slept for.

// countSyncs counts fsyncs of segment files from now on.
func countSyncs(fsys *faultfs.FS) *atomic.Int64 {
	var n atomic.Int64
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		if op == faultfs.OpSync && strings.Contains(name, ".seg") {
			n.Add(1)
		}
		return nil
	})
	return &n
}

func TestGroupCommit(t *testing.T) {
	const delay = 2 * time.Millisecond
	rec := make([]byte, 99) // 100 bytes with its length prefix
	tests := []struct {
		name    string
		o       ingestlog.Options
		appends int
		// after the appends: durable at once, or only after the delay
		atOnce bool
		syncs  int64
	}{
		{"group waits for the delay", ingestlog.Options{GroupDelay: delay}, 3, false, 1},
		{"group commits a full batch at once", ingestlog.Options{GroupDelay: time.Hour, GroupBytes: 1000}, 10, true, 1},
		{"group below the byte threshold waits", ingestlog.Options{GroupDelay: delay, GroupBytes: 1000}, 9, false, 1},
		{"always commits at once", ingestlog.Options{Sync: ingestlog.SyncAlways, GroupDelay: time.Hour}, 1, true, 1},
		{"never commits at once, no fsync", ingestlog.Options{Sync: ingestlog.SyncNever, GroupDelay: time.Hour}, 1, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				fsys := memFS()
				tt.o.FS = fsys
				l, _ := mustOpen(t, logDir, tt.o)
				defer mustClose(t, l)
				syncs := countSyncs(fsys)
				start := time.Now()
				for range tt.appends {
					if _, err := l.Append(ctx, rec); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				want := ingestlog.Position(tt.appends)
				if !tt.atOnce {
					if got := l.Durable(); got != 0 {
						t.Fatalf("durable %d at once, want 0 until the delay", got)
					}
					time.Sleep(delay - time.Microsecond)
					synctest.Wait()
					if got := l.Durable(); got != 0 {
						t.Fatalf("durable %d after %v, want 0", got, time.Since(start))
					}
					time.Sleep(time.Microsecond)
					synctest.Wait()
				}
				if got := l.Durable(); got != want {
					t.Fatalf("durable %d after %v, want %d", got, time.Since(start), want)
				}
				if got := syncs.Load(); got != tt.syncs {
					t.Fatalf("%d fsyncs, want %d", got, tt.syncs)
				}
			})
		})
	}
}

// blockSyncs makes every segment fsync wait until the returned func is
// called.
func blockSyncs(fsys *faultfs.FS) (release func()) {
	gate := make(chan struct{})
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		if op == faultfs.OpSync && strings.Contains(name, ".seg") {
			<-gate
		}
		return nil
	})
	return func() { close(gate) }
}

// TestBackPressure: while an fsync hangs, Append accepts MaxUnsynced bytes
// and then blocks, honouring its ctx, until the fsync returns.
func TestBackPressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := memFS()
		l, _ := mustOpen(t, logDir, ingestlog.Options{FS: fsys, MaxUnsynced: 4096, GroupBytes: 1024, MaxRecordSize: 1024})
		defer mustClose(t, l)
		release := blockSyncs(fsys)
		rec := make([]byte, 1000) // 1002 bytes with its prefix
		ctx := context.Background()
		for i := range 4 { // 2 in the hung commit, 2 buffered: 4008 bytes
			if _, err := l.Append(ctx, rec); err != nil {
				t.Fatalf("Append #%d: %v", i, err)
			}
			synctest.Wait()
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		if _, err := l.Append(short, rec); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Append over MaxUnsynced: %v, want to block until the deadline", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("Append gave up after %v, want 1s", waited)
		}
		errc := make(chan error)
		go func() {
			_, err := l.Append(ctx, rec)
			errc <- err
		}()
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("Append returned (%v) while the fsync hangs", err)
		default:
		}
		release()
		if err := <-errc; err != nil {
			t.Fatalf("Append after the fsync returned: %v", err)
		}
		if err := l.WaitDurable(ctx, 4); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCloseDeadline: Close gives up when its ctx ends during a hung fsync;
// the committer then finishes that fsync, drops the rest and exits.
func TestCloseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := memFS()
		l, _ := mustOpen(t, logDir, ingestlog.Options{FS: fsys, Sync: ingestlog.SyncAlways})
		release := blockSyncs(fsys)
		ctx := context.Background()
		for range 3 {
			if _, err := l.Append(ctx, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := l.Close(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want DeadlineExceeded", err)
		}
		if _, err := l.Append(ctx, []byte("y")); !errors.Is(err, ingestlog.ErrClosed) {
			t.Fatalf("Append after Close: %v, want ErrClosed", err)
		}
		release()
		// The hung commit completes; what was still buffered is dropped, so
		// the last record is either durable or never will be.
		if err := l.WaitDurable(ctx, 0); err != nil {
			t.Fatalf("WaitDurable(0): %v", err)
		}
		if err := l.WaitDurable(ctx, 2); err != nil && !errors.Is(err, ingestlog.ErrClosed) {
			t.Fatalf("WaitDurable(2): %v, want nil or ErrClosed", err)
		}
	})
}

// TestCommitOnCaller: records appended after BeginCommit are durable when
// Commit returns, in one fsync, though the group delay has not passed; the
// committer commits nothing more after it.
func TestCommitOnCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fsys := memFS()
		l, _ := mustOpen(t, logDir, ingestlog.Options{FS: fsys, GroupDelay: time.Hour})
		defer mustClose(t, l)
		syncs := countSyncs(fsys)
		for round := range 3 {
			l.BeginCommit()
			for range 5 {
				if _, err := l.Append(ctx, []byte("reading")); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Commit(); err != nil {
				t.Fatal(err)
			}
			if got, want := l.Durable(), ingestlog.Position(5*(round+1)); got != want {
				t.Fatalf("durable %d after Commit, want %d", got, want)
			}
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if got := syncs.Load(); got != 3 {
			t.Fatalf("%d fsyncs, want one a Commit (3)", got)
		}
		got, err := readAll(l, 0)
		if err != nil || len(got) != 15 {
			t.Fatalf("read %d records (%v), want 15", len(got), err)
		}
	})
}

// TestCommitBlockedAppend: an Append after BeginCommit that finds
// MaxUnsynced bytes waiting (below GroupBytes) wakes the committer rather
// than wait for a commit nobody was told to make.
func TestCommitBlockedAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l, _ := mustOpen(t, logDir, ingestlog.Options{FS: memFS(), GroupDelay: 2 * time.Millisecond,
			GroupBytes: 1000, MaxUnsynced: 1000, MaxRecordSize: 600})
		defer mustClose(t, l)
		l.BeginCommit()
		rec := make([]byte, 500)
		for range 2 {
			if _, err := l.Append(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := l.Durable(); got != 2 {
			t.Fatalf("durable %d, want 2", got)
		}
	})
}

// TestCommitConcurrent: appenders that commit their own batches, plain
// appenders and the committer share the log; every record is read back
// once, in the order of its positions, after a reopen. Run with -race.
func TestCommitConcurrent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, _ := mustOpen(t, dir, ingestlog.Options{GroupDelay: 100 * time.Microsecond, Sync: ingestlog.SyncNever})
	var mu sync.Mutex
	want := map[ingestlog.Position]string{}
	var g errgroup.Group
	for w := range 3 {
		g.Go(func() error {
			for i := range 200 {
				batch := w < 2 // two commit their own batches, one does not
				if batch {
					l.BeginCommit()
				}
				for j := range 1 + i%5 {
					rec := fmt.Sprintf("w%d-%d-%d", w, i, j)
					pos, err := l.Append(ctx, []byte(rec))
					if err != nil {
						return err
					}
					mu.Lock()
					want[pos] = rec
					mu.Unlock()
				}
				if batch {
					if err := l.Commit(); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	l, _ = mustOpen(t, dir, ingestlog.Options{})
	defer mustClose(t, l)
	got, err := readAll(l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, rec := range got {
		if w := want[ingestlog.Position(i)]; string(rec) != w {
			t.Fatalf("record %d is %q, want %q", i, rec, w)
		}
	}
}
