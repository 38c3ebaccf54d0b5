package aggregate

import (
	"errors"
	"fmt"
)

// ErrCorrupt marks every error that Decode and MergeEncoded return for an
// encoding they cannot accept: truncated or trailing bytes, a bad varint, a
// count that contradicts the record count, a sketch that fails validation.
// Test with errors.Is; the message says which aggregate and which byte.
var ErrCorrupt = errors.New("aggregate: corrupt state")

// ErrVersion is returned (wrapped) when the leading version byte of an
// encoding is not one this package writes. It wraps ErrCorrupt, so callers
// that only distinguish "decodable or not" need not know about it; a hub that
// wants to tell "newer edge" from "bit rot" tests ErrVersion first.
var ErrVersion = fmt.Errorf("aggregate: unknown state encoding version: %w", ErrCorrupt)

// ErrMismatch is returned (wrapped) when an encoding is well formed but was
// written by a Set with different sketch options: another HyperLogLog
// precision or DDSketch accuracy. Merging it would silently give wrong
// results, so it is refused. It wraps ErrCorrupt.
var ErrMismatch = fmt.Errorf("aggregate: state written with other sketch options: %w", ErrCorrupt)

// ErrInvalid is wrapped by every problem NewSet reports about its specs or
// options.
var ErrInvalid = errors.New("aggregate: invalid aggregate spec")
