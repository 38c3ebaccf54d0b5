// Package health is the /healthz report runnel-edge and runnel-hub share:
// a list of named checks, each ok, degraded or failing with a reason, and
// the node's status, the worst of them.
//
// The HTTP handler answers 200 while the node is ok or degraded and 503
// while it is failing, with the report as JSON:
//
//	{"status":"degraded","version":"v0.4.0-3-g1a2b3c4","commit":"1a2b3c4...","checks":[
//	  {"name":"uplink","status":"ok"},
//	  {"name":"quarantine","status":"degraded","reason":"3 outbox entries quarantined in the last hour (3 held): hub: partial 0 (seq 17): key of 5000 bytes, at most 4096"}]}
//
// so that a load balancer or a supervisor needs only the status code and a
// person reads the reasons, and which build answers (internal/buildinfo:
// the version `make release` stamped, or the toolchain's). Degraded means the node works but something
// needs a look (data is being set aside or dropped, a peer is away);
// failing means it does not do its job (it cannot ingest, commit or send).
package health
