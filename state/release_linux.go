package state

import "syscall"

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
