package edge

import (
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// TestWearFSCountsPages: the ingest log's counter counts the pages a
// write dirtied at each sync, the partly filled page again when the next
// commit appends to it, as the disk sees it.
func TestWearFSCountsPages(t *testing.T) {
	var c wearCounts
	fs := wearFS{FS: ingestlog.OSFS(), c: &c}
	f, err := fs.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	step := func(off int64, n int, wantPages int64) {
		t.Helper()
		if _, err := f.WriteAt(make([]byte, n), off); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := c.pages.Load(); got != wantPages {
			t.Fatalf("after %d bytes at %d: %d pages, want %d", n, off, got, wantPages)
		}
	}
	step(0, 100, 1)
	step(100, 100, 2)       // the same page again
	step(200, 8000, 5)      // pages 0 to 2
	step(8200, 4096, 7)     // pages 2 and 3
	step(12296, 10_000, 10) // pages 3 to 5
	if err := f.Sync(); err != nil || c.pages.Load() != 10 {
		t.Fatalf("a sync with nothing written counted pages: %d (%v)", c.pages.Load(), err)
	}
	if c.written.Load() != 100+100+8000+4096+10_000 || c.syncs.Load() != 6 {
		t.Fatalf("written %d, syncs %d", c.written.Load(), c.syncs.Load())
	}
	f.Close()
}
