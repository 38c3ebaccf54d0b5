package edge

import (
	"encoding/binary"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/window"
)

// TestKeyReaderMatchesMap: random window-shaped operations (slice partials
// and versions of a few record keys, slice deletions by prefix) over many
// checkpoints, with compaction, leave for every record key exactly the
// entries that applying them to a map gives, as keyReader.Load reads them
// (the reload of an evicted key).
func TestKeyReaderMatchesMap(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		groups := rapid.SampledFrom([]int{1, 3, 8}).Draw(rt, "groups")
		path := filepath.Join(dir, "state"+string(rune('a'+run%26))+strings.Repeat("x", run/26)+".db")
		st, err := state.Open(path, state.Options{NoSync: true, KeyGroups: groups})
		if err != nil {
			rt.Fatal(err)
		}
		defer func() {
			st.Close()
			_ = removeFile(path)
		}()
		ps := newPipeState(path, "p", groups)
		ps.foldMin = int64(rapid.IntRange(0, 300).Draw(rt, "foldMin"))
		ps.maxRecs = rapid.IntRange(1, 6).Draw(rt, "maxRecs")
		ps.budget = int64(rapid.IntRange(0, 2000).Draw(rt, "budget"))
		r := newKeyReader(st, "p")
		recKeys := []string{"d1", "d2", "d3", "d11"}
		slice := func(end int64) []byte {
			return binary.BigEndian.AppendUint64([]byte{'s'}, uint64(end)^1<<63)
		}
		entry := func(rt *rapid.T) (string, string) {
			k := rapid.SampledFrom(recKeys).Draw(rt, "key")
			if rapid.IntRange(0, 3).Draw(rt, "kind") == 0 {
				return "v" + k, k
			}
			return string(slice(rapid.Int64Range(1, 4).Draw(rt, "end"))) + k, k
		}
		model := map[string]string{}
		for id := range uint64(rapid.IntRange(1, 30).Draw(rt, "checkpoints")) {
			l := newOpLog(groups)
			l.Put(0, []byte{'m'}, []byte{2, 0, 0, 0})
			for range rapid.IntRange(0, 12).Draw(rt, "ops") {
				switch rapid.IntRange(0, 9).Draw(rt, "op") {
				case 0, 1, 2, 3, 4, 5:
					ek, k := entry(rt)
					v := rapid.StringN(0, 5, -1).Draw(rt, "value")
					l.Put(xxhash.Sum64String(k), []byte(ek), []byte(v))
					model[ek] = v
				case 6, 7:
					ek, k := entry(rt)
					l.Delete(xxhash.Sum64String(k), []byte(ek))
					delete(model, ek)
				default:
					p := string(slice(rapid.Int64Range(1, 4).Draw(rt, "end")))
					l.DeletePrefix([]byte(p))
					maps.DeleteFunc(model, func(k, _ string) bool { return strings.HasPrefix(k, p) })
				}
			}
			if err := st.Update(func(tx *state.Tx) error {
				_, _, err := ps.write(tx, l, id+1)
				return err
			}); err != nil {
				rt.Fatal(err)
			}
			for _, k := range recKeys {
				got := map[string]string{}
				err := r.Load(xxhash.Sum64String(k), []byte(k), func(ek, v []byte) error {
					if _, dup := got[string(ek)]; dup {
						rt.Fatalf("entry %q loaded twice", ek)
					}
					got[string(ek)] = string(v)
					return nil
				})
				if err != nil {
					rt.Fatal(err)
				}
				want := map[string]string{}
				for ek, v := range model {
					if string(window.RecordKey([]byte(ek))) == k {
						want[ek] = v
					}
				}
				if !maps.Equal(got, want) {
					rt.Fatalf("checkpoint %d, key %s: loaded %q, want %q", id+1, k, got, want)
				}
			}
		}
	})
}
