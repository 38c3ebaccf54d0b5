package operators

import (
	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// batch carries records from the ingesting goroutine to one worker, in
// columns, so a batch is a few reusable slices rather than a slice of
// pointers.
type batch struct {
	n       int
	times   []int64
	wms     []int64 // watermark after each record arrived
	offsets []int64
	hashes  []uint64
	keyEnd  []int
	keys    []byte
	nums    []float64 // the Set's NumInputs per record
	hsh     []uint64  // the Set's HashInputs per record
	wm      int64     // watermark when the batch was sent
	barrier uint64    // checkpoint barrier after the batch's records, 0 for none
	eof     bool      // last batch: the worker exits after it
}

func newBatch(size, nNum, nHash int) *batch {
	return &batch{
		times: make([]int64, 0, size), wms: make([]int64, 0, size), offsets: make([]int64, 0, size),
		hashes: make([]uint64, 0, size), keyEnd: make([]int, 0, size), keys: make([]byte, 0, size*16),
		nums: make([]float64, 0, size*nNum), hsh: make([]uint64, 0, size*nHash),
	}
}

func (b *batch) reset() {
	b.n = 0
	b.times, b.wms, b.offsets, b.hashes = b.times[:0], b.wms[:0], b.offsets[:0], b.hashes[:0]
	b.keyEnd, b.keys, b.nums, b.hsh = b.keyEnd[:0], b.keys[:0], b.nums[:0], b.hsh[:0]
	b.wm = window.MinTime
	b.barrier = 0
	b.eof = false
}

func (b *batch) add(r *Record, wm, offset int64) {
	b.n++
	b.times = append(b.times, r.Time)
	b.wms = append(b.wms, wm)
	b.offsets = append(b.offsets, offset)
	b.hashes = append(b.hashes, r.Hash)
	b.keys = append(b.keys, r.Key...)
	b.keyEnd = append(b.keyEnd, len(b.keys))
	b.nums = append(b.nums, r.Nums...)
	b.hsh = append(b.hsh, r.Hashes...)
}

func (b *batch) key(i int) []byte {
	start := 0
	if i > 0 {
		start = b.keyEnd[i-1]
	}
	return b.keys[start:b.keyEnd[i]]
}

// outBatch carries outputs to the Sink goroutine. Entries point into one
// append-only arena, so earlier entries stay valid while it grows.
type outBatch struct {
	results []Result
	late    []Late
	dead    []DeadLetter
	arena   []byte
	barrier uint64   // a barrier part follows these outputs, 0 for none
	snap    *snapBuf // the part's snapshot operations
}

const (
	outBatchEntries = 512
	outBatchBytes   = 256 << 10
)

func (ob *outBatch) full() bool {
	return len(ob.results)+len(ob.late)+len(ob.dead) >= outBatchEntries || len(ob.arena) >= outBatchBytes
}

func (ob *outBatch) bytes(p []byte) []byte {
	start := len(ob.arena)
	ob.arena = append(ob.arena, p...)
	return ob.arena[start:len(ob.arena):len(ob.arena)]
}

func (ob *outBatch) addResult(set *aggregate.Set, r *window.Result, epoch uint64) {
	start := len(ob.arena)
	ob.arena = append(ob.arena, r.Key...)
	key := ob.arena[start:len(ob.arena):len(ob.arena)]
	start = len(ob.arena)
	ob.arena = set.AppendEncode(ob.arena, r.State)
	st := ob.arena[start:len(ob.arena):len(ob.arena)]
	ob.results = append(ob.results, Result{Key: key, Hash: r.Hash, Start: r.Start, End: r.End, Version: r.Version, State: st, Epoch: epoch})
}

func (ob *outBatch) addLate(key []byte, t, wm, offset int64, epoch uint64) {
	ob.late = append(ob.late, Late{Key: ob.bytes(key), Time: t, Watermark: wm, Offset: offset, Epoch: epoch})
}

func (ob *outBatch) addDead(offset int64, topic string, payload []byte, reason string, epoch uint64) {
	ob.dead = append(ob.dead, DeadLetter{Offset: offset, Topic: topic, Payload: ob.bytes(payload), Reason: reason, Epoch: epoch})
}

func (ob *outBatch) deliver(s Sink) error {
	for i := range ob.dead {
		if err := s.Dead(&ob.dead[i]); err != nil {
			return err
		}
	}
	for i := range ob.results {
		if err := s.Result(&ob.results[i]); err != nil {
			return err
		}
	}
	for i := range ob.late {
		if err := s.Late(&ob.late[i]); err != nil {
			return err
		}
	}
	return nil
}

func (ob *outBatch) reset() {
	clear(ob.results)
	clear(ob.late)
	clear(ob.dead)
	ob.results, ob.late, ob.dead, ob.arena = ob.results[:0], ob.late[:0], ob.dead[:0], ob.arena[:0]
	ob.barrier, ob.snap = 0, nil
}
