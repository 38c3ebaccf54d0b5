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
		{"tiny cache", state.Options{CacheBytes: 1, KeyGroups: 1}, nil},
		{"max groups", state.Options{KeyGroups: state.MaxKeyGroups}, nil},
		{"negative cache", state.Options{CacheBytes: -1}, []string{"CacheBytes"}},
		{"too many groups", state.Options{KeyGroups: state.MaxKeyGroups + 1}, []string{"KeyGroups"}},
		{"negative groups", state.Options{KeyGroups: -3}, []string{"KeyGroups"}},
		{"file type bits", state.Options{FileMode: 0o600 | 1<<31}, []string{"FileMode"}},
		{"bad verify", state.Options{Verify: 7}, []string{"Verify"}},
		{"all at once", state.Options{CacheBytes: -1, KeyGroups: -1, Verify: -1}, []string{"CacheBytes", "KeyGroups", "Verify"}},
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
	if g := s.GroupOf(15); g != 1 {
		t.Fatalf("GroupOf(15) = %d with 7 groups, want 1", g)
	}
}

func TestLocked(t *testing.T) {
	s, path := tempStore(t, testOpts(4, 0))
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
	s, _ := tempStore(t, testOpts(4, 0))
	n := nsT(t, s, "ns")
	long := make([]byte, state.MaxKeySize+1)
	for _, tc := range []struct {
		name  string
		group int
		key   []byte
		want  error
	}{
		{"negative group", -1, []byte("k"), state.ErrGroup},
		{"group = KeyGroups", 4, []byte("k"), state.ErrGroup},
		{"empty key", 0, nil, state.ErrKey},
		{"long key", 0, long, state.ErrKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := n.Get(tc.group, tc.key); !errors.Is(err, tc.want) {
				t.Errorf("Get: %v, want %v", err, tc.want)
			}
			if err := n.Put(tc.group, tc.key, []byte("v")); !errors.Is(err, tc.want) {
				t.Errorf("Put: %v, want %v", err, tc.want)
			}
			if err := n.Delete(tc.group, tc.key); !errors.Is(err, tc.want) {
				t.Errorf("Delete: %v, want %v", err, tc.want)
			}
		})
	}
	if err := n.Scan(9, func(_, _ []byte) error { return nil }); !errors.Is(err, state.ErrGroup) {
		t.Errorf("Scan(9): %v, want ErrGroup", err)
	}
	for _, name := range []string{"", strings.Repeat("n", state.MaxNameSize+1), "bad\xff"} {
		if _, err := s.Namespace(name); !errors.Is(err, state.ErrName) {
			t.Errorf("Namespace(%q): %v, want ErrName", name, err)
		}
	}
	if _, err := s.BeginCommitGroups(2, 5); !errors.Is(err, state.ErrGroup) {
		t.Errorf("BeginCommitGroups(2, 5): %v, want ErrGroup", err)
	}
	if st := s.Stats(); st.Entries != 0 {
		t.Errorf("rejected calls left %d entries in the cache", st.Entries)
	}
}

