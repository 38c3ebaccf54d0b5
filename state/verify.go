package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"os"
)

// Verification of a bbolt file from its raw bytes, before bbolt maps it.
//
// Why not bbolt's own checks: bbolt validates only the two meta pages when it
// opens a file, then trusts every other page. A damaged page makes it panic
// (which Store recovers from), read outside the mapping (a fault, which Store
// also converts), allocate a slice sized by a garbage count (fatal, not
// recoverable), or follow a branch pointer back to an ancestor and recurse
// until the stack overflows (fatal). Tx.Check has the same recursion and no
// cycle guard. So this walker reads pages with ReadAt, never recurses into a
// page twice, bounds every offset by the page, and runs before bbolt.Open.
//
// The on-disk structures mirror go.etcd.io/bbolt/internal/common (format
// version 2), in the machine's byte order as bbolt writes them:
//
//	page header (16): id u64, flags u16, count u16, overflow u32
//	meta (at +16):    magic u32, version u32, pageSize u32, flags u32,
//	                  root bucket {root u64, sequence u64}, freelist u64,
//	                  pgid u64, txid u64, checksum u64 (FNV-64a of the rest)
//	branch elem (16): pos u32, ksize u32, pgid u64
//	leaf elem (16):   flags u32, pos u32, ksize u32, vsize u32
//	bucket value:     root u64, sequence u64, then an inline leaf page when
//	                  root is 0
//
// An element's key starts pos bytes after the element itself; a leaf value
// follows its key.

const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	boltPageHeader   = 16
	boltElemSize     = 16
	boltMetaSize     = 64
	boltInBucketSize = 16
	boltNoFreelist   = ^uint64(0)

	pageBranch   = 0x01
	pageLeaf     = 0x02
	pageMeta     = 0x04
	pageFreelist = 0x10

	leafBucketFlag = 0x01

	minPageSize = 512
	maxPageSize = 1 << 16
)

var ne = binary.NativeEndian

