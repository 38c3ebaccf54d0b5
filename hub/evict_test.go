package hub

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// heartbeat moves edge's watermark without entries; sent is the edge's last
// sequence.
func heartbeat(edge string, sent uint64, ms int64) *runnelv1.Batch {
	return wm(batch(edge, 1, sent+1, sent), "temps", ms)
}

// TestEvictReload: a window the watermark left behind leaves memory after
// the commit that emitted it; a late partial loads it back with every
// edge's partial and its version, and makes the next version.
func TestEvictReload(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Resident = time.Second })
	p := th.pipes[0]
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	status := func(resident int, evicted, reloaded uint64) {
		t.Helper()
		st := th.Status()
		if st.WindowsResident != resident || st.OpenWindows != resident || st.WindowsEvicted != evicted || st.WindowsReloaded != reloaded {
			t.Fatalf("resident %d, evicted %d, reloaded %d; want %d, %d, %d",
				st.WindowsResident, st.WindowsEvicted, st.WindowsReloaded, resident, evicted, reloaded)
		}
	}
	check := func(version uint32, edges uint32, count int64) {
		t.Helper()
		r := th.latest("k", 0)
		if r.Version != version || r.Edges != edges || th.count(r) != count {
			t.Fatalf("k@0: v%d, %d edges, count %d; want v%d, %d edges, count %d",
				r.Version, r.Edges, th.count(r), version, edges, count)
		}
	}

	must(th.Apply(wm(batch("a", 1, 1, 1, partial(p, 1, "k", 0, 1)), "temps", 1000)))
	must(th.Apply(wm(batch("b", 1, 1, 1, partial(p, 1, "k", 0, 1, 2)), "temps", 1000)))
	must(th.Apply(wm(batch("c", 1, 1, 1, partial(p, 1, "k", 0, 1, 2, 3)), "temps", 1000)))
	th.commit()
	check(1, 3, 6)
	status(1, 0, 0) // its end is the watermark: within residency

	for _, e := range []string{"a", "b", "c"} {
		must(th.Apply(heartbeat(e, 1, 5000)))
	}
	th.commit()
	status(0, 1, 0)

	// b's late partial replaces b's stored one; a's and c's come back from
	// the store.
	must(th.Apply(batch("b", 1, 2, 2, partial(p, 2, "k", 0, 1, 2, 3, 4, 5))))
	status(1, 1, 1)
	th.commit()
	check(2, 3, 9)
	status(0, 2, 1)

	// A resend of what was applied reloads nothing and changes nothing.
	must(th.Apply(batch("b", 1, 2, 2, partial(p, 2, "k", 0, 1, 2, 3, 4, 5))))
	th.commit()
	status(0, 2, 1)
	check(2, 3, 9)

	// After a restart the window is not loaded until a partial needs it.
	th.restart()
	status(0, 0, 0)
	must(th.Apply(batch("c", 1, 2, 2, partial(p, 2, "k", 0, 1))))
	th.commit()
	check(3, 3, 7)
	status(0, 1, 1)

	// A new edge adds its partial to the reloaded ones.
	must(th.Apply(batch("d", 1, 1, 1, partial(p, 1, "k", 0, 1, 1))))
	th.commit()
	check(4, 4, 9)

	rs, _, err := th.Query(Query{Pipeline: "temps", AllVersions: true})
	if err != nil {
		t.Fatal(err)
	}
	var versions []uint32
	for _, r := range rs {
		versions = append(versions, r.Version)
	}
	if fmt.Sprint(versions) != "[1 2 3 4]" || th.Pipelines()[0].Results != 4 {
		t.Fatalf("versions %v, pipeline results %d", versions, th.Pipelines()[0].Results)
	}
}

