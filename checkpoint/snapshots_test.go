package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/checkpoint"
)

// putSnapshot writes a snapshot of st as checkpoint id of edge gw-7.
func putSnapshot(t *testing.T, ss *checkpoint.Snapshots, id uint64, st []byte) checkpoint.Manifest {
	t.Helper()
	_, m := snapshot(t, st)
	// snapshot() names checkpoint 9 of gw-7: rewrite it.
	m.Checkpoint, m.EdgeID = id, ss.Edge
	var buf bytes.Buffer
	sums, err := checkpoint.WriteData(&buf, &checkpoint.Header{EdgeID: m.EdgeID, Checkpoint: id, Epoch: m.Epoch, StateSize: int64(len(st))}, bytes.NewReader(st))
	if err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	m.DataSize, m.DataSum = sums.DataSize, sums.DataSum
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ss.Put(context.Background(), &m, path); err != nil {
		t.Fatal(err)
	}
	return m
}

func ids(ms []checkpoint.Manifest) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.Checkpoint)
	}
	return out
}

func TestSnapshotsListPickRestore(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		store func(t *testing.T) checkpoint.Store
	}{
		{"dir", func(t *testing.T) checkpoint.Store { s, _ := checkpoint.NewDirStore(t.TempDir()); return s }},
		{"mem", func(t *testing.T) checkpoint.Store { return newMemStore() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.store(t)
			ss := &checkpoint.Snapshots{Store: st, Edge: "gw-7"}
			states := map[uint64][]byte{}
			for _, id := range []uint64{3, 12, 100} {
				states[id] = state(10_000+int(id), id)
				putSnapshot(t, ss, id, states[id])
			}
			// An upload that failed after its data object, and another
			// edge's snapshots, are not complete snapshots of this edge.
			if err := st.Put(ctx, ss.Key(200, checkpoint.DataObject), strings.NewReader("x"), 1); err != nil {
				t.Fatal(err)
			}
			putSnapshot(t, &checkpoint.Snapshots{Store: st, Edge: "gw-77"}, 500, state(10, 1))
			l, err := ss.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(l.Complete); !slices.Equal(got, []uint64{3, 12, 100}) || !slices.Equal(l.Incomplete, []uint64{200}) {
				t.Fatalf("List: complete %v, incomplete %v", got, l.Incomplete)
			}
			latest, err := l.Pick("gw-7", 0)
			if err != nil || latest.Checkpoint != 100 {
				t.Fatalf("Pick latest: %d, %v", latest.Checkpoint, err)
			}
			for _, id := range []uint64{200, 7} {
				if _, err := l.Pick("gw-7", id); !errors.Is(err, checkpoint.ErrNotFound) || !strings.Contains(err.Error(), "3, 12, 100") {
					t.Fatalf("Pick %d: %v, want ErrNotFound listing what there is", id, err)
				}
			}
			for id, want := range states {
				m, _ := l.Pick("gw-7", id)
				dst := filepath.Join(t.TempDir(), "state.db")
				if err := ss.Restore(ctx, &m, dst); err != nil {
					t.Fatal(err)
				}
				if got, _ := os.ReadFile(dst); !bytes.Equal(got, want) {
					t.Fatalf("restored %d: state differs", id)
				}
			}
			deleted, err := ss.Prune(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(deleted, []uint64{3}) {
				t.Fatalf("Prune(2) deleted %v, want [3]", deleted)
			}
			l, _ = ss.List(ctx)
			if got := ids(l.Complete); !slices.Equal(got, []uint64{12, 100}) || !slices.Equal(l.Incomplete, []uint64{200}) {
				t.Fatalf("after Prune: complete %v, incomplete %v", got, l.Incomplete)
			}
			// A new complete snapshot past the failed upload: the failed
			// one's data goes, and the oldest beyond keep.
			putSnapshot(t, ss, 300, state(100, 9))
			if deleted, _ := ss.Prune(ctx, 2); !slices.Equal(deleted, []uint64{12, 200}) {
				t.Fatalf("second Prune deleted %v, want [12 200]", deleted)
			}
			if keys, _ := st.List(ctx, "gw-77/"); len(keys) != 2 {
				t.Fatalf("another edge's snapshot touched: %q", keys)
			}
		})
	}
}

