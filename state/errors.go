package state

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps one of them (or an
// error from the operating system), so callers branch with errors.Is; the
// message around it says which file, bucket, key or page.
var (
	// ErrCorrupt marks every error caused by bytes on disk that are not what
	// this package (or bbolt beneath it) wrote: a bad bbolt page, a truncated
	// file, a value whose checksum does not match, a panic inside bbolt while
	// it read a damaged page. Test with errors.Is(err, ErrCorrupt); the
	// message names the file and, where known, the page, bucket and key.
	ErrCorrupt = errors.New("state: corrupt")

	// ErrFormat is returned by Open for a bbolt file that this package did
	// not write, or wrote with a newer layout version than it understands.
	// It is not corruption: the bytes are intact, they are just not ours.
	ErrFormat = errors.New("state: unsupported file format")

	// ErrClosed is returned by every method called after Store.Close.
	ErrClosed = errors.New("state: store closed")

	// ErrOptions wraps each problem Options.Validate finds.
	ErrOptions = errors.New("state: invalid options")

	// ErrKeyGroups is returned by Open when Options.KeyGroups differs from
	// the count the file was created with. Changing it needs every key
	// re-hashed into new groups, which this package does not do.
	ErrKeyGroups = errors.New("state: key group count differs from the file's")

	// ErrKey is returned by Bucket.Put and Bucket.Delete for an empty key or
	// one longer than MaxKeySize.
	ErrKey = errors.New("state: invalid key")

	// ErrValueTooLarge is returned by Bucket.Put for a value longer than
	// MaxValueSize.
	ErrValueTooLarge = errors.New("state: value too large")

	// ErrName is returned by Tx.Bucket for an invalid system bucket name:
	// empty, longer than MaxNameSize, or not valid UTF-8.
	ErrName = errors.New("state: invalid name")

	// ErrLocked is returned by Open when another process holds the file's
	// lock for longer than Options.Timeout.
	ErrLocked = errors.New("state: file locked by another process")

	// ErrReadOnly is returned by Bucket.Put and Bucket.Delete inside View.
	ErrReadOnly = errors.New("state: read-only transaction")
)

// corruptError is an error of the ErrCorrupt class. It carries its own
// message (which already says where) rather than wrapping ErrCorrupt with %w,
// so the text does not end in a redundant "state: corrupt".
type corruptError struct{ msg string }

func (e *corruptError) Error() string        { return e.msg + " (corrupt)" }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

// corruptf returns an error of the ErrCorrupt class.
func corruptf(format string, args ...any) error {
	return &corruptError{msg: fmt.Sprintf(format, args...)}
}