// boltMeta is a decoded meta page.
type boltMeta struct {
	page     int // 0 or 1
	pageSize int
	root     uint64
	rootSeq  uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// readMeta decodes and validates the meta of the page at off.
func readMeta(r io.ReaderAt, off int64, page int) (boltMeta, error) {
	var b [boltPageHeader + boltMetaSize]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return boltMeta{}, corruptf("meta page %d at offset %d: unreadable: %v", page, off, err)
	}
	m := b[boltPageHeader:]
	switch {
	case ne.Uint32(m[0:]) != boltMagic:
		return boltMeta{}, corruptf("meta page %d: bad magic %08x", page, ne.Uint32(m[0:]))
	case ne.Uint32(m[4:]) != boltVersion:
		return boltMeta{}, corruptf("meta page %d: bbolt format version %d, want %d", page, ne.Uint32(m[4:]), boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if sum := ne.Uint64(m[56:]); sum != h.Sum64() {
		return boltMeta{}, corruptf("meta page %d: checksum %016x, computed %016x", page, sum, h.Sum64())
	}
	return boltMeta{
		page:     page,
		pageSize: int(ne.Uint32(m[8:])),
		root:     ne.Uint64(m[16:]),
		rootSeq:  ne.Uint64(m[24:]),
		freelist: ne.Uint64(m[32:]),
		pgid:     ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}, nil
}

// chooseMeta picks the meta page bbolt will use, by bbolt's own rule: the
// valid one with the higher transaction id. Page 1 is looked for one page
// size in, the size page 0 states, or the OS page size if page 0 is invalid.
func chooseMeta(r io.ReaderAt, size int64) (boltMeta, error) {
	m0, err0 := readMeta(r, 0, 0)
	ps := os.Getpagesize()
	if err0 == nil {
		ps = m0.pageSize
	}
	if ps < minPageSize || ps > maxPageSize || bits.OnesCount(uint(ps)) != 1 {
		return boltMeta{}, corruptf("meta page 0: page size %d is not a power of two in [%d, %d]", ps, minPageSize, maxPageSize)
	}
	m1, err1 := readMeta(r, int64(ps), 1)
	var m boltMeta
	switch {
	case err0 != nil && err1 != nil:
		return boltMeta{}, corruptf("no valid meta page: %v; %v", err0, err1)
	case err0 != nil:
		m = m1
	case err1 != nil:
		m = m0
	case m1.txid > m0.txid:
		m = m1
	default:
		m = m0
	}
	if m.pageSize != ps {
		return boltMeta{}, corruptf("meta page %d: page size %d, but the page was found at offset %d", m.page, m.pageSize, ps)
	}
	if m.pgid < 4 || m.pgid > uint64(size)/uint64(ps) {
		return boltMeta{}, corruptf("meta page %d (txid %d): %d pages of %d bytes do not fit the %d-byte file (truncated?)",
			m.page, m.txid, m.pgid, ps, size)
	}
	if m.root < 2 || m.root >= m.pgid {
		return boltMeta{}, corruptf("meta page %d: root page %d outside [2, %d)", m.page, m.root, m.pgid)
	}
	if m.freelist != boltNoFreelist && (m.freelist < 2 || m.freelist >= m.pgid) {
		return boltMeta{}, corruptf("meta page %d: freelist page %d outside [2, %d)", m.page, m.freelist, m.pgid)
	}
	return m, nil
}

// pageSet is a bitmap over page ids below the high water mark.
type pageSet []uint64

func newPageSet(n uint64) pageSet    { return make(pageSet, (n+63)/64) }
func (s pageSet) has(id uint64) bool { return s[id/64]&(1<<(id%64)) != 0 }
func (s pageSet) add(id uint64)      { s[id/64] |= 1 << (id % 64) }

// checker walks one file. Its errors are of the ErrCorrupt class, except
// ErrFormat for a bbolt file that is not ours.
type checker struct {
	r    io.ReaderAt
	meta boltMeta
	ps   int
	used pageSet // pages reached: meta, freelist, tree pages
	free pageSet // pages on the freelist
	bufs [][]byte
	// set by the meta bucket when the walk reaches it
	keyGroups int
}

// verifyFile checks the bbolt file r of the given size. With VerifyQuick it
// checks the meta pages, length and freelist; with VerifyFull it also walks
// every reachable page and checks this package's layout. An empty file
// passes: bbolt initializes it.
func verifyFile(r io.ReaderAt, size int64, mode Verify) error {
	if size == 0 {
		return nil
	}
	m, err := chooseMeta(r, size)
	if err != nil {
		return err
	}
	c := &checker{r: r, meta: m, ps: m.pageSize, used: newPageSet(m.pgid), free: newPageSet(m.pgid)}
	c.used.add(0)
	c.used.add(1)
	if err := c.readFreelist(); err != nil {
		return err
	}
	if mode == VerifyQuick {
		return nil
	}
	if err := c.walkBucket(m.root, nil, 0, &rootVisitor{c: c}); err != nil {
		return err
	}
	if m.freelist == boltNoFreelist {
		return nil // bbolt rebuilds the freelist by its own walk
	}
	for id := uint64(2); id < m.pgid; id++ {
		switch u, f := c.used.has(id), c.free.has(id); {
		case u && f:
			return corruptf("page %d is both in use and on the freelist", id)
		case !u && !f:
			return corruptf("page %d is neither in use nor on the freelist", id)
		}
	}
	return nil
}

// readPage reads page id and its overflow pages into the buffer for depth,
// checking its header, and marks its pages used.
func (c *checker) readPage(id uint64, depth int) ([]byte, error) {
	if id < 2 || id >= c.meta.pgid {
		return nil, corruptf("page %d: outside [2, %d)", id, c.meta.pgid)
	}
	if c.used.has(id) {
		return nil, corruptf("page %d: reached twice", id)
	}
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, make([]byte, c.ps))
	}
	b := c.bufs[depth][:c.ps]
	if _, err := c.r.ReadAt(b, int64(id)*int64(c.ps)); err != nil {
		return nil, corruptf("page %d: unreadable: %v", id, err)
	}
	if got := ne.Uint64(b); got != id {
		return nil, corruptf("page %d: header says page %d", id, got)
	}
	overflow := uint64(ne.Uint32(b[12:]))
	if id+overflow >= c.meta.pgid {
		return nil, corruptf("page %d: %d overflow pages run past the high water mark %d", id, overflow, c.meta.pgid)
	}
	for i := uint64(0); i <= overflow; i++ {
		if c.used.has(id + i) {
			return nil, corruptf("page %d: overflow page %d reached twice", id, id+i)
		}
		c.used.add(id + i)
	}
	if overflow > 0 {
		n := (int(overflow) + 1) * c.ps
		if cap(c.bufs[depth]) < n {
			c.bufs[depth] = make([]byte, n)
		}
		b = c.bufs[depth][:n]
		if _, err := c.r.ReadAt(b, int64(id)*int64(c.ps)); err != nil {
			return nil, corruptf("page %d: %d overflow pages unreadable: %v", id, overflow, err)
		}
	}
	return b, nil
}

