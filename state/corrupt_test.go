package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/state"
)

// fileModel is everything a state file holds, as the API reports it.
type fileModel struct {
	state map[string][]kv // "ns/group" -> entries in key order
	sys   map[string][]kv // bucket -> entries in key order
}

func (a fileModel) equal(b fileModel) bool {
	return maps.EqualFunc(a.state, b.state, slices.Equal) && maps.EqualFunc(a.sys, b.sys, slices.Equal)
}

var (
	corruptNS     = []string{"window/t", "join/u"}
	corruptGroups = 8
)

// readModel reads the whole store through Scan and View; an error is
// returned as is (the callers check it is ErrCorrupt).
func readModel(s *state.Store) (fileModel, error) {
	m := fileModel{state: map[string][]kv{}, sys: map[string][]kv{}}
	for _, name := range corruptNS {
		n, err := s.Namespace(name)
		if err != nil {
			return m, err
		}
		for g := range corruptGroups {
			var got []kv
			err := n.Scan(g, func(k, v []byte) error {
				got = append(got, kv{string(k), string(v)})
				return nil
			})
			if err != nil {
				return m, err
			}
			// Get must agree with Scan (a sample of keys: every Get here
			// is a read transaction).
			for i, e := range got {
				if i%5 != 0 {
					continue
				}
				v, ok, err := n.Get(g, []byte(e.k))
				if err != nil {
					return m, err
				}
				if !ok || string(v) != e.v {
					return m, fmt.Errorf("Get(%s, %d, %q) = %q, %v; Scan said %q", name, g, e.k, v, ok, e.v)
				}
			}
			if len(got) > 0 {
				m.state[fmt.Sprintf("%s/%d", name, g)] = got
			}
		}
	}
	err := s.View(func(tx *state.Tx) error {
		for _, name := range []string{"outbox", "positions"} {
			b, err := tx.Bucket(name)
			if err != nil {
				return err
			}
			var got []kv
			if err := b.ForEach(nil, func(k, v []byte) error {
				got = append(got, kv{string(k), string(v)})
				return nil
			}); err != nil {
				return err
			}
			if len(got) != b.Len() {
				return fmt.Errorf("bucket %s: %d entries, Len says %d", name, len(got), b.Len())
			}
			if len(got) > 0 {
				m.sys[name] = got
			}
		}
		return nil
	})
	return m, err
}

