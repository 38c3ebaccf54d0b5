// Package faultfs is an in-memory ingestlog.FS that fails on demand and
// loses power, for tests of the ingest log and of what is built on it. The
// idea is pebble's vfs/errorfs, kept small.
//
// # Model
//
// The FS keeps two views of every file and of the directory entries:
//
//   - what the running process sees: every write, rename and removal, at
//     once;
//   - what a power loss leaves: file contents as of each file's last Sync,
//     and directory entries as of the directory's last SyncDir.
//
// Crash (or CrashAfter, at the n-th mutating operation from now) computes
// the image a power loss leaves and makes every later operation, on the FS
// and on files already open, fail with ErrCrashed: the process is dead.
// Reboot installs the image, as the next process finds it. A CrashMode says
// what becomes of unsynced writes: all lost, or a random prefix of them kept
// with the last kept write torn at a random byte (and optionally the rest of
// that write reading as zeros, as when the file size reached the disk but
// the data did not). Unsynced directory changes are lost, unless the mode
// includes KeepDirChanges.
//
// SetInjector installs a function consulted before every operation; the
// error it returns fails the operation. A failed write still lands a random
// prefix of its bytes (a short write). The function runs outside the FS's
// lock, so it may block to hold up, say, an fsync.
//
// # Caveats
//
//   - Directories are flat: a file's directory is filepath.Dir of its name,
//     and MkdirAll is durable at once.
//   - Power loss never reorders writes within a file, never corrupts synced
//     data and never keeps a later write while dropping an earlier one; tests
//     that want bit rot flip bytes themselves (ReadFile, WriteFile).
//   - Randomness comes from the seed given to New, but which operation a
//     crash hits also depends on goroutine scheduling in the code under
//     test.
package faultfs
