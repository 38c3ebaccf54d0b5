package operators

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// mapDedup is the reference: the window as a Go map of counts over the
// ring, as the first implementation had it.
type mapDedup struct {
	ring []uint64
	used []bool
	next int
	seen map[uint64]int
}

func (m *mapDedup) check(id uint64) bool {
	if m.seen[id] > 0 {
		return true
	}
	if m.used[m.next] {
		old := m.ring[m.next]
		if m.seen[old]--; m.seen[old] == 0 {
			delete(m.seen, old)
		}
	}
	m.ring[m.next], m.used[m.next] = id, true
	m.seen[id]++
	m.next = (m.next + 1) % len(m.ring)
	return false
}

// TestDedupMatchesMap: over random windows and id streams with many
// repeats (small id spaces, ids that collide in the table's low and high
// bits, zero), dedup answers as the map does, and a snapshot restored into
// a new dedup goes on answering alike.
func TestDedupMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := 1 + rng.IntN(200)
		space := uint64(1 + rng.IntN(3*n))
		d := newDedup(n)
		m := &mapDedup{ring: make([]uint64, n), used: make([]bool, n), seen: map[uint64]int{}}
		id := func() uint64 {
			v := rng.Uint64N(space)
			switch round % 3 {
			case 1:
				v <<= 40 // the same low bits
			case 2:
				v *= 1 << 58 / 7 // crowds the top bits the table hashes on
			}
			return v
		}
		for i := range 20 * n {
			v := id()
			if got, want := d.check(v), m.check(v); got != want {
				t.Fatalf("round %d (window %d): record %d id %#x: seen %v, want %v", round, n, i, v, got, want)
			}
			if i == 10*n {
				r := newDedup(n)
				if !r.restore(oldest(d)) {
					t.Fatal("restore failed")
				}
				if !bytes.Equal(oldest(r), oldest(d)) {
					t.Fatalf("round %d: restored snapshot differs", round)
				}
				d = r
			}
		}
	}
}

// oldest encodes d's ids oldest first, 8 bytes each: the entry of the
// checkpoints written before the ring was stored in chunks.
func oldest(d *dedup) []byte {
	var b []byte
	if d.full {
		b = appendIDs(b, d.ring[d.next:])
	}
	return appendIDs(b, d.ring[:d.next])
}

// TestDedupCheckpoints: a dedup that checkpoints at random points, its
// commits lagging its barriers, restarts from what the committed
// checkpoints hold (a barrier's entries reach the store when it commits)
// with the ids it had at the last committed barrier, oldest first; once a
// checkpoint has committed, each writes only the header and the chunks
// changed since; the entry of the format before chunks restores too.
func TestDedupCheckpoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 60 {
		n := 1 + rng.IntN(3000)
		d := newDedup(n)
		store := map[string][]byte{}
		type inflight struct {
			id      uint64
			puts    map[string][]byte
			oldest  []byte
			inserts int
		}
		var flying []inflight
		var committed, barrier uint64
		var committedOldest []byte
		inserts, committedInserts := 0, 0
		every := 1 + rng.IntN(40)
		for step := range 3000 {
			if !d.check(rng.Uint64N(uint64(2 * n))) {
				inserts++
			}
			if step%every == 0 {
				barrier++
				puts := map[string][]byte{}
				d.putChanges(func(k, v []byte) { puts[string(k)] = bytes.Clone(v) }, committed)
				d.epoch = barrier
				if committed > 0 {
					// The header, and the chunks the inserts since the
					// committed barrier can have touched (a partial chunk at
					// each end, and one more where the ring wraps).
					if limit := 1 + (inserts-committedInserts)/dedupChunk + 3; len(puts) > limit {
						t.Fatalf("round %d: barrier %d wrote %d entries for %d ids since the commit (at most %d)",
							round, barrier, len(puts), inserts-committedInserts, limit)
					}
				}
				flying = append(flying, inflight{barrier, puts, oldest(d), inserts})
			}
			if len(flying) > 0 && rng.IntN(3) == 0 {
				f := flying[0]
				flying = flying[1:]
				for k, v := range f.puts {
					store[k] = v
				}
				committed, committedOldest, committedInserts = f.id, f.oldest, f.inserts
			}
			if committed > 0 && rng.IntN(400) == 0 {
				// A restart from the store: the state at the committed barrier.
				r := newDedup(n)
				for k, v := range store {
					// A restore's values are valid during the call only.
					v = bytes.Clone(v)
					if !r.load([]byte(k), v) {
						t.Fatalf("round %d: entry %q refused", round, k)
					}
					clear(v)
				}
				if !r.finishRestore() {
					t.Fatalf("round %d: restore failed", round)
				}
				if !bytes.Equal(oldest(r), committedOldest) {
					t.Fatalf("round %d: restored ids differ from those at barrier %d", round, committed)
				}
				d, flying, committed, inserts, committedInserts = r, nil, 0, 0, 0
			}
		}
		// The entry written before chunks.
		r := newDedup(n)
		if !r.load([]byte{keyDedup}, oldest(d)) || !r.finishRestore() || !bytes.Equal(oldest(r), oldest(d)) {
			t.Fatalf("round %d: the format before chunks does not restore", round)
		}
	}
}

func BenchmarkDedup(b *testing.B) {
	d := newDedup(DefaultDedupWindow)
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]uint64, 1<<16)
	for i := range ids {
		ids[i] = rng.Uint64()
		if i%50 == 0 && i > 0 {
			ids[i] = ids[i-1-rng.IntN(min(i, 1000))] // a redelivery
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.check(ids[i&(len(ids)-1)])
		i++
	}
}
