package fleet

import (
	"errors"

	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
)

// The API errors, re-exported from hub/fleet/fleeterr (which the server
// maps to gRPC codes without importing this package). Every error a Fleet
// method returns for a refused request wraps one of them, with a message
// that names the object.
var (
	// ErrNotFound: no such pipeline, revision, edge, deployment or token.
	ErrNotFound = fleeterr.ErrNotFound
	// ErrInvalid: the request is wrong in itself. A pipeline spec with
	// problems is refused with a *SpecError, which matches it.
	ErrInvalid = fleeterr.ErrInvalid
	// ErrConflict: the request is fine but the state forbids it.
	ErrConflict = fleeterr.ErrConflict
	// ErrExists: the object exists already.
	ErrExists = fleeterr.ErrExists
)

// SpecError refuses a pipeline spec with every problem found.
type SpecError = fleeterr.SpecError

var (
	// ErrCorrupt marks a store that cannot be read: a record whose frame
	// or checksum is wrong, a record that does not decode, or a layout
	// this version does not know. Open returns it, naming the record.
	ErrCorrupt = errors.New("fleet: store corrupt")
	// ErrClosed: the Fleet was closed.
	ErrClosed = errors.New("fleet: closed")
)
