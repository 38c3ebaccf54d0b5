package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
