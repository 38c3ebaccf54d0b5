package edge

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/state"
)

// TestOpStateMatchesMap: random Put/Delete/DeletePrefix sequences over many
// checkpoints, with random key group counts, compaction budgets and
// restarts, materialize to exactly what applying them to a map gives.
func TestOpStateMatchesMap(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		path := filepath.Join(dir, strings.Repeat("x", run%3)+"state"+string(rune('a'+run%26))+".db")
		groups := rapid.SampledFrom([]int{1, 3, 8}).Draw(rt, "groups")
		st, err := state.Open(path, state.Options{NoSync: true, KeyGroups: groups})
		if err != nil {
			rt.Fatal(err)
		}
		defer func() {
			st.Close()
			_ = removeFile(path)
		}()
		policy := func(ps *pipeState) {
			ps.foldMin = int64(rapid.IntRange(0, 300).Draw(rt, "foldMin"))
			ps.maxRecs = rapid.IntRange(1, 6).Draw(rt, "maxRecs")
			ps.budget = int64(rapid.IntRange(0, 2000).Draw(rt, "budget"))
			ps.perAppend = int64(rapid.IntRange(0, 3).Draw(rt, "perAppend"))
		}
		ps := newPipeState(path, "p", groups)
		policy(ps)
		model := map[string]string{}
		keyGen := rapid.StringOfN(rapid.SampledFrom([]rune("abc")), 1, 3, -1)
		id := uint64(0)
		for range rapid.IntRange(1, 30).Draw(rt, "checkpoints") {
			id++
			l := newOpLog(groups)
			for range rapid.IntRange(0, 12).Draw(rt, "ops") {
				switch rapid.IntRange(0, 9).Draw(rt, "op") {
				case 0, 1, 2, 3, 4, 5:
					k, v := keyGen.Draw(rt, "key"), rapid.StringN(0, 5, -1).Draw(rt, "value")
					l.Put(hashOf(k), []byte(k), []byte(v))
					model[k] = v
				case 6, 7:
					k := keyGen.Draw(rt, "key")
					l.Delete(hashOf(k), []byte(k))
					delete(model, k)
				default:
					p := rapid.StringOfN(rapid.SampledFrom([]rune("abc")), 0, 2, -1).Draw(rt, "prefix")
					l.DeletePrefix([]byte(p))
					maps.DeleteFunc(model, func(k, _ string) bool { return strings.HasPrefix(k, p) })
				}
			}
			err := st.Update(func(tx *state.Tx) error {
				_, _, err := ps.write(tx, l, id)
				return err
			})
			if err != nil {
				rt.Fatal(err)
			}
			if rapid.IntRange(0, 4).Draw(rt, "restart") == 0 {
				if err := st.Close(); err != nil {
					rt.Fatal(err)
				}
				if st, err = state.Open(path, state.Options{NoSync: true}); err != nil {
					rt.Fatal(err)
				}
				before := ps.groups
				ps = newPipeState(path, "p", groups)
				policy(ps)
				got := restored(rt, st, ps)
				if !maps.Equal(got, model) {
					rt.Fatalf("checkpoint %d: restored %v, want %v", id, got, model)
				}
				for g := range before {
					if before[g] != ps.groups[g] {
						rt.Fatalf("group %d: the writer counted %+v, the restore %+v", g, before[g], ps.groups[g])
					}
				}
			}
		}
		got := restored(rt, st, newPipeState(path, "p", groups))
		if !maps.Equal(got, model) {
			rt.Fatalf("restored %v, want %v", got, model)
		}
	})
}

func hashOf(k string) uint64 {
	if k == "a" {
		return 0 // a runtime-wide entry
	}
	return xxhash.Sum64String(k)
}

