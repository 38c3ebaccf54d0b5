package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Store is one verified bbolt file of system buckets. See the package
// documentation for the model and the concurrency rules.
type Store struct {
	path   string
	db     *bolt.DB
	groups int

	closed atomic.Bool
	// poisoned holds the first error from a bbolt panic in a write
	// transaction. bbolt's in-memory state may be inconsistent after one,
	// so later writes fail fast instead of adding to a damaged file.
	poisoned atomic.Pointer[error]

	wc         writeCounters // stats.go
	compaction Compaction    // compact.go
	// mappedBase is the process's file-backed resident bytes after the
	// last ReleasePages (Tx.ReleaseOver).
	mappedBase atomic.Int64
}

// Open opens the state file at path, creating it if it does not exist, and
// verifies it as opts.Verify says. A damaged file gives an error wrapping
// ErrCorrupt; Open never panics on one.
func Open(path string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	o := opts.EnsureDefaults()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, o.FileMode)
	if err != nil {
		return nil, fmt.Errorf("state: open: %w", err)
	}
	if err := lockFile(f, o.Timeout); err != nil {
		f.Close()
		return nil, fmt.Errorf("state: open %s: lock: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state: open: %w", err)
	}
	if err := verifyFile(f, fi.Size(), o.Verify); err != nil {
		f.Close()
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	db, err := openBolt(path, f, o)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	s := &Store{path: path, db: db}
	if s.groups, err = s.initLayout(o.KeyGroups); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	if o.CompactFree > 0 {
		return s.compactIfFree(o)
	}
	return s, nil
}

// testPageSize, when not zero, is the page size of new files: tests use
// small pages to make small files (fuzz seeds). Zero is the OS page size.
var testPageSize int

// openBolt hands the verified, locked file f to bbolt. A panic inside bbolt
// (a page the verification did not cover, with VerifyQuick) becomes an
// ErrCorrupt error; the file is closed, but the mapping bbolt made before it
// panicked is leaked, as bbolt gives no handle to unmap it.
func openBolt(path string, f *os.File, o Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f.Close()
			db, err = nil, corruptf("bbolt panicked opening the file: %v", r)
		}
	}()
	db, err = bolt.Open(path, o.FileMode, &bolt.Options{
		// The file is already locked (lockFile); bbolt's own flock on the
		// same descriptor succeeds at once.
		Timeout:         o.Timeout,
		NoSync:          o.NoSync,
		FreelistType:    bolt.FreelistMapType,
		PageSize:        testPageSize,
		InitialMmapSize: o.MmapBytes,
		OpenFile: func(string, int, os.FileMode) (*os.File, error) {
			return f, nil
		},
	})
	if err != nil {
		// bbolt closes f on its error paths.
		if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
			return nil, corruptf("bbolt: %v", err)
		}
		return nil, err
	}
	return db, nil
}

// initLayout creates the top-level buckets of a new file, or checks those of
// an existing one, and returns the key group count.
func (s *Store) initLayout(want int) (groups int, err error) {
	err = s.update("open", func(tx *bolt.Tx) error {
		mb := tx.Bucket(bucketMeta)
		if mb == nil {
			if k, _ := tx.Cursor().First(); k != nil {
				return fmt.Errorf("%w: a bbolt file without this package's meta bucket (first bucket %q)", ErrFormat, k)
			}
			groups = want
			if groups == 0 {
				groups = DefaultKeyGroups
			}
			return writeMeta(tx, groups)
		}
		format, err := readMetaRecord(mb, metaKeyFormat)
		if err != nil {
			return err
		}
		v, err := decodeMetaFormat(format)
		if err != nil {
			return corruptf("meta/format: %v", err)
		}
		if v != layoutVersion {
			return formatVersionError(v)
		}
		kg, err := readMetaRecord(mb, metaKeyKeyGroups)
		if err != nil {
			return err
		}
		if groups, err = decodeMetaKeyGroups(kg); err != nil {
			return corruptf("meta/keygroups: %v", err)
		}
		if want != 0 && want != groups {
			return fmt.Errorf("%w: the file has %d key groups, Options.KeyGroups is %d", ErrKeyGroups, groups, want)
		}
		if tx.Bucket(bucketSys) == nil {
			return corruptf("top level: bucket sys missing")
		}
		return nil
	})
	return groups, err
}

