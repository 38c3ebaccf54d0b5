package state_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// testOpts are fast options for tests: no fsync, small key group count.
func testOpts(groups int, cache int64) state.Options {
	return state.Options{NoSync: true, KeyGroups: groups, CacheBytes: cache}
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

func nsT(t testing.TB, s *state.Store, name string) *state.Namespace {
	t.Helper()
	n, err := s.Namespace(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type kv struct{ k, v string }

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// scanAll returns what ScanPrefix reports, checking order on the way.
func scanAll(t fataler, n *state.Namespace, group int, prefix []byte) []kv {
	t.Helper()
	var out []kv
	err := n.ScanPrefix(group, prefix, func(k, v []byte) error {
		if len(out) > 0 && bytes.Compare([]byte(out[len(out)-1].k), k) >= 0 {
			t.Fatalf("scan out of order: %q after %q", k, out[len(out)-1].k)
		}
		out = append(out, kv{string(k), string(v)})
		return nil
	})
	if err != nil {
		t.Fatalf("ScanPrefix(%d, %q): %v", group, prefix, err)
	}
	return out
}

func mustGet(t fataler, n *state.Namespace, group int, key string) (string, bool) {
	t.Helper()
	v, ok, err := n.Get(group, []byte(key))
	if err != nil {
		t.Fatalf("Get(%d, %q): %v", group, key, err)
	}
	return string(v), ok
}

func mustPut(t fataler, n *state.Namespace, group int, key, val string) {
	t.Helper()
	if err := n.Put(group, []byte(key), []byte(val)); err != nil {
		t.Fatalf("Put(%d, %q): %v", group, key, err)
	}
}

func sortedKV(m map[string]string, prefix string) []kv {
	var out []kv
	for k, v := range m {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			out = append(out, kv{k, v})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return bytes.Compare([]byte(a.k), []byte(b.k)) })
	return out
}
