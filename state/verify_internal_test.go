package state

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// smallFile returns the bytes of a small state file with a few system
// buckets and entries, for fuzz seeds.
func smallFile(t testing.TB, entries int) []byte {
	testPageSize = minPageSize
	defer func() { testPageSize = 0 }()
	path := filepath.Join(t.TempDir(), "seed.db")
	s, err := Open(path, Options{NoSync: true, KeyGroups: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error {
		for i := range entries {
			b, err := tx.Bucket(fmt.Sprintf("oplog/%d", i%4))
			if err != nil {
				return err
			}
			if err := b.Put(fmt.Appendf(nil, "key-%d", i), fmt.Appendf(nil, "value-%d", i)); err != nil {
				return err
			}
		}
		b, err := tx.Bucket("outbox")
		if err != nil {
			return err
		}
		return b.Put([]byte("1"), []byte("entry"))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// bbolt grows files ahead of use; only the pages below the high water
	// mark matter, and small inputs keep the fuzzer's minimization fast.
	m, err := chooseMeta(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return b[:m.pgid*uint64(m.pageSize)]
}

// FuzzVerifyFile runs the verifier on arbitrary files: it must not panic,
// hang or allocate without bound, and must return nil or an error of the
// ErrCorrupt or ErrFormat class. (That a file it passes also opens and reads
// back cleanly is TestCorruptFile's job: a real Open per input would make
// the fuzzer's minimization of these multi-kilobyte inputs crawl.)
func FuzzVerifyFile(f *testing.F) {
	f.Add(smallFile(f, 3))
	f.Add(smallFile(f, 40))
	f.Add([]byte("not a database"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mode := range []Verify{VerifyFull, VerifyQuick} {
			err := verifyFile(bytes.NewReader(b), int64(len(b)), mode)
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrFormat) {
				t.Fatalf("%s: error of neither class: %v", mode, err)
			}
		}
	})
}

func TestSmallFileVerifies(t *testing.T) {
	for _, n := range []int{0, 3, 40, 400} {
		b := smallFile(t, n)
		if err := verifyFile(bytes.NewReader(b), int64(len(b)), VerifyFull); err != nil {
			t.Fatalf("%d entries, %d bytes: %v", n, len(b), err)
		}
	}
}

// TestLayoutVersion1 writes a file as layout version 1 did, with operator
// state in a namespace bucket under state/: Open refuses it with ErrFormat
// under either verification, saying why. A version 2 file that has grown a
// bucket state is corrupt.
func TestLayoutVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(b *bolt.Bucket, seed uint32, k, v []byte) error {
		rec, crc := appendRecord(nil, seed, k, v)
		if err := b.Put(k, rec); err != nil {
			return err
		}
		d := digestOf(b.Sequence())
		d.add(crc)
		return b.SetSequence(d.seq())
	}
	err = db.Update(func(tx *bolt.Tx) error {
		mb, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := put(mb, metaSeed, metaKeyFormat, []byte{1}); err != nil {
			return err
		}
		if err := put(mb, metaSeed, metaKeyKeyGroups, encodeMetaKeyGroups(4)); err != nil {
			return err
		}
		sb, err := tx.CreateBucket([]byte("state"))
		if err != nil {
			return err
		}
		nb, err := sb.CreateBucket([]byte("window/x"))
		if err != nil {
			return err
		}
		gb, err := nb.CreateBucket([]byte{0, 1})
		if err != nil {
			return err
		}
		seed := crc32.Update(nameSeed('s', "window/x"), castagnoli, []byte{0, 1})
		if err := put(gb, seed, []byte("k"), []byte("v")); err != nil {
			return err
		}
		_, err = tx.CreateBucket(bucketSys)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, v := range []Verify{VerifyFull, VerifyQuick} {
		_, err := Open(path, Options{NoSync: true, Verify: v})
		if !errors.Is(err, ErrFormat) || errors.Is(err, ErrCorrupt) ||
			!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "namespaces") {
			t.Fatalf("%s: Open of a version 1 file: %v; want ErrFormat naming the file and the namespaces", v, err)
		}
	}

	// Version 2 with a bucket state added.
	path = filepath.Join(t.TempDir(), "v2.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if db, err = bolt.Open(path, 0o600, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("state"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "does not have") {
		t.Fatalf("Open of a version 2 file with a bucket state: %v; want ErrCorrupt", err)
	}
}
