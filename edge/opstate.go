package edge

import (
	"bytes"
	"errors"
	"slices"

	"github.com/runnel-io/runnel/state"
)

// Operator state in state.db. A pipeline's state is a log per key group,
// compacted incrementally:
//
//   - A checkpoint appends, per key group its changes touch, one op record
//     (the group's snapshot operations of that checkpoint, in order) to the
//     system bucket "oplog/<pipeline>". It is a handful of appends at the
//     end of each group's run of keys, whatever the number of dirty keys,
//     instead of a B-tree update per key.
//   - Each group has a base in "base/<pipeline>": its entries as of the
//     last compaction. Compacting a group reads its base and op records,
//     applies them in order, writes the new base and deletes the folded
//     records. Every checkpoint compacts the groups with the most op bytes
//     that are due, within a byte budget, so the records of a group stay
//     bounded and no checkpoint pays for the whole state.
//   - Restore materializes base + op records per group and hands every
//     surviving entry to the runtime.
//
// All of it is written in the checkpoint's transaction, with the outbox and
// the log position. The byte layout is in docs/formats/state-layout.md.

// Compaction policy.
const (
	// A group is due for compaction when its op records hold at least
	// foldMinBytes and half its base, or when it has maxOpRecords of them.
	foldMinBytes = 64 << 10
	maxOpRecords = 256
	// compactBudget bounds the bytes (base + op records) one checkpoint
	// folds: at least this, or compactPerAppend times the bytes it appends,
	// so that folding keeps up with appending. The most-due group is folded
	// even if it alone is over budget.
	compactBudget    = 1 << 20
	compactPerAppend = 4
)

func oplogBucket(pipeline string) string { return "oplog/" + pipeline }
func baseBucket(pipeline string) string  { return "base/" + pipeline }

// pipeState is what the writer knows of a pipeline's stored state: per
// key group, the bytes and chunks of its base and its op records. It is
// loaded by the restore and kept by the writer (one goroutine at a time).
type pipeState struct {
	path   string // state.db, for errors
	name   string
	groups []groupStat
	f      *folder // scratch for compaction
	// val is scratch for the stored values (a chunk behind its header),
	// kept while small: a checkpoint writes a few hundred of them.
	val []byte

	// The compaction policy (the constants above; tests vary them).
	foldMin, budget, perAppend int64
	maxRecs                    int
}

type groupStat struct {
	base       int64 // bytes of the base's chunks
	baseChunks int
	ops        int64 // bytes of the op records' chunks
	recs       int   // op records (checkpoints)
}

func newPipeState(path, name string, groups int) *pipeState {
	return &pipeState{path: path, name: name, groups: make([]groupStat, groups),
		foldMin: foldMinBytes, budget: compactBudget, perAppend: compactPerAppend, maxRecs: maxOpRecords}
}

func (s groupStat) has() bool { return s.baseChunks > 0 || s.recs > 0 }

func (ps *pipeState) due(s groupStat) bool {
	return s.recs > 0 && (s.recs >= ps.maxRecs || (s.ops >= ps.foldMin && 2*s.ops >= s.base))
}

// write appends the checkpoint's op records of the pipeline and compacts
// what is due, in tx. It returns the bytes of op records appended and of
// the bases compaction wrote. It drops l's chunks as it stores them. On error
// the transaction must be rolled back and ps discarded.
func (ps *pipeState) write(tx *state.Tx, l *opLog, id uint64) (appended, rebased int64, err error) {
	ob, err := tx.Bucket(oplogBucket(ps.name))
	if err != nil {
		return 0, 0, err
	}
	l.finish(func(g int) bool { return ps.groups[g].has() })
	var key []byte
	val := ps.val
	for g := range l.groups {
		chunks := l.groups[g].chunks
		for j, c := range chunks {
			key = opKey(key[:0], g, id, j)
			val = chunkHeader(val[:0], opRecordFormat, len(chunks), 0, false)
			val = append(val, c...)
			if err := ob.Put(key, val); err != nil {
				return 0, 0, err
			}
			ps.groups[g].ops += int64(len(val))
			appended += int64(len(val))
		}
		if len(chunks) > 0 {
			ps.groups[g].recs++
		}
		// The store copied them: a collection during the rest of the
		// transaction (compaction, bbolt's spill) may free them.
		l.groups[g].chunks = nil
	}
	ps.keepVal(val)
	bb, err := tx.Bucket(baseBucket(ps.name))
	if err != nil {
		return 0, 0, err
	}
	budget := max(ps.budget, ps.perAppend*appended)
	for _, g := range ps.pick() {
		if budget <= 0 {
			break
		}
		budget -= ps.groups[g].base + ps.groups[g].ops
		if err := ps.compact(ob, bb, g); err != nil {
			return 0, 0, err
		}
		rebased += ps.groups[g].base
	}
	return appended, rebased, nil
}

// pick returns the groups due for compaction, most op bytes first.
func (ps *pipeState) pick() []int {
	var due []int
	for g, s := range ps.groups {
		if ps.due(s) {
			due = append(due, g)
		}
	}
	slices.SortFunc(due, func(a, b int) int {
		if d := ps.groups[b].ops - ps.groups[a].ops; d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		return a - b
	})
	return due
}

