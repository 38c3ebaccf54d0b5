// Package testbroker runs a real Mosquitto broker for tests.
//
// The edge's MQTT source is only as good as its behaviour against the broker
// it will meet in the field, so its tests run against the Debian
// `mosquitto` binary rather than a mock. [Start] launches one broker per
// test on a free loopback port, with its configuration, log, pid file and
// persistence database in t.TempDir(), waits until it accepts TCP
// connections, and stops it in t.Cleanup. When the test fails, the broker's
// log is copied into the test log.
//
// # Model
//
// A [Mosquitto] is one broker identity: a port and a persistence directory
// that survive [Mosquitto.Stop], [Mosquitto.Kill] and [Mosquitto.Restart].
// Stop sends SIGTERM, on which Mosquitto writes its in-memory database
// (sessions, subscriptions, queued QoS 1/2 messages) to disk; Restart stops
// it (if running) and starts it again on the same port from that database,
// which is what a broker restart in the field looks like. Kill sends
// SIGKILL: nothing is saved beyond the last autosave
// ([Options.AutosaveInterval]), which is what a power cut looks like.
//
// With [Options.TLS] the broker also listens for MQTT over TLS on a second
// port ([Mosquitto.TLSAddr]), with a certificate for 127.0.0.1 signed by a
// CA made for the test ([Mosquitto.CAFile]).
//
// [Publisher] is a bare paho.golang client for sending test traffic, and
// [Dial] the few lines every plain test client needs.
//
// # Defaults that differ from Mosquitto's
//
//   - max_queued_messages is 0 (no limit) unless [Options.MaxQueuedMessages]
//     says otherwise. Mosquitto's own default, 1000, silently drops QoS 1
//     messages queued for a slow or offline subscriber beyond that count;
//     tests that assert "nothing lost" would then test Mosquitto's
//     configuration instead of our code. Production configs should raise it
//     too (see deploy/).
//   - `user root`: Mosquitto started as root otherwise switches to the
//     `mosquitto` user and then cannot write its log or database in a
//     root-owned temporary directory (it fails silently).
//
// # Caveats
//
//   - The binary must be installed: run deploy/test/install-deps.sh. A
//     missing binary fails the test instead of skipping it, so that CI
//     cannot go green by silently testing nothing.
//   - The free port is found by binding :0 and closing it, so another
//     process can take it before Mosquitto binds it; Start then fails with
//     the broker's log. On this machine that has not been seen.
//   - On Linux the broker is started with PR_SET_PDEATHSIG, so a test
//     process that dies without running its cleanups (a panic, -timeout)
//     takes its brokers with it instead of leaving them running.
//   - Stop, Kill and Restart call t.Fatal on failure, so, like every
//     testing.TB method that may stop the test, they must be called from
//     the test goroutine.
package testbroker
