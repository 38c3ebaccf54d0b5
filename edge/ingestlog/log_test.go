package ingestlog_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// TestRoundTrip appends random records under every sync policy, with and
// without compression, on the real and the in-memory filesystem, reopens,
// and reads from random positions: exactly the appended records from there.
func TestRoundTrip(t *testing.T) {
	for _, fsName := range []string{"os", "mem"} {
		for _, sync := range []ingestlog.SyncPolicy{ingestlog.SyncGroup, ingestlog.SyncAlways, ingestlog.SyncNever} {
			for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
				t.Run(fmt.Sprintf("fs=%s/sync=%s/compression=%s", fsName, sync, comp), func(t *testing.T) {
					t.Parallel()
					rng := rand.New(rand.NewPCG(uint64(sync), uint64(comp)))
					var fsys ingestlog.FS = memFS()
					dir := logDir
					if fsName == "os" {
						fsys, dir = ingestlog.OSFS(), t.TempDir()
					}
					o := ingestlog.Options{
						FS:          fsys,
						Sync:        sync,
						Compression: comp,
						SegmentSize: 32 << 10,
						GroupDelay:  200 * time.Microsecond,
						GroupBytes:  16 << 10,
					}
					want := records(rng, 400, 64<<10)
					l, rec := mustOpen(t, dir, o)
					if rec.End != 0 || rec.Segments != 1 {
						t.Fatalf("fresh log: %+v", rec)
					}
					// Append in bursts, sometimes waiting, so that blocks of
					// one and of many records both occur.
					ctx := context.Background()
					for i, r := range want {
						p, err := l.Append(ctx, r)
						if err != nil {
							t.Fatal(err)
						}
						if p != ingestlog.Position(i) {
							t.Fatalf("Append #%d got position %d", i, p)
						}
						if rng.IntN(20) == 0 {
							if err := l.WaitDurable(ctx, p); err != nil {
								t.Fatal(err)
							}
						}
					}
					mustClose(t, l)

					l, rec = mustOpen(t, dir, o)
					defer mustClose(t, l)
					if rec.End != ingestlog.Position(len(want)) || rec.TruncatedSegment != "" {
						t.Fatalf("reopen: %+v, want End %d and nothing truncated", rec, len(want))
					}
					if rec.Segments < 10 {
						t.Fatalf("only %d segments: the test means to cross segment boundaries", rec.Segments)
					}
					if l.Size() != rec.Bytes {
						t.Fatalf("Size %d, Recovery.Bytes %d", l.Size(), rec.Bytes)
					}
					froms := []ingestlog.Position{0, ingestlog.Position(len(want) - 1), ingestlog.Position(len(want))}
					for range 12 {
						froms = append(froms, ingestlog.Position(rng.IntN(len(want))))
					}
					for _, from := range froms {
						got, err := readAll(l, from)
						if err != nil {
							t.Fatalf("read from %d: %v", from, err)
						}
						checkRecords(t, got, want[from:], from)
					}
				})
			}
		}
	}
}

