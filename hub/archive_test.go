package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/archive/archivetest"
)

// archived reads the archive through its manifests: every record,
// keyed by (pipeline, class, key, start, end, version), failing on one
// twice.
func archivedRecords(t *testing.T, st archive.Store) map[string]archive.Record {
	t.Helper()
	ctx := context.Background()
	ms, err := archive.Live(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]archive.Record{}
	for _, m := range ms {
		for _, f := range m.Files {
			rc, err := st.Get(ctx, f.Path)
			if err != nil {
				t.Fatalf("manifest of %s names %s: %v", m.Partition(), f.Path, err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			_, recs, err := archive.ReadFile(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			for _, r := range recs {
				id := fmt.Sprintf("%s/%d/%s/%d/%d/%d", r.Pipeline, r.Class, r.Key, r.Start, r.End, r.Version)
				if _, dup := out[id]; dup {
					t.Fatalf("%s archived twice", id)
				}
				out[id] = r
			}
		}
	}
	return out
}

// checkArchiveEqualsQuery compares every stored result version of the
// hub's pipelines with the archive: each there once, with the same
// aggregates, and nothing else there.
func checkArchiveEqualsQuery(t *testing.T, h *Hub, st archive.Store) {
	t.Helper()
	got := archivedRecords(t, st)
	n := 0
	for _, pi := range h.Pipelines() {
		p := pi.Pipeline
		var after []byte
		for {
			rs, next, err := h.Query(Query{Pipeline: p.Name, AllVersions: true, After: after, Limit: maxLimit})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				key, err := p.AppendKeyJSON(nil, r.Key)
				if err != nil {
					t.Fatal(err)
				}
				id := fmt.Sprintf("%s/%d/%s/%d/%d/%d", p.Name, r.Class, key, r.Start, r.End, r.Version)
				a, ok := got[id]
				if !ok {
					t.Fatalf("result %s is not in the archive", id)
				}
				delete(got, id)
				n++
				vals, err := resultValues(p.Aggregates, r.State)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range vals {
					w := a.Values[i]
					same := int(v.Kind) == int(w.Kind) && v.Int == w.Int && (v.Float == w.Float || math.IsNaN(v.Float) && math.IsNaN(w.Float))
					if v.Kind == 0 && p.Aggregates.Spec(i).Func.String() == "count" {
						same = w.Int == 0
					}
					if !same {
						t.Fatalf("%s: aggregate %d is %+v in the archive, %+v in the hub", id, i, w, v)
					}
				}
				if a.Emitted != r.Emitted || a.Edges != r.Edges {
					t.Fatalf("%s: emitted/edges %d/%d in the archive, %d/%d in the hub", id, a.Emitted, a.Edges, r.Emitted, r.Edges)
				}
			}
			if next == nil {
				break
			}
			after = next
		}
	}
	for id := range got {
		t.Fatalf("%s is in the archive, not in the hub", id)
	}
	if n == 0 {
		t.Fatal("no results to compare")
	}
	t.Logf("%d result versions archived, each once", n)
}

// TestArchiveOfCommits runs random batches (late partials making new
// versions) through a hub with its archive log, with hub crashes (what was
// not committed is lost, and the edges resend it) and archiver failures at
// random store operations, and compares the archive with the hub's store.
func TestArchiveOfCommits(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 9))
			th := newTestHub(t, func(c *Config) { c.ArchiveMaxPending = 1 << 20; c.Retention = 1000 * time.Hour })
			mem := archivetest.NewMemStore()
			fs := &archivetest.FaultStore{Store: mem}
			staging := t.TempDir()
			var ar *archive.Archiver
			newArchiver := func() {
				var err error
				ar, err = archive.New(archive.Options{Store: fs, Log: th.ArchiveLog(), StagingDir: staging, MaxRowsPerFile: 7,
					Now: th.clock.Now, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
			}
			newArchiver()
			temps := th.pipes[0]
			seqs := map[string]uint64{}
			wms := map[string]int64{}
			versions := map[string]uint32{}
			for round := range 60 {
				edge := fmt.Sprintf("e%d", rng.IntN(2))
				var ps []*runnelv1.Partial
				for range 1 + rng.IntN(4) {
					seqs[edge]++
					start := int64(rng.IntN(8)) * 1000
					key := fmt.Sprintf("k%d", rng.IntN(3))
					id := edge + key + fmt.Sprint(start)
					versions[id]++
					p := partial(temps, seqs[edge], key, start, float64(rng.IntN(100)), float64(round))
					p.Version = versions[id]
					ps = append(ps, p)
				}
				wms[edge] = min(8000, wms[edge]+int64(rng.IntN(1500)))
				b := wm(batch(edge, 1, ps[0].Seq, ps[len(ps)-1].Seq, ps...), temps.Name, wms[edge])
				if err := th.Apply(b); err != nil && !errors.Is(err, ErrGap) {
					t.Fatal(err)
				}
				switch rng.IntN(6) {
				case 0:
					th.crash()
					// The edges resend from what the hub acked.
					for e := range seqs {
						_, acked, _ := th.Acked(e)
						seqs[e] = acked
					}
					newArchiver()
				case 1, 2:
					th.commit()
				case 3:
					th.commit()
					fs.FailAt, fs.After = fs.Ops()+1+rng.IntN(6), rng.IntN(2) == 0
					if err := ar.Step(context.Background()); err != nil {
						newArchiver() // the archiver "crashed"
					}
				}
			}
			th.commit()
			fs.FailAt = 0
			if err := ar.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			if p := th.ArchivePending(); p != 0 {
				t.Fatalf("%d results pending after a step with the store up", p)
			}
			checkArchiveEqualsQuery(t, th.Hub, mem)
			// The log is trimmed: only its state and the last sequence remain.
			th.View(t, func(tx *bolt.Tx) {
				if n := tx.Bucket(bucketArchive).Bucket(archiveLog).Stats().KeyN; n != 0 {
					t.Errorf("%d log entries left after everything was archived", n)
				}
			})
		})
	}
}

