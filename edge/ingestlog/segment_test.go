package ingestlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// sealedLog writes n records through a log with tiny segments and returns
// the log (open) and the records.
func sealedLog(t *testing.T, comp ingestlog.Compression, n int) (*ingestlog.Log, [][]byte) {
	t.Helper()
	l, _ := mustOpen(t, t.TempDir(), ingestlog.Options{SegmentSize: ingestlog.MinSegmentSize, Compression: comp, Sync: ingestlog.SyncNever})
	var recs [][]byte
	for i := range n {
		r := fmt.Appendf(nil, `{"device":"d-%d","seq":%d,"pad":"%0*d"}`, i%7, i, i%90, 0)
		recs = append(recs, r)
		appendAll(t, l, [][]byte{r}) // one frame each, so segments roll often
	}
	t.Cleanup(func() { mustClose(t, l) })
	return l, recs
}

func TestReadSegmentReadsEverySealedSegment(t *testing.T) {
	for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
		t.Run(comp.String(), func(t *testing.T) {
			l, recs := sealedLog(t, comp, 300)
			segs := l.Sealed()
			if len(segs) < 3 {
				t.Fatalf("%d sealed segments, want several", len(segs))
			}
			next := ingestlog.Position(0)
			for _, s := range segs {
				if s.First != next {
					t.Fatalf("segment %s starts at %d, want %d", s.Name, s.First, next)
				}
				b, err := os.ReadFile(s.Path)
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(b)) != s.Size {
					t.Fatalf("%s: %d bytes on disk, Sealed says %d", s.Name, len(b), s.Size)
				}
				end, err := ingestlog.ReadSegment(context.Background(), bytes.NewReader(b), int64(len(b)), s.Name, func(pos ingestlog.Position, rec []byte) error {
					if pos != next {
						return fmt.Errorf("record at %d, want %d", pos, next)
					}
					if !bytes.Equal(rec, recs[pos]) {
						return fmt.Errorf("record %d = %q, want %q", pos, rec, recs[pos])
					}
					next++
					return nil
				})
				if err != nil {
					t.Fatalf("ReadSegment(%s): %v", s.Name, err)
				}
				if end != s.End || next != s.End {
					t.Fatalf("ReadSegment(%s) ended at %d (read to %d), Sealed says %d", s.Name, end, next, s.End)
				}
			}
			if got := l.Sealed()[len(segs)-1].End; int(got) >= len(recs) {
				t.Fatalf("the sealed segments hold every record (%d): the active one must not be listed", got)
			}
		})
	}
}

// A damaged or cut archived segment is refused before any record of it
// reaches the caller.
func TestReadSegmentRefusesDamageBeforeAnyRecord(t *testing.T) {
	l, _ := sealedLog(t, ingestlog.CompressionZstd, 120)
	s := l.Sealed()[0]
	good, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"flipped byte in the last frame": flipAt(good, len(good)-3),
		"flipped byte in the header":     flipAt(good, 9),
		"cut in the last frame":          good[:len(good)-5],
		"trailing bytes":                 append(bytes.Clone(good), 0, 0, 0),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			calls := 0
			_, err := ingestlog.ReadSegment(context.Background(), bytes.NewReader(b), int64(len(b)), s.Name, func(ingestlog.Position, []byte) error {
				calls++
				return nil
			})
			if !errors.Is(err, ingestlog.ErrCorrupt) {
				t.Fatalf("ReadSegment: %v, want ErrCorrupt", err)
			}
			if calls != 0 {
				t.Fatalf("fn saw %d records of a damaged segment", calls)
			}
		})
	}
	t.Run("wrong name", func(t *testing.T) {
		_, err := ingestlog.ReadSegment(context.Background(), bytes.NewReader(good), int64(len(good)), filepath.Base("00000000000000000007.seg"), func(ingestlog.Position, []byte) error { return nil })
		if !errors.Is(err, ingestlog.ErrCorrupt) {
			t.Fatalf("a segment under another first position: %v, want ErrCorrupt", err)
		}
	})
}

func flipAt(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

// FuzzReadSegment: whatever the bytes, ReadSegment does not panic, fails
// only with ErrCorrupt, and a segment it accepts gives dense positions.
func FuzzReadSegment(f *testing.F) {
	for _, b := range validSegments(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		next := ingestlog.Position(0)
		end, err := ingestlog.ReadSegment(context.Background(), bytes.NewReader(b), int64(len(b)), "00000000000000000000.seg", func(pos ingestlog.Position, rec []byte) error {
			if pos != next {
				t.Fatalf("record at %d, want %d", pos, next)
			}
			next++
			return nil
		})
		if err != nil {
			if !errors.Is(err, ingestlog.ErrCorrupt) && !errors.Is(err, ingestlog.ErrVersion) {
				t.Fatalf("ReadSegment: %v, want ErrCorrupt", err)
			}
			return
		}
		if end != next {
			t.Fatalf("ReadSegment ended at %d after %d records", end, next)
		}
	})
}

// TestSeal: Seal ends the active segment once what is buffered is durable;
// the next records go to a new one, and DeleteBefore then removes the
// sealed segment; sealing an empty active segment changes nothing; the
// log reopens with what is left.
func TestSeal(t *testing.T) {
	fsys := memFS()
	o := ingestlog.Options{FS: fsys}
	l, _ := mustOpen(t, logDir, o)
	ctx := context.Background()
	for i := range 10 {
		if _, err := l.Append(ctx, fmt.Appendf(nil, "record %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d != 10 {
		t.Fatalf("sealed with %d of 10 records durable", d)
	}
	sealed := l.Sealed()
	if len(sealed) != 1 || sealed[0].First != 0 || sealed[0].End != 10 {
		t.Fatalf("sealed segments %+v, want one of records 0 to 10", sealed)
	}
	if err := l.Seal(ctx); err != nil || len(l.Sealed()) != 1 {
		t.Fatalf("sealing an empty active segment: %v, %d sealed", err, len(l.Sealed()))
	}
	p, err := l.Append(ctx, []byte("record 10"))
	if err != nil || p != 10 {
		t.Fatalf("append after Seal: %d, %v", p, err)
	}
	if err := l.WaitDurable(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteBefore(10); err != nil || len(l.Sealed()) != 0 {
		t.Fatalf("DeleteBefore(10): %v, %d sealed left", err, len(l.Sealed()))
	}
	mustClose(t, l)
	l, rec := mustOpen(t, logDir, o)
	defer mustClose(t, l)
	got, err := readAll(l, 10)
	if err != nil || rec.End != 11 || len(got) != 1 || string(got[0]) != "record 10" {
		t.Fatalf("reopened: end %d, %q, %v", rec.End, got, err)
	}
}
