// Package archivetest has what tests of sync/archive and its users share:
// an in-memory Store and Log, and a Store that fails on demand (the
// fault-injecting store the crash tests use). None of it is for
// production use.
package archivetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/runnel-io/runnel/sync/archive"
)

// MemStore is an in-memory archive.Store with the semantics of the real
// ones: Put never overwrites, List is sorted and recursive.
type MemStore struct {
	mu   sync.Mutex
	objs map[string][]byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{objs: map[string][]byte{}} }

// Put implements archive.Store.
func (m *MemStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if size >= 0 && int64(len(b)) != size {
		return fmt.Errorf("memstore: put %s: %d bytes, want %d", key, len(b), size)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok {
		return fmt.Errorf("memstore: put %s: %w", key, archive.ErrExists)
	}
	m.objs[key] = b
	return nil
}

// PutFile implements archive.Store.
func (m *MemStore) PutFile(ctx context.Context, key, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return m.Put(ctx, key, bytes.NewReader(b), int64(len(b)))
}

// Get implements archive.Store.
func (m *MemStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("memstore: get %s: %w", key, archive.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// List implements archive.Store.
func (m *MemStore) List(ctx context.Context, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ks []string
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks, nil
}

// Delete implements archive.Store.
func (m *MemStore) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

// Bytes returns a copy of the object under key, nil when absent.
func (m *MemStore) Bytes(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.objs[key])
}

// ErrInjected is the failure FaultStore and MemLog inject.
var ErrInjected = errors.New("archivetest: injected failure")

// FaultStore wraps a Store and fails one operation: the FailAt-th (from
// 1; 0 never), before it reaches the store, or after it when After is
// set (the operation done, its answer lost, as in a crash between the
// upload and the response).
type FaultStore struct {
	archive.Store
	mu     sync.Mutex
	FailAt int
	After  bool
	n      int
}

// Ops returns the operations counted so far.
func (f *FaultStore) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *FaultStore) fault() (before, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.n != f.FailAt {
		return false, false
	}
	return !f.After, f.After
}

func (f *FaultStore) do(op func() error) error {
	before, after := f.fault()
	if before {
		return ErrInjected
	}
	err := op()
	if after {
		return ErrInjected
	}
	return err
}

// Put implements archive.Store.
func (f *FaultStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return f.do(func() error { return f.Store.Put(ctx, key, r, size) })
}

// PutFile implements archive.Store.
func (f *FaultStore) PutFile(ctx context.Context, key, path string) error {
	return f.do(func() error { return f.Store.PutFile(ctx, key, path) })
}

// Get implements archive.Store.
func (f *FaultStore) Get(ctx context.Context, key string) (rc io.ReadCloser, err error) {
	err = f.do(func() error { rc, err = f.Store.Get(ctx, key); return err })
	return rc, err
}

// List implements archive.Store.
func (f *FaultStore) List(ctx context.Context, prefix string) (ks []string, err error) {
	err = f.do(func() error { ks, err = f.Store.List(ctx, prefix); return err })
	return ks, err
}

// Delete implements archive.Store.
func (f *FaultStore) Delete(ctx context.Context, key string) error {
	return f.do(func() error { return f.Store.Delete(ctx, key) })
}

// MemLog is an in-memory archive.Log; Append adds entries as a hub
// commit would. FailSaveAt fails the n-th Save (from 1) before it
// stores anything, or after it when SaveAfter is set.
type MemLog struct {
	mu         sync.Mutex
	entries    map[uint64][]byte
	last       uint64
	schemas    map[uint64][]byte
	state      []byte
	FailSaveAt int
	SaveAfter  bool
	saves      int
}

// NewMemLog returns an empty MemLog.
func NewMemLog() *MemLog {
	return &MemLog{entries: map[uint64][]byte{}, schemas: map[uint64][]byte{}}
}

// AddSchema stores s.
func (l *MemLog) AddSchema(s *archive.Schema) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := s.ID()
	l.schemas[id] = s.AppendEncode(nil)
	return id
}

// Append logs r and returns its sequence number.
func (l *MemLog) Append(r *archive.Row) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last++
	l.entries[l.last] = archive.AppendEntry(nil, r)
	return l.last
}

// Len returns how many entries the log holds (not yet trimmed).
func (l *MemLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Saves returns how many Saves were attempted.
func (l *MemLog) Saves() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.saves
}

