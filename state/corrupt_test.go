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

// fileModel is everything a state file holds, as the API reports it:
// bucket -> entries in key order.
type fileModel map[string][]kv

func (a fileModel) equal(b fileModel) bool { return maps.EqualFunc(a, b, slices.Equal) }

// corruptBuckets are the system buckets buildFile writes: two that grow
// large (like the edge's op records and bases) and two small ones.
var corruptBuckets = []string{"oplog/t", "base/u", "outbox", "positions"}

// readModel reads every bucket through ForEach, Get and Len; an error is
// returned as is (the callers check it is ErrCorrupt).
func readModel(s *state.Store) (fileModel, error) {
	m := fileModel{}
	err := s.View(func(tx *state.Tx) error {
		for _, name := range corruptBuckets {
			got, err := bucketEntries(tx, name)
			if err != nil {
				return err
			}
			if len(got) > 0 {
				m[name] = got
			}
		}
		return nil
	})
	return m, err
}

// buildFile writes a state file through several Updates (so that it has
// free pages, overflow pages, inline and non-inline buckets) and returns the
// models after the last two: a damaged newest meta page makes bbolt fall
// back to the one before, which is a legitimate outcome.
func buildFile(t *testing.T, path string) (last, prev fileModel) {
	t.Helper()
	s := openT(t, path, testOpts(8))
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var models []fileModel
	for round := range 4 {
		err := s.Update(func(tx *state.Tx) error {
			big := make([]*state.Bucket, 2)
			for i := range big {
				var err error
				if big[i], err = tx.Bucket(corruptBuckets[i]); err != nil {
					return err
				}
			}
			for i := range 400 {
				b := big[rng.IntN(2)]
				key := fmt.Appendf(nil, "key-%04d", rng.IntN(300))
				if rng.IntN(5) == 0 {
					if err := b.Delete(key); err != nil {
						return err
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
				if err := b.Put(key, val); err != nil {
					return err
				}
			}
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

// putT writes key=val into a system bucket in its own Update.
func putT(s *state.Store, bucket, key, val string) error {
	return s.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte(val))
	})
}

// getT reads key from a system bucket.
func getT(s *state.Store, bucket, key string) (string, error) {
	var v []byte
	err := s.View(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		v, err = b.Get([]byte(key))
		return err
	})
	return string(v), err
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
		o := testOpts(8)
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
		// And it still takes an Update.
		if err := putT(s, "outbox", "after", "damage"); err != nil {
			t.Fatalf("%s: Update after a successful Open: %v", name, err)
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
// refuses the file, naming the file, bucket and key; a quick one opens it,
// and then reads of that bucket report ErrCorrupt while other buckets read
// fine.
func TestCorruptValue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "v.db")
	s := openT(t, path, testOpts(4))
	if err := putT(s, "a", "victim", "the-value-to-damage"); err != nil {
		t.Fatal(err)
	}
	if err := putT(s, "b", "bystander", "fine"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	data, _ := os.ReadFile(path)
	i := bytes.LastIndex(data, []byte("the-value-to-damage"))
	data[i+4] ^= 0x20
	os.WriteFile(path, data, 0o600)

	_, err := state.Open(path, testOpts(4))
	if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), "76696374696d") ||
		!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "sys/a") {
		t.Fatalf("full verification: %v; want ErrCorrupt naming %s, bucket sys/a and key 76696374696d (victim)", err, path)
	}
	o := testOpts(4)
	o.Verify = state.VerifyQuick
	s = openT(t, path, o)
	defer s.Close()
	if _, err := getT(s, "a", "victim"); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Get of the damaged value: %v, want ErrCorrupt", err)
	}
	err = s.View(func(tx *state.Tx) error {
		b, err := tx.Bucket("a")
		if err != nil {
			return err
		}
		return b.ForEach(nil, func(_, _ []byte) error { return nil })
	})
	if !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("ForEach over the damaged value: %v, want ErrCorrupt", err)
	}
	if v, err := getT(s, "b", "bystander"); err != nil || v != "fine" {
		t.Fatalf("bystander = %q, %v", v, err)
	}
}

// damagedLeaf writes a bucket big enough to have its own leaf pages and a
// small one, then turns the type of the leaf holding key-0200 into a
// freelist page's, so that bbolt panics when a read reaches it (a quick
// verification does not look at tree pages).
func damagedLeaf(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.db")
	s := openT(t, path, testOpts(4))
	err := s.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket("big")
		if err != nil {
			return err
		}
		for i := range 400 {
			if err := b.Put(fmt.Appendf(nil, "key-%04d", i), fmt.Appendf(nil, "value-%04d-%s", i, strings.Repeat("x", 40))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := putT(s, "small", "other", "ok"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	data, _ := os.ReadFile(path)
	data[pageOf(t, data, "value-0200-")*os.Getpagesize()+8] = 0x10 // leaf -> freelist type
	os.WriteFile(path, data, 0o600)
	return path
}

// TestBboltPanicIsCorrupt: the panic of bbolt on a damaged page comes back
// as an ErrCorrupt error, the store stays usable for reads elsewhere, and
// a write that panicked poisons later writes.
func TestBboltPanicIsCorrupt(t *testing.T) {
	path := damagedLeaf(t)
	if _, err := state.Open(path, testOpts(4)); !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("full verification: %v, want ErrCorrupt naming %s", err, path)
	}
	o := testOpts(4)
	o.Verify = state.VerifyQuick
	s := openT(t, path, o)
	defer s.Close()
	_, err := getT(s, "big", "key-0200")
	if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Get through the damaged page: %v, want ErrCorrupt from a recovered panic", err)
	}
	if v, err := getT(s, "small", "other"); err != nil || v != "ok" {
		t.Fatalf("other bucket: %q, %v", v, err)
	}
	if err := putT(s, "big", "key-0200", "new"); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Update through the damaged page: %v, want ErrCorrupt", err)
	}
	if err := s.Update(func(*state.Tx) error { return nil }); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Update after a bbolt panic in a write: %v, want ErrCorrupt", err)
	}
}

// TestBboltPanicInReadDoesNotPoison: a panic in a read leaves writes alone.
func TestBboltPanicInReadDoesNotPoison(t *testing.T) {
	path := damagedLeaf(t)
	o := testOpts(4)
	o.Verify = state.VerifyQuick
	s := openT(t, path, o)
	defer s.Close()
	if _, err := getT(s, "big", "key-0200"); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Get: %v, want ErrCorrupt", err)
	}
	if err := putT(s, "small", "other", "still ok"); err != nil {
		t.Fatalf("Update after a panic in a read: %v", err)
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
		o := testOpts(4)
		o.Verify = v
		_, err := state.Open(path, o)
		if !errors.Is(err, state.ErrFormat) || errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("%s: Open of a foreign bbolt file: %v, want ErrFormat", v, err)
		}
	}
	// Not bbolt at all.
	junk := filepath.Join(t.TempDir(), "junk.db")
	os.WriteFile(junk, bytes.Repeat([]byte("not a database "), 1000), 0o600)
	if _, err := state.Open(junk, testOpts(4)); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("Open of junk: %v, want ErrCorrupt", err)
	}
}