// A damaged or truncated data object is refused by Restore with the
// reason, and leaves no file behind; a damaged manifest takes its
// snapshot out of the listing, with the reason.
func TestSnapshotsRefuseDamage(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st, _ := checkpoint.NewDirStore(root)
	ss := &checkpoint.Snapshots{Store: st, Edge: "gw-7"}
	m := putSnapshot(t, ss, 5, state(50_000, 5))
	dataPath := filepath.Join(root, filepath.FromSlash(ss.Key(5, checkpoint.DataObject)))
	good, _ := os.ReadFile(dataPath)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"flipped", func() []byte { b := bytes.Clone(good); b[len(b)/2] ^= 0x40; return b }(), "damaged"},
		{"truncated", good[:len(good)*2/3], "truncated"},
		{"empty", nil, "truncated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(dataPath, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "state.db")
			err := ss.Restore(ctx, &m, dst)
			if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v, want ErrCorrupt saying %s", err, c.want)
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused restore left %s: %v", dst, err)
			}
		})
	}
	mpath := filepath.Join(root, filepath.FromSlash(ss.Key(5, checkpoint.ManifestObject)))
	mb, _ := os.ReadFile(mpath)
	mb[20] ^= 1
	os.WriteFile(mpath, mb, 0o644)
	l, err := ss.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Complete) != 0 || !errors.Is(l.Bad[5], checkpoint.ErrCorrupt) {
		t.Fatalf("damaged manifest: complete %v, bad %v", ids(l.Complete), l.Bad)
	}
	if _, err := l.Pick("gw-7", 5); !errors.Is(err, checkpoint.ErrNotFound) || !strings.Contains(err.Error(), "manifest is unusable") {
		t.Fatalf("Pick of the damaged snapshot: %v", err)
	}
}

// A Put whose manifest upload fails leaves no complete snapshot; the
// manifest is written after the data, never before.
func TestSnapshotsPutOrder(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	var order []string
	st.failPut = func(key string) error {
		order = append(order, key[strings.LastIndexByte(key, '/')+1:])
		if strings.HasSuffix(key, checkpoint.ManifestObject) {
			return errors.New("injected: manifest upload fails")
		}
		return nil
	}
	ss := &checkpoint.Snapshots{Store: st, Edge: "gw-7"}
	data, m := snapshot(t, state(1000, 1))
	path := filepath.Join(t.TempDir(), "data")
	os.WriteFile(path, data, 0o600)
	if err := ss.Put(ctx, &m, path); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Put: %v, want the injected failure", err)
	}
	if !slices.Equal(order, []string{checkpoint.DataObject, checkpoint.ManifestObject}) {
		t.Fatalf("upload order %v, want data then manifest", order)
	}
	l, _ := ss.List(ctx)
	if len(l.Complete) != 0 || !slices.Equal(l.Incomplete, []uint64{m.Checkpoint}) {
		t.Fatalf("after a failed manifest: complete %v, incomplete %v", ids(l.Complete), l.Incomplete)
	}
	if err := (&checkpoint.Snapshots{Store: st, Edge: "../x"}).Put(ctx, &m, path); err == nil {
		t.Fatal("an edge id of ../x: no error")
	}
}

// Prune deletes each manifest before its data object: a listing between
// the two never finds a manifest without its data.
func TestPruneOrder(t *testing.T) {
	st := newMemStore()
	ss := &checkpoint.Snapshots{Store: st, Edge: "gw-7"}
	for _, id := range []uint64{1, 2, 3} {
		putSnapshot(t, ss, id, state(100, id))
	}
	if _, err := ss.Prune(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	want := []string{ss.Key(1, checkpoint.ManifestObject), ss.Key(1, checkpoint.DataObject), ss.Key(2, checkpoint.ManifestObject), ss.Key(2, checkpoint.DataObject)}
	if !slices.Equal(st.deleted, want) {
		t.Fatalf("deleted %q, want %q", st.deleted, want)
	}
}
