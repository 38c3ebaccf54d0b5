// Package fleeterr holds the errors of the hub's control plane: the fleet
// store (hub/fleet) returns them, wrapped with a message that names the
// object, and the server (hub/server) maps them to gRPC codes. It is its
// own package so that the server does not import the store.
package fleeterr

import (
	"errors"
	"strings"

	"github.com/runnel-io/runnel/operators/spec"
)

var (
	// ErrNotFound: no such pipeline, revision, edge, deployment or token
	// (gRPC NotFound).
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request is wrong in itself (InvalidArgument).
	ErrInvalid = errors.New("invalid")
	// ErrConflict: the request is fine but the state forbids it, such as
	// deleting a deployed pipeline (FailedPrecondition).
	ErrConflict = errors.New("conflict")
	// ErrExists: the object exists already (AlreadyExists).
	ErrExists = errors.New("already exists")
)

// SpecError refuses a pipeline spec: every problem found, as an edge
// reports them. It matches ErrInvalid.
type SpecError struct {
	Problems []spec.Problem
}

// Error lists the problems one per line, as file:line:col: field: message.
func (e *SpecError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return "invalid pipeline spec:\n" + strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *SpecError) Is(target error) bool { return target == ErrInvalid }
