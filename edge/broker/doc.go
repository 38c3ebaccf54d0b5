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
// MQTT v3.1.1 and v5 clients are both accepted.
//
// # In-process intake
//
// With [Options.Intake] (the edge always sets it) the messages of the
// pipelines' topics never take the subscriber path: mochi's OnPublish hook
// hands each one to the edge, which appends it to its ingest log, and the
// publisher gets its PUBACK only once the message is durable (for QoS 2,
// mochi's PUBREC waits for that). A publisher whose intake blocks (the
// disk cap) is not read meanwhile: that is the back-pressure to devices.
// So a device that has its acknowledgement has lost nothing, even if the
// edge is killed the next moment, and the mochi defects below (which are
// all on the subscriber path) do not touch the edge's data. Messages the
// intake takes still reach the broker's other subscribers, and are
// retained when asked, through mochi's inline client.
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
//     sessions, and the messages it held for other subscribers. What the
//     intake took is in the ingest log.
//
// The defects of mochi v2.7.9 that follow are on its subscriber path,
// which the edge's own data no longer takes; they still apply to other
// subscribers of this broker (a local dashboard) and to tests that
// subscribe.
//
//   - mochi v2.7.9 can deadlock a subscriber's connection under a QoS 1
//     stream: Inflight.NextImmediate takes the store's read lock and then
//     calls GetAll, which takes it again; a publisher waiting for the write
//     lock in between (to add the next message) blocks the second read
//     lock, and both wait forever (Close then hangs too). It needs a
//     subscriber with messages in flight while publishers add more, so a
//     busy edge will meet it; the tests here met it about once in 25 runs
//     of a 100-message exchange, and a quarter of the armv7 runs under
//     qemu when the edge still subscribed.
//   - Receive Maximum is not safe with mochi v2.7.9 either. When a subscriber has
//     its Receive Maximum of messages unacknowledged, mochi parks further
//     QoS 1/2 messages and sends one per packet it later receives from that
//     client; such a message is (1) deleted from mochi's store when it is
//     sent, not when acknowledged, so it is lost if the subscriber goes
//     away before acking it; (2) never gives its send quota back, so after
//     Receive Maximum of them the subscription stalls for good (seen here:
//     412 of 10,000 messages delivered at Receive Maximum 64, then
//     nothing); (3) picked by an unstable sort on its creation second, so
//     order is lost. TestPinnedMochiDefectLosesQuotaHeldMessage pins (1).
//     The workaround: a subscriber (the edge's MQTT source) uses a Receive
//     Maximum of DefaultMaxInflight, the size of mochi's per-client store,
//     so that mochi's store fills, and it drops (counted in
//     Stats.InflightDropped), before that path is taken. Back-pressure then
//     ends at this broker's store, in the edge's own memory.
//   - Per client, at most [Options.MaxInflight] QoS 1/2 messages are held
//     (sent and unacknowledged, plus queued for an offline persistent
//     session); beyond that mochi drops the message and counts it in
//     [Stats.InflightDropped].
//   - mochi resends unacknowledged messages on reconnect in an order that
//     is not the original one (the same unstable sort).
//   - Every packet a client sends (each PUBACK included) costs mochi a scan
//     of all the messages it holds for that client, so working off a
//     backlog of n messages costs O(n²): 10,000 queued messages took 16 s
//     to drain here, against 2 s through Mosquitto.
//   - No authentication and no TLS.
package broker
