package rawarchive

import "errors"

var (
	// ErrCorrupt marks an archived object that is not what its manifest
	// says (size, checksum, format): it is refused, never half-used.
	ErrCorrupt = errors.New("rawarchive: corrupt")
	// ErrVersion marks a manifest of another format version.
	ErrVersion = errors.New("rawarchive: unknown manifest version")
	// ErrGap marks positions no manifest covers: the edge deleted those
	// segments unarchived (at its disk cap) or they were never archived.
	ErrGap = errors.New("rawarchive: gap in the archive")
	// ErrExists is what a Store's Put returns for a key that exists.
	ErrExists = errors.New("rawarchive: object exists")
	// ErrNotFound is what a Store's Get returns for a missing key.
	ErrNotFound = errors.New("rawarchive: object not found")
)