// buildFile writes a state file through several commits (so that it has
// free pages, overflow pages, inline and non-inline buckets) and returns the
// models after the last two commits: a damaged newest meta page makes bbolt
// fall back to the one before, which is a legitimate outcome.
func buildFile(t *testing.T, path string) (last, prev fileModel) {
	t.Helper()
	s := openT(t, path, testOpts(corruptGroups, 1<<20))
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	ns := []*state.Namespace{nsT(t, s, corruptNS[0]), nsT(t, s, corruptNS[1])}
	var models []fileModel
	for round := range 4 {
		for i := range 400 {
			n := ns[rng.IntN(2)]
			g := rng.IntN(corruptGroups)
			if round == 0 && n == ns[1] && g%2 == 0 {
				g++ // leave some buckets small, so they stay inline
			}
			key := fmt.Sprintf("key-%04d", rng.IntN(300))
			if rng.IntN(5) == 0 {
				if err := n.Delete(g, []byte(key)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			size := 8 + rng.IntN(80)
			if i%97 == 0 {
				size = 3*4096 + rng.IntN(4096) // overflow pages
			}
			val := fmt.Appendf(nil, "r%d-i%d-", round, i)
			for len(val) < size {
				val = append(val, byte('a'+rng.IntN(26)))
			}
			mustPut(t, n, g, key, string(val))
		}
		_, err := s.Commit(func(tx *state.Tx) error {
			ob, err := tx.Bucket("outbox")
			if err != nil {
				return err
			}
			for i := range 30 {
				if err := ob.Put(fmt.Appendf(nil, "seq-%06d", round*30+i), fmt.Appendf(nil, "partial %d/%d", round, i)); err != nil {
					return err
				}
			}
			if round > 0 {
				for i := range 20 {
					if err := ob.Delete(fmt.Appendf(nil, "seq-%06d", (round-1)*30+i)); err != nil {
						return err
					}
				}
			}
			pb, err := tx.Bucket("positions")
			if err != nil {
				return err
			}
			return pb.Put([]byte("ingest"), fmt.Appendf(nil, "segment %d offset %d", round, round*1000))
		})
		if err != nil {
			t.Fatal(err)
		}
		m, err := readModel(s)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, m)
	}
	return models[len(models)-1], models[len(models)-2]
}

// TestCorruptFile damages a real file by truncating it at random offsets
// and flipping random bits, and requires that Open either fails with an
// error of the ErrCorrupt class or succeeds on a file that reads back,
// without error, as exactly the last or (bbolt's fallback when the newest
// meta page is damaged) the previous commit; and that nothing panics.
func TestCorruptFile(t *testing.T) {
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig.db")
	last, prev := buildFile(t, orig)
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	// A clean copy opens as the last commit.
	check := func(t *testing.T, name string, b []byte, verify state.Verify) (opened bool) {
		t.Helper()
		path := filepath.Join(dir, "damaged.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		o := testOpts(corruptGroups, 1<<20)
		o.Verify = verify
		s, err := state.Open(path, o)
		if err != nil {
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("%s: Open: %v, want an ErrCorrupt error", name, err)
			}
			return false
		}
		defer s.Close()
		got, err := readModel(s)
		if err != nil {
			t.Fatalf("%s: Open succeeded, then reading failed: %v", name, err)
		}
		if !got.equal(last) && !got.equal(prev) {
			t.Fatalf("%s: Open succeeded, but the file reads as neither of the last two commits", name)
		}
		// And it still takes a commit.
		n, _ := s.Namespace(corruptNS[0])
		if err := n.Put(0, []byte("after"), []byte("damage")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(nil); err != nil {
			t.Fatalf("%s: Commit after a successful Open: %v", name, err)
		}
		return true
	}
	if !check(t, "undamaged", data, state.VerifyFull) {
		t.Fatal("the undamaged file does not open")
	}

	rng := rand.New(rand.NewPCG(3, 4))
	ps := os.Getpagesize()
	t.Run("truncate", func(t *testing.T) {
		offsets := []int{0, 1, 15, ps - 1, ps, 2 * ps, 2*ps + 100, len(data) - ps, len(data) - 1}
		for range 150 {
			offsets = append(offsets, rng.IntN(len(data)))
		}
		for _, verify := range []state.Verify{state.VerifyFull, state.VerifyQuick} {
			rejected := 0
			for _, off := range offsets {
				if off <= 0 {
					// An empty file is a new store, not a damaged one.
					continue
				}
				if !check(t, fmt.Sprintf("truncated at %d (%s)", off, verify), data[:off], verify) {
					rejected++
				}
			}
			if rejected == 0 {
				t.Fatalf("%s: no truncation was detected", verify)
			}
		}
	})
	t.Run("flip", func(t *testing.T) {
		rejected, opened := 0, 0
		for i := range 500 {
			b := bytes.Clone(data)
			var where []string
			for range 1 + rng.IntN(3) {
				off, bit := rng.IntN(len(b)), rng.IntN(8)
				b[off] ^= 1 << bit
				where = append(where, fmt.Sprintf("page %d byte %d bit %d", off/ps, off%ps, bit))
			}
			if check(t, fmt.Sprintf("trial %d: flipped %s", i, strings.Join(where, ", ")), b, state.VerifyFull) {
				opened++
			} else {
				rejected++
			}
		}
		t.Logf("bit flips: %d files rejected, %d opened clean", rejected, opened)
	})
	t.Run("meta", func(t *testing.T) {
		// Flip a bit in each meta page in turn: bbolt falls back to the
		// other; damage both and Open must fail.
		for _, off := range []int{16 + 40, ps + 16 + 40} {
			b := bytes.Clone(data)
			b[off] ^= 1
			if !check(t, fmt.Sprintf("meta flip at %d", off), b, state.VerifyFull) {
				t.Fatalf("one damaged meta page: Open failed, want the other used")
			}
		}
		b := bytes.Clone(data)
		b[16+40] ^= 1
		b[ps+16+40] ^= 1
		if check(t, "both metas", b, state.VerifyFull) {
			t.Fatal("both meta pages damaged, but Open succeeded")
		}
	})
}

// pageOf returns the page number of the first occurrence of needle.
func pageOf(t *testing.T, data []byte, needle string) int {
	t.Helper()
	i := bytes.Index(data, []byte(needle))
	if i < 0 {
		t.Fatalf("%q not in the file", needle)
	}
	return i / os.Getpagesize()
}

// TestCorruptValue flips one byte of one stored value: a full verification
// refuses the file and names the key; a quick one opens it, and then Get and
// Scan of that group report ErrCorrupt while other groups read fine.
func TestCorruptValue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "v.db")
	s := openT(t, path, testOpts(4, 1))
	n := nsT(t, s, "ns")
	mustPut(t, n, 2, "victim", "the-value-to-damage")
	mustPut(t, n, 3, "bystander", "fine")
	if _, err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	data, _ := os.ReadFile(path)
	i := bytes.LastIndex(data, []byte("the-value-to-damage"))
	data[i+4] ^= 0x20
	os.WriteFile(path, data, 0o600)

	_, err := state.Open(path, testOpts(4, 1))
	if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), "76696374696d") {
		t.Fatalf("full verification: %v; want ErrCorrupt naming key 76696374696d (victim)", err)
	}
	o := testOpts(4, 1)
	o.Verify = state.VerifyQuick
	s = openT(t, path, o)
	defer s.Close()
	n = nsT(t, s, "ns")
	if _, _, err := n.Get(2, []byte("victim")); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Get of the damaged value: %v, want ErrCorrupt", err)
	}
	if err := n.Scan(2, func(_, _ []byte) error { return nil }); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Scan over the damaged value: %v, want ErrCorrupt", err)
	}
	if v, ok := mustGet(t, n, 3, "bystander"); !ok || v != "fine" {
		t.Fatalf("bystander = %q, %v", v, ok)
	}
}

