// Package mqtt is the edge's MQTT source: it holds one MQTT v5 (default)
// or v3.1.1 connection (Config.Protocol) to a broker (the embedded one, edge/broker, or Mosquitto and the like),
// subscribes to the configured topics, and hands the messages to a
// BatchHandler, a batch per read of the connection, acknowledging them to
// the broker only when the handler says so.
//
// # Model
//
// Data flow step 1 in DESIGN.md: a message is acknowledged (PUBACK) only
// after the edge has appended it to its ingest log and synced it. So the
// source never acknowledges on its own. The handler receives each batch
// with its Acks; the edge calls Acks.Ack after the group commit that made
// the batch durable. Until then the broker keeps the message and, if the
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
//   - Handler calls come one at a time (from the connection's reader), in
//     the order the broker sent the messages.
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
//     for as long as it runs, and resubscribes on every connection. With
//     Config.Hold it does not connect while Hold says so: a handler that
//     holds messages would leave the SUBACK behind the first batch unread.
//   - Close lets the running handler call return, disconnects with a
//     normal DISCONNECT (the broker keeps the session) and waits for every
//     goroutine the source started.
//
// # MQTT v3.1.1
//
// Config.Protocol "3.1.1" is for brokers, or policies, that allow nothing
// newer. The BatchHandler contract, the invariants above and the Source API are
// the same; what v3.1.1 gives is a persistent session (CleanSession false,
// so unacknowledged and queued QoS 1 messages are redelivered after a
// reconnect or restart), QoS 0 and 1 (and 2), TLS and user name and
// password. What it lacks:
//
//   - Receive Maximum. Back-pressure is the broker's own bound on unacked
//     messages in flight to one client (Mosquitto: max_inflight_messages,
//     default 20; 0 means none) and then TCP. Config.ReceiveMaximum is
//     ignored, and Stats.OverReceiveMaximum stays 0.
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
// The source reads the socket itself (wire.go): one goroutine per
// connection reads whatever the socket holds into one buffer, frames the
// packets in place, and hands every PUBLISH of the read to the handler as
// one Batch, acknowledged with one call (and, corked, one write of all
// its PUBACKs). Between reads it waits Config.BatchWait (5 ms) when a read
// did not fill its buffer, so that more messages share a wake-up: on these
// machines a wake-up costs more than decoding a message, so CPU per
// message follows messages per wake-up. The reader answers PUBREL with
// PUBCOMP itself. After a batch, a read that finds nothing within 1 ms
// calls Config.Idle: the edge commits there what it left to its group
// commit when the broker may be waiting for the acknowledgements. The
// client libraries see every other packet (CONNACK, SUBACK, PINGRESP,
// the acks of our own publishes) through bufConn.Read, and do what they
// are good at: the handshake, keep-alive, SUBSCRIBE and
// publishing. A library that reads packet by packet costs a wake-up, a
// goroutine hand-off and several allocations per message (paho.golang's
// reader was a third of the edge's CPU).
//
// The v5 client is github.com/eclipse/paho.golang's paho package; the
// reconnect loop is ours rather than autopaho's (autopaho needs
// golang.org/x/net, which this module does not require, and its loop
// offers no way to tie acknowledgements to a connection). paho's own
// manual acknowledgement mode is not used either: see acker in session.go.
//
// The v3.1.1 client is github.com/eclipse/paho.mqtt.golang, one client per
// connection with its automatic reconnect and message store turned off.
//
// # Caveats
//
//   - MQTT 3.1 (protocol level 3) and MQTT-over-WebSocket are not spoken.
//     Prefer v5 where the broker allows it: v3.1.1's back-pressure bound is
//     the broker's, not the edge's (see "MQTT v3.1.1" above).
//   - Receive Maximum bounds QoS 1 and 2 only. QoS 0 messages have no flow
//     control: a handler slower than a QoS 0 stream blocks the connection's
//     reader, pings go unanswered and the broker drops the connection.
//   - A payload longer than Config.MaxMessage is delivered with only its
//     start (Message.Size has its length); the edge keeps that start as a
//     dead letter.
//   - The client's session state (packet IDs in use) is in memory, which is
//     enough for a receive-only client: on restart, the broker's session is
//     what matters, and the broker redelivers what was not acknowledged.
//   - Subscriptions removed from the config stay in a persistent session on
//     the broker until it expires or CleanStart is set once.
//   - Receive Maximum bounds back-pressure only if the broker honours it.
//     Mosquitto 2.0.11 (Debian 12) does for the first window only: after
//     that each PUBACK releases up to ReceiveMaximum more messages (fixed
//     in 2.0.13). The source then still delivers everything, in order, but
//     the messages beyond the bound wait in TCP buffers while the handler
//     blocks, which stalls keep-alive pings until it catches up. Stats.OverReceiveMaximum counts
//     them and a warning is logged once per connection. The embedded mochi
//     broker has worse flow-control defects (see edge/broker's Caveats):
//     with it, use ReceiveMaximum = broker.DefaultMaxInflight.
//   - The broker may cap SessionExpiry (Mosquitto: persistent_client_expiration)
//     and the number of queued messages (Mosquitto: max_queued_messages,
//     default 1000, beyond which it drops QoS 1 messages silently). Size
//     both for the longest outage the edge must survive.
package mqtt
