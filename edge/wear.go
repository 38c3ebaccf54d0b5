package edge

import (
	"sync"
	"sync/atomic"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// Disk wear. An edge's SD card lasts as long as what is written to it
// allows, so the node counts its writes by what makes them
// (docs/design.md, "Write amplification"): the ingest log's through
// wearFS below, the state file's from state.Store.WriteStats, and what
// checkpoints store in it from commit.

// wearPage is the unit a write reaches the disk in: the page cache's page.
// Rewriting part of a page that was synced writes the whole page again.
const wearPage = 4096

// wearFS counts what the ingest log writes: bytes handed to WriteAt, and
// the pages they dirtied, counted at each Sync (or Close) as the disk
// sees them: a group commit that appends 200 bytes to a synced segment
// writes the 4 KiB page they fall in.
type wearFS struct {
	ingestlog.FS
	c *wearCounts
}

type wearCounts struct {
	written, pages, syncs atomic.Int64
}

func (fs wearFS) Create(name string) (ingestlog.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &wearFile{File: f, c: fs.c}, nil
}

func (fs wearFS) OpenReadWrite(name string) (ingestlog.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &wearFile{File: f, c: fs.c}, nil
}

func (fs wearFS) SyncDir(dir string) error {
	fs.c.syncs.Add(1)
	return fs.FS.SyncDir(dir)
}

// wearFile keeps the page range written since the last Sync. The log
// appends, so one range is exact for it; scattered writes would be
// counted as the span between them.
type wearFile struct {
	ingestlog.File
	c      *wearCounts
	mu     sync.Mutex
	lo, hi int64 // dirty byte range since the last Sync; lo == hi: none
}

func (f *wearFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if n > 0 {
		f.c.written.Add(int64(n))
		f.mu.Lock()
		if f.lo == f.hi {
			f.lo, f.hi = off, off+int64(n)
		} else {
			f.lo, f.hi = min(f.lo, off), max(f.hi, off+int64(n))
		}
		f.mu.Unlock()
	}
	return n, err
}

// flushed counts the dirty range as written to the disk.
func (f *wearFile) flushed() {
	f.mu.Lock()
	if f.lo < f.hi {
		f.c.pages.Add((f.hi+wearPage-1)/wearPage - f.lo/wearPage)
	}
	f.lo, f.hi = 0, 0
	f.mu.Unlock()
}

func (f *wearFile) Sync() error {
	err := f.File.Sync()
	f.c.syncs.Add(1)
	f.flushed()
	return err
}

func (f *wearFile) Close() error {
	f.flushed() // written back later, synced or not
	return f.File.Close()
}