// TestBboltPanicIsCorrupt damages a leaf page's type so that bbolt panics
// when a read reaches it (the quick verification does not look at tree
// pages): the panic must come back as an ErrCorrupt error, and the store
// must stay usable for reads elsewhere.
func TestBboltPanicIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.db")
	s := openT(t, path, testOpts(4, 1))
	n := nsT(t, s, "ns")
	// Enough entries that group 1's bucket has its own leaf pages.
	for i := range 400 {
		mustPut(t, n, 1, fmt.Sprintf("key-%04d", i), fmt.Sprintf("value-%04d-%s", i, strings.Repeat("x", 40)))
	}
	mustPut(t, n, 0, "other", "ok")
	if _, err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	data, _ := os.ReadFile(path)
	pg := pageOf(t, data, "value-0200-")
	ps := os.Getpagesize()
	data[pg*ps+8] = 0x10 // leaf -> freelist type
	os.WriteFile(path, data, 0o600)

	if _, err := state.Open(path, testOpts(4, 1)); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("full verification: %v, want ErrCorrupt", err)
	}
	o := testOpts(4, 1)
	o.Verify = state.VerifyQuick
	s = openT(t, path, o)
	defer s.Close()
	n = nsT(t, s, "ns")
	_, _, err := n.Get(1, []byte("key-0200"))
	if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Get through the damaged page: %v, want ErrCorrupt from a recovered panic", err)
	}
	if v, ok := mustGet(t, n, 0, "other"); !ok || v != "ok" {
		t.Fatalf("other group: %q, %v", v, ok)
	}
	// A commit that reaches the damaged page fails, keeps its entries
	// dirty, and poisons later writes.
	mustPut(t, n, 1, "key-0200", "new")
	if _, err := s.Commit(nil); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Commit through the damaged page: %v, want ErrCorrupt", err)
	}
	if v, _ := mustGet(t, n, 1, "key-0200"); v != "new" {
		t.Fatalf("the failed commit's entry reads %q, want new", v)
	}
	if err := s.Update(func(*state.Tx) error { return nil }); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Update after a bbolt panic in a write: %v, want ErrCorrupt", err)
	}
}

// TestBboltPanicInReadDoesNotPoison: a panic in a read leaves writes alone.
func TestBboltPanicInReadDoesNotPoison(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s := openT(t, path, testOpts(4, 1))
	n := nsT(t, s, "ns")
	for i := range 400 {
		mustPut(t, n, 1, fmt.Sprintf("key-%04d", i), fmt.Sprintf("value-%04d-%s", i, strings.Repeat("x", 40)))
	}
	if _, err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	data, _ := os.ReadFile(path)
	data[pageOf(t, data, "value-0200-")*os.Getpagesize()+8] = 0x10
	os.WriteFile(path, data, 0o600)
	o := testOpts(4, 1)
	o.Verify = state.VerifyQuick
	s = openT(t, path, o)
	defer s.Close()
	n = nsT(t, s, "ns")
	if _, _, err := n.Get(1, []byte("key-0200")); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Get: %v, want ErrCorrupt", err)
	}
	mustPut(t, n, 0, "other", "still ok")
	if _, err := s.Commit(nil); err != nil {
		t.Fatalf("Commit after a panic in a read: %v", err)
	}
}

// TestForeignFile: a bbolt file some other program wrote is ErrFormat, not
// corruption, and is left alone.
func TestForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "foreign.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("widgets"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, v := range []state.Verify{state.VerifyFull, state.VerifyQuick} {
		o := testOpts(4, 0)
		o.Verify = v
		_, err := state.Open(path, o)
		if !errors.Is(err, state.ErrFormat) || errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("%s: Open of a foreign bbolt file: %v, want ErrFormat", v, err)
		}
	}
	// Not bbolt at all.
	junk := filepath.Join(t.TempDir(), "junk.db")
	os.WriteFile(junk, bytes.Repeat([]byte("not a database "), 1000), 0o600)
	if _, err := state.Open(junk, testOpts(4, 0)); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Open of junk: %v, want ErrCorrupt", err)
	}
}
