package state

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactMinBytes is the smallest file Open compacts: below it the free
// pages are not worth a rewrite.
const compactMinBytes = 1 << 20

// compactTxBytes bounds what one transaction of the copy holds (bbolt
// keeps a transaction's dirty pages in memory).
const compactTxBytes = 16 << 20

// compactCopying, when set (by a test), is called once the copy's file
// exists and before the copy starts.
var compactCopying func()

// Compaction is what Open's compaction did (Options.CompactFree).
type Compaction struct {
	// Before and After are the bytes of the file's pages up to bbolt's
	// high-water mark (what the file takes on disk; its length past it is
	// growth made ahead, not allocated) before and after; both zero when
	// Open did not compact.
	Before, After int64
	Took          time.Duration
	// Err is why a compaction that was due did not happen; Open then
	// went on with the file as it was.
	Err error
}

// Compaction says what Open's compaction did.
func (s *Store) Compaction() Compaction { return s.compaction }

// compactIfFree rewrites the store's file compactly when its free pages
// are at least o.CompactFree of its pages up to the high-water mark: a copy in key order with full pages, written next to it, fsynced
// and renamed over it. bbolt never shrinks its file, so an outbox that an
// outage filled and the uplink emptied would otherwise keep its disk for
// good. A crash leaves either file whole at the path (the rename is atomic)
// and perhaps the copy's remains, which the next Open removes. It returns
// the store to use: the compacted one reopened, or s when nothing was due
// or the copy failed (recorded in Compaction().Err).
func (s *Store) compactIfFree(o Options) (*Store, error) {
	tmp := s.path + ".compact"
	failed := func(err error) (*Store, error) {
		os.Remove(tmp)
		s.compaction = Compaction{Err: err}
		return s, nil
	}
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return failed(fmt.Errorf("state: remove an earlier compaction's copy: %w", err))
	}
	hwm, free, err := s.pageUse()
	if err != nil {
		return failed(err)
	}
	if hwm < compactMinBytes || float64(free) < o.CompactFree*float64(hwm) {
		return s, nil
	}
	began := time.Now()
	dst, err := bolt.Open(tmp, o.FileMode, &bolt.Options{NoSync: o.NoSync, FreelistType: bolt.FreelistMapType, PageSize: s.db.Info().PageSize})
	if err != nil {
		return failed(fmt.Errorf("state: compact: %w", err))
	}
	if compactCopying != nil {
		compactCopying()
	}
	if err := bolt.Compact(dst, s.db, compactTxBytes); err != nil {
		dst.Close()
		return failed(fmt.Errorf("state: compact: %w", err))
	}
	if err := dst.Close(); err != nil {
		return failed(fmt.Errorf("state: compact: %w", err))
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return failed(fmt.Errorf("state: compact: %w", err))
	}
	// From here the compacted file is the store: reopen it (and verify it,
	// as o says) in place of the old one.
	if err := syncDir(filepath.Dir(s.path)); err != nil && !o.NoSync {
		s.db.Close()
		return nil, fmt.Errorf("state: compact: %w", err)
	}
	if err := s.db.Close(); err != nil {
		return nil, fmt.Errorf("state: compact: close the old file: %w", err)
	}
	o.CompactFree = 0
	ns, err := Open(s.path, o)
	if err != nil {
		return nil, fmt.Errorf("state: reopen after compaction: %w", err)
	}
	after, _, err := ns.pageUse()
	if err != nil {
		ns.Close()
		return nil, err
	}
	ns.compaction = Compaction{Before: hwm, After: after, Took: time.Since(began)}
	return ns, nil
}

// pageUse returns the bytes of the file's pages up to the high-water mark
// and of its free (and pending) pages among them.
func (s *Store) pageUse() (hwm, free int64, err error) {
	st := s.db.Stats()
	err = s.db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	return hwm, int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize), err
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
