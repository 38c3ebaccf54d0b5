package state

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// releaseMapped drops the process's page table entries for size bytes of
// the read-only shared mapping at addr (MADV_DONTNEED). The file's pages
// stay in the page cache; the next access maps them again.
func releaseMapped(addr uintptr, size int) error {
	if size <= 0 {
		return nil
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, addr, uintptr(size), syscall.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}

var statm struct {
	once sync.Once
	f    *os.File
	mu   sync.Mutex
	buf  [128]byte
}

// fileResident returns the process's resident file-backed (and shared)
// bytes: the third field of /proc/self/statm, in pages. The file is kept
// open and read again from its start, which makes the kernel fill it anew.
func fileResident() (int64, bool) {
	statm.once.Do(func() { statm.f, _ = os.Open("/proc/self/statm") })
	if statm.f == nil {
		return 0, false
	}
	statm.mu.Lock()
	defer statm.mu.Unlock()
	n, err := statm.f.ReadAt(statm.buf[:], 0)
	if n == 0 && err != nil {
		return 0, false
	}
	b := statm.buf[:n] // "size resident shared text lib data dt"
	for range 2 {
		i := bytes.IndexByte(b, ' ')
		if i < 0 {
			return 0, false
		}
		b = b[i+1:]
	}
	if i := bytes.IndexAny(b, " \n"); i >= 0 {
		b = b[:i]
	}
	pages, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}
