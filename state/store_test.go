package state_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/state"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    state.Options
		want []string // substrings, one per problem
	}{
		{"zero", state.Options{}, nil},
		{"one group", state.Options{KeyGroups: 1}, nil},
		{"max groups", state.Options{KeyGroups: state.MaxKeyGroups}, nil},
		{"negative mmap", state.Options{MmapBytes: -1}, []string{"MmapBytes"}},
		{"too many groups", state.Options{KeyGroups: state.MaxKeyGroups + 1}, []string{"KeyGroups"}},
		{"negative groups", state.Options{KeyGroups: -3}, []string{"KeyGroups"}},
		{"file type bits", state.Options{FileMode: 0o600 | 1<<31}, []string{"FileMode"}},
		{"bad verify", state.Options{Verify: 7}, []string{"Verify"}},
		{"all at once", state.Options{MmapBytes: -1, KeyGroups: -1, Verify: -1}, []string{"MmapBytes", "KeyGroups", "Verify"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, state.ErrOptions) {
				t.Fatalf("Validate: %v, want ErrOptions", err)
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tc.want) {
				t.Fatalf("Validate reported %d problems, want %d: %v", n, len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v, want mention of %s", err, w)
				}
			}
		})
	}
}

func TestOpenKeyGroups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kg.db")
	s := openT(t, path, state.Options{NoSync: true})
	if s.KeyGroups() != state.DefaultKeyGroups {
		t.Fatalf("new file: %d key groups, want %d", s.KeyGroups(), state.DefaultKeyGroups)
	}
	s.Close()
	s = openT(t, path, state.Options{NoSync: true, KeyGroups: state.DefaultKeyGroups})
	s.Close()
	_, err := state.Open(path, state.Options{NoSync: true, KeyGroups: 64})
	if !errors.Is(err, state.ErrKeyGroups) || !strings.Contains(err.Error(), "128") {
		t.Fatalf("Open with another key group count: %v, want ErrKeyGroups naming 128", err)
	}
	path2 := filepath.Join(t.TempDir(), "kg2.db")
	s = openT(t, path2, state.Options{NoSync: true, KeyGroups: 7})
	s.Close()
	s = openT(t, path2, state.Options{NoSync: true})
	defer s.Close()
	if s.KeyGroups() != 7 {
		t.Fatalf("reopen with KeyGroups 0: %d, want the file's 7", s.KeyGroups())
	}
	if s.Path() != path2 {
		t.Fatalf("Path() = %q, want %q", s.Path(), path2)
	}
}

func TestLocked(t *testing.T) {
	s, path := tempStore(t, testOpts(4))
	_ = s
	start := time.Now()
	_, err := state.Open(path, state.Options{Timeout: 100 * time.Millisecond})
	if !errors.Is(err, state.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second Open took %v with a 100ms timeout", d)
	}
}

