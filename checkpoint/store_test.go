package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/runnel-io/runnel/checkpoint"
)

func TestDirStore(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "snaps")
	st, err := checkpoint.NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, val string) error {
		return st.Put(ctx, key, strings.NewReader(val), int64(len(val)))
	}
	if err := put("a/b/c", "one"); err != nil {
		t.Fatal(err)
	}
	if err := put("a/b/d", "two"); err != nil {
		t.Fatal(err)
	}
	if err := put("a/bb", "three"); err != nil {
		t.Fatal(err)
	}
	// Never an overwrite.
	if err := put("a/b/c", "other"); !errors.Is(err, checkpoint.ErrExists) {
		t.Fatalf("second Put of a/b/c: %v, want ErrExists", err)
	}
	rc, err := st.Get(ctx, "a/b/c")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "one" {
		t.Fatalf("a/b/c = %q after a refused overwrite", b)
	}
	if _, err := st.Get(ctx, "a/x"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	// A reader that gives fewer or more bytes than announced stores
	// nothing.
	if err := st.Put(ctx, "short", strings.NewReader("ab"), 3); err == nil {
		t.Fatal("Put of 2 bytes announced as 3: no error")
	}
	if err := st.Put(ctx, "long", strings.NewReader("abcd"), 3); err == nil {
		t.Fatal("Put of 4 bytes announced as 3: no error")
	}
	// A temporary file a crash left is not listed.
	if err := os.WriteFile(filepath.Join(root, "a", "b", ".e.tmp-123"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]string{
		"":      {"a/b/c", "a/b/d", "a/bb"},
		"a/b":   {"a/b/c", "a/b/d", "a/bb"},
		"a/b/":  {"a/b/c", "a/b/d"},
		"a/bb":  {"a/bb"},
		"zz/":   nil,
		"a/b/c": {"a/b/c"},
	} {
		got, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
	for _, key := range []string{"", "/abs", "a/../b", "a//b", "./a", "a/", "..", "a/.b.tmp-1", "a\\b"} {
		if err := put(key, "x"); err == nil {
			t.Errorf("Put of key %q: no error", key)
		}
	}
	if err := st.Delete(ctx, "a/b/c"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "a/b/c"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	os.Remove(filepath.Join(root, "a", "b", ".e.tmp-123"))
	if err := st.Delete(ctx, "a/b/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "a", "b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a/b left behind empty: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "a")); err != nil {
		t.Fatalf("a (still holding bb) gone: %v", err)
	}
	// A cancelled context stops a Put.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := st.Put(cctx, "c", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: %v", err)
	}
	if keys, _ := st.List(ctx, "c"); len(keys) != 0 {
		t.Fatalf("cancelled Put left %q", keys)
	}
}

// Concurrent Puts of one key: exactly one wins, the others get ErrExists.
func TestDirStoreOneWriterWins(t *testing.T) {
	st, _ := checkpoint.NewDirStore(t.TempDir())
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			errs[i] = st.Put(context.Background(), "k", bytes.NewReader([]byte{byte(i)}), 1)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, checkpoint.ErrExists):
			t.Fatalf("Put: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d Puts of one key succeeded, want 1", won)
	}
}

func TestOpenStore(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{dir, "file://" + dir, "file://localhost" + dir} {
		st, err := checkpoint.OpenStore(u, nil)
		if err != nil {
			t.Fatalf("OpenStore(%q): %v", u, err)
		}
		if ds, ok := st.(*checkpoint.DirStore); !ok || ds.Root() != dir {
			t.Fatalf("OpenStore(%q) = %#v, want a DirStore at %s", u, st, dir)
		}
	}
	for _, u := range []string{"", "file://host/x", "s3://bucket/prefix", "file:///x?y=1"} {
		if _, err := checkpoint.OpenStore(u, nil); !errors.Is(err, checkpoint.ErrStoreURL) {
			t.Errorf("OpenStore(%q): %v, want ErrStoreURL", u, err)
		}
	}
	// The hook for other schemes.
	mem := newMemStore()
	var got *url.URL
	st, err := checkpoint.OpenStore("s3://bucket/some/prefix", map[string]checkpoint.Opener{"s3": func(u *url.URL) (checkpoint.Store, error) {
		got = u
		return mem, nil
	}})
	if err != nil || st != mem || got.Host != "bucket" || got.Path != "/some/prefix" {
		t.Fatalf("OpenStore with an s3 opener: %v, %v, %v", st, err, got)
	}
}

func TestParseRef(t *testing.T) {
	for _, c := range []struct {
		ref, store, edge string
		id               uint64
	}{
		{"s3://bucket/prefix/gw-001", "s3://bucket/prefix", "gw-001", 0},
		{"s3://bucket/prefix/gw-001@42", "s3://bucket/prefix", "gw-001", 42},
		{"s3://bucket/gw-001/", "s3://bucket", "gw-001", 0},
		{"file:///backups/runnel/gw.7@1", "file:///backups/runnel", "gw.7", 1},
		{"file:///gw", "file:///", "gw", 0},
		{"/backups/gw", "/backups", "gw", 0},
		{"/gw@3", "/", "gw", 3},
		{"gw", ".", "gw", 0},
		{"rel/dir/gw_1", "rel/dir", "gw_1", 0},
	} {
		store, edge, id, err := checkpoint.ParseRef(c.ref)
		if err != nil || store != c.store || edge != c.edge || id != c.id {
			t.Errorf("ParseRef(%q) = %q, %q, %d, %v; want %q, %q, %d", c.ref, store, edge, id, err, c.store, c.edge, c.id)
		}
	}
	for _, ref := range []string{"s3://bucket", "/backups/gw@0", "/backups/gw@x", "/backups/..", "/a/gw@", "/a/g w", ""} {
		if _, _, _, err := checkpoint.ParseRef(ref); !errors.Is(err, checkpoint.ErrStoreURL) {
			t.Errorf("ParseRef(%q): %v, want ErrStoreURL", ref, err)
		}
	}
}

// memStore is an in-memory Store that can be told to fail.
type memStore struct {
	mu      sync.Mutex
	objs    map[string][]byte
	failPut func(key string) error
	deleted []string // keys Delete was called with, in order
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) Put(_ context.Context, key string, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failPut != nil {
		if err := m.failPut(key); err != nil {
			return err
		}
	}
	if _, ok := m.objs[key]; ok {
		return checkpoint.ErrExists
	}
	if int64(len(b)) != size {
		return errors.New("size mismatch")
	}
	m.objs[key] = b
	return nil
}

func (m *memStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[key]
	if !ok {
		return nil, checkpoint.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *memStore) List(_ context.Context, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (m *memStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleted = append(m.deleted, key)
	delete(m.objs, key)
	return nil
}
