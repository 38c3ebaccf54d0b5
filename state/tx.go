package state

import (
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// Tx is a transaction over the system buckets, where the edge keeps its
// operator state, outbox entries and checkpoint metadata; everything an
// Update writes is committed atomically. A Tx is valid only inside the
// function it was passed to, and only on that goroutine.
type Tx struct {
	s       *Store
	btx     *bolt.Tx
	buckets map[string]*Bucket
}

func newTx(s *Store, btx *bolt.Tx) *Tx { return &Tx{s: s, btx: btx} }

// ReleasePages is Store.ReleasePages from within a read transaction: a
// long read (a restore of the whole state) lets go of what it has read so
// far. Values read before stay valid (a later access maps the page again).
func (tx *Tx) ReleasePages() error {
	if tx.btx.Writable() {
		return fmt.Errorf("state: ReleasePages in a write transaction")
	}
	db := tx.btx.DB()
	if err := releaseMapped(db.Info().Data, int(tx.btx.Size())); err != nil {
		return fmt.Errorf("state: release mapped pages of %s: %w", db.Path(), err)
	}
	if n, ok := fileResident(); ok {
		tx.s.mappedBase.Store(n)
	}
	return nil
}

// ReleaseOver is ReleasePages when the process's file-backed resident set
// has grown by more than budget bytes since the store's last release, and
// nothing otherwise (or where that set cannot be read: Linux reads it from
// /proc/self/statm, a few µs). A loop that reads much of the file (the
// lookups of evicted keys, the count of a long outbox) calls it as it
// goes: what it keeps mapped is then bounded by what the process has
// resident, whatever the kernel maps around each page it faults in
// (fault-around maps up to 16 pages already cached), which a count of
// the bytes read does not see.
func (tx *Tx) ReleaseOver(budget int64) error {
	n, ok := fileResident()
	if !ok || n-tx.s.mappedBase.Load() <= budget {
		return nil
	}
	return tx.ReleasePages()
}

// Writable reports whether the transaction may write (Update) or not
// (View).
func (tx *Tx) Writable() bool { return tx.btx.Writable() }

// Bucket returns the system bucket called name, creating it in a writable
// transaction. In a read-only one a bucket never written reads as empty.
func (tx *Tx) Bucket(name string) (*Bucket, error) {
	defer rethrowBolt()
	if b, ok := tx.buckets[name]; ok {
		return b, nil
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: system bucket %q (must be 1-%d bytes of UTF-8)", ErrName, name, MaxNameSize)
	}
	sys := tx.btx.Bucket(bucketSys)
	if sys == nil {
		return nil, corruptf("state: top-level bucket sys missing")
	}
	var bb *bolt.Bucket
	if tx.btx.Writable() {
		var err error
		if bb, err = sys.CreateBucketIfNotExists([]byte(name)); err != nil {
			return nil, fmt.Errorf("state: system bucket %q: %w", name, err)
		}
	} else {
		bb = sys.Bucket([]byte(name))
	}
	b := &Bucket{name: name, b: bb, seed: nameSeed(domainSys, name)}
	if bb != nil {
		b.d = digestOf(bb.Sequence())
	}
	if tx.buckets == nil {
		tx.buckets = make(map[string]*Bucket)
	}
	tx.buckets[name] = b
	return b, nil
}

// Bucket is a system bucket: keys and values, each value stored as a
// checksummed record (docs/formats/state-layout.md). Slices it returns
// point into the file's mapping: they are valid until the transaction ends
// and must not be modified.
type Bucket struct {
	name string
	b    *bolt.Bucket // nil: absent, in a read-only transaction
	seed uint32
	d    digest
}

// Name returns the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Len returns the number of keys in the bucket.
func (b *Bucket) Len() int { return int(b.d.count) }

// Get returns the value of key, or nil if there is none. A value whose
// checksum fails gives an ErrCorrupt error.
func (b *Bucket) Get(key []byte) ([]byte, error) {
	defer rethrowBolt()
	if b.b == nil {
		return nil, nil
	}
	rec := b.b.Get(key)
	if rec == nil {
		return nil, nil
	}
	return b.decode(key, rec)
}

func (b *Bucket) decode(key, rec []byte) ([]byte, error) {
	p, _, err := decodeRecord(b.seed, key, rec)
	if err != nil {
		return nil, corruptf("state: system bucket %q key %x: %v", b.name, key, err)
	}
	return p, nil
}

// FillSequential tells the transaction that the bucket's new keys come
// after all its others (an outbox keyed by sequence number), so that its
// pages fill up before they split. bbolt otherwise splits a page at half
// its size, which for keys added in order leaves every page half empty: the
// file grows twice as fast as the data, and a commit writes twice the
// pages. Keys added in the middle after all split a full page, so call it
// only for a bucket that mostly grows at its end. It holds for this
// transaction only.
func (b *Bucket) FillSequential() {
	if b.b != nil {
		b.b.FillPercent = 1.0
	}
}

// Put sets key to value. Both are copied; the caller may reuse them.
func (b *Bucket) Put(key, value []byte) error {
	defer rethrowBolt()
	if err := b.writable(key); err != nil {
		return err
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes (max %d) in system bucket %q", ErrValueTooLarge, len(value), MaxValueSize, b.name)
	}
	if old := b.b.Get(key); old != nil {
		b.d.remove(storedCRC(old))
	}
	// bbolt keeps key and value until the transaction ends: one buffer
	// holds both.
	buf := make([]byte, len(key), len(key)+recordSize(len(value)))
	copy(buf, key)
	buf, crc := appendRecord(buf, b.seed, key, value)
	if err := b.b.Put(buf[:len(key)], buf[len(key):]); err != nil {
		return fmt.Errorf("state: system bucket %q: put %x: %w", b.name, key, err)
	}
	b.d.add(crc)
	return b.b.SetSequence(b.d.seq())
}

// Delete removes key, if present.
func (b *Bucket) Delete(key []byte) error {
	defer rethrowBolt()
	if err := b.writable(key); err != nil {
		return err
	}
	old := b.b.Get(key)
	if old == nil {
		return nil
	}
	if err := b.b.Delete(key); err != nil {
		return fmt.Errorf("state: system bucket %q: delete %x: %w", b.name, key, err)
	}
	b.d.remove(storedCRC(old))
	return b.b.SetSequence(b.d.seq())
}

func (b *Bucket) writable(key []byte) error {
	if b.b == nil || !b.b.Writable() {
		return fmt.Errorf("%w: system bucket %q", ErrReadOnly, b.name)
	}
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("%w: %d bytes (must be 1-%d) in system bucket %q", ErrKey, len(key), MaxKeySize, b.name)
	}
	return nil
}