// TestScanMerge checks Scan's merge of file and cache across many chunks:
// committed keys, some overwritten, some deleted, some added between them,
// some handed off and being written, in both namespaces.
func TestScanMerge(t *testing.T) {
	for _, cache := range []int64{1 << 30, 1} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			s, _ := tempStore(t, testOpts(2, cache))
			a, b := nsT(t, s, "a"), nsT(t, s, "b")
			want := map[string]string{}
			for i := range 1000 {
				k := fmt.Sprintf("k%05d", i*10)
				mustPut(t, a, 1, k, "disk")
				mustPut(t, b, 1, k, "other namespace")
				want[k] = "disk"
			}
			if _, err := s.Commit(nil); err != nil {
				t.Fatal(err)
			}
			change := func(i int) {
				switch k := fmt.Sprintf("k%05d", i*10); {
				case i%7 == 0:
					mustPut(t, a, 1, k, fmt.Sprint("dirty", i))
					want[k] = fmt.Sprint("dirty", i)
				case i%11 == 0:
					if err := a.Delete(1, []byte(k)); err != nil {
						t.Fatal(err)
					}
					delete(want, k)
				case i%13 == 0:
					k = fmt.Sprintf("k%05d", i*10+5)
					mustPut(t, a, 1, k, "new")
					want[k] = "new"
				}
			}
			for i := range 500 {
				change(i)
			}
			h, err := s.BeginCommit() // the first half is now in flight
			if err != nil {
				t.Fatal(err)
			}
			for i := 500; i < 1000; i++ {
				change(i)
			}
			mustPut(t, a, 1, "a-before-all", "x")
			mustPut(t, a, 1, "z-after-all", "y")
			want["a-before-all"], want["z-after-all"] = "x", "y"
			mustPut(t, a, 0, "k00010", "other group")

			check := func(stage string) {
				for _, prefix := range []string{"", "k", "k001", "k0099", "z", "nothing"} {
					if got, w := scanAll(t, a, 1, []byte(prefix)), sortedKV(want, prefix); !slices.Equal(got, w) {
						t.Fatalf("%s: ScanPrefix(%q): %d entries, want %d\n got %v\nwant %v", stage, prefix, len(got), len(w), head(got), head(w))
					}
				}
			}
			check("handoff pending")
			if _, err := h.Write(nil); err != nil {
				t.Fatal(err)
			}
			check("handoff written")
			if _, err := s.Commit(nil); err != nil {
				t.Fatal(err)
			}
			check("all committed")
		})
	}
}

func head(kvs []kv) []kv { return kvs[:min(len(kvs), 5)] }