func TestBadArguments(t *testing.T) {
	s, _ := tempStore(t, testOpts(4))
	long := make([]byte, state.MaxKeySize+1)
	err := s.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket("b")
		if err != nil {
			return err
		}
		for _, key := range [][]byte{nil, {}, long} {
			if err := b.Put(key, []byte("v")); !errors.Is(err, state.ErrKey) {
				t.Errorf("Put(key of %d bytes): %v, want ErrKey", len(key), err)
			}
			if err := b.Delete(key); !errors.Is(err, state.ErrKey) {
				t.Errorf("Delete(key of %d bytes): %v, want ErrKey", len(key), err)
			}
		}
		for _, name := range []string{"", strings.Repeat("n", state.MaxNameSize+1), "bad\xff"} {
			if _, err := tx.Bucket(name); !errors.Is(err, state.ErrName) {
				t.Errorf("Bucket(%q): %v, want ErrName", name, err)
			}
		}
		if b.Len() != 0 {
			t.Errorf("rejected calls left %d keys", b.Len())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpdateFailureRollsBack: an Update whose fn fails writes nothing.
func TestUpdateFailureRollsBack(t *testing.T) {
	s, path := tempStore(t, testOpts(4))
	put := func(key, val string) func(tx *state.Tx) error {
		return func(tx *state.Tx) error {
			b, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			return b.Put([]byte(key), []byte(val))
		}
	}
	if err := s.Update(put("a", "1")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk on fire")
	err := s.Update(func(tx *state.Tx) error {
		if err := put("a", "2")(tx); err != nil {
			return err
		}
		if err := put("b", "3")(tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update: %v, want the fn error", err)
	}
	s.Close()
	s = openT(t, path, testOpts(4))
	defer s.Close()
	if got := readBucket(t, s, "outbox"); !slices.Equal(got, []kv{{"a", "1"}}) {
		t.Fatalf("after a failed Update: %v, want only a=1", got)
	}
}

func TestUserPanicPassesThrough(t *testing.T) {
	s, _ := tempStore(t, testOpts(4))
	func() {
		defer func() {
			if r := recover(); r != "user bug" {
				t.Fatalf("recovered %v, want the caller's own panic value", r)
			}
		}()
		s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			b.Put([]byte("k"), []byte("v"))
			panic("user bug")
		})
	}()
	// Also from inside ForEach, whose cursor steps are guarded for bbolt's
	// own panics.
	func() {
		defer func() {
			if r := recover(); r != "bug in ForEach" {
				t.Fatalf("recovered %v, want the caller's own panic value", r)
			}
		}()
		s.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("other")
			if err != nil {
				return err
			}
			if err := b.Put([]byte("k"), []byte("v")); err != nil {
				return err
			}
			return b.ForEach(nil, func(_, _ []byte) error { panic("bug in ForEach") })
		})
	}()
	// The transactions rolled back, and the store works (a caller's panic
	// does not poison it).
	if got := readBucket(t, s, "outbox"); len(got) != 0 {
		t.Fatalf("after a panic in fn: %v, want nothing written", got)
	}
	if err := s.Update(func(tx *state.Tx) error { _, err := tx.Bucket("outbox"); return err }); err != nil {
		t.Fatalf("Update after a panic in fn: %v", err)
	}
}

func TestSystemBuckets(t *testing.T) {
	s, path := tempStore(t, testOpts(4))
	err := s.Update(func(tx *state.Tx) error {
		if !tx.Writable() {
			t.Error("Update's Tx is not writable")
		}
		b, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		for i := range 10 {
			if err := b.Put(fmt.Appendf(nil, "%03d", i), fmt.Appendf(nil, "entry %d", i)); err != nil {
				return err
			}
		}
		if err := b.Put([]byte("005"), []byte("replaced")); err != nil {
			return err
		}
		if err := b.Delete([]byte("000")); err != nil {
			return err
		}
		if err := b.Delete([]byte("absent")); err != nil {
			return err
		}
		if b.Len() != 9 {
			t.Errorf("Len = %d, want 9", b.Len())
		}
		if _, err := tx.Bucket(""); !errors.Is(err, state.ErrName) {
			t.Errorf("Bucket(\"\"): %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, path, testOpts(4))
	defer s.Close()
	err = s.View(func(tx *state.Tx) error {
		b, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		if v, err := b.Get([]byte("005")); err != nil || string(v) != "replaced" {
			t.Errorf("Get(005) = %q, %v", v, err)
		}
		var keys []string
		if err := b.ForEach([]byte("007"), func(k, v []byte) error {
			keys = append(keys, string(k))
			return nil
		}); err != nil {
			return err
		}
		if !slices.Equal(keys, []string{"007", "008", "009"}) {
			t.Errorf("ForEach from 007: %v", keys)
		}
		if err := b.Put([]byte("x"), []byte("y")); !errors.Is(err, state.ErrReadOnly) {
			t.Errorf("Put in View: %v, want ErrReadOnly", err)
		}
		empty, err := tx.Bucket("never-written")
		if err != nil {
			return err
		}
		if v, err := empty.Get([]byte("k")); v != nil || err != nil || empty.Len() != 0 {
			t.Errorf("absent bucket: %q, %v, len %d", v, err, empty.Len())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClosed(t *testing.T) {
	s, _ := tempStore(t, testOpts(4))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Close":  s.Close(),
		"View":   s.View(func(*state.Tx) error { return nil }),
		"Update": s.Update(func(*state.Tx) error { return nil }),
	} {
		if !errors.Is(err, state.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}