func writeMeta(tx *bolt.Tx, groups int) error {
	mb, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	var d digest
	for _, kv := range []struct{ k, v []byte }{
		{metaKeyFormat, encodeMetaFormat()},
		{metaKeyKeyGroups, encodeMetaKeyGroups(groups)},
	} {
		rec, crc := appendRecord(nil, metaSeed, kv.k, kv.v)
		if err := mb.Put(kv.k, rec); err != nil {
			return err
		}
		d.add(crc)
	}
	if err := mb.SetSequence(d.seq()); err != nil {
		return err
	}
	_, err = tx.CreateBucket(bucketSys)
	return err
}

func readMetaRecord(mb *bolt.Bucket, key []byte) ([]byte, error) {
	rec := mb.Get(key)
	if rec == nil {
		return nil, corruptf("meta/%s: missing", key)
	}
	p, _, err := decodeRecord(metaSeed, key, rec)
	if err != nil {
		return nil, corruptf("meta/%s: %v", key, err)
	}
	return bytes.Clone(p), nil
}

// Close closes the file, waiting for a View or Update in progress. Every
// method called after it returns ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("state: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// KeyGroups returns the key group count the file was created with
// (Options.KeyGroups). The store itself does not use it: it is the caller's
// partition of its keys, kept with the data so that it cannot change under
// them.
func (s *Store) KeyGroups() int { return s.groups }

// View runs fn in a read-only transaction over the system buckets.
func (s *Store) View(fn func(tx *Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.view("view", func(btx *bolt.Tx) error { return callUser(fn, newTx(s, btx)) })
}

// Update runs fn in a read-write transaction over the system buckets, and
// commits it (with fsync unless NoSync): everything fn writes is durable
// when Update returns nil, and none of it is if fn or the commit fails.
// Updates are serialized by bbolt; they may run concurrently with Views.
func (s *Store) Update(fn func(tx *Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if p := s.poisoned.Load(); p != nil {
		return *p
	}
	return s.update("update", func(btx *bolt.Tx) error { return callUser(fn, newTx(s, btx)) })
}

// ReleasePages drops the process's mappings of the file's pages. bbolt
// reads the file through a read-only shared mapping (and writes with
// pwrite), so every page a transaction or a compaction ever read stays
// mapped, and counts in the process's resident set, until the kernel needs
// the memory: on a gateway with a memory budget that looks like a leak
// growing with the file. After ReleasePages those pages are page cache
// only; the next access maps them again (a minor fault, no disk read while
// they are cached). It runs inside a read transaction, which holds off
// bbolt's remapping, so the range it releases is the live mapping.
func (s *Store) ReleasePages() error {
	return s.View(func(tx *Tx) error { return tx.ReleasePages() })
}

// userPanic carries a panic raised by a caller's function through bbolt (so
// its transaction rolls back) and past guard, which re-raises it.
type userPanic struct{ v any }

// boltPanic carries a panic raised inside bbolt, during a Tx or Bucket
// method called by the caller's function, through callUser to guard, which
// turns it into an ErrCorrupt error.
type boltPanic struct{ v any }

// rethrowBolt, deferred by every Tx and Bucket method around its calls
// into bbolt (and its reads of mapped values), marks a panic there as
// bbolt's, not the caller's.
func rethrowBolt() {
	if r := recover(); r != nil {
		panic(boltPanic{r})
	}
}

func callUser(fn func(*Tx) error, tx *Tx) error {
	defer func() {
		if r := recover(); r != nil {
			if bp, ok := r.(boltPanic); ok {
				panic(bp)
			}
			panic(userPanic{r})
		}
	}()
	return fn(tx)
}

// guard runs f, which calls into bbolt, and turns a bbolt panic, or a memory
// fault in the mapped file, into an ErrCorrupt error. A panic from the
// caller's own function passes through unchanged.
func (s *Store) guard(op string, write bool, f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if up, ok := r.(userPanic); ok {
			panic(up.v)
		}
		if bp, ok := r.(boltPanic); ok {
			r = bp.v
		}
		err = corruptf("state: %s %s: bbolt panicked on a damaged page: %v", op, s.path, r)
		if write {
			first := err
			s.poisoned.CompareAndSwap(nil, &first)
		}
	}()
	err = f()
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		err = ErrClosed
	}
	return err
}

func (s *Store) view(op string, fn func(*bolt.Tx) error) error {
	return s.guard(op, false, func() error { return s.db.View(fn) })
}

func (s *Store) update(op string, fn func(*bolt.Tx) error) error {
	err := s.guard(op, true, func() error { return s.db.Update(fn) })
	if err == nil {
		s.countCommit()
	}
	return err
}
