// Package fakehub is an in-memory hub for runnelctl's tests: the Fleet,
// Results and Health services over real gRPC on a loopback port, with
// state a test sets up and reads back, every request recorded, and
// errors injected per method.
//
// It follows the contract of proto/runnel/v1/fleet.proto closely enough
// for a client: specs are checked with operators/spec and refused with a
// SpecProblems detail, a dry run stores nothing, an identical spec adds
// no revision, a refused call changes nothing. It is not the hub: no
// rollout ever progresses unless a test scripts it (Script).
package fakehub
