// Package broker is the MQTT broker that runnel-edge embeds, so that an
// edge with an empty configuration has somewhere for its sensors to
// publish and for its MQTT source to subscribe.
//
// It is github.com/mochi-mqtt/server/v2 with three choices made:
//
//   - One plain TCP listener, bound to loopback (127.0.0.1:1883) unless
//     [Options.Addr] says otherwise. No WebSocket, no $SYS HTTP listener.
//   - Every client may connect and may publish and subscribe to every
//     topic (an allow-all auth hook: without one, mochi refuses every
//     connection). That is only safe because the default address is
//     loopback; binding it to a LAN address opens it to that LAN.
//   - Sessions, subscriptions and queued messages live in memory.
//
// MQTT v3.1.1 and v5 clients are both accepted. A v5 client's Receive
// Maximum is honoured: mochi holds further QoS 1/2 messages for it until it
// acknowledges earlier ones, which is how the edge's MQTT source applies
// back-pressure to publishers (see edge/mqtt).
//
// # Lifecycle
//
// [Start] binds the listener and returns once the broker accepts
// connections. [Broker.Close] disconnects every client, closes the listener
// and waits for the connection goroutines to finish.
//
// # Caveats
//
//   - No persistence: when the edge process stops, the broker forgets
//     sessions and every QoS 1/2 message it had accepted from a publisher
//     but not yet delivered to (and had acknowledged by) a subscriber. The
//     MQTT source acknowledges only what the ingest log has made durable,
//     so nothing the edge acknowledged is lost; but messages the broker had
//     already acknowledged to a device are. Where that matters, run
//     Mosquitto with persistence instead (deploy/), or give this package a
//     storage hook (mochi has a bbolt one) — not done yet.
//   - Per client, at most [Options.MaxInflight] QoS 1/2 messages are held
//     (sent and unacknowledged, plus queued for an offline persistent
//     session); beyond that mochi drops the message and counts it in
//     [Stats.InflightDropped].
//   - No authentication and no TLS.
package broker
