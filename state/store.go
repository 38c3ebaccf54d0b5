package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Store is keyed operator state in one bbolt file, behind a write-behind
// cache. See the package documentation for the model and the concurrency
// rules.
type Store struct {
	path   string
	db     *bolt.DB
	groups int
	budget int64
	shards []shard

	closed atomic.Bool
	// bytes is the accounted size of every cached entry; clean the part of
	// it that eviction may drop. Both are sums of per-shard counters kept
	// here so that a Put can see the budget without taking other locks.
	bytes atomic.Int64
	clean atomic.Int64
	// hand is where the next cross-shard eviction starts.
	hand atomic.Uint32
	// poisoned holds the first error from a bbolt panic in a write
	// transaction. bbolt's in-memory state may be inconsistent after one,
	// so later writes fail fast instead of adding to a damaged file.
	poisoned atomic.Pointer[error]

	nsMu sync.Mutex
	ns   map[string]*Namespace
}

// Namespace is the state of one operator or purpose, such as
// "window/line-temps". Its keys are split into the store's key groups; a key
// lives in the group the caller names, which it chooses from the key's hash
// (see Store.GroupOf). The same key in two groups is two entries.
type Namespace struct {
	s     *Store
	name  string
	bname []byte
	id    int
	seed  uint32 // CRC seed of its records, before the group id
}

// Name returns the namespace's name.
func (n *Namespace) Name() string { return n.name }

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
	s := &Store{path: path, db: db, budget: o.CacheBytes, ns: make(map[string]*Namespace)}
	if s.groups, err = s.initLayout(o.KeyGroups); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	s.shards = make([]shard, s.groups)
	for i := range s.shards {
		s.shards[i].open = 1
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
			return fmt.Errorf("%w: layout version %d, this build reads version %d", ErrFormat, v, layoutVersion)
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
		if tx.Bucket(bucketState) == nil || tx.Bucket(bucketSys) == nil {
			return corruptf("top level: bucket state or sys missing")
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
	if _, err := tx.CreateBucket(bucketState); err != nil {
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

// Close closes the file. Changes not yet committed are discarded, exactly as
// a crash would discard them. Close waits for a Handoff.Write in progress;
// it must not be called concurrently with other methods otherwise, and every
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

// KeyGroups returns the number of key groups.
func (s *Store) KeyGroups() int { return s.groups }

// GroupOf returns the key group of a key whose hash is h (such as
// xxhash.Sum64(key)): h modulo KeyGroups.
func (s *Store) GroupOf(h uint64) int { return int(h % uint64(s.groups)) }

// Namespace returns the namespace called name, creating it on first use. Its
// buckets appear in the file with its first committed entry. The name must
// be valid UTF-8, 1 to MaxNameSize bytes.
func (s *Store) Namespace(name string) (*Namespace, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: namespace %q (must be 1-%d bytes of UTF-8)", ErrName, name, MaxNameSize)
	}
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if n, ok := s.ns[name]; ok {
		return n, nil
	}
	n := &Namespace{s: s, name: name, bname: []byte(name), id: len(s.ns), seed: nameSeed(domainState, name)}
	s.ns[name] = n
	return n, nil
}

// View runs fn in a read-only transaction over the system buckets.
func (s *Store) View(fn func(tx *Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.view("view", func(btx *bolt.Tx) error { return callUser(fn, newTx(btx)) })
}

// Update runs fn in a read-write transaction over the system buckets, and
// commits it (with fsync unless NoSync). It writes no state: use it for
// bookkeeping outside checkpoints, such as deleting outbox entries the hub
// has acknowledged. It may run concurrently with a Handoff.Write; bbolt
// serializes the two.
func (s *Store) Update(fn func(tx *Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if p := s.poisoned.Load(); p != nil {
		return *p
	}
	return s.update("update", func(btx *bolt.Tx) error { return callUser(fn, newTx(btx)) })
}

// userPanic carries a panic raised by a caller's function through bbolt (so
// its transaction rolls back) and past guard, which re-raises it.
type userPanic struct{ v any }

func callUser(fn func(*Tx) error, tx *Tx) error {
	defer func() {
		if r := recover(); r != nil {
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
	return s.guard(op, true, func() error { return s.db.Update(fn) })
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	Entries    int    // cached entries, clean and dirty, including known-absent keys
	Bytes      int64  // accounted bytes of all cached entries
	DirtyBytes int64  // bytes of entries not yet committed (dirty or in a handoff)
	Hits       uint64 // Gets answered from the cache
	Misses     uint64 // Gets that read the file
	Evictions  uint64 // clean entries dropped to stay within CacheBytes
	InFlight   int    // key groups held by an unfinished Handoff
}

// Stats returns the cache's counters, summed over key groups one at a time
// (not an atomic snapshot across groups).
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += len(sh.ring)
		st.Bytes += sh.openBytes + sh.flightBytes + sh.cleanBytes
		st.DirtyBytes += sh.openBytes + sh.flightBytes
		st.Hits += sh.hits
		st.Misses += sh.misses
		st.Evictions += sh.evictions
		if sh.inFlight {
			st.InFlight++
		}
		sh.mu.Unlock()
	}
	return st
}

// checkGroup validates the arguments every group operation shares.
func (s *Store) checkGroup(group int) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if group < 0 || group >= s.groups {
		return fmt.Errorf("%w: %d not in [0, %d)", ErrGroup, group, s.groups)
	}
	return nil
}

// checkKey validates the arguments every keyed operation shares.
func (s *Store) checkKey(group int, key []byte) error {
	if err := s.checkGroup(group); err != nil {
		return err
	}
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("%w: %d bytes (must be 1-%d)", ErrKey, len(key), MaxKeySize)
	}
	return nil
}

// groupBucket returns the bucket of (ns, group) in tx, or nil.
func groupBucket(tx *bolt.Tx, ns []byte, group int) *bolt.Bucket {
	nb := tx.Bucket(bucketState).Bucket(ns)
	if nb == nil {
		return nil
	}
	gk := groupKey(group)
	return nb.Bucket(gk[:])
}
