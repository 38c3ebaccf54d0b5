package ingestlog_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// dirBytes is the length of every file in the log's directory but LOCK.
func dirBytes(t *testing.T, fsys *faultfs.FS) (total int64, spares int) {
	t.Helper()
	names, err := fsys.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if name == "LOCK" {
			continue
		}
		b, err := fsys.ReadFile(logDir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		total += int64(len(b))
		if strings.HasSuffix(name, ".seg.free") {
			spares++
		}
	}
	return total, spares
}

// TestRecycle: segments that DeleteBefore frees are written over rather than
// made anew (one spare file kept); every record reads back; Size is what the
// files take on disk, spares and a spare's earlier bytes included; a clean
// Close leaves nothing for Open to cut; DropSpares gives the spare back; a
// Reader left in a segment whose file was written over fails with
// ErrOutOfRange, never with another segment's records.
func TestRecycle(t *testing.T) {
	fsys := memFS()
	var mu sync.Mutex
	ops := map[string]int{}
	fsys.SetInjector(func(op faultfs.Op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case op == faultfs.OpCreate && strings.HasSuffix(name, ".seg.tmp"):
			ops["create"]++
		case op == faultfs.OpRename && strings.HasSuffix(name, ".seg.free"):
			ops["recycle"]++
		}
		return nil
	})
	o := ingestlog.Options{FS: fsys, SegmentSize: 2 << 10, Sync: ingestlog.SyncAlways}
	l, _ := mustOpen(t, logDir, o)
	rng := rand.New(rand.NewPCG(7, 7))
	var want [][]byte
	early, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	for round := range 40 {
		batch := records(rng, 10, 200)
		appendAll(t, l, batch)
		want = append(want, batch...)
		if round == 0 {
			// The early reader takes a record of the first segment, which
			// is then deleted and, later, written over.
			if _, _, err := early.Next(); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.DeleteBefore(l.Durable()); err != nil {
			t.Fatal(err)
		}
		if onDisk, spares := dirBytes(t, fsys); l.Size() != onDisk || spares > 1 {
			t.Fatalf("round %d: Size %d, files %d bytes with %d spares (want equal, at most 1 spare)", round, l.Size(), onDisk, spares)
		}
	}
	mu.Lock()
	created, recycled := ops["create"], ops["recycle"]
	mu.Unlock()
	if recycled < 20 || created > 3 {
		t.Fatalf("%d segments made anew and %d over spare files; want nearly all over spares", created, recycled)
	}
	for {
		_, _, err := early.Next()
		if err == nil {
			continue
		}
		if !errors.Is(err, ingestlog.ErrOutOfRange) {
			t.Fatalf("reader left in a recycled segment: %v, want ErrOutOfRange", err)
		}
		break
	}
	first := l.First()
	got, err := readAll(l, first)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, want[first:], first)
	// The last segment is written over a spare, which has bytes after it.
	if err := l.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, [][]byte{[]byte("last")})
	want = append(want, []byte("last"))
	if err := l.DeleteBefore(l.Durable()); err != nil {
		t.Fatal(err)
	}
	first = l.First()
	if onDisk, _ := dirBytes(t, fsys); l.Size() != onDisk {
		t.Fatalf("Size %d, files %d bytes", l.Size(), onDisk)
	}
	mustClose(t, l)

	l, rec := mustOpen(t, logDir, o)
	defer mustClose(t, l)
	if rec.TruncatedSegment != "" || rec.End != ingestlog.Position(len(want)) {
		t.Fatalf("reopen after a clean Close: %+v", rec)
	}
	got, err = readAll(l, first)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, want[first:], first)
	before, spare := l.Size(), l.SpareBytes()
	freed, err := l.DropSpares()
	if err != nil || freed <= 0 || l.Size() != before-freed || freed != spare || l.SpareBytes() != 0 {
		t.Fatalf("DropSpares: %d bytes, %v; Size %d -> %d; SpareBytes %d -> %d", freed, err, before, l.Size(), spare, l.SpareBytes())
	}
	if onDisk, spares := dirBytes(t, fsys); spares != 0 || onDisk != l.Size() {
		t.Fatalf("after DropSpares: %d spares, files %d bytes, Size %d", spares, onDisk, l.Size())
	}
}

// TestRecycleCrash: a power loss while the log writes over a spare file
// leaves the spare's earlier frames after the last good one. Open cuts them
// as the torn tail they look like and says where they came from, and
// appends carry on over them.
func TestRecycleCrash(t *testing.T) {
	fsys := memFS()
	o := ingestlog.Options{FS: fsys, SegmentSize: 4 << 10, Sync: ingestlog.SyncAlways}
	l, _ := mustOpen(t, logDir, o)
	rng := rand.New(rand.NewPCG(8, 8))
	var want [][]byte
	for range 12 {
		batch := records(rng, 8, 300)
		appendAll(t, l, batch)
		want = append(want, batch...)
		if err := l.DeleteBefore(l.Durable()); err != nil {
			t.Fatal(err)
		}
	}
	fsys.Crash(faultfs.DropUnsynced)
	l.Close(context.Background())
	fsys.Reboot()

	l, rec := mustOpen(t, logDir, o)
	if rec.End != ingestlog.Position(len(want)) {
		t.Fatalf("recovered end %d, want %d", rec.End, len(want))
	}
	if rec.TruncatedSegment == "" || !strings.Contains(rec.TruncatedReason, "spare") {
		t.Fatalf("a recycled segment's tail cut without saying so: %q", rec.TruncatedReason)
	}
	more := records(rng, 30, 300)
	appendAll(t, l, more)
	want = append(want, more...)
	mustClose(t, l)
	l, _ = mustOpen(t, logDir, o)
	defer mustClose(t, l)
	got, err := readAll(l, l.First())
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, want[l.First():], l.First())
}

// TestRecycledSaltCollision: were a spare's earlier frames to verify under
// the new salt (1 in 2^32), they are below the expected position: the end
// of a recycled last segment, not damage that stops the edge.
func TestRecycledSaltCollision(t *testing.T) {
	const salt = 0x5eed
	rec := []byte("a reading")
	seg := segHeaderV2(100, salt, 1) // recycled
	seg = append(seg, frameIn(salt, 1, 1, uint32(len(rec)+1), 100, plainBlock(rec))...)
	good := int64(len(seg))
	seg = append(seg, frameIn(salt, 1, 1, uint32(len(rec)+1), 40, plainBlock(rec))...)
	fsys := memFS()
	fsys.WriteFile(segPath(100), seg)
	l, r, err := ingestlog.Open(context.Background(), logDir, &ingestlog.Options{FS: fsys})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer mustClose(t, l)
	if r.End != 101 || r.TruncatedOffset != good || !strings.Contains(r.TruncatedReason, "earlier use") {
		t.Fatalf("Recovery %+v, want end 101 and the stale frame cut at %d", r, good)
	}
	names, _ := fsys.ReadDir(logDir)
	if !slices.Contains(names, segName(100)) {
		t.Fatalf("files: %q", names)
	}
}
