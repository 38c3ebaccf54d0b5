package state_test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/state"
)

// benchKey writes the key of entity i: 16 bytes, like a device id plus a
// window end.
func benchKey(buf []byte, i int) []byte {
	buf = append(buf[:0], "dev-"...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(i))
	return binary.BigEndian.AppendUint64(buf, 1767225600000) // window end
}

const benchGroups = 128

// fillStore commits n keys with 24-byte values (the size of a small
// aggregate), in batches.
func fillStore(b *testing.B, s *state.Store, ns *state.Namespace, n int) {
	b.Helper()
	var kb []byte
	for i := range n {
		kb = benchKey(kb, i)
		if err := ns.Put(i%benchGroups, kb, make([]byte, 24)); err != nil {
			b.Fatal(err)
		}
		if (i+1)%200_000 == 0 || i == n-1 {
			if _, err := s.Commit(nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPutGet is the hot path: an update and a read of a cached key.
func BenchmarkPutGet(b *testing.B) {
	s, _ := tempStore(b, testOpts(benchGroups, 0))
	ns := nsT(b, s, "window/bench")
	const keys = 10_000
	keyset := make([][]byte, keys)
	for i := range keyset {
		keyset[i] = benchKey(nil, i)
		ns.Put(i%benchGroups, keyset[i], make([]byte, 24))
	}
	val := make([]byte, 24)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % keys
		if err := ns.Put(k%benchGroups, keyset[k], val); err != nil {
			b.Fatal(err)
		}
		if _, ok, err := ns.Get(k%benchGroups, keyset[k]); !ok || err != nil {
			b.Fatal(ok, err)
		}
		i++
	}
}

// BenchmarkCommit measures Commit alone (the Puts that dirty the entries
// are outside the timer), with fsync unless the name says nosync.
func BenchmarkCommit(b *testing.B) {
	for _, bc := range []struct {
		name        string
		keys, dirty int
		nosync      bool
		cache       int64
	}{
		{"keys=1e6/dirty=1e4", 1_000_000, 10_000, false, 0},
		{"keys=1e6/dirty=1e4/nosync", 1_000_000, 10_000, true, 0},
		{"keys=1e5/dirty=1e5", 100_000, 100_000, false, 256 << 20},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o := state.Options{KeyGroups: benchGroups, NoSync: true, CacheBytes: bc.cache}
			path := filepath.Join(b.TempDir(), "bench.db")
			s := openT(b, path, o)
			ns := nsT(b, s, "window/bench")
			fillStore(b, s, ns, bc.keys)
			if !bc.nosync {
				// Reopen with fsync for the measured commits.
				s.Close()
				o.NoSync, o.Verify = false, state.VerifyQuick
				s = openT(b, path, o)
				ns = nsT(b, s, "window/bench")
			}
			defer s.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			var kb []byte
			val := make([]byte, 24)
			var last state.CommitStats
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				for j := range bc.dirty {
					k := j
					if bc.dirty < bc.keys {
						k = rng.IntN(bc.keys)
					}
					kb = benchKey(kb, k)
					binary.LittleEndian.PutUint64(val, rng.Uint64())
					ns.Put(k%benchGroups, kb, append([]byte(nil), val...))
				}
				b.StartTimer()
				st, err := s.Commit(nil)
				if err != nil {
					b.Fatal(err)
				}
				last = st
			}
			b.ReportMetric(float64(last.Puts), "entries/commit")
			b.ReportMetric(float64(last.Bytes)/float64(last.Puts), "B/entry")
		})
	}
}

// BenchmarkBeginCommit is the pause a worker sees at a checkpoint barrier:
// handing off 10^4 dirty entries in 128 key groups.
func BenchmarkBeginCommit(b *testing.B) {
	s, _ := tempStore(b, testOpts(benchGroups, 0))
	ns := nsT(b, s, "window/bench")
	var kb []byte
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range 10_000 {
			kb = benchKey(kb, i)
			ns.Put(i%benchGroups, kb, nil)
		}
		b.StartTimer()
		h, err := s.BeginCommit()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		h.Abort()
		b.StartTimer()
	}
}

