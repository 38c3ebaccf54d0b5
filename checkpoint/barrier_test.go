package checkpoint_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/checkpoint"
)

// recorder is a ChangeWriter that writes its calls down.
type recorder []string

func (r *recorder) Put(h uint64, k, v []byte) error {
	*r = append(*r, fmt.Sprintf("P %d %q %q", h, k, v))
	return nil
}
func (r *recorder) Delete(h uint64, k []byte) error {
	*r = append(*r, fmt.Sprintf("D %d %q", h, k))
	return nil
}
func (r *recorder) DeletePrefix(p []byte) error {
	*r = append(*r, fmt.Sprintf("X %q", p))
	return nil
}

// Changes replays exactly what it was given, in order.
func TestChangesReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c checkpoint.Changes
		var want recorder
		for range rapid.IntRange(0, 50).Draw(t, "n") {
			h := rapid.Uint64().Draw(t, "h")
			k := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "k")
			v := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "v")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				c.Put(h, k, v)
				want.Put(h, k, v)
			case 1:
				c.Delete(h, k)
				want.Delete(h, k)
			default:
				c.DeletePrefix(k)
				want.DeletePrefix(k)
			}
		}
		var got recorder
		if err := c.Replay(&got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("replayed %q, want %q", got, want)
		}
		c.Reset()
		if c.Len() != 0 {
			t.Fatal("Reset left bytes")
		}
	})
}

// Parts returns a checkpoint once all its parts are in, whatever the
// order of parts and checkpoints, and whichever part says how many.
func TestParts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type part struct {
			id   uint64
			i    int
			need int
		}
		var all []part
		want := map[uint64]int{}
		for id := uint64(1); id <= uint64(rapid.IntRange(1, 6).Draw(t, "ckpts")); id++ {
			n := rapid.IntRange(1, 5).Draw(t, "parts")
			teller := rapid.IntRange(0, n-1).Draw(t, "teller")
			for i := range n {
				need := -1
				if i == teller {
					need = n
				}
				all = append(all, part{id, i, need})
			}
			want[id] = n
		}
		order := rapid.Permutation(all).Draw(t, "order")
		var p checkpoint.Parts[part]
		done := map[uint64]bool{}
		for j, pt := range order {
			parts, ok := p.Add(pt.id, pt, pt.need)
			// Complete exactly when this is the last of its id to come.
			last := true
			for _, o := range order[j+1:] {
				if o.id == pt.id {
					last = false
				}
			}
			if ok != last {
				t.Fatalf("part %+v: complete %v, want %v", pt, ok, last)
			}
			if ok {
				if len(parts) != want[pt.id] || done[pt.id] {
					t.Fatalf("checkpoint %d: %d parts (done before: %v), want %d", pt.id, len(parts), done[pt.id], want[pt.id])
				}
				done[pt.id] = true
			}
		}
		if p.Pending() != 0 {
			t.Fatalf("%d checkpoints still pending", p.Pending())
		}
	})
}