// TestCompressionPays checks, by walking the frames on disk, that JSON
// blocks are stored as zstd and come out smaller, and that blocks that do
// not compress are stored plain.
func TestCompressionPays(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var json, noise [][]byte
	for range 2000 {
		json = append(json, fmt.Appendf(nil, `{"device":"sensor-%04d","ts":%d,"temp":%.2f}`, rng.IntN(50), 1767225600000+rng.Int64N(1e6), rng.Float64()*30))
		b := make([]byte, 60)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		noise = append(noise, b)
	}
	// write returns the bytes on disk and the count of frames by type.
	write := func(recs [][]byte, c ingestlog.Compression) (int64, map[byte]int) {
		fsys := memFS()
		l, _ := mustOpen(t, logDir, ingestlog.Options{FS: fsys, Compression: c, Sync: ingestlog.SyncNever, GroupBytes: 8 << 10})
		appendAll(t, l, recs)
		got, err := readAll(l, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkRecords(t, got, recs, 0)
		size := l.Size()
		mustClose(t, l)
		b, err := fsys.ReadFile(segPath(0))
		if err != nil {
			t.Fatal(err)
		}
		types := map[byte]int{}
		for off := segHeaderSize; off < len(b); off += frameHeaderSize + int(binary.LittleEndian.Uint32(b[off+12:])) {
			types[b[off+4]]++
		}
		return size, types
	}
	plain, _ := write(json, ingestlog.CompressionNone)
	z, types := write(json, ingestlog.CompressionZstd)
	if types[2] == 0 || z*2 > plain {
		t.Errorf("JSON records: %d bytes compressed, %d plain, frames by type %v; want zstd frames at least 2x smaller", z, plain, types)
	}
	if _, types = write(noise, ingestlog.CompressionZstd); types[2] != 0 {
		t.Errorf("random records: frames by type %v; incompressible blocks should be stored plain (type 1)", types)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    ingestlog.Options
		want []string // substrings, one per expected problem
	}{
		{"zero", ingestlog.Options{}, nil},
		{"small segment", ingestlog.Options{SegmentSize: 100}, []string{"SegmentSize 100"}},
		{"negative", ingestlog.Options{MaxRecordSize: -1, GroupBytes: -1, GroupDelay: -1}, []string{"MaxRecordSize -1", "GroupBytes -1", "GroupDelay -1ns"}},
		{"record larger than unsynced", ingestlog.Options{MaxRecordSize: 2 << 20, MaxUnsynced: 1 << 20, GroupBytes: 1 << 10}, []string{"does not fit in MaxUnsynced"}},
		{"group above unsynced", ingestlog.Options{GroupBytes: 8 << 20, MaxUnsynced: 4 << 20}, []string{"GroupBytes 8388608 above MaxUnsynced"}},
		{"block limit", ingestlog.Options{MaxUnsynced: 128 << 20}, []string{"above MaxBlockSize"}},
		{"enums", ingestlog.Options{Sync: 9, Compression: 9}, []string{"unknown Sync policy 9", "unknown Compression 9"}},
		{"big record gets a bigger default buffer", ingestlog.Options{MaxRecordSize: 16 << 20}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nmissing %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tt.want) {
				t.Errorf("Validate reported %d problems, want %d:\n%v", n, len(tt.want), err)
			}
		})
	}
	if _, _, err := ingestlog.Open(context.Background(), logDir, &ingestlog.Options{FS: memFS(), SegmentSize: 1}); err == nil {
		t.Error("Open accepted invalid options")
	}
}