// BenchmarkGetMiss reads keys that are not cached (a one-byte budget evicts
// every clean entry): one bbolt read transaction, a checksum and a copy.
func BenchmarkGetMiss(b *testing.B) {
	s, _ := tempStore(b, testOpts(benchGroups, 1))
	ns := nsT(b, s, "window/bench")
	const keys = 100_000
	fillStore(b, s, ns, keys)
	rng := rand.New(rand.NewPCG(3, 4))
	var kb []byte
	b.ReportAllocs()
	for b.Loop() {
		k := rng.IntN(keys)
		kb = benchKey(kb, k)
		if _, ok, err := ns.Get(k%benchGroups, kb); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	if st := s.Stats(); st.Hits > st.Misses/100 {
		b.Fatalf("expected misses: %+v", st)
	}
}

// BenchmarkScan scans one key group of a 10^6-key store from disk, with
// 1% of it dirty in the cache.
func BenchmarkScan(b *testing.B) {
	s, _ := tempStore(b, testOpts(benchGroups, 0))
	ns := nsT(b, s, "window/bench")
	const keys = 1_000_000
	fillStore(b, s, ns, keys)
	var kb []byte
	for i := 0; i < keys; i += 100 {
		kb = benchKey(kb, i)
		ns.Put(i%benchGroups, kb, []byte("dirty"))
	}
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := ns.Scan(5, func(_, _ []byte) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "keys/scan")
}

// BenchmarkOpen opens a 10^6-key file with each verification mode.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "open.db")
	s := openT(b, path, testOpts(benchGroups, 0))
	fillStore(b, s, nsT(b, s, "window/bench"), 1_000_000)
	s.Close()
	for _, v := range []state.Verify{state.VerifyFull, state.VerifyQuick} {
		b.Run(fmt.Sprintf("keys=1e6/verify=%s", v), func(b *testing.B) {
			o := testOpts(benchGroups, 0)
			o.Verify = v
			for b.Loop() {
				s := openT(b, path, o)
				s.Close()
			}
		})
	}
}

// BenchmarkBoltBaseline is the floor under BenchmarkCommit: the same
// update (10^4 random keys of 10^6, 16-byte keys, 29-byte values, one
// bucket per key group, puts in key order, fsync) on bare bbolt, with no
// cache, checksums or digests.
func BenchmarkBoltBaseline(b *testing.B) {
	for _, nosync := range []bool{false, true} {
		name := "keys=1e6/dirty=1e4"
		if nosync {
			name += "/nosync"
		}
		b.Run(name, func(b *testing.B) {
			db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600,
				&bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			const keys = 1_000_000
			val := make([]byte, 29)
			for lo := 0; lo < keys; lo += 200_000 {
				if err := db.Update(func(tx *bolt.Tx) error {
					for i := lo; i < lo+200_000; i++ {
						bk, err := tx.CreateBucketIfNotExists([]byte{byte(i % benchGroups)})
						if err != nil {
							return err
						}
						if err := bk.Put(benchKey(nil, i), val); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			db.NoSync = nosync
			rng := rand.New(rand.NewPCG(1, 2))
			ks := make([]int, 10_000)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				for i := range ks {
					ks[i] = rng.IntN(keys)
				}
				slices.SortFunc(ks, func(x, y int) int {
					return cmp.Or(cmp.Compare(x%benchGroups, y%benchGroups), cmp.Compare(x, y))
				})
				b.StartTimer()
				if err := db.Update(func(tx *bolt.Tx) error {
					for _, k := range ks {
						if err := tx.Bucket([]byte{byte(k % benchGroups)}).Put(benchKey(nil, k), val); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
