package state

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CommitStats describes one commit.
type CommitStats struct {
	Groups   int           // key groups whose dirty entries the commit took
	Puts     int           // values written
	Deletes  int           // keys deleted (deletions of absent keys are not counted)
	Bytes    int64         // bytes of keys and records handed to bbolt
	Duration time.Duration // from the start of Write to the end of the fsync
}

// Handoff is the dirty state of some key groups, taken out of the cache by
// BeginCommit so that Puts can go on while it is written. Call exactly one
// of Write and Abort (Join folds a Handoff into another). Until then its
// groups cannot be taken by another BeginCommit (ErrInFlight).
//
// A Handoff is not safe for concurrent use, but it may be handed to, and
// written by, any goroutine.
type Handoff struct {
	s     *Store
	parts []part
	done  bool
}

// part is one group's share of a handoff.
type part struct {
	group   int
	epoch   uint64
	entries []*entry
}

// Len returns the number of entries (puts and deletes) in the handoff.
func (h *Handoff) Len() int {
	n := 0
	for _, p := range h.parts {
		n += len(p.entries)
	}
	return n
}

// Commit writes every dirty entry of every namespace, and whatever fn writes
// through tx, in one bbolt transaction, then fsyncs: all of it is durable
// or none of it. fn may be nil. It is BeginCommit followed by Write.
func (s *Store) Commit(fn func(tx *Tx) error) (CommitStats, error) {
	h, err := s.BeginCommit()
	if err != nil {
		return CommitStats{}, err
	}
	return h.Write(fn)
}

// BeginCommit takes the dirty entries of every key group; see
// BeginCommitGroups.
func (s *Store) BeginCommit() (*Handoff, error) { return s.BeginCommitGroups(0, s.groups) }

// BeginCommitGroups takes the dirty entries of key groups [lo, hi) out of
// the cache and returns them as a Handoff, in time proportional to the
// number of groups, not entries. It is an atomic cut: it holds the locks of
// all the groups while it takes them. Afterwards Get, Put, Delete and Scan
// go on as before, and see the handed-off values until later Puts replace
// them; those later Puts belong to the next commit, which (as commits of a
// group are serialized) also wins on disk.
//
// A worker that owns a range of groups calls it when it has seen a
// checkpoint barrier on all its inputs; the checkpoint writer Joins the
// workers' handoffs and Writes them as one transaction.
func (s *Store) BeginCommitGroups(lo, hi int) (*Handoff, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if lo < 0 || hi > s.groups || lo > hi {
		return nil, fmt.Errorf("%w: range [%d, %d) not within [0, %d)", ErrGroup, lo, hi, s.groups)
	}
	for g := lo; g < hi; g++ {
		s.shards[g].mu.Lock()
	}
	defer func() {
		for g := lo; g < hi; g++ {
			s.shards[g].mu.Unlock()
		}
	}()
	for g := lo; g < hi; g++ {
		if s.shards[g].inFlight {
			return nil, fmt.Errorf("%w: key group %d", ErrInFlight, g)
		}
	}
	h := &Handoff{s: s, parts: make([]part, 0, hi-lo)}
	for g := lo; g < hi; g++ {
		sh := &s.shards[g]
		if len(sh.dirty) == 0 {
			continue // nothing to hand off; the group stays free
		}
		h.parts = append(h.parts, part{group: g, epoch: sh.open, entries: sh.dirty})
		sh.flight, sh.flightEpoch, sh.inFlight = sh.dirty, sh.open, true
		sh.dirty, sh.spare = sh.spare, nil
		sh.open++
		sh.flightBytes, sh.openBytes = sh.openBytes, 0
	}
	return h, nil
}

// Join moves other's groups into h, so that one Write commits both; other
// is spent. Both must come from the same Store.
func (h *Handoff) Join(other *Handoff) error {
	if h.done || other.done {
		return ErrHandoffDone
	}
	if h == other {
		return nil
	}
	if h.s != other.s {
		return fmt.Errorf("state: join: handoffs of different stores (%s and %s)", h.s.path, other.s.path)
	}
	h.parts = append(h.parts, other.parts...)
	other.parts, other.done = nil, true
	return nil
}

// Abort gives the handoff's entries back to the dirty set, as a failed
// Write does, without writing anything. It does nothing on a spent handoff.
func (h *Handoff) Abort() {
	if h.done {
		return
	}
	h.done = true
	h.finish(false)
}

// Write commits the handoff's entries, and whatever fn writes through tx,
// in one bbolt transaction, then fsyncs (unless Options.NoSync). fn may be
// nil. On success the entries are clean, unless a later Put dirtied them
// again. On failure (from bbolt, the disk, or fn) nothing of it is on disk,
// the entries go back to the dirty set so that the next commit retries
// them, and the error says so.
//
// Write may run on any goroutine, concurrently with Get, Put, Delete, Scan,
// BeginCommit of other groups, View and Update.
func (h *Handoff) Write(fn func(tx *Tx) error) (CommitStats, error) {
	if h.done {
		return CommitStats{}, ErrHandoffDone
	}
	h.done = true
	s := h.s
	start := time.Now()
	st := CommitStats{Groups: len(h.parts)}
	if s.closed.Load() {
		h.finish(false)
		return st, ErrClosed
	}
	if p := s.poisoned.Load(); p != nil {
		h.finish(false)
		return st, *p
	}
	work := h.sorted()
	// finish runs even if fn panics: the panic goes on to the caller, the
	// entries back to the dirty set.
	ok := false
	defer func() { h.finish(ok) }()
	err := s.update("commit", func(btx *bolt.Tx) error {
		st.Puts, st.Deletes, st.Bytes = 0, 0, 0 // bbolt does not retry, but stay exact
		if err := writeEntries(btx, work, &st); err != nil {
			return err
		}
		if fn != nil {
			return callUser(fn, newTx(btx))
		}
		return nil
	})
	st.Duration = time.Since(start)
	ok = err == nil
	if err != nil {
		return st, fmt.Errorf("state: commit of %d entries in %d key groups failed; they stay dirty for the next commit: %w",
			h.Len(), len(h.parts), err)
	}
	return st, nil
}

