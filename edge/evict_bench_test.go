package edge

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// BenchmarkKeyReload measures one evicted key's read back from the state
// file (keyReader.Load, what a reload costs the worker beyond decoding the
// key's few entries): 10^6 keys of operator state, one partial each, as
// BenchmarkCheckpoint leaves the store (bases plus the op records of 1%
// dirty checkpoints, compaction in steady state).
func BenchmarkKeyReload(b *testing.B) {
	const keys, dirty = 1_000_000, 10_000
	n := benchNode(b)
	defer n.closeAll(b.Context())
	pipe := n.pipes[0].p.Name
	groups := n.store.KeyGroups()
	rng := rand.New(rand.NewPCG(1, 2))
	dev := func(i int) []byte { return fmt.Appendf(nil, "sensor-%07d", i) }
	var kb, vb []byte
	put := func(l *opLog, i int, gen uint64) {
		kb = append(kb[:0], 's')
		kb = binary.BigEndian.AppendUint64(kb, uint64(1_767_225_660_000)^1<<63)
		kb = append(kb, dev(i)...)
		vb = binary.LittleEndian.AppendUint64(vb[:0], gen)
		vb = append(vb, make([]byte, 16)...)
		l.Put(xxhash.Sum64(dev(i)), kb, vb)
	}
	id := uint64(0)
	commit := func(l *opLog) {
		id++
		if err := n.commit(id, []ckptPart{{id: id, isPos: true}, {id: id, pipe: pipe, ops: l}}); err != nil {
			b.Fatal(err)
		}
	}
	all := newOpLog(groups)
	for i := range keys {
		put(all, i, 0)
	}
	commit(all)
	for range 3 * groups / 2 {
		l := newOpLog(groups)
		for range dirty {
			put(l, rng.IntN(keys), id)
		}
		commit(l)
	}
	r := newKeyReader(n.store, pipe)
	found := 0
	// Index every group's chunks first (a reload after compaction or a
	// new op record indexes that chunk once: BenchmarkKeyReload/cold).
	for i := range 100 * groups {
		k := dev(i)
		if err := r.Load(xxhash.Sum64(k), k, func(_, _ []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		k := dev(rng.IntN(keys))
		if err := r.Load(xxhash.Sum64(k), k, func(_, _ []byte) error { found++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	if found < b.N {
		b.Fatalf("%d of %d keys found", found, b.N)
	}
}
