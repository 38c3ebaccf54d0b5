package state_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// testOpts are fast options for tests: no fsync, a small key group count.
func testOpts(groups int) state.Options {
	return state.Options{NoSync: true, KeyGroups: groups}
}

func openT(t testing.TB, path string, o state.Options) *state.Store {
	t.Helper()
	s, err := state.Open(path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s
}

func tempStore(t testing.TB, o state.Options) (*state.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path, o)
	t.Cleanup(func() { s.Close() })
	return s, path
}

type kv struct{ k, v string }

// readBucket returns a system bucket's entries in key order, through
// ForEach, checking Len on the way.
func readBucket(t testing.TB, s *state.Store, name string) []kv {
	t.Helper()
	var out []kv
	err := s.View(func(tx *state.Tx) error {
		var err error
		out, err = bucketEntries(tx, name)
		return err
	})
	if err != nil {
		t.Fatalf("read bucket %s: %v", name, err)
	}
	return out
}

// bucketEntries reads a system bucket through ForEach and checks Len and,
// for every entry, Get.
func bucketEntries(tx *state.Tx, name string) ([]kv, error) {
	b, err := tx.Bucket(name)
	if err != nil {
		return nil, err
	}
	var out []kv
	if err := b.ForEach(nil, func(k, v []byte) error {
		out = append(out, kv{string(k), string(v)})
		return nil
	}); err != nil {
		return nil, err
	}
	if len(out) != b.Len() {
		return nil, fmt.Errorf("bucket %s: %d entries, Len says %d", name, len(out), b.Len())
	}
	for _, e := range out {
		v, err := b.Get([]byte(e.k))
		if err != nil {
			return nil, err
		}
		if string(v) != e.v {
			return nil, fmt.Errorf("bucket %s: Get(%q) = %q, ForEach said %q", name, e.k, v, e.v)
		}
	}
	return out, nil
}
