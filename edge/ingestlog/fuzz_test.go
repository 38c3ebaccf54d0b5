package ingestlog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// openAndRead opens a log holding the given segment files and reads all of
// it. Whatever the bytes, it must not panic, Open may only fail with
// ErrCorrupt or ErrVersion, and a Reader returns exactly the records Open
// counted or stops at ErrCorrupt.
func openAndRead(t *testing.T, files map[uint64][]byte) {
	fsys := faultfs.New(1)
	for first, b := range files {
		fsys.WriteFile(segPath(first), b)
	}
	l, rec, err := ingestlog.Open(context.Background(), logDir, &ingestlog.Options{FS: fsys})
	if err != nil {
		if !errors.Is(err, ingestlog.ErrCorrupt) && !errors.Is(err, ingestlog.ErrVersion) {
			t.Fatalf("Open: %v, want ErrCorrupt or ErrVersion", err)
		}
		return
	}
	defer mustClose(t, l)
	r, err := l.NewReader(rec.First)
	if err != nil {
		t.Fatalf("NewReader(%d): %v", rec.First, err)
	}
	defer r.Close()
	n := 0
	for {
		_, pos, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !errors.Is(err, ingestlog.ErrCorrupt) {
				t.Fatalf("Next: %v, want ErrCorrupt", err)
			}
			return
		}
		if pos != rec.First+ingestlog.Position(n) {
			t.Fatalf("record %d at position %d", n, pos)
		}
		n++
	}
	if ingestlog.Position(n) != rec.End-rec.First {
		t.Fatalf("read %d records, Open counted %d", n, rec.End-rec.First)
	}
}

// validSegments returns segment files written by the log itself: plain and
// zstd frames, one and many records.
func validSegments(f *testing.F) [][]byte {
	var out [][]byte
	for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
		fsys := faultfs.New(1)
		l, _, err := ingestlog.Open(context.Background(), logDir, &ingestlog.Options{FS: fsys, Compression: comp, Sync: ingestlog.SyncAlways})
		if err != nil {
			f.Fatal(err)
		}
		for i := range 3 {
			var batch [][]byte
			for j := range 2*i + 1 {
				batch = append(batch, fmt.Appendf(nil, `{"device":"d-%d","seq":%d,"pad":"%0*d"}`, i, j, j*40, 0))
			}
			appendAll(f, l, batch)
		}
		if err := l.Close(context.Background()); err != nil {
			f.Fatal(err)
		}
		b, err := fsys.ReadFile(segPath(0))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzSegment feeds arbitrary bytes to Open and the Reader as the only
// segment file of a log (so torn-tail repair is in play too).
func FuzzSegment(f *testing.F) {
	for _, b := range validSegments(f) {
		f.Add(b)
		f.Add(b[:len(b)-3])
		f.Add(b[:segHeaderSize+5])
	}
	f.Add([]byte{})
	f.Add(segHeader(0, 1))
	f.Add(segHeader(0, 7))
	f.Fuzz(func(t *testing.T, data []byte) {
		openAndRead(t, map[uint64][]byte{0: data})
	})
}

// FuzzBlock frames arbitrary bytes with valid CRCs, so that the fuzzer
// reaches the block decoder (zstd and record lengths) rather than stopping
// at a CRC mismatch, and puts the segment in front of an intact last one so
// that the strict (not-last) policy applies.
func FuzzBlock(f *testing.F) {
	f.Add(false, uint32(2), uint32(0), plainBlock([]byte("ab"), nil))
	f.Add(true, uint32(1), uint32(5), zstdFrame(plainBlock([]byte("abcd"))))
	f.Add(true, uint32(3), uint32(300), zstdFrame(plainBlock(make([]byte, 100), make([]byte, 100), make([]byte, 97))))
	f.Add(false, uint32(1), uint32(0), []byte{0x80})
	f.Fuzz(func(t *testing.T, compressed bool, count, rawLen uint32, payload []byte) {
		typ := byte(1)
		if compressed {
			typ = 2
		} else {
			rawLen = uint32(len(payload))
		}
		seg := append(segHeader(0, 1), frame(typ, count, rawLen, 0, payload)...)
		files := map[uint64][]byte{0: seg}
		if count > 0 {
			files[uint64(count)] = segHeader(uint64(count), 1)
		}
		openAndRead(t, files)
	})
}