// run is the entries of one (group, namespace), sorted by key, with the slot
// the handoff reads.
type run struct {
	group   int
	ns      *Namespace
	slot    uint64
	entries []*entry
}

// sorted groups the handoff's entries into runs. It works on copies of the
// lists: Scan may read the originals under the group locks meanwhile.
func (h *Handoff) sorted() []run {
	var runs []run
	for _, p := range h.parts {
		es := slices.Clone(p.entries)
		slices.SortFunc(es, func(a, b *entry) int {
			if c := cmp.Compare(a.ns.id, b.ns.id); c != 0 {
				return c
			}
			return strings.Compare(a.key, b.key)
		})
		for i := 0; i < len(es); {
			j := i + 1
			for j < len(es) && es[j].ns == es[i].ns {
				j++
			}
			runs = append(runs, run{group: p.group, ns: es[i].ns, slot: p.epoch & 1, entries: es[i:j]})
			i = j
		}
	}
	return runs
}

// writeEntries puts and deletes the runs' entries and keeps each group
// bucket's digest current.
func writeEntries(btx *bolt.Tx, runs []run, st *CommitStats) error {
	stateB := btx.Bucket(bucketState)
	if stateB == nil {
		return corruptf("state: top-level bucket state missing")
	}
	// bbolt keeps keys and values until the transaction ends, so they are
	// encoded into arenas that live as long.
	var arena []byte
	alloc := func(n int) []byte {
		if cap(arena)-len(arena) < n {
			arena = make([]byte, 0, max(n, 1<<20))
		}
		b := arena[len(arena) : len(arena) : len(arena)+n]
		arena = arena[:len(arena)+n]
		return b
	}
	for _, r := range runs {
		gk := groupKey(r.group)
		var gb *bolt.Bucket
		if nb := stateB.Bucket(r.ns.bname); nb != nil {
			gb = nb.Bucket(gk[:])
		}
		if gb == nil {
			if onlyDeletes(r) {
				continue // nothing on disk to delete
			}
			nb, err := stateB.CreateBucketIfNotExists(r.ns.bname)
			if err != nil {
				return fmt.Errorf("namespace %q: %w", r.ns.name, err)
			}
			if gb, err = nb.CreateBucketIfNotExists(gk[:]); err != nil {
				return fmt.Errorf("namespace %q group %d: %w", r.ns.name, r.group, err)
			}
		}
		d := digestOf(gb.Sequence())
		seed := groupSeed(r.ns.seed, r.group)
		for _, e := range r.entries {
			sl := e.slots[r.slot]
			buf := alloc(len(e.key))
			buf = append(buf, e.key...)
			old := gb.Get(buf)
			if sl.del {
				if old == nil {
					continue
				}
				if err := gb.Delete(buf); err != nil {
					return fmt.Errorf("namespace %q group %d: delete %x: %w", r.ns.name, r.group, buf, err)
				}
				d.remove(storedCRC(old))
				st.Deletes++
				continue
			}
			if old != nil {
				d.remove(storedCRC(old))
			}
			rec, crc := appendRecord(alloc(recordSize(len(sl.val))), seed, buf, sl.val)
			if err := gb.Put(buf, rec); err != nil {
				return fmt.Errorf("namespace %q group %d: put %x: %w", r.ns.name, r.group, buf, err)
			}
			d.add(crc)
			st.Puts++
			st.Bytes += int64(len(buf) + len(rec))
		}
		if err := gb.SetSequence(d.seq()); err != nil {
			return err
		}
	}
	return nil
}

func onlyDeletes(r run) bool {
	for _, e := range r.entries {
		if !e.slots[r.slot].del {
			return false
		}
	}
	return true
}

// finish ends the handoff: on success its epochs are durable, its entries
// clean; on failure its entries not dirtied again since go back to the
// dirty set of the group's open epoch.
func (h *Handoff) finish(ok bool) {
	s := h.s
	for _, p := range h.parts {
		sh := &s.shards[p.group]
		sh.mu.Lock()
		if ok {
			sh.durable = p.epoch
			sh.cleanBytes += sh.flightBytes
			s.clean.Add(sh.flightBytes)
		} else {
			for _, e := range p.entries {
				if e.epoch == p.epoch {
					e.slots[sh.open&1] = e.slots[p.epoch&1]
					e.epoch = sh.open
					sh.dirty = append(sh.dirty, e)
				}
			}
			sh.openBytes += sh.flightBytes
		}
		sh.flightBytes = 0
		sh.flight, sh.inFlight = nil, false
		clear(p.entries)
		if sh.spare == nil {
			sh.spare = p.entries[:0]
		}
		sh.mu.Unlock()
	}
	if ok {
		// Entries just became clean: the cache may be over budget.
		for _, p := range h.parts {
			s.maybeEvict(p.group)
		}
	}
}