func (th *testHub) View(t *testing.T, f func(tx *bolt.Tx)) {
	t.Helper()
	if err := th.db.View(func(tx *bolt.Tx) error { f(tx); return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestArchiveBackPressure: at ArchiveMaxPending results waiting, batches
// are refused (counted) rather than the log growing or results dropped;
// once the archiver has caught up they apply again.
func TestArchiveBackPressure(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.ArchiveMaxPending = 3 })
	temps := th.pipes[0]
	b := wm(batch("e1", 1, 1, 3, partial(temps, 1, "a", 0, 1), partial(temps, 2, "b", 0, 2), partial(temps, 3, "c", 0, 3)), temps.Name, 5000)
	if err := th.Apply(b); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if p := th.ArchivePending(); p != 3 {
		t.Fatalf("pending %d, want 3", p)
	}
	err := th.Apply(wm(batch("e1", 1, 4, 4, partial(temps, 4, "d", 6000, 4)), temps.Name, 9000))
	if !errors.Is(err, ErrArchiveFull) {
		t.Fatalf("Apply with the archive log full: %v, want ErrArchiveFull", err)
	}
	if st := th.Status(); st.ArchiveRefused != 1 || st.ArchivePending != 3 {
		t.Fatalf("status: refused %d pending %d", st.ArchiveRefused, st.ArchivePending)
	}
	mem := archivetest.NewMemStore()
	ar, err := archive.New(archive.Options{Store: mem, Log: th.ArchiveLog(), StagingDir: t.TempDir(), Now: th.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	// With the store failing, nothing moves and nothing is lost.
	down := &archivetest.FaultStore{Store: mem, FailAt: 1}
	arDown, err := archive.New(archive.Options{Store: down, Log: th.ArchiveLog(), StagingDir: t.TempDir(), Now: th.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := arDown.Step(context.Background()); err == nil {
		t.Fatal("a step with the store down succeeded")
	}
	if p := th.ArchivePending(); p != 3 {
		t.Fatalf("pending %d after a failed step, want 3", p)
	}
	if err := ar.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := th.ArchivePending(); p != 0 {
		t.Fatalf("pending %d after the archiver caught up", p)
	}
	if err := th.Apply(wm(batch("e1", 1, 4, 4, partial(temps, 4, "d", 6000, 4)), temps.Name, 9000)); err != nil {
		t.Fatalf("Apply after the archive caught up: %v", err)
	}
	th.commit()
	if err := ar.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkArchiveEqualsQuery(t, th.Hub, mem)
}
