package state_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/state"
)

// fillOutbox writes 4,000 entries of value (12 MB of 3,000-byte values)
// to the outbox of a new store, and returns it and its file.
func fillOutbox(t *testing.T, value []byte) (*state.Store, string) {
	t.Helper()
	s, path := tempStore(t, testOpts(4))
	for batch := range 8 {
		err := s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			for i := range 500 {
				if err := b.Put(fmt.Appendf(nil, "%02d-%04d", batch, i), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return s, path
}

func TestReleasePages(t *testing.T) {
	value := bytes.Repeat([]byte("x"), 3000)
	s, path := fillOutbox(t, value)
	readAll := func() {
		n := 0
		err := s.View(func(tx *state.Tx) error {
			b, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			return b.ForEach(nil, func(_, v []byte) error {
				if !bytes.Equal(v, value) {
					return fmt.Errorf("value changed")
				}
				n++
				return nil
			})
		})
		if err != nil || n != 4000 {
			t.Fatalf("read %d entries: %v", n, err)
		}
	}
	readAll()
	before := testproc.MappedKiB(t, path)
	if before < 8000 {
		t.Fatalf("reading 12 MB mapped only %d KiB of the file: the test no longer measures anything", before)
	}
	if err := s.ReleasePages(); err != nil {
		t.Fatal(err)
	}
	if after := testproc.MappedKiB(t, path); after > before/10 {
		t.Fatalf("resident after ReleasePages: %d KiB (before: %d KiB)", after, before)
	}
	readAll() // the data is still there, read back through the mapping
}

// TestReleaseOver reads 12 MB of values in one read transaction, asking
// for a release over a 2 MiB budget as it goes: the file's pages this
// process has mapped stay near the budget all along, where the same read
// without it maps most of the file (TestReleasePages).
func TestReleaseOver(t *testing.T) {
	value := bytes.Repeat([]byte("y"), 3000)
	s, path := fillOutbox(t, value)
	if err := s.ReleasePages(); err != nil {
		t.Fatal(err)
	}
	const budget = 2 << 20
	peak, n := 0, 0
	err := s.View(func(tx *state.Tx) error {
		b, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		return b.ForEach(nil, func(_, v []byte) error {
			if !bytes.Equal(v, value) {
				return fmt.Errorf("value changed")
			}
			if n++; n%16 == 0 {
				if err := tx.ReleaseOver(budget); err != nil {
					return err
				}
			}
			if n%200 == 0 {
				peak = max(peak, testproc.MappedKiB(t, path))
			}
			return nil
		})
	})
	if err != nil || n != 4000 {
		t.Fatalf("read %d entries: %v", n, err)
	}
	// The budget counts every file page the process maps (its binary's
	// too), checked every 48 KB of values: 4 MiB is the budget and room.
	if peak > 4<<10 {
		t.Fatalf("read 12 MB with a release over %d KiB: %d KiB of the file mapped at the peak", budget>>10, peak)
	}
	t.Logf("peak %d KiB of the file mapped", peak)
}