func TestAppendErrors(t *testing.T) {
	ctx := context.Background()
	l, _ := mustOpen(t, logDir, ingestlog.Options{FS: memFS(), MaxRecordSize: 100})
	if _, err := l.Append(ctx, make([]byte, 101)); !errors.Is(err, ingestlog.ErrTooLarge) {
		t.Errorf("Append 101 bytes: %v, want ErrTooLarge", err)
	}
	p, err := l.Append(ctx, make([]byte, 100))
	if err != nil || p != 0 {
		t.Fatalf("Append 100 bytes: %d, %v", p, err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := l.WaitDurable(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitDurable(1) with one record: %v, want to wait for it", err)
	}
	if _, err := l.NewReader(5); !errors.Is(err, ingestlog.ErrOutOfRange) {
		t.Errorf("NewReader(5): %v, want ErrOutOfRange", err)
	}
	mustClose(t, l)
	if l.Durable() != 1 {
		t.Errorf("Close did not commit the buffered record: Durable %d", l.Durable())
	}
	if _, err := l.Append(ctx, nil); !errors.Is(err, ingestlog.ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if err := l.Close(ctx); !errors.Is(err, ingestlog.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	// Readers keep working on a closed log.
	got, err := readAll(l, 0)
	if err != nil || len(got) != 1 {
		t.Errorf("read after Close: %d records, %v", len(got), err)
	}
}

func TestLocked(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   ingestlog.FS
		dir  string
	}{{"os", ingestlog.OSFS(), t.TempDir()}, {"mem", memFS(), logDir}} {
		t.Run(tc.name, func(t *testing.T) {
			o := ingestlog.Options{FS: tc.fs}
			l, _ := mustOpen(t, tc.dir, o)
			if _, _, err := ingestlog.Open(context.Background(), tc.dir, &o); !errors.Is(err, ingestlog.ErrLocked) {
				t.Errorf("second Open: %v, want ErrLocked", err)
			}
			mustClose(t, l)
			l, _ = mustOpen(t, tc.dir, o) // released by Close
			mustClose(t, l)
		})
	}
}

func TestDeleteBefore(t *testing.T) {
	fsys := memFS()
	o := ingestlog.Options{FS: fsys, SegmentSize: 1 << 10, Sync: ingestlog.SyncAlways}
	l, _ := mustOpen(t, logDir, o)
	want := make([][]byte, 100)
	for i := range want {
		want[i] = fmt.Appendf(nil, "record %03d %s", i, strings.Repeat("x", 90))
		appendAll(t, l, want[i:i+1]) // one frame per record: 7 per segment
	}
	before := l.Size()
	early, err := l.NewReader(2) // holds segment 0 open across the delete
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if err := l.DeleteBefore(20); err != nil {
		t.Fatal(err)
	}
	// Segments start at 0, 7, 14, 21: the one ending at 21 still holds 20.
	if got := l.First(); got != 14 {
		t.Fatalf("First after DeleteBefore(20) = %d, want 14", got)
	}
	if l.Size() >= before {
		t.Errorf("Size %d not below %d", l.Size(), before)
	}
	if _, err := l.NewReader(13); !errors.Is(err, ingestlog.ErrOutOfRange) {
		t.Errorf("NewReader(13): %v, want ErrOutOfRange", err)
	}
	got, err := readAll(l, 14)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, want[14:], 14)
	// The early reader finishes its open segment, then finds the next gone.
	for i := 2; i < 7; i++ {
		rec, pos, err := early.Next()
		if err != nil || pos != ingestlog.Position(i) || string(rec) != string(want[i]) {
			t.Fatalf("early reader at %d: %d, %v", i, pos, err)
		}
	}
	if _, _, err := early.Next(); !errors.Is(err, ingestlog.ErrOutOfRange) {
		t.Fatalf("early reader past its deleted segment: %v, want ErrOutOfRange", err)
	}
	// Everything up to the end: all segments but the active one go.
	if err := l.DeleteBefore(1000); err != nil {
		t.Fatal(err)
	}
	if got := l.First(); got != 98 {
		t.Errorf("First after DeleteBefore(1000) = %d, want 98 (the active segment)", got)
	}
	mustClose(t, l)
	l, rec := mustOpen(t, logDir, o)
	defer mustClose(t, l)
	if rec.First != 98 || rec.End != 100 || rec.Segments != 1 {
		t.Errorf("reopen after delete: %+v", rec)
	}
	// The first segment deleted is kept as the spare (SpareSegments).
	names, _ := fsys.ReadDir(logDir)
	if !slices.Equal(names, []string{segName(0) + ".free", segName(98)}) {
		t.Errorf("files left: %q", names)
	}
}

// TestTailWhileAppending reads with one goroutine while another appends;
// the reader sees every record once, in order, and only durable ones.
func TestTailWhileAppending(t *testing.T) {
	for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
		t.Run(comp.String(), func(t *testing.T) {
			var mu sync.Mutex
			var reported []ingestlog.Position
			o := ingestlog.Options{
				FS: memFS(), SegmentSize: 8 << 10, Compression: comp,
				GroupDelay: 100 * time.Microsecond,
				OnDurable: func(upTo ingestlog.Position) {
					mu.Lock()
					reported = append(reported, upTo)
					mu.Unlock()
				},
			}
			l, _ := mustOpen(t, logDir, o)
			want := records(rand.New(rand.NewPCG(1, 2)), 3000, 2000)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				for _, r := range want {
					if _, err := l.Append(ctx, r); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			r, err := l.NewReader(0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for next := ingestlog.Position(0); int(next) < len(want); {
				rec, pos, err := r.Next()
				if err == io.EOF {
					if err := l.WaitDurable(ctx, next); err != nil {
						t.Fatalf("WaitDurable(%d): %v", next, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				if pos != next || string(rec) != string(want[pos]) {
					t.Fatalf("read position %d (%d bytes), want %d (%d bytes)", pos, len(rec), next, len(want[next]))
				}
				if d := l.Durable(); pos >= d {
					t.Fatalf("read position %d beyond the durable end %d", pos, d)
				}
				next++
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			mustClose(t, l)
			mu.Lock()
			defer mu.Unlock()
			if !slices.IsSorted(reported) || slices.Compact(slices.Clone(reported)) == nil || reported[len(reported)-1] != ingestlog.Position(len(want)) {
				t.Fatalf("OnDurable calls not increasing to %d: %v", len(want), reported)
			}
			for i := 1; i < len(reported); i++ {
				if reported[i] <= reported[i-1] {
					t.Fatalf("OnDurable went %d then %d", reported[i-1], reported[i])
				}
			}
		})
	}
}

// TestFailedSync: an fsync error fails the log for good; what was durable
// before is there after reopening.
func TestFailedSync(t *testing.T) {
	ctx := context.Background()
	fsys := memFS()
	o := ingestlog.Options{FS: fsys, Sync: ingestlog.SyncAlways}
	l, _ := mustOpen(t, logDir, o)
	appendAll(t, l, [][]byte{[]byte("a"), []byte("b")})
	boom := errors.New("EIO")
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		if op == faultfs.OpSync {
			return boom
		}
		return nil
	})
	p, err := l.Append(ctx, []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(ctx, p); !errors.Is(err, ingestlog.ErrFailed) || !errors.Is(err, boom) {
		t.Fatalf("WaitDurable after failed fsync: %v, want ErrFailed wrapping the cause", err)
	}
	if _, err := l.Append(ctx, []byte("d")); !errors.Is(err, ingestlog.ErrFailed) {
		t.Fatalf("Append after failed fsync: %v, want ErrFailed", err)
	}
	if err := l.Close(ctx); !errors.Is(err, ingestlog.ErrFailed) {
		t.Fatalf("Close: %v, want ErrFailed", err)
	}
	fsys.SetInjector(nil)
	l, rec := mustOpen(t, logDir, o)
	defer mustClose(t, l)
	if rec.End < 2 {
		t.Fatalf("reopen: %+v, want the 2 durable records", rec)
	}
}

// TestFailedWrite: a short write fails the log; reopening cuts the partial
// frame as a torn tail.
func TestFailedWrite(t *testing.T) {
	ctx := context.Background()
	fsys := faultfs.New(3)
	o := ingestlog.Options{FS: fsys, Sync: ingestlog.SyncAlways}
	l, _ := mustOpen(t, logDir, o)
	appendAll(t, l, [][]byte{[]byte("first")})
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		if op == faultfs.OpWrite {
			return errors.New("ENOSPC")
		}
		return nil
	})
	p, _ := l.Append(ctx, []byte(strings.Repeat("second", 100)))
	if err := l.WaitDurable(ctx, p); !errors.Is(err, ingestlog.ErrFailed) {
		t.Fatalf("WaitDurable: %v, want ErrFailed", err)
	}
	l.Close(ctx)
	fsys.SetInjector(nil)
	l, rec := mustOpen(t, logDir, o)
	defer mustClose(t, l)
	if rec.End != 1 {
		t.Fatalf("reopen: %+v, want End 1", rec)
	}
	got, err := readAll(l, 0)
	if err != nil || len(got) != 1 || string(got[0]) != "first" {
		t.Fatalf("read: %q, %v", got, err)
	}
}

// TestSteadyStateAllocs: Append and Reader.Next allocate nothing once the
// buffers have grown.
func TestSteadyStateAllocs(t *testing.T) {
	for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
		t.Run(comp.String(), func(t *testing.T) {
			ctx := context.Background()
			l, _ := mustOpen(t, t.TempDir(), ingestlog.Options{Sync: ingestlog.SyncNever, Compression: comp, GroupBytes: 64 << 10})
			defer mustClose(t, l)
			rec := []byte(strings.Repeat(`{"device":"sensor-0001","temp":21.5}`, 6))
			app := func() {
				if _, err := l.Append(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			for range 20000 {
				app()
			}
			if a := testing.AllocsPerRun(20000, app); a > 0.01 {
				t.Errorf("Append: %.3f allocs per call", a)
			}
			if err := l.WaitDurable(ctx, 40000-1); err != nil {
				t.Fatal(err)
			}
			r, err := l.NewReader(0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			next := func() {
				if _, _, err := r.Next(); err != nil {
					t.Fatal(err)
				}
			}
			for range 1000 {
				next()
			}
			if a := testing.AllocsPerRun(10000, next); a > 0.01 {
				t.Errorf("Reader.Next: %.3f allocs per call", a)
			}
		})
	}
}

// TestSizeCountsBufferedRecords: Size counts a record from its Append, not
// from its write, and once written counts it once: a disk cap checked
// against Size before each append holds however fast records come (with
// Size lagging by a commit, records arriving at a high rate passed a cap
// by hundreds of kilobytes).
func TestSizeCountsBufferedRecords(t *testing.T) {
	o := ingestlog.Options{FS: memFS(), Sync: ingestlog.SyncGroup, GroupDelay: time.Hour, GroupBytes: 64 << 10}
	l, _ := mustOpen(t, logDir, o)
	defer mustClose(t, l)
	empty := l.Size()
	rec := make([]byte, 1000)
	var last ingestlog.Position
	for range 10 {
		p, err := l.Append(context.Background(), rec)
		if err != nil {
			t.Fatal(err)
		}
		last = p
	}
	if got, want := l.Size()-empty, int64(10*(2+1000)); got != want {
		t.Fatalf("10 buffered records of 1000 bytes: Size grew by %d, want %d", got, want)
	}
	if d := l.Durable(); d > last {
		t.Fatalf("already durable (%d): the test needs them buffered", d)
	}
	appendAll(t, l, [][]byte{make([]byte, 70_000)}) // past GroupBytes: commits everything
	if got, want := l.Size()-empty, int64(10*(2+1000)+3+70_000+32); got != want {
		t.Fatalf("after the commit Size grew by %d, want %d (the records and one frame header)", got, want)
	}
}