// ForEach calls fn for every key from start on (all keys if start is nil),
// in key order. If fn returns an error, ForEach stops and returns it. fn
// must not modify the bucket.
func (b *Bucket) ForEach(start []byte, fn func(key, value []byte) error) error {
	if b.b == nil {
		return nil
	}
	c := b.b.Cursor()
	k, v, err := b.step(c, start, true)
	for ; k != nil && err == nil; k, v, err = b.step(c, nil, false) {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return err
}

// step moves c to start (first) or to the next key and decodes the record
// there. fn runs outside it, so that a panic of the caller's own stays the
// caller's.
func (b *Bucket) step(c *bolt.Cursor, start []byte, first bool) (k, v []byte, err error) {
	k, rec, err := b.move(c, start, first)
	if k == nil || err != nil {
		return nil, nil, err
	}
	v, err = b.decode(k, rec)
	return k, v, err
}

// move moves c to start (first) or to the next key and returns the key and
// its record, undecoded; a nested bucket there is corruption.
func (b *Bucket) move(c *bolt.Cursor, start []byte, first bool) (k, rec []byte, err error) {
	defer rethrowBolt()
	switch {
	case !first:
		k, rec = c.Next()
	case start == nil:
		k, rec = c.First()
	default:
		k, rec = c.Seek(start)
	}
	if k != nil && rec == nil {
		return nil, nil, corruptf("state: system bucket %q: nested bucket %x where only records belong", b.name, k)
	}
	return k, rec, nil
}

// ForEachRecord calls fn for every key from start on, in key order, with
// its record not yet read: Record.Value checks and returns it like
// ForEach's values, Record.CRC and Record.Unchecked read its stored CRC
// and its payload without checking them. It is for a caller that keeps
// what it derived from records it has checked: by key and CRC (the CRC
// covers key and value, so a record with the key and CRC of one checked
// before holds the same value), or by key alone where the caller's keys
// are written once. A record neither method touches costs no read of its
// pages: a value that fills its own pages is not read at all.
func (b *Bucket) ForEachRecord(start []byte, fn func(key []byte, r Record) error) error {
	if b.b == nil {
		return nil
	}
	c := b.b.Cursor()
	k, rec, err := b.move(c, start, true)
	for ; k != nil && err == nil; k, rec, err = b.move(c, nil, false) {
		if err := fn(k, Record{b, k, rec}); err != nil {
			return err
		}
	}
	return err
}

// Record is a record of a Bucket that ForEachRecord found; valid like the
// values of ForEach.
type Record struct {
	b      *Bucket
	k, rec []byte
}

// Value returns the record's value, or an ErrCorrupt error if its
// checksum fails.
func (r Record) Value() ([]byte, error) { return r.b.decode(r.k, r.rec) }

// CRC returns the record's stored CRC, unchecked (0 for a record too short
// to have one, which Value reports).
func (r Record) CRC() uint32 { return storedCRC(r.rec) }

// Unchecked returns the record's payload without checking it (nil for a
// record too short to have one).
func (r Record) Unchecked() []byte {
	if len(r.rec) < recordHeaderSize {
		return nil
	}
	return r.rec[recordHeaderSize:]
}

// DeleteBucket deletes the system bucket called name with everything in
// it (a writable transaction only); a bucket that does not exist is no
// error. A Bucket obtained from tx before is not valid afterwards.
func (tx *Tx) DeleteBucket(name string) error {
	defer rethrowBolt()
	if !tx.btx.Writable() {
		return fmt.Errorf("state: delete system bucket %q: read-only transaction", name)
	}
	sys := tx.btx.Bucket(bucketSys)
	if sys == nil {
		return corruptf("state: top-level bucket sys missing")
	}
	delete(tx.buckets, name)
	if sys.Bucket([]byte(name)) == nil {
		return nil
	}
	if err := sys.DeleteBucket([]byte(name)); err != nil {
		return fmt.Errorf("state: delete system bucket %q: %w", name, err)
	}
	return nil
}

// Buckets returns the names of the system buckets that exist, in name
// order.
func (tx *Tx) Buckets() ([]string, error) {
	defer rethrowBolt()
	sys := tx.btx.Bucket(bucketSys)
	if sys == nil {
		return nil, corruptf("state: top-level bucket sys missing")
	}
	var names []string
	err := sys.ForEach(func(k, v []byte) error {
		if v != nil {
			return corruptf("state: top-level bucket sys: record %x where only buckets belong", k)
		}
		names = append(names, string(k))
		return nil
	})
	return names, err
}

// Size returns the length of the file as this transaction sees it: what
// WriteTo writes.
func (tx *Tx) Size() int64 {
	defer rethrowBolt()
	return tx.btx.Size()
}

// WriteTo writes a copy of the whole file as this transaction sees it to w
// (bbolt's Tx.WriteTo): Size bytes, both meta pages pointing at this
// transaction, a file Open accepts with every check. In a View it is a
// consistent copy taken while Updates go on; it reads the file through
// the descriptor the store holds, not through its mapping, so what it
// reads does not stay in the process's resident set. The transaction
// stays open while w takes the bytes: a slow w holds back the reuse of
// pages later Updates free (the file grows by what they write meanwhile),
// and an Update that must grow the mapping (a file past
// Options.MmapBytes) waits for it.
func (tx *Tx) WriteTo(w io.Writer) (int64, error) {
	defer rethrowBolt()
	return tx.btx.WriteTo(w)
}