// readFreelist checks the freelist page and records the free page ids.
func (c *checker) readFreelist() error {
	id := c.meta.freelist
	if id == boltNoFreelist {
		return nil
	}
	b, err := c.readPage(id, 0)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if f := ne.Uint16(b[8:]); f != pageFreelist {
		return corruptf("freelist page %d: page type %#x, want %#x", id, f, pageFreelist)
	}
	idx, count := uint64(0), uint64(ne.Uint16(b[10:]))
	if count == 0xFFFF {
		idx, count = 1, ne.Uint64(b[boltPageHeader:])
	}
	if avail := uint64(len(b)-boltPageHeader) / 8; count > avail || idx+count > avail {
		return corruptf("freelist page %d: %d ids do not fit its %d bytes", id, count, len(b))
	}
	for i := uint64(0); i < count; i++ {
		f := ne.Uint64(b[boltPageHeader+8*(idx+i):])
		if f < 2 || f >= c.meta.pgid {
			return corruptf("freelist page %d: free page %d outside [2, %d)", id, f, c.meta.pgid)
		}
		if c.free.has(f) {
			return corruptf("freelist page %d: page %d freed twice", id, f)
		}
		c.free.add(f)
	}
	return nil
}

// visitor receives a bucket's contents in key order.
type visitor interface {
	value(key, val []byte) error
	bucket(key []byte, seq uint64) (visitor, error)
	done() error
}

// walkBucket walks the bucket whose root is page root, or the inline page
// when root is 0. Buffers from depth on are free for its use.
func (c *checker) walkBucket(root uint64, inline []byte, depth int, v visitor) error {
	if root == 0 {
		if len(inline) < boltPageHeader {
			return corruptf("inline bucket of %d bytes is shorter than a page header", len(inline))
		}
		if f := ne.Uint16(inline[8:]); f != pageLeaf {
			return corruptf("inline bucket: page type %#x, want leaf", f)
		}
		if err := c.walkLeaf(inline, nil, nil, depth, v); err != nil {
			return fmt.Errorf("inline bucket: %w", err)
		}
	} else if err := c.walkPage(root, nil, nil, depth, v); err != nil {
		return err
	}
	return v.done()
}

