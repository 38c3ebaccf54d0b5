package cli

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// grpcExit maps the gRPC status err carries to an exit code.
func grpcExit(err error) (int, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return 0, false
	}
	switch se.GRPCStatus().Code() {
	case codes.OK:
		return ExitOK, true
	case codes.InvalidArgument, codes.OutOfRange:
		return ExitUsage, true
	case codes.NotFound:
		return ExitNotFound, true
	case codes.Unauthenticated, codes.PermissionDenied:
		return ExitPermission, true
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return ExitConflict, true
	}
	return ExitError, true
}

// hubError is a call's error with the object it was about: one line
// "what: message (Code)", then a refused spec's problems, one a line.
type hubError struct {
	what string
	addr string // the hub's address, for Unavailable
	err  error
}

func (e *hubError) Unwrap() error { return e.err }

func (e *hubError) Error() string {
	st, ok := status.FromError(e.err)
	if !ok {
		return e.what + ": " + e.err.Error()
	}
	msg := st.Message()
	var problems []string
	for _, d := range st.Details() {
		if sp, ok := d.(*runnelv1.SpecProblems); ok {
			for _, p := range sp.Problems {
				problems = append(problems, spec.Problem{File: p.File, Pos: spec.Pos{Line: int(p.Line), Column: int(p.Column)}, Field: p.Field, Msg: p.Message}.Error())
			}
		}
	}
	if len(problems) > 0 {
		// The message repeats the problems after its first line.
		msg, _, _ = strings.Cut(msg, "\n")
		msg = strings.TrimSuffix(msg, ":")
	} else {
		msg = strings.ReplaceAll(strings.TrimSpace(msg), "\n", "; ")
	}
	line := fmt.Sprintf("%s: %s (%s)", e.what, msg, st.Code())
	switch st.Code() {
	case codes.Unavailable:
		line += fmt.Sprintf("; is the hub running at %s? (--hub, %s)", e.addr, EnvHub)
	case codes.Unauthenticated:
		line += fmt.Sprintf("; give an API token: --token-file, %s or %s", EnvToken, EnvTokenFile)
	case codes.DeadlineExceeded:
		line += "; the hub did not answer within --timeout"
	}
	if len(problems) > 0 {
		line += "\n" + strings.Join(problems, "\n")
	}
	return line
}

// wrap names the object of a failed call; nil stays nil.
func (a *app) wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	addr := ""
	if a.target != nil {
		addr = a.target.addr
	}
	return &hubError{what: fmt.Sprintf(format, args...), addr: addr, err: err}
}
