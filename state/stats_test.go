package state_test

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// TestWriteStats: every commit counts, with at least its meta page and a
// changed page; the freelist is part of the bytes; the file length is
// the file's.
func TestWriteStats(t *testing.T) {
	s, path := tempStore(t, testOpts(4))
	before := s.WriteStats()
	if before.Commits == 0 || before.Bytes == 0 {
		t.Fatalf("Open's own commit not counted: %+v", before)
	}
	for i := range 3 {
		if err := s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("b")
			if err != nil {
				return err
			}
			return b.Put([]byte{byte(i)}, make([]byte, 100))
		}); err != nil {
			t.Fatal(err)
		}
	}
	after := s.WriteStats()
	ps := int64(os.Getpagesize())
	if after.Commits != before.Commits+3 || after.Bytes-before.Bytes < 3*2*ps {
		t.Fatalf("3 commits: %+v, then %+v", before, after)
	}
	if after.FreelistBytes <= before.FreelistBytes || after.FreelistBytes >= after.Bytes {
		t.Fatalf("freelist bytes %d of %d", after.FreelistBytes, after.Bytes)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.FileBytes != fi.Size() {
		t.Fatalf("FileBytes %d, the file has %d", after.FileBytes, fi.Size())
	}
}

// TestFillSequential: keys added in order to a bucket told so fill its
// pages: the commits write, and the file grows by, well under the half-full
// pages of bbolt's default split.
func TestFillSequential(t *testing.T) {
	grow := func(sequential bool) state.WriteStats {
		s, _ := tempStore(t, testOpts(4))
		seq := uint64(0)
		for range 20 {
			if err := s.Update(func(tx *state.Tx) error {
				b, err := tx.Bucket("outbox")
				if err != nil {
					return err
				}
				if sequential {
					b.FillSequential()
				}
				for range 500 {
					seq++
					if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), make([]byte, 40)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return s.WriteStats()
	}
	half, full := grow(false), grow(true)
	if full.Bytes*10 > half.Bytes*8 || full.FileBytes >= half.FileBytes {
		t.Fatalf("sequential fill wrote %d bytes (file %d), the default %d (file %d)", full.Bytes, full.FileBytes, half.Bytes, half.FileBytes)
	}
	t.Logf("sequential fill wrote %d bytes (file %d), the default %d (file %d)", full.Bytes, full.FileBytes, half.Bytes, half.FileBytes)
}

// TestDataBytes: what the file holds grows with the values put and falls
// when they are deleted, though the file keeps its length: its free pages
// are room for what comes next.
func TestDataBytes(t *testing.T) {
	s, _ := tempStore(t, testOpts(4))
	put := func(del bool) {
		t.Helper()
		if err := s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("b")
			if err != nil {
				return err
			}
			for i := range 256 {
				var k [8]byte
				binary.BigEndian.PutUint64(k[:], uint64(i))
				if del {
					err = b.Delete(k[:])
				} else {
					err = b.Put(k[:], make([]byte, 4096))
				}
				if err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	empty := s.WriteStats()
	put(false)
	full := s.WriteStats()
	if grew := full.DataBytes - empty.DataBytes; grew < 1<<20 || full.DataBytes > full.FileBytes {
		t.Fatalf("1 MiB of values put: data %d -> %d bytes (file %d)", empty.DataBytes, full.DataBytes, full.FileBytes)
	}
	put(true)
	put(true) // a second commit: the pages the first freed are free now, not pending
	gone := s.WriteStats()
	if gone.DataBytes-empty.DataBytes > 64<<10 || gone.FileBytes < full.FileBytes {
		t.Fatalf("all deleted: data %d bytes (%d empty, %d full), file %d bytes (%d full)",
			gone.DataBytes, empty.DataBytes, full.DataBytes, gone.FileBytes, full.FileBytes)
	}
}
