package state_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// dump returns every system bucket's entries.
func dump(t testing.TB, s *state.Store) map[string][]kv {
	t.Helper()
	out := map[string][]kv{}
	err := s.View(func(tx *state.Tx) error {
		names, err := tx.Buckets()
		if err != nil {
			return err
		}
		if !slices.IsSorted(names) {
			return fmt.Errorf("Buckets %v: not sorted", names)
		}
		for _, name := range names {
			if out[name], err = bucketEntries(tx, name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriteToCopy: a copy written by a read transaction while Updates go
// on is a file Open verifies whole, and holds exactly what the
// transaction saw, none of the later writes.
func TestWriteToCopy(t *testing.T) {
	s, _ := tempStore(t, testOpts(4))
	put := func(bucket string, from, to int) {
		t.Helper()
		err := s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket(bucket)
			if err != nil {
				return err
			}
			for i := from; i < to; i++ {
				if err := b.Put(fmt.Appendf(nil, "k%05d", i), bytes.Repeat([]byte{byte(i)}, 100+i%300)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("a", 0, 2000)
	put("b", 0, 10)
	want := dump(t, s)
	copyPath := filepath.Join(t.TempDir(), "copy.db")
	err := s.View(func(tx *state.Tx) error {
		f, err := os.Create(copyPath)
		if err != nil {
			return err
		}
		defer f.Close()
		// Writes that commit while the copy is taken are not in it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			put("a", 2000, 3000)
			put("c", 0, 5)
		}()
		<-done
		n, err := tx.WriteTo(f)
		if err != nil {
			return err
		}
		if n != tx.Size() {
			return fmt.Errorf("WriteTo wrote %d bytes, Size says %d", n, tx.Size())
		}
		return f.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
	c := openT(t, copyPath, state.Options{NoSync: true, Verify: state.VerifyFull})
	defer c.Close()
	got := dump(t, c)
	if len(got) != len(want) {
		t.Fatalf("copy has buckets %d, want %d", len(got), len(want))
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("bucket %s: copy differs (%d entries, want %d)", name, len(got[name]), len(w))
		}
	}
	if n := len(dump(t, s)["a"]); n != 3000 {
		t.Fatalf("the store itself has %d entries in a, want 3000", n)
	}
}

// TestInUse: a state file an open Store holds is in use (flock locks
// belong to open files, so a second open in this process conflicts as
// another process's would); one nobody holds, or that does not exist, is
// not, and InUse leaves it unchanged.
func TestInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if busy, err := state.InUse(path); err != nil || busy {
		t.Fatalf("InUse of a missing file: %v, %v", busy, err)
	}
	s := openT(t, path, testOpts(1))
	if busy, err := state.InUse(path); err != nil || !busy {
		t.Fatalf("InUse of an open store's file: %v, %v; want true", busy, err)
	}
	s.Close()
	before, _ := os.ReadFile(path)
	if busy, err := state.InUse(path); err != nil || busy {
		t.Fatalf("InUse of a closed file: %v, %v", busy, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("InUse changed the file")
	}
}
