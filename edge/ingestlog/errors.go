package ingestlog

import (
	"errors"
	"fmt"
)

// ErrCorrupt marks damaged data on disk: a frame or segment header whose CRC
// does not match, lengths that do not fit, records missing between two
// segments. Open and Reader.Next return it as a *CorruptError, which names the
// segment file and the byte offset; test with errors.Is(err, ErrCorrupt).
// A torn tail of the last segment is not corruption: Open repairs it.
var ErrCorrupt = errors.New("ingestlog: corrupt data")

// ErrVersion is returned by Open for a segment whose header carries a format
// version this build does not read, most likely written by a newer runnel.
// It does not wrap ErrCorrupt on purpose: such a segment is left untouched,
// never truncated or deleted as damage.
var ErrVersion = errors.New("ingestlog: unsupported segment format version")

// ErrClosed is returned by Append, WaitDurable and Close once Close has been
// called.
var ErrClosed = errors.New("ingestlog: log closed")

// ErrTooLarge is wrapped by Append for a record longer than
// Options.MaxRecordSize. The record is not appended.
var ErrTooLarge = errors.New("ingestlog: record too large")

// ErrOutOfRange is wrapped by NewReader and Reader.Next for a position the
// log does not hold: before First (deleted by DeleteBefore), or past the
// durable end.
var ErrOutOfRange = errors.New("ingestlog: position out of range")

// ErrFailed is wrapped, together with the cause, by every Append and
// WaitDurable after a write or fsync failed. After a failed fsync the state
// of the file is unknown, so the Log stops writing rather than retry; Close
// it and Open the directory again, which keeps what is intact on disk.
var ErrFailed = errors.New("ingestlog: log failed")

// ErrLocked is returned by Open when another Log, in this process or
// another, holds the directory.
var ErrLocked = errors.New("ingestlog: directory locked by another log")

// CorruptError says what is damaged and where. Offset is the byte offset in
// the segment file of the frame (or header, at 0) that failed to verify.
type CorruptError struct {
	Segment string // file name, without the directory
	Offset  int64
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("ingestlog: corrupt segment %s at offset %d: %s", e.Segment, e.Offset, e.Reason)
}

// Is makes every *CorruptError match ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(seg string, off int64, format string, args ...any) error {
	return &CorruptError{Segment: seg, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
