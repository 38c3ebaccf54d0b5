package checkpoint

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error of this package wraps one of them (or an
// error of the store or the operating system), with a message that says
// which object, snapshot or field.
var (
	// ErrCorrupt marks bytes that are not what this package wrote: a
	// manifest or data header that does not check, a data object whose
	// size or checksum differs from its manifest's, a zstd stream that
	// does not decode, a checkpoint record that does not decode.
	// Restoring such a snapshot is refused.
	ErrCorrupt = errors.New("checkpoint: corrupt")

	// ErrFormat is a manifest, data object or checkpoint record of a
	// version this package does not know (written by a newer runnel). The
	// bytes may be intact.
	ErrFormat = errors.New("checkpoint: unknown format version")

	// ErrNotFound is what a Store returns for a key it does not hold (a
	// wiring adapter maps its backend's own "no such key" to it), and what
	// Snapshots return for a snapshot that is not there.
	ErrNotFound = errors.New("checkpoint: not found")

	// ErrExists is what a Store returns from Put for a key it already
	// holds: stores never overwrite.
	ErrExists = errors.New("checkpoint: already exists")

	// ErrStoreURL is a snapshot store URL that cannot be opened: bad
	// syntax, or a scheme nothing is registered for.
	ErrStoreURL = errors.New("checkpoint: bad snapshot store URL")
)

// corruptError is an error of the ErrCorrupt class that carries its own
// message, which says where.
type corruptError struct{ msg string }

func (e *corruptError) Error() string        { return e.msg }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(format string, args ...any) error {
	return &corruptError{msg: fmt.Sprintf(format, args...)}
}

// errorf wraps sentinel with a message of its own.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, sentinel)...)
}
