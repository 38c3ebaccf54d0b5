// Package uplink drains an edge's committed outbox to the hub over gRPC.
//
// One Sync stream at a time. The uplink says Hello with its epoch and the
// next sequence it will commit; the hub answers with the highest sequence
// of that epoch it made durable, and the uplink resends from the one after
// it. Batches follow in sequence order without waiting (up to MaxUnacked
// entries ahead of the hub's acks); acks come back as the hub commits, and
// the outbox deletes what they cover. Any failure closes the stream and a
// new one starts after a jittered exponential back-off, so hub restarts,
// cut links and days offline all end the same way: resume from the ack.
//
// Epochs. When the hub has made durable more of this edge than the edge
// itself remembers committing (it was restored from an older copy of its
// data), or fences the edge's epoch, the uplink starts a new epoch (stored
// durably before use) and resends its whole outbox under it. The hub keeps
// each edge's latest partial per window, so a resent window replaces what
// the old history left there instead of adding to it. A new epoch waits out
// the back-off like any failure, so two edges fighting over one id, or a hub
// that keeps fencing, cost a write per back-off at most.
//
// What the hub will never take is set aside, not retried. The hub announces
// its limits in the Resume; an entry beyond them (a key or state too long, an
// entry that alone is over the batch limit) is quarantined before it is sent.
// A batch the hub refuses because of some of its partials (InvalidArgument
// with a Refusal detail) has those entries quarantined with the hub's
// reasons, and the rest is sent again at once. Quarantined entries keep their
// sequence numbers and go as numbers only, like entries of pipelines without
// a hub output, so the sequence stays whole. A ResourceExhausted (a message
// over the hub's gRPC limit, from a hub that announced a larger one) halves
// the entries per batch; once batches are single entries, each stream's
// first batch goes alone until acked, so that an entry too large even alone
// is known for sure, and quarantined. A refusal of a whole batch
// (InvalidArgument without detail), or of the edge's epoch, is retried after
// the back-off and reported (Stats.Refusal), since only an operator can fix
// it.
//
// Client certificates. With one in Config.TLS, a hub that refuses it (under
// TLS 1.3 the refusal arrives after the client's handshake is done) ends the
// connection attempt with an error that says so, naming the hub's TLS alert
// (expired certificate, unknown certificate authority), rather than the
// broken pipe the first write would meet: after the handshake the uplink
// waits up to 5 s for the hub's first bytes (clientcert.go).
package uplink
