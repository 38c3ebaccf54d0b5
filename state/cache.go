package state

import (
	"bytes"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The write-behind cache.
//
// Each key group is a shard with its own lock, maps (one per namespace), a
// CLOCK ring over its cached entries for eviction, and its commit epochs.
//
// Epochs make the handoff to a commit O(1) per group. A group's Puts go into
// epoch open. BeginCommit takes the list of entries dirtied in open as the
// handoff's list, and opens open+1. durable is the newest epoch known to be
// on disk: an entry whose epoch is <= durable is clean. So finishing a commit
// is one assignment (durable = its epoch), with no walk over its entries.
//
// Each entry has two value slots, and the current one is slots[epoch&1]. A
// handoff of epoch e reads only slot e&1 of its entries; a Put while it runs
// moves the entry to epoch e+1 and writes slot (e+1)&1. The writer goroutine
// and the Put therefore never touch the same memory, and the writer needs no
// lock. At most one handoff per group is in flight, which is what keeps a
// Put from reaching slot e&1 again (that would take epoch e+2).
type shard struct {
	mu   sync.Mutex
	maps []map[string]*entry // by Namespace.id
	ring []*entry            // every cached entry, for CLOCK
	hand int

	dirty       []*entry // entries first dirtied in epoch open
	spare       []*entry // an emptied list to become the next dirty list
	flight      []*entry // the in-flight handoff's list; read only here
	flightEpoch uint64
	inFlight    bool
	open        uint64
	durable     uint64

	// Accounted bytes by state. open and flight entries are never evicted.
	openBytes, flightBytes, cleanBytes int64

	hits, misses, evictions uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// slot is one version of an entry's value. del marks a deletion (or, in a
// clean entry, a key known to be absent from the file).
type slot struct {
	val []byte
	del bool
}

type entry struct {
	key   string
	ns    *Namespace
	slots [2]slot
	epoch uint64
	size  int64 // accounted bytes
	ring  int   // index in shard.ring
	ref   bool  // CLOCK reference bit
}

func (e *entry) cur() slot { return e.slots[e.epoch&1] }

// entryOverhead approximates what an entry costs beyond its key and value:
// the struct, its map slot and its ring slot.
const entryOverhead = 160

func entrySize(key, val int) int64 { return int64(entryOverhead + key + val) }

func (sh *shard) nsMap(id int) map[string]*entry {
	for len(sh.maps) <= id {
		sh.maps = append(sh.maps, nil)
	}
	m := sh.maps[id]
	if m == nil {
		m = make(map[string]*entry)
		sh.maps[id] = m
	}
	return m
}

func (sh *shard) insert(m map[string]*entry, e *entry) {
	m[e.key] = e
	e.ring = len(sh.ring)
	e.ref = true
	sh.ring = append(sh.ring, e)
}

// Get returns the value of key in group: from the cache, or else from the
// file (then cached as clean). ok is false if the key has no value. The
// returned slice belongs to the store: the caller must not modify it. It
// stays valid and unchanged after later calls, because the store never
// writes into a value; a later Put replaces it with another slice.
func (n *Namespace) Get(group int, key []byte) (value []byte, ok bool, err error) {
	s := n.s
	if err := s.checkKey(group, key); err != nil {
		return nil, false, err
	}
	sh := &s.shards[group]
	sh.mu.Lock()
	m := sh.nsMap(n.id)
	if e, hit := m[string(key)]; hit {
		e.ref = true
		sh.hits++
		c := e.cur()
		sh.mu.Unlock()
		return c.val, !c.del, nil
	}
	sh.misses++
	// The read holds the group's lock, so no Put of this key can slip in
	// between reading the file and caching what it said.
	val, found, err := s.readKey(n, group, key)
	if err != nil {
		sh.mu.Unlock()
		return nil, false, err
	}
	e := &entry{key: string(key), ns: n, epoch: sh.durable, size: entrySize(len(key), len(val))}
	e.slots[e.epoch&1] = slot{val: val, del: !found}
	sh.insert(m, e)
	sh.cleanBytes += e.size
	s.clean.Add(e.size)
	s.bytes.Add(e.size)
	sh.mu.Unlock()
	s.maybeEvict(group)
	return val, found, nil
}

// readKey reads one record from the file and returns a copy of its payload.
func (s *Store) readKey(n *Namespace, group int, key []byte) (val []byte, found bool, err error) {
	err = s.view("get", func(tx *bolt.Tx) error {
		b := groupBucket(tx, n.bname, group)
		if b == nil {
			return nil
		}
		rec := b.Get(key)
		if rec == nil {
			return nil
		}
		p, _, err := decodeRecord(groupSeed(n.seed, group), key, rec)
		if err != nil {
			return corruptf("state: get %s: namespace %q group %d key %x: %v", s.path, n.name, group, key, err)
		}
		val, found = bytes.Clone(p), true
		return nil
	})
	return val, found, err
}

// Put sets key in group to value. The store takes ownership of value: the
// caller must not modify it after Put returns (but may keep reading it).
// The key is copied. The change reaches the file at the next commit of the
// group; until then it is dirty and is never evicted.
func (n *Namespace) Put(group int, key, value []byte) error {
	if err := n.s.checkKey(group, key); err != nil {
		return err
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrValueTooLarge, len(value), MaxValueSize)
	}
	n.set(group, key, value, false)
	return nil
}

// Delete removes key from group. It needs no read of the file: the deletion
// is recorded in the cache and applied at the next commit.
func (n *Namespace) Delete(group int, key []byte) error {
	if err := n.s.checkKey(group, key); err != nil {
		return err
	}
	n.set(group, key, nil, true)
	return nil
}

func (n *Namespace) set(group int, key, val []byte, del bool) {
	s := n.s
	sh := &s.shards[group]
	sh.mu.Lock()
	m := sh.nsMap(n.id)
	e, ok := m[string(key)]
	if !ok {
		e = &entry{key: string(key), ns: n, epoch: sh.open, size: entrySize(len(key), len(val))}
		e.slots[e.epoch&1] = slot{val: val, del: del}
		sh.insert(m, e)
		sh.dirty = append(sh.dirty, e)
		sh.openBytes += e.size
		s.bytes.Add(e.size)
		sh.mu.Unlock()
		s.maybeEvict(group)
		return
	}
	e.ref = true
	size := entrySize(len(key), len(val))
	switch {
	case e.epoch == sh.open:
		sh.openBytes += size - e.size
	case e.epoch > sh.durable:
		// In the in-flight handoff: leave its slot alone, move to open.
		sh.flightBytes -= e.size
		sh.openBytes += size
		e.epoch = sh.open
		sh.dirty = append(sh.dirty, e)
	default:
		if del && e.cur().del {
			sh.mu.Unlock()
			return // known absent already
		}
		sh.cleanBytes -= e.size
		s.clean.Add(-e.size)
		sh.openBytes += size
		e.epoch = sh.open
		sh.dirty = append(sh.dirty, e)
	}
	e.slots[e.epoch&1] = slot{val: val, del: del}
	delta := size - e.size
	e.size = size
	sh.mu.Unlock()
	if delta != 0 {
		s.bytes.Add(delta)
		if delta > 0 {
			s.maybeEvict(group)
		}
	}
}

// maybeEvict drops clean entries while the cache is over budget: first from
// the group that just grew (its lock is not contended by other workers),
// then round-robin over the others.
func (s *Store) maybeEvict(group int) {
	if s.bytes.Load() <= s.budget || s.clean.Load() <= 0 {
		return
	}
	s.evictFrom(group)
	for range len(s.shards) {
		if s.bytes.Load() <= s.budget || s.clean.Load() <= 0 {
			return
		}
		s.evictFrom(int(s.hand.Add(1) % uint32(len(s.shards))))
	}
}

func (s *Store) evictFrom(group int) {
	sh := &s.shards[group]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	over := s.bytes.Load() - s.budget
	if over <= 0 || sh.cleanBytes <= 0 {
		return
	}
	var freed int64
	for steps := 2 * len(sh.ring); steps > 0 && freed < over && sh.cleanBytes > 0; steps-- {
		if sh.hand >= len(sh.ring) {
			sh.hand = 0
		}
		e := sh.ring[sh.hand]
		if e.epoch > sh.durable {
			sh.hand++ // dirty or in flight
			continue
		}
		// Clean: nothing reads the other slot any more.
		e.slots[1-e.epoch&1] = slot{}
		if e.ref {
			e.ref = false
			sh.hand++
			continue
		}
		delete(sh.maps[e.ns.id], e.key)
		last := sh.ring[len(sh.ring)-1]
		sh.ring[sh.hand] = last
		last.ring = sh.hand
		sh.ring[len(sh.ring)-1] = nil
		sh.ring = sh.ring[:len(sh.ring)-1]
		sh.cleanBytes -= e.size
		sh.evictions++
		freed += e.size
	}
	s.clean.Add(-freed)
	s.bytes.Add(-freed)
}