// walkPage walks the subtree at page id, whose keys must lie in [lo, hi)
// (nil for unbounded).
func (c *checker) walkPage(id uint64, lo, hi []byte, depth int, v visitor) error {
	p, err := c.readPage(id, depth)
	if err != nil {
		return err
	}
	switch f := ne.Uint16(p[8:]); f {
	case pageLeaf:
		if err := c.walkLeaf(p, lo, hi, depth, v); err != nil {
			return fmt.Errorf("page %d: %w", id, err)
		}
		return nil
	case pageBranch:
	default:
		return corruptf("page %d: page type %#x where a branch or leaf page belongs", id, f)
	}
	n := int(ne.Uint16(p[10:]))
	if n == 0 {
		return corruptf("page %d: branch page with no elements", id)
	}
	if boltPageHeader+n*boltElemSize > len(p) {
		return corruptf("page %d: %d elements overrun the %d-byte page", id, n, len(p))
	}
	key := func(i int) ([]byte, error) {
		e := boltPageHeader + i*boltElemSize
		return span(p, e, uint64(ne.Uint32(p[e:])), uint64(ne.Uint32(p[e+4:])))
	}
	var prev []byte
	for i := 0; i < n; i++ {
		k, err := key(i)
		if err != nil {
			return corruptf("page %d: branch element %d: key %v", id, i, err)
		}
		if err := checkOrder(k, prev, lo, hi, i); err != nil {
			return corruptf("page %d: branch element %d: %v", id, i, err)
		}
		prev = k
		next := hi
		if i+1 < n {
			if next, err = key(i + 1); err != nil {
				return corruptf("page %d: branch element %d: key %v", id, i+1, err)
			}
		}
		child := ne.Uint64(p[boltPageHeader+i*boltElemSize+8:])
		if err := c.walkPage(child, k, next, depth+1, v); err != nil {
			return err
		}
	}
	return nil
}

// walkLeaf walks the elements of leaf page p (a real page or an inline one).
func (c *checker) walkLeaf(p []byte, lo, hi []byte, depth int, v visitor) error {
	n := int(ne.Uint16(p[10:]))
	if boltPageHeader+n*boltElemSize > len(p) {
		return corruptf("%d elements overrun the %d-byte page", n, len(p))
	}
	var prev []byte
	for i := 0; i < n; i++ {
		e := boltPageHeader + i*boltElemSize
		flags := ne.Uint32(p[e:])
		pos, ksz, vsz := uint64(ne.Uint32(p[e+4:])), uint64(ne.Uint32(p[e+8:])), uint64(ne.Uint32(p[e+12:]))
		kv, err := span(p, e, pos, ksz+vsz)
		if err != nil {
			return corruptf("leaf element %d: key and value %v", i, err)
		}
		k, val := kv[:ksz:ksz], kv[ksz:]
		if err := checkOrder(k, prev, lo, hi, i); err != nil {
			return corruptf("leaf element %d: %v", i, err)
		}
		prev = k
		switch flags {
		case 0:
			if err := v.value(k, val); err != nil {
				return err
			}
		case leafBucketFlag:
			if len(val) < boltInBucketSize {
				return corruptf("bucket %q: header of %d bytes, want %d", k, len(val), boltInBucketSize)
			}
			root, seq := ne.Uint64(val), ne.Uint64(val[8:])
			child, err := v.bucket(k, seq)
			if err != nil {
				return err
			}
			if err := c.walkBucket(root, val[boltInBucketSize:], depth+1, child); err != nil {
				return fmt.Errorf("bucket %q: %w", k, err)
			}
		default:
			return corruptf("leaf element %d: flags %#x", i, flags)
		}
	}
	return nil
}

// span returns p[base+pos : base+pos+n], or an error if that is not inside p.
func span(p []byte, base int, pos, n uint64) ([]byte, error) {
	start := uint64(base) + pos
	if pos > uint64(len(p)) || n > uint64(len(p)) || start+n > uint64(len(p)) {
		return nil, fmt.Errorf("at %d+%d, %d bytes, overruns the %d-byte page", base, pos, n, len(p))
	}
	return p[start : start+n : start+n], nil
}

// checkOrder checks that key k follows prev and lies in [lo, hi).
func checkOrder(k, prev, lo, hi []byte, i int) error {
	switch {
	case len(k) == 0:
		return errors.New("empty key")
	case i > 0 && bytes.Compare(prev, k) >= 0:
		return fmt.Errorf("key %x does not follow %x", k, prev)
	case lo != nil && bytes.Compare(k, lo) < 0:
		return fmt.Errorf("key %x below its parent's bound %x", k, lo)
	case hi != nil && bytes.Compare(k, hi) >= 0:
		return fmt.Errorf("key %x not below its parent's next key %x", k, hi)
	}
	return nil
}

// The layout visitors check what docs/formats/state-layout.md describes.