// Scan implements archive.Log.
func (l *MemLog) Scan(after, through uint64, fn func(uint64, []byte) error) error {
	l.mu.Lock()
	var seqs []uint64
	for s := range l.entries {
		if s > after && s <= through {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	es := make([][]byte, len(seqs))
	for i, s := range seqs {
		es[i] = l.entries[s]
	}
	l.mu.Unlock()
	for i, s := range seqs {
		if err := fn(s, es[i]); err != nil {
			return err
		}
	}
	return nil
}

// Last implements archive.Log.
func (l *MemLog) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Schema implements archive.Log.
func (l *MemLog) Schema(id uint64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.schemas[id]
	if !ok {
		return nil, fmt.Errorf("memlog: no schema %016x", id)
	}
	return b, nil
}

// State implements archive.Log.
func (l *MemLog) State() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.state), nil
}

// Save implements archive.Log.
func (l *MemLog) Save(state []byte, trim uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saves++
	fail := l.saves == l.FailSaveAt
	if fail && !l.SaveAfter {
		return ErrInjected
	}
	l.state = bytes.Clone(state)
	for s := range l.entries {
		if s <= trim {
			delete(l.entries, s)
		}
	}
	if fail {
		return ErrInjected
	}
	return nil
}

// StoreConformance checks the Store semantics the archive relies on
// (never overwrite, ErrExists and ErrNotFound, sorted recursive List by
// string prefix, Delete of a missing key) against st, which must be
// empty: run it against every Store the archive is given, e.g. sync/objstore
// on the real S3 server (sync/objstore).
func StoreConformance(t *testing.T, st archive.Store) {
	t.Helper()
	ctx := context.Background()
	put := func(key, body string) error { return st.Put(ctx, key, strings.NewReader(body), int64(len(body))) }
	get := func(key string) (string, error) {
		rc, err := st.Get(ctx, key)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	if err := put("p=a/x/1.json", "one"); err != nil {
		t.Fatal(err)
	}
	if err := put("p=a/x/1.json", "two"); !errors.Is(err, archive.ErrExists) {
		t.Fatalf("a second Put of a key: %v, want ErrExists", err)
	}
	if got, err := get("p=a/x/1.json"); err != nil || got != "one" {
		t.Fatalf("after the refused overwrite: %q, %v; want the first contents", got, err)
	}
	if _, err := get("p=a/missing"); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, []byte("file"), 0o600)
	if err := st.PutFile(ctx, "p=a/y.parquet", f); err != nil {
		t.Fatal(err)
	}
	// The same file again: ErrExists, or nil from a store that sees the
	// object already holds these bytes (sync/objstore, after a lost
	// answer); either way the archive takes it as its own earlier upload.
	if err := st.PutFile(ctx, "p=a/y.parquet", f); err != nil && !errors.Is(err, archive.ErrExists) {
		t.Fatalf("a second PutFile of the same file: %v, want ErrExists or nil", err)
	}
	g := filepath.Join(t.TempDir(), "g")
	os.WriteFile(g, []byte("other"), 0o600)
	if err := st.PutFile(ctx, "p=a/y.parquet", g); !errors.Is(err, archive.ErrExists) {
		t.Fatalf("a PutFile of other bytes over an object: %v, want ErrExists", err)
	}
	put("p=b/z", "z")
	put("p=aa", "aa")
	ks, err := st.List(ctx, "p=a/")
	if err != nil || !slices.Equal(ks, []string{"p=a/x/1.json", "p=a/y.parquet"}) {
		t.Fatalf("List(p=a/) = %q, %v", ks, err)
	}
	ks, _ = st.List(ctx, "p=a")
	if !slices.Equal(ks, []string{"p=a/x/1.json", "p=a/y.parquet", "p=aa"}) {
		t.Fatalf("List(p=a) = %q", ks)
	}
	if err := st.Delete(ctx, "p=a/x/1.json"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "p=a/x/1.json"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	ks, _ = st.List(ctx, "")
	if !slices.Equal(ks, []string{"p=a/y.parquet", "p=aa", "p=b/z"}) {
		t.Fatalf("List() after Delete = %q", ks)
	}
	if err := put("p=a/x/1.json", "again"); err != nil {
		t.Fatalf("Put after Delete: %v", err)
	}
}
