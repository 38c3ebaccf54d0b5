// Package mqtt is the edge's MQTT source: it holds one MQTT v5 (default)
// or v3.1.1 connection (Config.Protocol) to a broker (the embedded one, edge/broker, or Mosquitto and the like),
// subscribes to the configured topics, and hands each message to a
// Handler, acknowledging it to the broker only when the handler says so.
//
// # Model
//
// Data flow step 1 in DESIGN.md: a message is acknowledged (PUBACK) only
// after the edge has appended it to its ingest log and synced it. So the
// source never acknowledges on its own. The Handler receives each message
// with an ack func; the edge calls it after the group commit that made the
// message durable. Until then the broker keeps the message and, if the
// connection or the process dies, sends it again.
//
// Back-pressure (DESIGN.md step 3) is MQTT's Receive Maximum, which the
// source sets in CONNECT (Config.ReceiveMaximum, default 64): the broker
// never has more than that many QoS 1/2 messages sent and not
// acknowledged. A pipeline that falls behind stops acking; the broker
// stops sending and queues, and the publishers' own flow control takes it
// from there.
//
// The session is persistent by default (CleanStart false, SessionExpiry
// 24h): while the edge is away the broker keeps the subscriptions and
// queues QoS 1 messages; on reconnect it first resends the ones it had
// sent and not had acknowledged (with the Duplicate flag), then the
// queued ones.
//
// # Invariants
//
//   - Handler calls come from one goroutine, in the order the broker sent
//     the messages.
//   - Acknowledgements reach the broker in arrival order (MQTT 4.6), each
//     at most once, and only on the connection that delivered the message:
//     an ack after that connection has dropped is a no-op, because the
//     broker may already have reused the packet ID for another message on
//     the new connection. The broker redelivers the unacknowledged message.
//   - No message is acknowledged unless its ack func was called. So
//     delivery is at least once: after a reconnect or a restart the handler
//     can see a message again. Messages that carry a unique ID are
//     deduplicated downstream (DESIGN.md, "Exactly-once"); others are not.
//   - Start does not wait for the broker; the source reconnects with a
//     jittered exponential back-off (ConnectRetryMin to ConnectRetryMax)
//     for as long as it runs, and resubscribes on every connection.
//   - Close lets the running handler call return, disconnects with a
//     normal DISCONNECT (the broker keeps the session) and waits for every
//     goroutine the source started.
//
// # MQTT v3.1.1
//
// Config.Protocol "3.1.1" is for brokers, or policies, that allow nothing
// newer. The Handler contract, the invariants above and the Source API are
// the same; what v3.1.1 gives is a persistent session (CleanSession false,
// so unacknowledged and queued QoS 1 messages are redelivered after a
// reconnect or restart), QoS 0 and 1 (and 2), TLS and user name and
// password. What it lacks:
//
//   - Receive Maximum. Back-pressure is the broker's own bound on unacked
//     messages in flight to one client (Mosquitto: max_inflight_messages,
//     default 20; 0 means none) and then TCP. Config.ReceiveMaximum is
//     ignored, and Stats.OverReceiveMaximum stays 0. The source buffers up
//     to 1024 delivered messages; a broker that sends more unacknowledged
//     ones blocks the connection's reader, and with it keep-alive, until
//     the handler catches up (the broker may then drop the connection).
//   - Session expiry. Config.SessionExpiry is ignored: the broker's policy
//     (Mosquitto: persistent_client_expiration, default never) decides how
//     long it keeps the session while the edge is away.
//   - User properties. Publish sends the message without them.
//   - A broker-assigned client ID: a ClientID is required.
//   - Retain Handling. Subscribing again makes the broker resend retained
//     messages, so the source subscribes on its first connection and when
//     the broker lost the session, not on every reconnect.
//   - CleanStart. A v3.1.1 clean session ends with its connection, so the
//     source gets CleanStart's meaning (discard the old session once, then
//     keep one) by connecting once with CleanSession set, disconnecting,
//     and connecting again without.
//
// # Implementation notes
//
// A connection is a link (source.go): the loop, back-off, delivery and
// acknowledgement order are the Source's, the wire is the link's. conn5.go
// speaks v5, conn311.go v3.1.1.
//
// The v5 client is github.com/eclipse/paho.golang's paho package; the
// reconnect loop is ours rather than autopaho's (autopaho needs
// golang.org/x/net, which this module does not require, and its loop
// offers no way to tie acknowledgements to a connection). paho's own
// manual acknowledgement mode is not used either: see acker in session.go
// for why, in short a 50 ms flush ticker that caps throughput at
// ReceiveMaximum per 50 ms (with a broker that honours it), acks lost at
// disconnect, and acks that can hit the next connection (paho.golang
// issues #327 and #160). Instead paho runs in automatic mode with a
// session that ignores the automatic ack and sends the handler's.
//
// The v3.1.1 client is github.com/eclipse/paho.mqtt.golang, one client per
// connection with its automatic reconnect, automatic acknowledgement and
// message store turned off: the acker writes the PUBACKs itself, on the
// same terms as for v5 (link311 says why).
//
// # Caveats
//
//   - MQTT 3.1 (protocol level 3) and MQTT-over-WebSocket are not spoken.
//     Prefer v5 where the broker allows it: v3.1.1's back-pressure bound is
//     the broker's, not the edge's (see "MQTT v3.1.1" above).
//   - Receive Maximum bounds QoS 1 and 2 only. QoS 0 messages have no flow
//     control: a handler slower than a QoS 0 stream blocks the connection's
//     reader, pings go unanswered and the broker drops the connection.
//   - The client's session state (packet IDs in use) is in memory, which is
//     enough for a receive-only client: on restart, the broker's session is
//     what matters, and the broker redelivers what was not acknowledged.
//   - Subscriptions removed from the config stay in a persistent session on
//     the broker until it expires or CleanStart is set once.
//   - Receive Maximum bounds back-pressure only if the broker honours it.
//     Mosquitto 2.0.11 (Debian 12) does for the first window only: after
//     that each PUBACK releases up to ReceiveMaximum more messages (fixed
//     in 2.0.13). The source then still delivers everything, in order, but
//     the messages beyond the bound wait in its inbox and paho's buffers
//     (and, once those are full, in TCP buffers, which stalls keep-alive
//     pings until the handler catches up). Stats.OverReceiveMaximum counts
//     them and a warning is logged once per connection. The embedded mochi
//     broker has worse flow-control defects (see edge/broker's Caveats):
//     with it, use ReceiveMaximum = broker.DefaultMaxInflight.
//   - The broker may cap SessionExpiry (Mosquitto: persistent_client_expiration)
//     and the number of queued messages (Mosquitto: max_queued_messages,
//     default 1000, beyond which it drops QoS 1 messages silently). Size
//     both for the longest outage the edge must survive.
package mqtt