type rootVisitor struct {
	c                 *checker
	meta, sys, others bool
}

func (v *rootVisitor) value(k, _ []byte) error {
	return corruptf("top level: a value under %q where only buckets belong", k)
}

func (v *rootVisitor) bucket(k []byte, seq uint64) (visitor, error) {
	switch {
	case bytes.Equal(k, bucketMeta):
		v.meta = true
		return &recordVisitor{path: "meta", seed: metaSeed, seq: seq, meta: v.c}, nil
	case bytes.Equal(k, bucketSys):
		v.sys = true
		return &sysVisitor{}, nil
	}
	v.others = true
	return &skipVisitor{}, nil
}

func (v *rootVisitor) done() error {
	switch {
	case v.others && !v.meta && !v.sys:
		// None of our buckets, all of someone else's: a foreign file. (One
		// of ours missing, or renamed by a flipped bit, is corruption.)
		return fmt.Errorf("%w: a bbolt file without this package's buckets", ErrFormat)
	case v.others:
		// A version 1 file's bucket state is not reached: meta, which
		// sorts first, has already refused the file (ErrFormat).
		return corruptf("top level: a bucket this layout does not have")
	case !v.meta && v.sys:
		return corruptf("top level: bucket sys without bucket meta")
	case v.meta && v.c.keyGroups == 0:
		return corruptf("bucket meta: no key group count")
	}
	return nil
}

// skipVisitor accepts anything: the contents of a bucket that decides the
// file is not ours, so only bbolt's structure is checked there.
type skipVisitor struct{}

func (skipVisitor) value(_, _ []byte) error                    { return nil }
func (skipVisitor) bucket(_ []byte, _ uint64) (visitor, error) { return skipVisitor{}, nil }
func (skipVisitor) done() error                                { return nil }

type sysVisitor struct{}

func (v *sysVisitor) value(k, _ []byte) error {
	return corruptf("bucket sys: a value under %q where only buckets belong", k)
}

func (v *sysVisitor) bucket(k []byte, seq uint64) (visitor, error) {
	if !validName(string(k)) {
		return nil, corruptf("bucket sys: invalid bucket name %q", k)
	}
	return &recordVisitor{path: "sys/" + string(k), seed: nameSeed(domainSys, string(k)), seq: seq}, nil
}

func (v *sysVisitor) done() error { return nil }

// recordVisitor checks a bucket of records: each checksum, and the digest.
// For the meta bucket (meta != nil) it also decodes the two meta records.
type recordVisitor struct {
	path string
	seed uint32
	seq  uint64
	d    digest
	meta *checker
	fmt  bool
}

func (v *recordVisitor) value(k, val []byte) error {
	p, crc, err := decodeRecord(v.seed, k, val)
	if err != nil {
		return corruptf("bucket %s: key %x: %v", v.path, k, err)
	}
	v.d.add(crc)
	if v.meta == nil {
		return nil
	}
	switch {
	case bytes.Equal(k, metaKeyFormat):
		ver, err := decodeMetaFormat(p)
		if err != nil {
			return corruptf("meta/format: %v", err)
		}
		if ver != layoutVersion {
			return formatVersionError(ver)
		}
		v.fmt = true
	case bytes.Equal(k, metaKeyKeyGroups):
		n, err := decodeMetaKeyGroups(p)
		if err != nil {
			return corruptf("meta/keygroups: %v", err)
		}
		v.meta.keyGroups = n
	default:
		return corruptf("bucket meta: unknown key %q", k)
	}
	return nil
}

func (v *recordVisitor) bucket(k []byte, _ uint64) (visitor, error) {
	return nil, corruptf("bucket %s: a nested bucket %q where only records belong", v.path, k)
}

func (v *recordVisitor) done() error {
	if want := digestOf(v.seq); v.d != want {
		return corruptf("bucket %s: holds %d records (xor %08x), its digest says %d (xor %08x)",
			v.path, v.d.count, v.d.xor, want.count, want.xor)
	}
	if v.meta != nil && !v.fmt {
		return corruptf("bucket meta: no format record")
	}
	return nil
}
