package window

import "bytes"

// keyIndex maps keys to dense indexes into Operator.keys, by open addressing
// with linear probing on the caller's 64-bit key hash. Dense indexes let
// aligned-window state live in per-slice arrays indexed by key (slabs), and
// keep a key's bookkeeping in one contiguous array instead of behind
// pointers. Removal shifts later entries back (no tombstones), so lookups
// never slow down as keys come and go.
type keyIndex struct {
	slots []kslot
	shift uint // 64 - log2(len(slots))
	n     int
}

type kslot struct {
	hash uint64
	idx  int32 // index+1; 0 marks an empty slot
}

func newKeyIndex() keyIndex {
	return keyIndex{slots: make([]kslot, 1024), shift: 64 - 10}
}

// home spreads hashes over the table with a Fibonacci multiply, so hashes
// whose low bits were used to route keys to this worker still spread.
func (x *keyIndex) home(h uint64) uint64 { return (h * 0x9E3779B97F4A7C15) >> x.shift }

func (x *keyIndex) find(h uint64, key []byte, keys []keyState) int32 {
	mask := uint64(len(x.slots) - 1)
	for i := x.home(h); ; i = (i + 1) & mask {
		s := x.slots[i]
		if s.idx == 0 {
			return -1
		}
		if s.hash == h && bytes.Equal(keys[s.idx-1].key(), key) {
			return s.idx - 1
		}
	}
}

func (x *keyIndex) insert(h uint64, idx int32) {
	if (x.n+1)*2 > len(x.slots) {
		x.grow()
	}
	x.n++
	mask := uint64(len(x.slots) - 1)
	i := x.home(h)
	for x.slots[i].idx != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = kslot{hash: h, idx: idx + 1}
}

func (x *keyIndex) grow() {
	old := x.slots
	x.slots = make([]kslot, 2*len(old))
	x.shift--
	mask := uint64(len(x.slots) - 1)
	for _, s := range old {
		if s.idx == 0 {
			continue
		}
		i := x.home(s.hash)
		for x.slots[i].idx != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
}

// remove deletes the entry of idx (hash h) and shifts back the entries
// after it that probed past it.
func (x *keyIndex) remove(h uint64, idx int32) {
	mask := uint64(len(x.slots) - 1)
	i := x.home(h)
	for x.slots[i].idx != idx+1 {
		i = (i + 1) & mask
	}
	x.n--
	for {
		x.slots[i] = kslot{}
		j := i
		for {
			j = (j + 1) & mask
			s := x.slots[j]
			if s.idx == 0 {
				return
			}
			// s may move to i if its home is not in (i, j] cyclically.
			k := x.home(s.hash)
			if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
				x.slots[i] = s
				i = j
				break
			}
		}
	}
}
