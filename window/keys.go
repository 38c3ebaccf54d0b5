package window

import "encoding/binary"

// keyIndex maps keys to dense indexes into Operator.keys, by open addressing
// with linear probing on the caller's 64-bit key hash. Dense indexes let
// aligned-window state live in per-slice arrays indexed by key (slabs), and
// keep a key's bookkeeping in one contiguous array instead of behind
// pointers. Removal shifts later entries back (no tombstones), so lookups
// never slow down as keys come and go.
//
// A slot is 8 bytes: the top 32 bits of the mixed hash (its leading bits are
// the slot's home, the rest tell keys of one neighbourhood apart) and the
// index. Small slots keep the table, read at a random place per record, half
// as large as with the whole hash; a mix that matches is confirmed against
// the key bytes anyway.
type keyIndex struct {
	slots []kslot
	shift uint // 32 - log2(len(slots))
	n     int
}

type kslot struct {
	mix uint32
	idx int32 // index+1; 0 marks an empty slot
}

func newKeyIndex() keyIndex {
	return keyIndex{slots: make([]kslot, 1024), shift: 32 - 10}
}

// mix spreads hashes with a Fibonacci multiply, so hashes whose low bits
// were used to route keys to this worker still spread.
func mix(h uint64) uint32 { return uint32((h * 0x9E3779B97F4A7C15) >> 32) }

// home returns the slot a mix probes from.
func (x *keyIndex) home(m uint32) uint64 { return uint64(m >> x.shift) }

func (x *keyIndex) find(h uint64, key []byte, names *keyNames) int32 {
	m := mix(h)
	mask := uint64(len(x.slots) - 1)
	for i := x.home(m); ; i = (i + 1) & mask {
		s := x.slots[i]
		if s.idx == 0 {
			return -1
		}
		if s.mix == m && names.equal(s.idx-1, key) {
			return s.idx - 1
		}
	}
}

// walk returns the index of the first entry whose mix is h's, or -1: find
// without the key's bytes, so its answer must be confirmed against them.
func (x *keyIndex) walk(h uint64) int32 {
	m := mix(h)
	mask := uint64(len(x.slots) - 1)
	for i := x.home(m); ; i = (i + 1) & mask {
		s := x.slots[i]
		if s.idx == 0 || s.mix == m {
			return s.idx - 1
		}
	}
}

func (x *keyIndex) insert(h uint64, idx int32) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow() // at most 3/4 full: 10^5 keys take 1 MiB of slots, not 2
	}
	x.n++
	m := mix(h)
	mask := uint64(len(x.slots) - 1)
	i := x.home(m)
	for x.slots[i].idx != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = kslot{mix: m, idx: idx + 1}
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
		i := x.home(s.mix)
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
	i := x.home(mix(h))
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
			k := x.home(s.mix)
			if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
				x.slots[i] = s
				i = j
				break
			}
		}
	}
}

// keyNames keeps the key bytes by key index. Short keys sit inline in a
// dense array of 32-byte entries, two per cache line: confirming a key found
// in the index, the only per-record access to key bookkeeping on aligned
// windows, touches one line.
type keyNames struct {
	short []keyName
	// long holds the keys longer than inlineKey, by index; owned, reused
	// when the index is recycled. A map, not a slice by index: most
	// pipelines have no long key, and a slice header per key cost 24 bytes
	// of every key's memory (as much as its inline bytes).
	long map[int32][]byte
}

type keyName struct {
	n   int32
	inl [inlineKey]byte // the key when n <= inlineKey
}

// inlineKey is the longest key kept inline.
const inlineKey = 28

// get returns key idx's bytes; they stay valid until the next set.
func (kn *keyNames) get(idx int32) []byte {
	nm := &kn.short[idx]
	if nm.n <= inlineKey {
		return nm.inl[:nm.n]
	}
	return kn.long[idx]
}

// equal reports whether key idx is key.
func (kn *keyNames) equal(idx int32, key []byte) bool {
	nm := &kn.short[idx]
	if int(nm.n) != len(key) {
		return false
	}
	if nm.n <= inlineKey {
		return equalInline(&nm.inl, key)
	}
	return string(kn.long[idx]) == string(key)
}

// equalInline reports whether the first len(key) bytes of inl are key. It
// compares 8-byte words (the last one overlapping) instead of calling the
// runtime's memequal, whose call and length dispatch cost more than the
// compare itself for keys this short.
func equalInline(inl *[inlineKey]byte, key []byte) bool {
	n := len(key)
	if n < 8 {
		for i := range n {
			if inl[i] != key[i] {
				return false
			}
		}
		return true
	}
	for i := 0; i < n-8; i += 8 {
		if binary.LittleEndian.Uint64(inl[i:]) != binary.LittleEndian.Uint64(key[i:]) {
			return false
		}
	}
	return binary.LittleEndian.Uint64(inl[n-8:]) == binary.LittleEndian.Uint64(key[n-8:])
}

// clear makes idx the key of nothing: equal is false for every key until
// the next set.
func (kn *keyNames) clear(idx int32) { kn.short[idx].n = -1 }

// set makes key the key of idx, which is at most one past the last index.
func (kn *keyNames) set(idx int32, key []byte) {
	if int(idx) == len(kn.short) {
		kn.short = append(kn.short, keyName{})
	}
	nm := &kn.short[idx]
	nm.n = int32(len(key))
	if len(key) <= inlineKey {
		copy(nm.inl[:], key)
		return
	}
	if kn.long == nil {
		kn.long = make(map[int32][]byte)
	}
	kn.long[idx] = append(kn.long[idx][:0], key...)
}