// compact folds group g's op records into a new base.
func (ps *pipeState) compact(ob, bb *state.Bucket, g int) error {
	if ps.f == nil {
		ps.f = newFolder()
	}
	f := ps.f
	f.reset()
	defer f.reset() // values point into the transaction
	var folded [][]byte
	var through uint64
	base, err := ps.load(ob, bb, g, f, nil, func(key []byte, id uint64) {
		folded = append(folded, bytes.Clone(key))
		through = id
	})
	if err != nil {
		return err
	}
	oldChunks := len(base)
	chunks, bad, why := f.fold(base, int(ps.groups[g].base+ps.groups[g].ops))
	if why != "" {
		return errBadState(ps.path, baseBucket(ps.name), baseKey(nil, g, bad), "%s", why)
	}
	st := groupStat{baseChunks: len(chunks)}
	var key []byte
	val := ps.val
	defer func() { ps.keepVal(val) }()
	for j, c := range chunks {
		key = baseKey(key[:0], g, j)
		val = chunkHeader(val[:0], baseFormat, len(chunks), through, true)
		val = append(val, c...)
		if err := bb.Put(key, val); err != nil {
			return err
		}
		chunks[j] = nil // the store copied it
		st.base += int64(len(val))
	}
	for j := len(chunks); j < oldChunks; j++ {
		if err := bb.Delete(baseKey(key[:0], g, j)); err != nil {
			return err
		}
	}
	for _, k := range folded {
		if err := ob.Delete(k); err != nil {
			return err
		}
	}
	ps.groups[g] = st
	return nil
}

// keepVal keeps b as the value scratch unless it grew past maxScratch.
func (ps *pipeState) keepVal(b []byte) {
	if cap(b) <= maxScratch {
		ps.val = b[:0]
	}
}

// maxScratch bounds the value scratch a pipeState keeps between uses.
const maxScratch = 256 << 10

var errStop = errors.New("stop")

// load reads group g's op records into f, in order, and returns the chunk
// bodies of its base (their headers checked, their entries not yet: see
// eachBase). It sets the group's statistics in st (if not nil). rec, if not
// nil, is called with the key of every op record chunk read and its
// checkpoint id. Damage gives an error of the state.ErrCorrupt class.
func (ps *pipeState) load(ob, bb *state.Bucket, g int, f *folder, st *groupStat, rec func(key []byte, id uint64)) ([][]byte, error) {
	var s groupStat
	prefix := baseKey(nil, g, 0)[:2]
	want, chunks := 0, 0
	var base [][]byte
	bname := baseBucket(ps.name)
	err := bb.ForEach(prefix, func(k, v []byte) error {
		if !bytes.HasPrefix(k, prefix) {
			return errStop
		}
		if len(k) != 4 {
			return errBadState(ps.path, bname, k, "key of %d bytes", len(k))
		}
		n, _, body, why := readHeader(v, baseFormat, true)
		switch {
		case why != "":
		case chunks == 0:
			want = n
		case n != want:
			why = "chunk count differs from the first chunk's"
		}
		if why == "" && int(k[2])<<8|int(k[3]) != chunks {
			why = "chunk out of sequence"
		}
		if why != "" {
			return errBadState(ps.path, bname, k, "%s", why)
		}
		base = append(base, body)
		chunks++
		s.base += int64(len(v))
		return nil
	})
	if err != nil && err != errStop {
		return nil, err
	}
	if chunks != want {
		return nil, errBadState(ps.path, bname, prefix, "base of group %d has %d chunks of %d", g, chunks, want)
	}
	s.baseChunks = chunks
	oname := oplogBucket(ps.name)
	var id uint64
	want, chunks = 0, 0
	err = ob.ForEach(prefix, func(k, v []byte) error {
		if !bytes.HasPrefix(k, prefix) {
			return errStop
		}
		if len(k) != 12 {
			return errBadState(ps.path, oname, k, "key of %d bytes", len(k))
		}
		kid, kc := be64(k[2:]), int(k[10])<<8|int(k[11])
		n, _, body, why := readHeader(v, opRecordFormat, false)
		switch {
		case why != "":
		case chunks == want: // the first chunk of a record
			if kid <= id && s.recs > 0 || kc != 0 {
				why = "record out of sequence"
			}
			id, want, chunks = kid, n, 0
			s.recs++
		case kid != id || kc != chunks || n != want:
			why = "chunk out of sequence"
		}
		if why == "" {
			why = decodeOps(body, f)
		}
		if why != "" {
			return errBadState(ps.path, oname, k, "%s", why)
		}
		chunks++
		s.ops += int64(len(v))
		if rec != nil {
			rec(k, kid)
		}
		return nil
	})
	if err != nil && err != errStop {
		return nil, err
	}
	if chunks != want {
		return nil, errBadState(ps.path, oname, opKey(nil, g, id, 0), "record has %d chunks of %d", chunks, want)
	}
	if st != nil {
		*st = s
	}
	return base, nil
}

func be64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// restore reads the pipeline's state, group by group, calling fn with every
// entry (hash 0: the runtime recomputes it), and sets ps's statistics.
func (ps *pipeState) restore(st *state.Store, fn func(hash uint64, key, value []byte) error) error {
	return st.View(func(tx *state.Tx) error {
		ob, err := tx.Bucket(oplogBucket(ps.name))
		if err != nil {
			return err
		}
		bb, err := tx.Bucket(baseBucket(ps.name))
		if err != nil {
			return err
		}
		f := newFolder()
		for g := range ps.groups {
			f.reset()
			base, err := ps.load(ob, bb, g, f, &ps.groups[g], nil)
			if err != nil {
				return err
			}
			bad, why, err := f.materialize(base, func(k, v []byte) error { return fn(0, k, v) })
			if why != "" {
				return errBadState(ps.path, baseBucket(ps.name), baseKey(nil, g, bad), "%s", why)
			}
			if err != nil {
				return err
			}
			// The group's entries are in the runtime now: its pages
			// need not stay mapped (a state larger than memory restores
			// within the bound, operators.Options.Restore).
			if err := tx.ReleaseOver(mappedBudget); err != nil {
				return err
			}
		}
		return nil
	})
}
