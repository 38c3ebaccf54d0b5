package archive_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/archive/archivetest"
	"github.com/runnel-io/runnel/sync/objstore"
)

// TestDirStore: the archive's directory store is checkpoint.DirStore
// (its temporary files and crash leftovers are tested there).
func TestDirStore(t *testing.T) {
	dir := t.TempDir()
	st, err := archive.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	archivetest.StoreConformance(t, st)
	for _, k := range []string{"", "/abs", "a/../../b", "../x", "a//b", "dir/"} {
		if err := st.Put(context.Background(), k, bytes.NewReader(nil), 0); err == nil {
			t.Errorf("Put(%q) accepted", k)
		}
	}
	if _, err := archive.OpenURL("file://" + dir); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.OpenURL("file://host/dir"); err == nil {
		t.Fatal("a file URL with a host opened")
	}
}

func TestMemStore(t *testing.T) { archivetest.StoreConformance(t, archivetest.NewMemStore()) }

// TestObjstoreMem: sync/objstore's stores plug in as they are: their
// errors match the archive's (checkpoint's) sentinels.
func TestObjstoreMem(t *testing.T) { archivetest.StoreConformance(t, objstore.NewMem()) }
