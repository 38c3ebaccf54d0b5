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
				if !r.restore(d.appendSnapshot(nil)) {
					t.Fatal("restore failed")
				}
				if !bytes.Equal(r.appendSnapshot(nil), d.appendSnapshot(nil)) {
					t.Fatalf("round %d: restored snapshot differs", round)
				}
				d = r
			}
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
