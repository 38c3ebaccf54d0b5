// Package server is the hub's network side: the gRPC services of
// proto/runnel/v1 (Uplink for edges; Results and Health for readers),
// the same read API as REST through grpc-gateway, Server-Sent Events,
// /healthz and /metrics. It owns no state: every call goes to a Core
// (*hub.Hub), which dedups, merges and stores.
//
// # Listeners
//
//   - gRPC (default 127.0.0.1:7443): Uplink.Sync, Results, Health.
//   - HTTP (default 127.0.0.1:7080): REST under /v1/ (docs/hub-api.md),
//     /v1/openapi.json, SSE at /v1/pipelines/{pipeline}/results/events,
//     /healthz, /metrics.
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
// Edges authenticate with a bearer token each (metadata
// "authorization: Bearer <token>"), configured as edge id → token. The
// interceptor maps the token to its edge before the handler runs: no
// token or an unknown one is Unauthenticated; a Hello or Batch naming
// another edge is PermissionDenied. Either way nothing reaches the core.
// Tokens are kept as SHA-256 sums and compared in constant time against
// every edge's. The read API (Results, Health, REST, SSE) needs the API
// token when one is configured and is open otherwise; /healthz and
// /metrics are always open (bind the HTTP listener accordingly).
//
// # Uplink stream
//
// Hello first (core.Hello) → Resume, which also announces the hub's
// limits (hub.MaxKeyBytes, hub.MaxStateBytes, hub.MaxBatchPartials, and
// the gRPC receive limit less 64 KiB as max_batch_bytes); then Batches,
// each core.Apply'd in order by a receive loop, while an acker sends
// Ack{epoch, acked_seq} each time core.Acked's next channel closes and
// the durable sequence moved. Core errors end the stream with stable
// codes: ErrFenced → FailedPrecondition (a batch of an older epoch; a
// Hello with one is answered with the hub's epoch instead), ErrGap →
// OutOfRange (reconnect, resume from the ack), ErrBadBatch and
// ErrBadEpoch → InvalidArgument (with the reason), ErrClosed →
// Unavailable. A *hub.RefusedError (some partials the hub
// will never accept) is InvalidArgument with a runnelv1.Refusal detail
// naming the entries by sequence number with their reasons, at most 1000
// of them with reasons cut to 256 bytes so that the trailer stays small;
// the edge sets those aside and resends, and a further refusal names the
// rest. When the edge closes its side, the stream stays until the last
// batch is acked (at most 5 s).
//
// # Invariants
//
//   - Every goroutine has an owner: the acker is the stream's and is
//     waited for before the handler returns; the receive loop may sit
//     in Recv until the handler returns, so the Server owns it and
//     Shutdown waits for it. After Shutdown returns nothing calls the
//     core, and it may be closed.
//   - Only the receive loop calls Recv and only the acker calls Send
//     after the Resume.
//   - Shutdown ends uplink streams (Unavailable), subscriptions and SSE
//     streams at once, then stops the gRPC servers gracefully until its
//     context ends.
//
// # Caveats
//
//   - A subscription the core drops (the subscriber fell behind) ends the
//     gRPC stream with Unavailable and the SSE response without a
//     message; clients resubscribe and query the gap.
//   - Browsers' EventSource cannot send an Authorization header: with an
//     API token, SSE needs a client that can (curl, most SDKs) or a proxy.
//   - TLS certificates are read once, at New; renewing one needs a
//     restart.
package server
