package archive

import "errors"

// Errors of the archive besides the Store's (ErrExists, ErrNotFound).
var (
	// ErrCorrupt: bytes that do not decode: a log entry, a schema, the
	// archiver's state, a manifest or a Parquet file of the archive.
	ErrCorrupt = errors.New("archive: corrupt")
	// ErrInvalid: Options, a Schema or a Row the archive cannot take.
	ErrInvalid = errors.New("archive: invalid")
	// ErrConflict: an object the archiver was about to publish exists with
	// other contents: another writer uses the same archive and log id, or
	// the archive was changed by hand. The archiver stops rather than
	// publish over it.
	ErrConflict = errors.New("archive: conflicting object")
)
