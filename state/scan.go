package state

import (
	"bytes"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// scanChunk bounds how many entries Scan copies out of one bbolt read
// transaction. Scan does not hold a transaction while it calls fn, so fn
// may call Get (which may read the file) without the bbolt deadlock that
// nested transactions on one goroutine risk.
const scanChunk = 256

// overlayItem is a cached entry that is not clean: its value (or deletion)
// wins over the file's.
type overlayItem struct {
	key string
	val []byte
	del bool
}

// Scan calls fn for every key of group in ascending key order, with its
// value: the cache's for keys changed since the last commit (a deleted key
// is skipped even though the file still has it), the file's otherwise. If
// fn returns an error, Scan stops and returns it.
//
// key and value are valid only until fn returns and must not be modified.
// fn may call Get, Put and Delete, on this group too. A key changed while
// the scan runs (by fn or by another goroutine) is seen with its old value,
// its new value, or, if it was added or deleted, possibly not at all; every
// other key is seen exactly once, with its value.
func (n *Namespace) Scan(group int, fn func(key, value []byte) error) error {
	return n.ScanPrefix(group, nil, fn)
}

// ScanPrefix is Scan restricted to the keys that start with prefix.
func (n *Namespace) ScanPrefix(group int, prefix []byte, fn func(key, value []byte) error) error {
	s := n.s
	if err := s.checkGroup(group); err != nil {
		return err
	}
	ov := n.overlay(group, prefix)
	seed := groupSeed(n.seed, group)

	var (
		buf   []byte      // the chunk's keys and values, back to back
		items []chunkItem // where each entry of the chunk is in buf
		last  []byte      // last key of the previous chunk
		oi    int         // next overlay item
		done  bool        // no more keys on disk
		first = true
	)
	for !done {
		buf, items = buf[:0], items[:0]
		err := s.view("scan", func(tx *bolt.Tx) error {
			b := groupBucket(tx, n.bname, group)
			if b == nil {
				done = true
				return nil
			}
			c := b.Cursor()
			var k, rec []byte
			if first {
				k, rec = c.Seek(prefix)
			} else if k, rec = c.Seek(last); bytes.Equal(k, last) {
				k, rec = c.Next()
			}
			for ; k != nil && len(items) < scanChunk; k, rec = c.Next() {
				if !bytes.HasPrefix(k, prefix) {
					done = true
					return nil
				}
				if rec == nil {
					return corruptf("state: scan %s: namespace %q group %d: nested bucket %x where only records belong", s.path, n.name, group, k)
				}
				p, _, err := decodeRecord(seed, k, rec)
				if err != nil {
					return corruptf("state: scan %s: namespace %q group %d key %x: %v", s.path, n.name, group, k, err)
				}
				items = append(items, chunkItem{off: len(buf), klen: len(k), vlen: len(p)})
				buf = append(append(buf, k...), p...)
			}
			if k == nil {
				done = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		first = false
		for _, it := range items {
			k := buf[it.off : it.off+it.klen : it.off+it.klen]
			v := buf[it.off+it.klen : it.off+it.klen+it.vlen : it.off+it.klen+it.vlen]
			for oi < len(ov) && compareKey(ov[oi].key, k) < 0 {
				if err := emit(ov[oi], fn); err != nil {
					return err
				}
				oi++
			}
			if oi < len(ov) && compareKey(ov[oi].key, k) == 0 {
				err := emit(ov[oi], fn)
				oi++
				if err != nil {
					return err
				}
				continue
			}
			if err := fn(k, v); err != nil {
				return err
			}
		}
		if len(items) > 0 {
			it := items[len(items)-1]
			last = append(last[:0], buf[it.off:it.off+it.klen]...)
		}
	}
	for ; oi < len(ov); oi++ {
		if err := emit(ov[oi], fn); err != nil {
			return err
		}
	}
	return nil
}

// chunkItem locates one entry of a scan chunk in the chunk's buffer.
type chunkItem struct{ off, klen, vlen int }

func emit(it overlayItem, fn func(key, value []byte) error) error {
	if it.del {
		return nil
	}
	return fn([]byte(it.key), it.val)
}

// overlay returns the namespace's entries in group that are dirty or in
// flight, and match prefix, sorted by key.
func (n *Namespace) overlay(group int, prefix []byte) []overlayItem {
	sh := &n.s.shards[group]
	sh.mu.Lock()
	var ov []overlayItem
	add := func(e *entry) {
		if e.ns == n && strings.HasPrefix(e.key, string(prefix)) {
			c := e.cur()
			ov = append(ov, overlayItem{key: e.key, val: c.val, del: c.del})
		}
	}
	for _, e := range sh.dirty {
		add(e)
	}
	if sh.inFlight {
		for _, e := range sh.flight {
			// An entry dirtied again is in sh.dirty already.
			if e.epoch == sh.flightEpoch {
				add(e)
			}
		}
	}
	sh.mu.Unlock()
	slices.SortFunc(ov, func(a, b overlayItem) int { return strings.Compare(a.key, b.key) })
	return ov
}

// compareKey compares a string key with a byte key without converting
// either.
func compareKey(a string, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// DeletePrefix deletes every key of group that starts with prefix (every
// key, for an empty prefix) and returns how many it deleted. It is a Scan
// that deletes as it goes, so it costs a Scan plus one Delete per key; like
// Delete, the deletions reach the file at the next commit.
func (n *Namespace) DeletePrefix(group int, prefix []byte) (int, error) {
	deleted := 0
	err := n.ScanPrefix(group, prefix, func(k, _ []byte) error {
		deleted++
		return n.Delete(group, k)
	})
	return deleted, err
}
