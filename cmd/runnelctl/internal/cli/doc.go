// Package cli is runnelctl: its commands, the connection to the hub, and
// the output a person or a script reads. cmd/runnelctl's main only calls
// Main with the process's streams, environment and clock.
//
// # Model
//
// Every command is a thin client of the hub's gRPC API (runnel.v1.Fleet,
// Results and Health): it checks its input, makes one or a few calls,
// each under --timeout (streams excepted), and prints what came back as
// an aligned table, or as the API's own objects (-o json, -o yaml:
// protojson with the REST API's field names, every field present).
//
// # Invariants
//
//   - The exit code says what happened (Exit* constants, --help,
//     docs/runnelctl.md), whatever the command; the gRPC code of a
//     refusal decides it.
//   - Errors go to stderr, one line each, naming the object, the hub's
//     message and its code; a refused spec adds its problems as
//     file:line:col: field: message lines. Results go to stdout.
//   - The token is never printed, not in errors either.
//   - apply checks every document locally and every pipeline spec at the
//     hub (dry run) before it stores anything; a refusal stores nothing.
//   - The connection settings merge flag > environment > config file >
//     default, and every problem of every source is listed at once.
//
// # Caveats
//
//   - apply is not a transaction: once the checks passed, a pipeline or
//     deployment the hub refuses then (its state changed meanwhile)
//     leaves the objects before it applied; the error says which.
//   - A dry run of a deployment that names a pipeline the same apply
//     would create cannot be checked by the hub, and says so.
//   - rollout status --watch polls (--interval); it does not stream.
package cli