// TestEvictReloadCorrupt: a store record that does not decode fails the
// batch that needed it, which is then not applied at all.
func TestEvictReloadCorrupt(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Resident = time.Second })
	p := th.pipes[0]
	if err := th.Apply(wm(batch("a", 1, 1, 1, partial(p, 1, "k", 0, 1)), "temps", 5000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if st := th.Status(); st.WindowsEvicted != 1 {
		t.Fatalf("evicted %d", st.WindowsEvicted)
	}
	kg := windowKeyGroup(th.Hub, encKey("k"))
	err := th.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPartials).Bucket(kgBucket(kg))
		k := appendWindowPrefix(nil, "temps", 0, 1000, encKey("k"))
		k = append(k, tagPartial)
		k = append(k, "a"...)
		v := bytes.Clone(b.Get(k))
		v[len(v)-1] ^= 0xFF
		return b.Put(k, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	before := th.Status()
	err = th.Apply(batch("a", 1, 2, 3, partial(p, 2, "k2", 3000, 1), partial(p, 3, "k", 0, 1, 2)))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Apply over a corrupt record: %v", err)
	}
	if after := th.Status(); after.Partials != before.Partials || after.Batches != before.Batches {
		t.Fatalf("the failed batch applied something: %+v -> %+v", before, after)
	}
}

func windowKeyGroup(h *Hub, key []byte) uint32 {
	return uint32(xxhash.Sum64(key) % uint64(h.keyGroups))
}

// TestOpenResidentOnly: Open loads the windows within residency of the
// stored watermark, not the retention; expiry still deletes the evicted
// ones from the store by key range.
func TestOpenResidentOnly(t *testing.T) {
	resident := func(c *Config) { c.Resident = 10 * time.Second }
	th := newTestHub(t, resident)
	p := th.pipes[0]
	const windows, keys = 100, 5
	var ps []*runnelv1.Partial
	for w := range int64(windows) {
		for k := range keys {
			ps = append(ps, partial(p, uint64(len(ps)+1), fmt.Sprintf("k%d", k), w*1000, 1))
		}
	}
	if err := th.Apply(wm(batch("a", 1, 1, uint64(len(ps)), ps...), "temps", windows*1000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	// Windows ending at or after 100 s - 10 s stay: starts 89..99 s.
	const hot = 11 * keys
	if st := th.Status(); st.WindowsResident != hot || st.WindowsEvicted != windows*keys-hot {
		t.Fatalf("after commit: %d resident, %d evicted", st.WindowsResident, st.WindowsEvicted)
	}
	th.restart()
	if st := th.Status(); st.WindowsResident != hot {
		t.Fatalf("after Open: %d windows resident, want %d", st.WindowsResident, hot)
	}
	results := func() int {
		t.Helper()
		rs, _, err := th.Query(Query{Pipeline: "temps", Limit: maxLimit})
		if err != nil {
			t.Fatal(err)
		}
		if pr := th.Pipelines()[0].Results; pr != uint64(len(rs)) {
			t.Fatalf("pipeline results %d, stored %d", pr, len(rs))
		}
		return len(rs)
	}
	if n := results(); n != windows*keys {
		t.Fatalf("%d results", n)
	}

	// Retention 50 s: when the watermark next moves, windows ending before
	// 101 s - 50 s go, evicted or not.
	th.Hub.Close()
	th.cfg = func(c *Config) { resident(c); c.Retention = 50 * time.Second }
	th.open()
	if err := th.Apply(heartbeat("a", uint64(len(ps)), 101_000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if n := results(); n != 50*keys {
		t.Fatalf("after expiry %d results, want %d", n, 50*keys)
	}
	var stored, old int
	err := th.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPartials).ForEachBucket(func(name []byte) error {
			return tx.Bucket(bucketPartials).Bucket(name).ForEach(func(k, _ []byte) error {
				pk, err := parsePartialKey(k)
				if err != nil {
					return err
				}
				if pk.tag == tagWindow {
					stored++
					if pk.end < 51_000 {
						old++
					}
				}
				return nil
			})
		})
	})
	if err != nil || stored != 50*keys || old != 0 {
		t.Fatalf("store holds %d windows, %d expired (%v)", stored, old, err)
	}
	if pp := th.Hub.cat.Load().pipeOf("temps", 0); pp.storedFrom != 51_000 {
		t.Fatalf("storedFrom %d, want 51000", pp.storedFrom)
	}
	// A partial for an expired window is dropped, not reloaded.
	if err := th.Apply(batch("a", 1, uint64(len(ps))+1, uint64(len(ps))+1, partial(p, uint64(len(ps))+1, "k0", 0, 1))); err != nil {
		t.Fatal(err)
	}
	if st := th.Status(); st.PartialsExpired != 1 || st.WindowsReloaded != 0 {
		t.Fatalf("expired partial: %+v", st)
	}
}
