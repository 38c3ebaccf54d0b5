package window

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestKeyIndexMatchesMap inserts and removes random keys (with colliding
// hashes on purpose) and checks every lookup against a Go map.
func TestKeyIndexMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x := newKeyIndex()
		var names keyNames
		ref := map[string]int32{}
		hashBits := rapid.SampledFrom([]uint64{0, 3, 64}).Draw(t, "hashBits")
		hash := func(k string) uint64 {
			var h uint64 = 1469598103934665603
			for i := 0; i < len(k); i++ {
				h = (h ^ uint64(k[i])) * 1099511628211
			}
			if hashBits < 64 {
				h &= 1<<hashBits - 1 // force collisions
			}
			return h
		}
		for range rapid.IntRange(0, 3000).Draw(t, "ops") {
			k := fmt.Sprintf("k%d", rapid.IntRange(0, 400).Draw(t, "key"))
			switch len(k) % 3 {
			case 0:
				k = strings.Repeat(k, 20) // beyond inlineKey
			case 1:
				k = "sensor-" + k + "-temperature" // inline, longer than a word
			}
			idx, ok := ref[k]
			if got := x.find(hash(k), []byte(k), &names); (got >= 0) != ok || (ok && got != idx) {
				t.Fatalf("find(%s) = %d, want %d (present %v)", k, got, idx, ok)
			}
			if ok {
				x.remove(hash(k), idx)
				delete(ref, k)
				names.set(idx, nil)
				continue
			}
			idx = int32(len(names.short))
			names.set(idx, []byte(k))
			x.insert(hash(k), idx)
			ref[k] = idx
		}
		if x.n != len(ref) {
			t.Fatalf("n = %d, want %d", x.n, len(ref))
		}
		for k, idx := range ref {
			if got := x.find(hash(k), []byte(k), &names); got != idx {
				t.Fatalf("final find(%s) = %d, want %d", k, got, idx)
			}
		}
	})
}

// TestEqualInline compares keys of every inline length with copies that
// differ in one byte, at each position.
func TestEqualInline(t *testing.T) {
	for n := 0; n <= inlineKey; n++ {
		key := make([]byte, n)
		for i := range key {
			key[i] = byte('a' + i)
		}
		var inl [inlineKey]byte
		copy(inl[:], key)
		if n < inlineKey {
			inl[n] = 0xff // bytes past the key do not matter
		}
		if !equalInline(&inl, key) {
			t.Errorf("length %d: equal keys reported different", n)
		}
		for i := range n {
			other := inl
			other[i] ^= 1
			if equalInline(&other, key) {
				t.Errorf("length %d: keys differing at byte %d reported equal", n, i)
			}
		}
	}
}
