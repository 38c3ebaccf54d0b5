package archive_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/archive/archivetest"
)

func TestDirStore(t *testing.T) {
	st, err := archive.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	archivetest.StoreConformance(t, st)
	for _, k := range []string{"", "/abs", "a/../../b", "../x", "a//b", ".tmp/x", "dir/"} {
		if err := st.Put(context.Background(), k, bytes.NewReader(nil), 0); err == nil {
			t.Errorf("Put(%q) accepted", k)
		}
	}
	// A crash's temporary files go at the next open, and never list.
	dir := st.Root()
	os.WriteFile(filepath.Join(dir, ".tmp", "put-123"), []byte("half"), 0o600)
	if ks, _ := st.List(context.Background(), ""); slices.ContainsFunc(ks, func(k string) bool { return strings.Contains(k, "put-") }) {
		t.Fatalf("List shows a temporary file: %q", ks)
	}
	if _, err := archive.OpenDir(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, ".tmp")); len(ents) != 0 {
		t.Fatalf("OpenDir left %d temporary files", len(ents))
	}
	if _, err := archive.OpenURL("file://" + dir); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.OpenURL("file://host/dir"); err == nil {
		t.Fatal("a file URL with a host opened")
	}
}

func TestMemStore(t *testing.T) { archivetest.StoreConformance(t, archivetest.NewMemStore()) }

// TestAdapt maps another store's sentinels.
func TestAdapt(t *testing.T) {
	theirExists, theirNotFound := errors.New("theirs: exists"), errors.New("theirs: not found")
	st := archive.Adapt(errStore{exists: theirExists, notFound: theirNotFound}, theirExists, theirNotFound)
	err := st.Put(context.Background(), "k", nil, 0)
	if !errors.Is(err, archive.ErrExists) || !errors.Is(err, theirExists) {
		t.Fatalf("Put: %v", err)
	}
	if _, err := st.Get(context.Background(), "k"); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
}

type errStore struct{ exists, notFound error }

func (e errStore) Put(context.Context, string, io.Reader, int64) error { return e.exists }
func (e errStore) PutFile(context.Context, string, string) error       { return e.exists }
func (e errStore) Get(context.Context, string) (io.ReadCloser, error)  { return nil, e.notFound }
func (e errStore) List(context.Context, string) ([]string, error)      { return nil, nil }
func (e errStore) Delete(context.Context, string) error                { return nil }
