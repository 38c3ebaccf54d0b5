package state

import (
	"os"
	"sync/atomic"
)

// WriteStats counts what a Store's Updates wrote to its file since Open, as
// bbolt reports it. A commit writes every page it changed (bbolt copies a
// changed page, and the branch pages above it up to the root, to a free
// place in the file), then the whole freelist, then fsyncs, then writes one
// meta page and fsyncs again.
type WriteStats struct {
	// Commits is the number of Updates committed (Open's own included).
	Commits int64
	// Bytes is what the commits wrote: changed pages, freelist pages and
	// one meta page each.
	Bytes int64
	// FreelistBytes is the part of Bytes that is the freelist (the ids of
	// every free page, rewritten by each commit), estimated from its size
	// after each commit as bbolt rounds it: one page more than its length
	// needs.
	FreelistBytes int64
	// FreePages is the number of free pages (free and pending) after the
	// last commit: the pages the freelist lists.
	FreePages int
	// FileBytes is the length of the file after the last commit.
	FileBytes int64
	// DataBytes is what the file holds after the last commit: its pages up
	// to the high-water mark (every page bbolt has written; the length past
	// it is growth made ahead, not yet written) less the free pages, which
	// later commits reuse before the file grows. It is what counts toward a
	// disk cap: the file does not shrink (but see Options.CompactFree),
	// and its free pages are room.
	DataBytes int64
}

// writeCounters accumulate WriteStats; Updates run one at a time, but
// WriteStats may be read from any goroutine.
type writeCounters struct {
	commits, bytes, freelist, freePages, fileBytes, dataBytes atomic.Int64
}

// countCommit adds one committed Update. It runs after bbolt's Update
// returned; the page bytes are bbolt's cumulative total, so a later commit
// that slips in first does not make them wrong.
func (s *Store) countCommit() {
	st := s.db.Stats()
	ps := int64(s.db.Info().PageSize)
	alloc := st.TxStats.GetPageAlloc()
	s.wc.commits.Add(1)
	s.wc.bytes.Store(alloc + s.wc.commits.Load()*ps)
	s.wc.freelist.Add((int64(st.FreelistInuse)/ps + 1) * ps)
	s.wc.freePages.Store(int64(st.FreePageN + st.PendingPageN))
	if fi, err := os.Stat(s.path); err == nil {
		s.wc.fileBytes.Store(fi.Size())
	}
	if hwm, free, err := s.pageUse(); err == nil {
		s.wc.dataBytes.Store(max(hwm-free, 0))
	}
}

// WriteStats returns what the store's Updates have written since Open.
func (s *Store) WriteStats() WriteStats {
	return WriteStats{
		Commits:       s.wc.commits.Load(),
		Bytes:         s.wc.bytes.Load(),
		FreelistBytes: s.wc.freelist.Load(),
		FreePages:     int(s.wc.freePages.Load()),
		FileBytes:     s.wc.fileBytes.Load(),
		DataBytes:     s.wc.dataBytes.Load(),
	}
}
