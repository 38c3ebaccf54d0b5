package state_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// fillAndEmpty writes n values of size bytes to bucket "out" of a new
// store at path and deletes all but every keep-th, the way an outage's
// outbox fills and the uplink empties it, and closes the store.
func fillAndEmpty(t *testing.T, path string, n, size, keep int) {
	t.Helper()
	s := openT(t, path, testOpts(4))
	defer s.Close()
	for lo := 0; lo < n; lo += 1000 {
		if err := s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("out")
			if err != nil {
				return err
			}
			for i := lo; i < min(lo+1000, n); i++ {
				v := make([]byte, size)
				binary.BigEndian.PutUint64(v, uint64(i))
				if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket("out")
		if err != nil {
			return err
		}
		for i := range n {
			if i%keep != 0 {
				if err := b.Delete(binary.BigEndian.AppendUint64(nil, uint64(i))); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// allocated is the disk the file at path takes: its blocks.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestCompactAtOpen: a file mostly free pages is rewritten at Open with
// CompactFree, smaller, with every entry and the bucket's count intact and
// verified; an earlier copy's remains are removed; a file below the
// fraction, or opened without it, is left as it is.
func TestCompactAtOpen(t *testing.T) {
	const n, size, keep = 20000, 200, 10
	path := filepath.Join(t.TempDir(), "state.db")
	fillAndEmpty(t, path, n, size, keep)
	before := fileSize(t, path)
	if err := os.WriteFile(path+".compact", []byte("a crashed compaction's remains"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Without CompactFree: as it was.
	s := openT(t, path, testOpts(4))
	if c := s.Compaction(); c.Before != 0 || c.Err != nil {
		t.Fatalf("compacted without CompactFree: %+v", c)
	}
	s.Close()
	if got := fileSize(t, path); got != before {
		t.Fatalf("the file went from %d to %d bytes without CompactFree", before, got)
	}

	// Above the fraction asked for: as it was (90 % of it is free).
	o := testOpts(4)
	o.CompactFree = 0.95
	s = openT(t, path, o)
	if c := s.Compaction(); c.Before != 0 {
		t.Fatalf("compacted a file 90 %% free at CompactFree 0.95: %+v", c)
	}
	s.Close()

	o.CompactFree = 0.5
	s = openT(t, path, o)
	defer s.Close()
	c := s.Compaction()
	if c.Err != nil || c.Before < n*size || c.After > c.Before/4 {
		t.Fatalf("compaction %+v of a file of %d bytes of values, a tenth of them left", c, n*size)
	}
	if got := allocated(t, path); got > c.After+64<<10 {
		t.Fatalf("the compacted file takes %d bytes of disk, for %d bytes of pages", got, c.After)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the copy's remains are still there: %v", err)
	}
	got := 0
	if err := s.View(func(tx *state.Tx) error {
		b, err := tx.Bucket("out")
		if err != nil {
			return err
		}
		if b.Len() != n/keep {
			t.Errorf("the bucket counts %d entries, want %d", b.Len(), n/keep)
		}
		return b.ForEach(nil, func(k, v []byte) error {
			i := binary.BigEndian.Uint64(k)
			if i%keep != 0 || len(v) != size || binary.BigEndian.Uint64(v) != i {
				t.Errorf("entry %d: %d bytes, %x", i, len(v), v[:8])
			}
			got++
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if got != n/keep {
		t.Fatalf("read %d entries back, want %d", got, n/keep)
	}
	// The compacted file takes writes and reopens verified.
	if err := s.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket("out")
		if err != nil {
			return err
		}
		return b.Put([]byte("after"), []byte("compaction"))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, path, testOpts(4))
	s.Close()
}
