package state

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Defaults for the zero values of Options.
const (
	// DefaultKeyGroups is the key group count of a new file when
	// Options.KeyGroups is zero.
	DefaultKeyGroups = 128
	// DefaultFileMode is the permission of a new file when Options.FileMode
	// is zero.
	DefaultFileMode os.FileMode = 0o600
	// DefaultTimeout is how long Open waits for the file lock when
	// Options.Timeout is zero.
	DefaultTimeout = 10 * time.Second
)

// Limits.
const (
	// MaxKeyGroups is the largest key group count: a group id is stored in
	// two bytes.
	MaxKeyGroups = 1 << 16
	// MaxKeySize is the longest key in a system bucket, bbolt's own limit.
	MaxKeySize = 32768
	// MaxValueSize is the longest value: bbolt's limit less the record
	// header (see docs/formats/state-layout.md).
	MaxValueSize = (1 << 30) - recordHeaderSize
	// MaxNameSize is the longest system bucket name.
	MaxNameSize = 255
)

// Verify says how much of an existing file Open checks before handing it to
// bbolt.
type Verify int

const (
	// VerifyFull (the default) checks both meta pages, the freelist, and
	// walks every page reachable from the root: page ids and types, element
	// bounds, key order, no page reached twice or both reached and free, no
	// page lost, every value's checksum and every bucket's entry count. It
	// reads the whole file once.
	VerifyFull Verify = iota
	// VerifyQuick checks the meta pages, the file length and the freelist
	// only. Open is then O(freelist), but a damaged tree page is found only
	// when a read reaches it; see the Caveats in the package documentation.
	VerifyQuick
)

func (v Verify) String() string {
	switch v {
	case VerifyFull:
		return "full"
	case VerifyQuick:
		return "quick"
	}
	return fmt.Sprintf("Verify(%d)", int(v))
}

// Options configure Open. The zero value of every field means its default,
// so Options{} is a working configuration.
type Options struct {
	// NoSync skips the fsync at the end of each Update. A crash can then
	// lose or tear committed checkpoints: for tests and benchmarks only.
	NoSync bool

	// KeyGroups is the key group count (Store.KeyGroups), by which the
	// caller partitions its keys. A new file stores it; an existing file
	// must match it (ErrKeyGroups). Zero means the file's count, or
	// DefaultKeyGroups for a new file.
	KeyGroups int

	// FileMode is the permission of a newly created file. Zero means
	// DefaultFileMode.
	FileMode os.FileMode

	// Timeout bounds how long Open waits for another process to release
	// the file lock. Zero means DefaultTimeout; negative waits forever.
	Timeout time.Duration

	// Verify says how much of an existing file Open checks. The zero value
	// is VerifyFull.
	Verify Verify

	// MmapBytes is the address space the file is mapped with at first.
	// Growing the mapping makes bbolt copy every node of the writing
	// transaction out of the old one, which large Updates feel; reserving
	// it up front avoids that (file pages are read in only as touched).
	// Zero means bbolt's default (grow from 32 KiB). A stored file larger
	// than it is mapped whole.
	MmapBytes int

	// CompactFree, above zero, makes Open rewrite an existing file of at
	// least 1 MiB compactly when its free pages are at least this fraction
	// of the pages bbolt has written: bbolt reuses free pages but never
	// gives them back. The copy takes the
	// disk of what the file holds, and the time to write it; see
	// Store.Compaction. Zero never compacts.
	CompactFree float64
}

// EnsureDefaults returns a copy of o with every zero field set to its
// default (KeyGroups stays zero: Open resolves it against the file).
func (o Options) EnsureDefaults() Options {
	if o.FileMode == 0 {
		o.FileMode = DefaultFileMode
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Validate reports every problem with o at once, each wrapping ErrOptions.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrOptions}, args...)...))
	}
	if o.MmapBytes < 0 {
		bad("MmapBytes is %d, must be >= 0", o.MmapBytes)
	}
	if o.KeyGroups < 0 || o.KeyGroups > MaxKeyGroups {
		bad("KeyGroups is %d, must be in [1, %d] (or 0 for the default)", o.KeyGroups, MaxKeyGroups)
	}
	if o.FileMode&^os.ModePerm != 0 {
		bad("FileMode is %v, must hold permission bits only", o.FileMode)
	}
	if o.CompactFree < 0 || o.CompactFree > 1 {
		bad("CompactFree is %v, must be in [0, 1]", o.CompactFree)
	}
	if o.Verify != VerifyFull && o.Verify != VerifyQuick {
		bad("Verify is %d, must be VerifyFull or VerifyQuick", int(o.Verify))
	}
	return errors.Join(errs...)
}
