package fleet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func TestOpenFormat(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir, Options{Tick: -1, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	editStore(t, filepath.Join(dir, "fleet.db"), func(tx *bolt.Tx) error {
		w := where{bucketMeta, metaFormat}
		return tx.Bucket(bucketMeta).Put(metaFormat, seal(w, binary.BigEndian.AppendUint32(nil, storeFormat+1)))
	})
	if _, err := Open(dir, Options{Tick: -1}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "format 2, this hub reads format 1") {
		t.Fatalf("Open: %v", err)
	}
}

func editStore(t testing.TB, path string, edit func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(edit); err != nil {
		t.Fatal(err)
	}
}

func FuzzUnseal(f *testing.F) {
	f.Add([]byte("k"), seal(where{[]byte("b"), []byte("k")}, []byte(`{"id":"x"}`)))
	f.Add([]byte("k"), []byte{1, 0, 0})
	f.Add([]byte(""), []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		w := where{bucketEdges, key}
		p, err := unseal(w, value)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unseal: %v, want ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(seal(w, p), value) {
			t.Fatal("seal(unseal(v)) != v")
		}
		if _, _, _, err := decodeStatus(w, p); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeStatus: %v", err)
		}
		var e edgeRecord
		if err := readJSON(w, value, &e); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("readJSON: %v", err)
		}
	})
}

var (
	fuzzStoreOnce sync.Once
	fuzzStore     []byte
)

// fuzzTemplate is a store with a pipeline, a deployment whose rollout is
// under way, edges and a token.
func fuzzTemplate(t testing.TB) []byte {
	fuzzStoreOnce.Do(func() {
		dir := t.TempDir()
		f, err := Open(dir, Options{Tick: -1, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.ApplyPipeline("a", &runnelv1.ApplyPipelineRequest{Spec: "name: p\nsource: {mqtt: {topic: t}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates:\n  n: count()\n"}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for _, id := range []string{"e1", "e2", "e3"} {
			if _, err := f.Connect(ctx, id, &runnelv1.Register{EdgeId: id, Labels: map[string]string{"a": "1"}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.ApplyDeployment("a", &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "d", Selector: "a=1", Pipelines: []*runnelv1.PipelineRef{{Name: "p"}}, Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 1}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.CreateToken("a", "t", RoleAdmin); err != nil {
			t.Fatal(err)
		}
		cancel()
		f.Close()
		b, err := os.ReadFile(filepath.Join(dir, "fleet.db"))
		if err != nil {
			t.Fatal(err)
		}
		fuzzStore = b
	})
	return fuzzStore
}

// FuzzLoad writes a fuzzed record, with a valid frame, at one of the
// store's places and opens the store: it opens, or fails with
// ErrCorrupt; nothing panics, and an opened store serves and evaluates.
func FuzzLoad(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":"e1","labels":{"a":"1"},"generation":1,"desired":[{"name":"p","revision":1}],"assign":{"d":{"version":1,"by":1,"gen":1}}}`))
	f.Add(uint8(0), []byte(`{"id":"e1","assign":{"d":{"version":7}}}`))
	f.Add(uint8(1), []byte(`{"version":1,"selector":"a=1","targets":["e1","e2","e3"],"ends":[1,2,3],"resolved":[{"name":"p","revision":1}]}`))
	f.Add(uint8(1), []byte(`{"version":1,"selector":"a=1","targets":["e1"],"ends":[5]}`))
	f.Add(uint8(2), []byte(`{"phase":"progressing","step":9}`))
	f.Add(uint8(2), []byte(`{"phase":"paused","step":3}`))
	f.Add(uint8(3), []byte(`{"name":"p","revision":1,"spec":"x"}`))
	f.Add(uint8(4), []byte(`{"name":"d","created_ms":1}`))
	f.Add(uint8(5), []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 8, 1})
	f.Add(uint8(6), []byte(`{"name":"t","role":"admin","sum":"AAAA"}`))
	f.Fuzz(func(t *testing.T, place uint8, payload []byte) {
		tmpl := fuzzTemplate(t)
		dir := t.TempDir()
		path := filepath.Join(dir, "fleet.db")
		if err := os.WriteFile(path, tmpl, 0o600); err != nil {
			t.Fatal(err)
		}
		places := []where{
			{bucketEdges, []byte("e1")},
			{bucketDeployments, []byte("d"), numKey(tagVersion, 1)},
			{bucketDeployments, []byte("d"), numKey(tagRollout, 1)},
			{bucketPipelines, []byte("p"), numKey(tagRevision, 1)},
			{bucketDeployments, []byte("d"), keyHeader},
			{bucketStatus, []byte("e2")},
			{bucketTokens, []byte("t")},
		}
		w := places[int(place)%len(places)]
		editStore(t, path, func(tx *bolt.Tx) error {
			b := tx.Bucket(w[0])
			for _, name := range w[1 : len(w)-1] {
				b = b.Bucket(name)
			}
			return b.Put(w[len(w)-1], seal(w, payload))
		})
		fl, err := Open(dir, Options{Tick: -1, NoSync: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			return
		}
		defer fl.Close()
		if err := fl.Evaluate(); err != nil {
			t.Fatalf("Evaluate: %v", err)
		}
		fl.ListDeployments()
		fl.DeploymentVersions("d")
		fl.ListEdges("")
		fl.ListPipelines()
		fl.Authenticate("rnl_x")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := fl.Connect(ctx, "e1", &runnelv1.Register{EdgeId: "e1", Labels: map[string]string{"a": "2"}}, nil); err != nil {
			t.Fatalf("Connect: %v", err)
		}
		for _, a := range []string{ActionAbort, ActionUndo} {
			fl.Rollout("x", "d", a)
		}
	})
}

// TestPutStatusKeepsNewer: a status write that lost a race to a newer one
// (the periodic flush and Status writing the same edge) leaves the newer.
func TestPutStatusKeepsNewer(t *testing.T) {
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "x.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucket(bucketStatus); err != nil {
			return err
		}
		for _, seq := range []uint64{5, 3, 7, 6} {
			if err := putStatus(tx, "e", seq, encodeStatus(seq, int64(seq), nil)); err != nil {
				return err
			}
		}
		w := where{bucketStatus, []byte("e")}
		p, err := unseal(w, tx.Bucket(bucketStatus).Get([]byte("e")))
		if err != nil {
			return err
		}
		if seq, _, _, _ := decodeStatus(w, p); seq != 7 {
			t.Errorf("stored seq %d, want 7", seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
