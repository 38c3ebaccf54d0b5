package ingestlog_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The layout constants of docs/formats/ingest-log.md. Tests spell them out
// rather than import them so that a format change has to change the doc and
// the tests too.
const (
	segHeaderSize   = 24 // version 2, which the log writes
	segHeaderSizeV1 = 20
	frameHeaderSize = 32
	logDir          = "/log"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func segName(first uint64) string { return fmt.Sprintf("%020d.seg", first) }

func segPath(first uint64) string { return logDir + "/" + segName(first) }

// segHeader builds a version 1 segment header as the format doc lays it
// out, with the version byte given.
func segHeader(first uint64, version byte) []byte {
	b := make([]byte, segHeaderSizeV1)
	copy(b, "RNIL")
	b[4] = version
	binary.LittleEndian.PutUint64(b[8:], first)
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	return b
}

// segHeaderV2 builds a version 2 segment header.
func segHeaderV2(first uint64, salt uint32, flags byte) []byte {
	b := make([]byte, segHeaderSize)
	copy(b, "RNIL")
	b[4], b[5] = 2, flags
	binary.LittleEndian.PutUint64(b[8:], first)
	binary.LittleEndian.PutUint32(b[16:], salt)
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], castagnoli))
	return b
}

// saltOf returns the salt of the version 2 segment whose bytes are seg.
func saltOf(seg []byte) uint32 { return binary.LittleEndian.Uint32(seg[16:20]) }

// frameIn builds a frame for a version 2 segment with the given salt: its
// header CRC runs over the salt's four bytes, then header bytes 4-31.
func frameIn(salt uint32, typ byte, count, rawLen uint32, first uint64, payload []byte) []byte {
	b := frame(typ, count, rawLen, first, payload)
	var s [4]byte
	binary.LittleEndian.PutUint32(s[:], salt)
	seed := crc32.Checksum(s[:], castagnoli)
	binary.LittleEndian.PutUint32(b[0:], crc32.Update(seed, castagnoli, b[4:frameHeaderSize]))
	return b
}

// frame builds a version 1 frame as the format doc lays it out.
func frame(typ byte, count, rawLen uint32, first uint64, payload []byte) []byte {
	b := make([]byte, frameHeaderSize, frameHeaderSize+len(payload))
	b[4] = typ
	binary.LittleEndian.PutUint32(b[8:], count)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[16:], rawLen)
	binary.LittleEndian.PutUint64(b[20:], first)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(b[0:], crc32.Checksum(b[4:frameHeaderSize], castagnoli))
	return append(b, payload...)
}

// plainBlock encodes records as a plain block payload.
func plainBlock(recs ...[]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// tb is what the helpers need of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustOpen(t testing.TB, dir string, o ingestlog.Options) (*ingestlog.Log, ingestlog.Recovery) {
	t.Helper()
	l, rec, err := ingestlog.Open(context.Background(), dir, &o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, rec
}

func mustClose(t tb, l *ingestlog.Log) {
	t.Helper()
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// appendAll appends recs and waits until the last is durable.
func appendAll(t testing.TB, l *ingestlog.Log, recs [][]byte) {
	t.Helper()
	ctx := context.Background()
	var last ingestlog.Position
	for _, r := range recs {
		p, err := l.Append(ctx, r)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		last = p
	}
	if len(recs) > 0 {
		if err := l.WaitDurable(ctx, last); err != nil {
			t.Fatalf("WaitDurable(%d): %v", last, err)
		}
	}
}

// readAll reads from pos to the durable end, copying each record.
func readAll(l *ingestlog.Log, from ingestlog.Position) ([][]byte, error) {
	r, err := l.NewReader(from)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out [][]byte
	want := from
	for {
		rec, pos, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if pos != want {
			return out, fmt.Errorf("record at position %d, want %d", pos, want)
		}
		want++
		out = append(out, bytes.Clone(rec))
	}
}

// checkRecords compares got with want, naming the first difference.
func checkRecords(t tb, got, want [][]byte, from ingestlog.Position) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record at position %d: got %d bytes %.20x…, want %d bytes %.20x…", from+ingestlog.Position(i), len(got[i]), got[i], len(want[i]), want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records from position %d, want %d", len(got), from, len(want))
	}
}

// records makes n records: mostly sensor-like JSON (compressible), some
// random bytes, some empty, sizes up to maxSize.
func records(rng *rand.Rand, n, maxSize int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = record(rng, maxSize)
	}
	return out
}

func record(rng *rand.Rand, maxSize int) []byte {
	var size int
	switch rng.IntN(10) {
	case 0:
		size = 0
	case 1, 2:
		size = rng.IntN(maxSize + 1)
	default:
		size = rng.IntN(min(maxSize, 300) + 1)
	}
	b := make([]byte, 0, size)
	if rng.IntN(4) == 0 {
		for len(b) < size {
			b = append(b, byte(rng.Uint32()))
		}
		return b
	}
	for len(b) < size {
		b = fmt.Appendf(b, `{"topic":"plant/line-%d/temp","device":"sensor-%04d","ts":%d,"temp":%.2f}`,
			rng.IntN(4), rng.IntN(50), 1767225600000+rng.Int64N(1e6), 15+rng.Float64()*20)
	}
	return b[:size]
}

func isCorrupt(err error) (*ingestlog.CorruptError, bool) {
	var ce *ingestlog.CorruptError
	if errors.As(err, &ce) && errors.Is(err, ingestlog.ErrCorrupt) {
		return ce, true
	}
	return nil, false
}

func memFS() *faultfs.FS { return faultfs.New(1) }

// zstdFrame compresses b as the log does: one zstd frame, no checksum.
func zstdFrame(b []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(false), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}
