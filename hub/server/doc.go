// Package server is the hub's network side: the gRPC services of
// proto/runnel/v1 (Uplink and Control for edges; Results, Health and
// Fleet for API clients), the same API as REST through grpc-gateway,
// Server-Sent Events, /healthz and /metrics. It owns no state: every call
// goes to a Core (*hub.Hub), which dedups, merges and stores, or to a
// FleetCore (hub/fleet), the control plane.
//
// # Listeners
//
//   - gRPC (default 127.0.0.1:7443): Uplink.Sync, Control.Connect,
//     Results, Health, Fleet. The listener is the wire server's (package
//     wire): it serves the edges' two streams itself, a connection for one
//     goroutine and a few KB, and hands every connection whose first call
//     is another method to grpc-go, which serves the API on it with all
//     it offers. A connection serves the one or the other for its life:
//     an API method on an edge's connection, or an edge stream on an API
//     client's, is Unimplemented with a message saying so (after the
//     access rules: an edge's certificate or token is refused first).
//     Edges, runnelctl and the gateway each keep to theirs.
//   - HTTP (default 127.0.0.1:7080): REST under /v1/ (docs/hub-api.md),
//     the Fleet under /v1/fleet/, /v1/openapi.json, SSE at
//     /v1/pipelines/{pipeline}/results/events, /healthz, /metrics.
//
// /healthz, the runnel_hub_health gauge and the Health service serve one
// report (internal/health) of named checks: commit (failing while the
// last commit failed, or while shutting down), refusals, parked, clock and
// epochs (degraded while the core reports such incidents; health.go).
// /healthz is 503 only while failing.
//
// Both use TLS when a certificate and key are configured; without them
// New refuses unless Config.Insecure is set, and Start logs a warning.
// The gateway does not dial the gRPC listener: it calls a second,
// in-process gRPC server over a pipe (grpc-gateway's direct mode cannot
// stream), with the same interceptors, so REST needs what gRPC needs.
//
// # Auth
//
// The interceptor decides every call by its full method before a handler
// runs; a refused call reaches neither core. Bearer tokens (metadata
// "authorization: Bearer <token>") are of two kinds:
//
//   - Edge tokens, configured as edge id → token, call only the edge
//     services (Uplink, Control). The interceptor maps the token to its
//     edge; a Hello, Batch or Register naming another edge is
//     PermissionDenied.
//   - API tokens call everything else, by role (methodRoles): viewer
//     reads (Results, Health, the Fleet's Get, List, Diff and Audit),
//     operator also changes pipelines, deployments and labels, admin also
//     manages tokens. An API token is Config.APIToken (admin, named "api"
//     in the audit log) or one FleetCore.Authenticate accepts (its name,
//     its role). The handler gets the caller (callerOf), whose name is
//     the who of the change.
//
// With Config.ClientAuth optional or require, the gRPC listener also
// verifies a client certificate given against Config.ClientCAFile, and a
// verified one names its edge by its subject CN (internal/edgecert).
// tokens.edge resolves a stream's edge from the token, the certificate,
// or both (which must agree: PermissionDenied otherwise), and the
// handlers hold every Hello, Batch and Register to it: one check for
// both credentials. Under require an edge stream without a verified
// certificate is Unauthenticated, whatever its token. A connection with
// an edge certificate calls no API method (PermissionDenied). Any edge id
// a certificate of the CA names is accepted, listed in EdgeTokens or not.
// Certificates of another CA, expired or not for client authentication
// fail the handshake (runnel_hub_tls_handshake_failures_total, a logged
// warning); streams refused after it count in
// runnel_hub_edge_auth_refused_total by reason.
//
// A token of the wrong kind is PermissionDenied, a role too low
// PermissionDenied naming the role needed, no token or an unknown one
// Unauthenticated. Without an APIToken a call with no token is an
// anonymous viewer: reads stay open as they were before the fleet, and
// the Fleet's changes are Unauthenticated ("configure auth.api_token").
// A token given is always checked. Edge tokens and the API token are
// kept as SHA-256 sums; a presented token's sum is looked up among the
// edges' (one map probe, whatever the fleet's size) and compared with
// the API token's in constant time; fleet tokens are the FleetCore's to
// compare.
// /healthz and /metrics are always open (bind the HTTP listener
// accordingly). Without a Fleet, the Fleet and Control services answer
// Unimplemented ("the hub has no fleet store") before any token check.
//
// # Uplink stream
//
// Hello first (core.Hello) → Resume, which also announces the hub's
// limits (hub.MaxKeyBytes, hub.MaxStateBytes, hub.MaxBatchPartials, and
// the gRPC receive limit less 64 KiB as max_batch_bytes); then Batches,
// each core.Apply'd in order on the connection's goroutine (a batch being
// applied holds back that connection's next frames, the back-pressure an
// edge meets). Acks go out from one goroutine for every stream, the
// acker: woken by each commit of the core, it looks at the streams with
// batches not yet durable and sends each an Ack{epoch, acked_seq} when
// its edge's durable sequence moved. Core errors end the stream with
// stable codes: ErrFenced → FailedPrecondition (a batch of an older
// epoch; a Hello with one is answered with the hub's epoch instead),
// ErrGap → OutOfRange (reconnect, resume from the ack), ErrBadBatch and
// ErrBadEpoch → InvalidArgument (with the reason), ErrClosed and
// ErrArchiveFull → Unavailable. A *hub.RefusedError (some partials the
// hub will never accept) is InvalidArgument with a runnelv1.Refusal
// detail naming the entries by sequence number with their reasons, at
// most 1000 of them with reasons cut to 256 bytes so that the trailer
// stays small; the edge sets those aside and resends, and a further
// refusal names the rest. When the edge closes its side, the stream stays
// until the last batch is acked (at most 5 s).
//
// # Control stream
//
// Register first, naming the token's edge (else InvalidArgument or
// PermissionDenied) and within the bounds of control.go (at most 1000
// labels, 256 pipelines a status, 1 MiB a message; beyond them
// InvalidArgument, and nothing of the message reaches the fleet). Then
// FleetCore.Connect gives a channel of the edge's desired sets, and
// calls back when it has put one there: the stream's outbox then starts
// a goroutine that queues each in order on the stream and exits when the
// channel is empty, while each EdgeStatus is passed to FleetCore.Status
// on the connection's goroutine, always under the token's edge id. An
// idle stream thus costs no goroutine of its own. The stream ends when
// the channel closes while the stream lasts (a newer connection of the
// edge replaced it: Aborted), when the edge closes its side (OK), on a
// refused message, or on Shutdown (Unavailable).
//
// # Fleet API
//
// The Fleet handlers are adapters: they refuse what is wrong in the
// request itself (empty names, an unknown rollout action or role) with
// InvalidArgument before the core is called, and map the FleetCore's
// errors (fleeterr): ErrNotFound → NotFound, ErrInvalid →
// InvalidArgument (a *fleeterr.SpecError with a runnelv1.SpecProblems
// detail, at most 1000 problems, and the message listing them as
// file:line:col: field: message, one per line), ErrConflict →
// FailedPrecondition, ErrExists → AlreadyExists, anything else →
// Internal, logged. The metrics of the fleet (runnel_hub_fleet_*) are
// computed at each scrape from ListEdges("") and ListDeployments(); the
// per-edge series only as Config.FleetEdgeMetrics says (by default while
// the fleet has at most EdgeMetricsAutoMax edges: beyond, a scrape would
// take a large part of a second).
//
// # Invariants
//
//   - Every goroutine has an owner: the Server's (the listeners' loops,
//     the acker) and the control streams' senders, which Shutdown waits
//     for; the wire server's (a connection's, its writer) are its own.
//     After Shutdown returns nothing calls the core or the fleet, and
//     they may be closed.
//   - An edge stream's messages are handled on its connection's
//     goroutine, in order; its responses are queued, never waiting for
//     the edge: a Resume by that goroutine, Acks by the acker after it,
//     desired sets by the stream's sender, one at a time.
//   - Shutdown ends uplink and control streams (Unavailable),
//     subscriptions and SSE streams at once, then stops the gRPC servers
//     gracefully until its context ends.
//
// # Caveats
//
//   - A subscription the core drops (the subscriber fell behind) ends the
//     gRPC stream with Unavailable and the SSE response without a
//     message; clients resubscribe and query the gap.
//   - Browsers' EventSource cannot send an Authorization header: with an
//     API token, SSE needs a client that can (curl, most SDKs) or a proxy.
//   - TLS certificates and the client CA are read once, at New; renewing
//     one needs a restart. Client certificates are not checked for
//     revocation.
//   - A hub with a fleet and no API token shows the fleet's state to
//     anyone who reaches the listeners, and nobody can change it.
//   - An edge that stops reading has what it does not take queued for
//     it, up to 4 MiB a stream (wire.Config.MaxQueued); beyond, its
//     stream ends with ResourceExhausted and the edge reconnects. A
//     socket it does not read closes after 20 s of a blocked write.
//   - A tool that calls the API and opens edge streams needs two
//     connections (see Listeners).
package server
