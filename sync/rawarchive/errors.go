package rawarchive

import (
	"errors"

	"github.com/runnel-io/runnel/checkpoint"
)

var (
	// ErrCorrupt marks an archived object that is not what its manifest
	// says (size, checksum, format): it is refused, never half-used.
	ErrCorrupt = errors.New("rawarchive: corrupt")
	// ErrVersion marks a manifest of another format version.
	ErrVersion = errors.New("rawarchive: unknown manifest version")
	// ErrGap marks positions no manifest covers: the edge deleted those
	// segments unarchived (at its disk cap) or they were never archived.
	ErrGap = errors.New("rawarchive: gap in the archive")
	// ErrNotFound marks an object a manifest names that the store does
	// not hold; it also matches checkpoint.ErrNotFound.
	ErrNotFound = checkpoint.ErrNotFound
)
