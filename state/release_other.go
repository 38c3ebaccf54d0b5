//go:build !linux

package state

// releaseMapped is a no-op where the release is not implemented: the
// mapped pages count toward the process's resident set until the kernel
// reclaims them.
func releaseMapped(uintptr, int) error { return nil }

// fileResident is not known here: Tx.ReleaseOver does nothing.
func fileResident() (int64, bool) { return 0, false }