func restored(t interface{ Fatalf(string, ...any) }, st *state.Store, ps *pipeState) map[string]string {
	got := map[string]string{}
	err := ps.restore(st, func(h uint64, k, v []byte) error {
		if _, dup := got[string(k)]; dup {
			t.Fatalf("key %q restored twice", k)
		}
		got[string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	return got
}

// TestOpStateChunks: records and bases above chunkBytes are split, and
// come back whole.
func TestOpStateChunks(t *testing.T) {
	st, path := opStore(t, 2)
	ps := newPipeState(path, "p", 2)
	want := writeBig(t, st, ps)
	if ps.groups[1].baseChunks < 2 {
		t.Fatalf("group 1: %+v: want a base of several chunks", ps.groups[1])
	}
	if got := restored(t, st, newPipeState(path, "p", 2)); !maps.Equal(got, want) {
		t.Fatalf("restored %d entries, want %d", len(got), len(want))
	}
}

// writeBig writes 3 MiB into group 1 in two checkpoints, the first
// compacted into a base, the second left as a record of several chunks.
func writeBig(t *testing.T, st *state.Store, ps *pipeState) map[string]string {
	t.Helper()
	want := map[string]string{}
	for id := uint64(1); id <= 2; id++ {
		l := newOpLog(2)
		for i := range 3 << 10 {
			k := string(rune('a'+id)) + string(rune(0x100+i))
			v := strings.Repeat(string(rune('a'+i%26)), 1<<10)
			l.Put(1, []byte(k), []byte(v))
			want[k] = v
		}
		if id == 2 {
			ps.maxRecs, ps.foldMin = 1<<30, 1<<62 // keep the record
		}
		if err := st.Update(func(tx *state.Tx) error { _, _, err := ps.write(tx, l, id); return err }); err != nil {
			t.Fatal(err)
		}
	}
	if ps.groups[1].recs != 1 {
		t.Fatalf("group 1: %+v: want one op record left", ps.groups[1])
	}
	return want
}

func opStore(t *testing.T, groups int) (*state.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := state.Open(path, state.Options{NoSync: true, KeyGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

// TestOpStateDamage: a damaged op record or base is refused with
// state.ErrCorrupt naming the file, whether the damage breaks a checksum
// (found by the verification at open, or by the read) or is a well-formed
// record with wrong contents (a chunk lost, a bad operation).
func TestOpStateDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bucket string
		damage func(b *state.Bucket) error
	}{
		{"lost op record chunk", "oplog/p", func(b *state.Bucket) error { return b.Delete(opKey(nil, 1, 2, 1)) }},
		{"lost base chunk", "base/p", func(b *state.Bucket) error { return b.Delete(baseKey(nil, 1, 1)) }},
		{"extra base chunk", "base/p", func(b *state.Bucket) error {
			return b.Put(baseKey(nil, 1, 7), chunkHeader(nil, baseFormat, 8, 1, true))
		}},
		{"bad operation", "oplog/p", func(b *state.Bucket) error {
			return b.Put(opKey(nil, 0, 9, 0), append(chunkHeader(nil, opRecordFormat, 1, 0, false), 'Q', 1, 'k'))
		}},
		{"truncated value", "oplog/p", func(b *state.Bucket) error {
			return b.Put(opKey(nil, 0, 9, 0), append(chunkHeader(nil, opRecordFormat, 1, 0, false), 'P', 1, 'k', 5, 'v'))
		}},
		{"base keys out of order", "base/p", func(b *state.Bucket) error {
			return b.Put(baseKey(nil, 0, 0), append(chunkHeader(nil, baseFormat, 1, 1, true), 1, 'b', 0, 1, 'a', 0))
		}},
		{"unknown format", "base/p", func(b *state.Bucket) error {
			return b.Put(baseKey(nil, 1, 0), []byte{9, 1, 1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, path := opStore(t, 2)
			writeBig(t, st, newPipeState(path, "p", 2))
			err := st.Update(func(tx *state.Tx) error {
				b, err := tx.Bucket(tc.bucket)
				if err != nil {
					return err
				}
				return tc.damage(b)
			})
			if err != nil {
				t.Fatal(err)
			}
			err = newPipeState(path, "p", 2).restore(st, func(uint64, []byte, []byte) error { return nil })
			if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("restore: %v; want state.ErrCorrupt naming %s", err, path)
			}
		})
	}
	for _, bucket := range []string{"oplog/p", "base/p"} {
		t.Run("flipped byte in "+bucket, func(t *testing.T) {
			st, path := opStore(t, 2)
			writeBig(t, st, newPipeState(path, "p", 2))
			st.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("sys")).Bucket([]byte(bucket))
				k, v := b.Cursor().Last()
				v = append([]byte(nil), v...)
				v[len(v)/2] ^= 0x10
				return b.Put(append([]byte(nil), k...), v)
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := state.Open(path, state.Options{}); !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("open: %v; want state.ErrCorrupt naming %s", err, path)
			}
			st, err = state.Open(path, state.Options{Verify: state.VerifyQuick})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			err = newPipeState(path, "p", 2).restore(st, func(uint64, []byte, []byte) error { return nil })
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("restore: %v; want state.ErrCorrupt", err)
			}
		})
	}
}

func removeFile(path string) error { return os.Remove(path) }
