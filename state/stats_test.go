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