// TestScanCallbacks: fn may read and write the store, including the group
// being scanned, and an error from fn stops the scan.
func TestScanCallbacks(t *testing.T) {
	s, _ := tempStore(t, testOpts(2, 1))
	n := nsT(t, s, "ns")
	for i := range 600 {
		mustPut(t, n, 0, fmt.Sprintf("k%04d", i), "v")
	}
	if _, err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	seen := 0
	err := n.Scan(0, func(k, v []byte) error {
		seen++
		if _, ok := mustGet(t, n, 0, string(k)); !ok {
			t.Fatalf("Get(%s) inside Scan: missing", k)
		}
		// Rewrite the key being visited.
		mustPut(t, n, 0, string(k), "rewritten")
		return nil
	})
	if err != nil || seen != 600 {
		t.Fatalf("Scan with writes in fn: %d seen, %v", seen, err)
	}
	stop := errors.New("stop")
	seen = 0
	err = n.Scan(0, func(k, v []byte) error {
		if seen++; seen == 300 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 300 {
		t.Fatalf("Scan stopped by fn: %d seen, %v", seen, err)
	}
}

func TestCommitFailureKeepsDirty(t *testing.T) {
	s, path := tempStore(t, testOpts(4, 1))
	n := nsT(t, s, "ns")
	mustPut(t, n, 0, "a", "1")
	mustPut(t, n, 3, "b", "2")
	boom := errors.New("disk on fire")
	st, err := s.Commit(func(tx *state.Tx) error { return boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "stay dirty") {
		t.Fatalf("Commit: %v, want the fn error and a note that entries stay dirty", err)
	}
	if st.Groups != 2 {
		t.Fatalf("stats of the failed commit: %+v", st)
	}
	if got := s.Stats(); got.DirtyBytes == 0 || got.InFlight != 0 {
		t.Fatalf("after a failed commit: %+v, want dirty entries and nothing in flight", got)
	}
	st, err = s.Commit(nil)
	if err != nil || st.Puts != 2 || st.Deletes != 0 || st.Bytes == 0 {
		t.Fatalf("retry: %+v, %v", st, err)
	}
	s.Close()
	s = openT(t, path, testOpts(4, 1))
	defer s.Close()
	n = nsT(t, s, "ns")
	if v, _ := mustGet(t, n, 3, "b"); v != "2" {
		t.Fatalf("b = %q after the retried commit", v)
	}
}

func TestUserPanicPassesThrough(t *testing.T) {
	s, _ := tempStore(t, testOpts(4, 0))
	n := nsT(t, s, "ns")
	mustPut(t, n, 0, "a", "1")
	func() {
		defer func() {
			if r := recover(); r != "user bug" {
				t.Fatalf("recovered %v, want the caller's own panic value", r)
			}
		}()
		s.Commit(func(*state.Tx) error { panic("user bug") })
	}()
	// The transaction rolled back, the entry is dirty again, and the store
	// works.
	st, err := s.Commit(nil)
	if err != nil || st.Puts != 1 {
		t.Fatalf("Commit after a panic in fn: %+v, %v", st, err)
	}
}

func TestHandoffLifecycle(t *testing.T) {
	s, _ := tempStore(t, testOpts(4, 0))
	n := nsT(t, s, "ns")
	for g := range 4 {
		mustPut(t, n, g, "k", fmt.Sprint(g))
	}
	lo, err := s.BeginCommitGroups(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	hi, err := s.BeginCommitGroups(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(nil); !errors.Is(err, state.ErrInFlight) {
		t.Fatalf("Commit with groups in flight: %v", err)
	}
	if err := lo.Join(hi); err != nil {
		t.Fatal(err)
	}
	if lo.Len() != 4 {
		t.Fatalf("joined handoff holds %d entries, want 4", lo.Len())
	}
	if _, err := hi.Write(nil); !errors.Is(err, state.ErrHandoffDone) {
		t.Fatalf("Write of a joined-away handoff: %v", err)
	}
	lo.Abort()
	if _, err := lo.Write(nil); !errors.Is(err, state.ErrHandoffDone) {
		t.Fatalf("Write after Abort: %v", err)
	}
	lo.Abort() // no-op
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("after Abort: %d groups in flight", st.InFlight)
	}
	st, err := s.Commit(nil)
	if err != nil || st.Puts != 4 || st.Groups != 4 {
		t.Fatalf("Commit after Abort: %+v, %v", st, err)
	}
	// An empty handoff still writes fn.
	st, err = s.Commit(func(tx *state.Tx) error {
		b, err := tx.Bucket("checkpoints")
		if err != nil {
			return err
		}
		return b.Put([]byte("n"), []byte("2"))
	})
	if err != nil || st.Groups != 0 {
		t.Fatalf("empty Commit: %+v, %v", st, err)
	}
}

func TestSystemBuckets(t *testing.T) {
	s, path := tempStore(t, testOpts(4, 0))
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
	s = openT(t, path, testOpts(4, 0))
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
	s, _ := tempStore(t, testOpts(4, 0))
	n := nsT(t, s, "ns")
	mustPut(t, n, 0, "k", "v")
	h, err := s.BeginCommit()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Close":  s.Close(),
		"Put":    n.Put(0, []byte("k"), nil),
		"Delete": n.Delete(0, []byte("k")),
		"Scan":   n.Scan(0, func(_, _ []byte) error { return nil }),
		"View":   s.View(func(*state.Tx) error { return nil }),
		"Update": s.Update(func(*state.Tx) error { return nil }),
	} {
		if !errors.Is(err, state.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, _, err := n.Get(0, []byte("k")); !errors.Is(err, state.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if _, err := h.Write(nil); !errors.Is(err, state.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if _, err := s.Namespace("x"); !errors.Is(err, state.ErrClosed) {
		t.Errorf("Namespace after Close: %v", err)
	}
}

// TestEviction: clean entries are evicted down to the budget; dirty ones
// never are, whatever the budget.
func TestEviction(t *testing.T) {
	const budget = 64 << 10
	s, _ := tempStore(t, testOpts(8, budget))
	n := nsT(t, s, "ns")
	const keys = 5000
	val := strings.Repeat("v", 50)
	for i := range keys {
		mustPut(t, n, i%8, fmt.Sprintf("key-%05d", i), val)
	}
	if st := s.Stats(); st.Entries != keys || st.Bytes <= budget || st.Evictions != 0 {
		t.Fatalf("all dirty: %+v, want all %d entries kept over budget", st, keys)
	}
	if _, err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Bytes > budget || st.DirtyBytes != 0 || st.Evictions == 0 {
		t.Fatalf("after commit: %+v, want within %d bytes", st, budget)
	}
	// Every key still reads back, most from the file.
	for i := range keys {
		if v, ok := mustGet(t, n, i%8, fmt.Sprintf("key-%05d", i)); !ok || v != val {
			t.Fatalf("key %d = %q, %v", i, v, ok)
		}
	}
	if st := s.Stats(); st.Bytes > budget+1024 || st.Misses < keys/2 {
		t.Fatalf("after reading everything back: %+v", st)
	}
}

// TestValueOwnership pins the contract on returned values: the store never
// writes into a value, so a slice from Get stays as it was after later
// Puts, commits and evictions.
func TestValueOwnership(t *testing.T) {
	s, _ := tempStore(t, testOpts(1, 1))
	n := nsT(t, s, "ns")
	mustPut(t, n, 0, "k", "first")
	v1, _, _ := n.Get(0, []byte("k"))
	mustPut(t, n, 0, "k", "second")
	s.Commit(nil)
	v2, _, _ := n.Get(0, []byte("k"))
	mustPut(t, n, 0, "k", "third")
	if string(v1) != "first" || string(v2) != "second" {
		t.Fatalf("earlier Get results changed: %q, %q", v1, v2)
	}
	// Put copies the key.
	key := []byte("mutable")
	mustPut(t, n, 0, string(key), "x")
	n.Put(0, key, []byte("y"))
	key[0] = 'M'
	if v, ok := mustGet(t, n, 0, "mutable"); !ok || v != "y" {
		t.Fatalf("Get(mutable) = %q, %v after the caller changed its key slice", v, ok)
	}
	// Empty values are values.
	mustPut(t, n, 0, "empty", "")
	s.Commit(nil)
	if v, ok := mustGet(t, n, 0, "empty"); !ok || v != "" {
		t.Fatalf("empty value: %q, %v", v, ok)
	}
}

// TestHotPathAllocs: a Put and a Get of a cached key allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	s, _ := tempStore(t, testOpts(8, 0))
	n := nsT(t, s, "ns")
	key, val := []byte("sensor-17"), []byte("0123456789abcdef")
	mustPut(t, n, 3, string(key), string(val))
	allocs := testing.AllocsPerRun(1000, func() {
		n.Put(3, key, val)
		n.Get(3, key)
	})
	if allocs != 0 {
		t.Fatalf("Put+Get of a cached key: %.1f allocations, want 0", allocs)
	}
}

func TestDeletePrefix(t *testing.T) {
	for _, cache := range []int64{1 << 30, 1} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			s, path := tempStore(t, testOpts(2, cache))
			n := nsT(t, s, "ns")
			for _, k := range []string{"a1", "a2", "a3", "b1"} {
				mustPut(t, n, 1, k, "disk")
			}
			mustPut(t, n, 0, "a1", "other group")
			if _, err := s.Commit(nil); err != nil {
				t.Fatal(err)
			}
			mustPut(t, n, 1, "a4", "dirty")
			if err := n.Delete(1, []byte("a2")); err != nil {
				t.Fatal(err)
			}
			got, err := n.DeletePrefix(1, []byte("a"))
			if err != nil || got != 3 {
				t.Fatalf("DeletePrefix(a) = %d, %v; want 3 (a1, a3, a4)", got, err)
			}
			want := []kv{{"b1", "disk"}}
			if got := scanAll(t, n, 1, nil); !slices.Equal(got, want) {
				t.Fatalf("after DeletePrefix: %v", got)
			}
			if _, err := s.Commit(nil); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = openT(t, path, testOpts(2, cache))
			defer s.Close()
			n = nsT(t, s, "ns")
			if got := scanAll(t, n, 1, nil); !slices.Equal(got, want) {
				t.Fatalf("after reopen: %v", got)
			}
			if v, ok := mustGet(t, n, 0, "a1"); !ok || v != "other group" {
				t.Fatalf("other group: %q, %v", v, ok)
			}
		})
	}
}
