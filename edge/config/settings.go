package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/runnel-io/runnel/internal/settings"
)

// table is the single source of truth every source of configuration is
// derived from: YAML decoding, environment lookup, flag registration,
// defaults, --help and docs/edge-config.md. Adding a setting is adding a
// row (and the Config field); TestSettingsTable checks that every field
// has exactly one. Rows are in the order of the docs and of a config file.
var table = settings.New(settings.Table[Config]{
	Program:   "runnel-edge",
	File:      "edge.yaml",
	EnvPrefix: "RUNNEL_",
	ConfigEnv: "RUNNEL_CONFIG",
	Invalid:   ErrInvalid,
	Settings: append([]*settings.Setting[Config]{
		{Path: "edge_id", Flag: "edge-id", Env: "RUNNEL_EDGE_ID", DefaultDoc: "the hostname", Example: "gw-001",
			Doc:   "Names this gateway to the hub: 1 to 64 letters, digits, '.', '_' or '-'. Set it when gateways share a hostname (cloned images); the hub cannot tell such edges apart.",
			Value: settings.String(func(c *Config) *string { return &c.EdgeID }, checkEdgeID)},
		{Path: "data_dir", Flag: "data-dir", Env: "RUNNEL_DATA_DIR", Default: "./runnel-data",
			Doc:   "Directory of the state, checkpoints, ingest log and outbox; created if missing. Keep it on the same disk across restarts: it is what makes a restart resume.",
			Value: settings.Path(func(c *Config) *string { return &c.DataDir }, settings.NonEmpty)},
		{Path: "pipelines", Flag: "pipeline", Env: "RUNNEL_PIPELINES", DefaultDoc: "the built-in demo pipeline", Example: "[pipelines/*.yaml]",
			Doc:   "Pipeline spec files, or globs such as pipelines/*.yaml. The flag can be repeated; the variable is comma-separated.",
			Value: settings.Paths(func(c *Config) *[]string { return &c.Pipelines }, settings.PathOrGlob)},

		{Path: "memory_limit", Flag: "memory-limit", Env: "RUNNEL_MEMORY_LIMIT", Default: "0", Example: "48MiB",
			Doc:   "Soft limit on the memory the Go runtime uses (debug.SetMemoryLimit, like GOMEMLIMIT): near it the garbage collector runs more often, trading CPU for memory. Set it below the gateway's memory with room for the page cache; keep it well above the live heap (go_memstats_heap_alloc_bytes just after a collection) or the collector runs all the time. Unless state.max_resident_keys is set, a third of it bounds the window keys kept in memory (256 bytes a key): the rest are evicted to the state file. 0: no limit (GOMEMLIMIT from the environment, if set, applies).",
			Value: settings.Size(func(c *Config) *int64 { return &c.MemoryLimit }, nil)},

		{Path: "shutdown_timeout", Flag: "shutdown-timeout", Env: "RUNNEL_SHUTDOWN_TIMEOUT", Default: "10s",
			Doc:   "How long a stop (SIGTERM) may take to checkpoint and drain before the edge exits anyway; the next start replays from the last checkpoint.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, settings.Positive)},

		{Path: "broker.url", Flag: "broker-url", Env: "RUNNEL_BROKER_URL", Example: "mqtts://broker.example.com:8883",
			Doc:   "MQTT broker to read from: mqtt://host:port or tcp://host:port (plain), mqtts://host:port (TLS). Empty: start the embedded broker on broker.embedded_addr.",
			Value: settings.String(func(c *Config) *string { return &c.Broker.URL }, checkBrokerURL)},
		{Path: "broker.protocol", Flag: "broker-protocol", Env: "RUNNEL_BROKER_PROTOCOL", Default: "5",
			Doc:   "MQTT version spoken to the broker: 5, or 3.1.1 for brokers or policies that allow nothing newer. 3.1.1 lacks Receive Maximum, so back-pressure is the broker's own in-flight limit (Mosquitto: max_inflight_messages; keep it at most 1024) and then TCP; it lacks session expiry, so the broker's policy (Mosquitto: persistent_client_expiration) decides how long it keeps the session; and it lacks user properties, so mqtt outputs publish without their result_id.",
			Value: settings.Enum(func(c *Config) *Protocol { return &c.Broker.Protocol }, ProtocolV5, ProtocolV311)},
		{Path: "broker.embedded_addr", Flag: "embedded-broker-addr", Env: "RUNNEL_EMBEDDED_BROKER_ADDR", Default: "127.0.0.1:1883",
			Doc:   "Where the embedded broker listens when broker.url is empty. Loopback only, unless broker.embedded_allow_remote is true.",
			Value: settings.String(func(c *Config) *string { return &c.Broker.EmbeddedAddr }, checkAddr)},
		{Path: "broker.embedded_allow_remote", Flag: "broker-embedded-allow-remote", Env: "RUNNEL_BROKER_EMBEDDED_ALLOW_REMOTE", Default: "false",
			Doc:   "Let broker.embedded_addr be beyond loopback (0.0.0.0, a LAN address, a host name other than localhost). The embedded broker has no authentication: anyone who can reach it can publish readings and read them.",
			Value: settings.Bool(func(c *Config) *bool { return &c.Broker.EmbeddedAllowRemote })},
		{Path: "broker.client_id", Flag: "broker-client-id", Env: "RUNNEL_BROKER_CLIENT_ID", DefaultDoc: `"runnel-" + edge_id`, Example: "runnel-gw-001",
			Doc:   "MQTT client id; the broker keeps the persistent session under it, so changing it loses messages queued for the old one.",
			Value: settings.String(func(c *Config) *string { return &c.Broker.ClientID }, checkClientID)},
		{Path: "broker.username", Flag: "broker-username", Env: "RUNNEL_BROKER_USERNAME", Example: "gw-001",
			Doc:   "MQTT user name.",
			Value: settings.String(func(c *Config) *string { return &c.Broker.Username }, checkMQTTString)},
		{Path: "broker.password", Flag: "broker-password", Env: "RUNNEL_BROKER_PASSWORD", Secret: true, Example: "\"...\"",
			Doc:   "MQTT password. A flag is visible to every user of the host (ps); prefer the variable or broker.password_file.",
			Value: settings.String(func(c *Config) *string { return &c.Broker.Password }, nil)},
		{Path: "broker.password_file", Flag: "broker-password-file", Env: "RUNNEL_BROKER_PASSWORD_FILE", Example: "/etc/runnel/mqtt-password",
			Doc:   "File holding the MQTT password (a final line break is dropped). Not together with broker.password.",
			Value: settings.Path(func(c *Config) *string { return &c.Broker.PasswordFile }, nil)},
		{Path: "broker.tls.ca_file", Flag: "broker-tls-ca-file", Env: "RUNNEL_BROKER_TLS_CA_FILE", Example: "/etc/runnel/ca.pem",
			Doc:   "PEM certificates to verify the broker with (mqtts:// only). Empty: the system roots.",
			Value: settings.Path(func(c *Config) *string { return &c.Broker.TLS.CAFile }, nil)},
		{Path: "broker.tls.cert_file", Flag: "broker-tls-cert-file", Env: "RUNNEL_BROKER_TLS_CERT_FILE", Example: "/etc/runnel/client.pem",
			Doc:   "PEM client certificate, for brokers that require one; needs broker.tls.key_file.",
			Value: settings.Path(func(c *Config) *string { return &c.Broker.TLS.CertFile }, nil)},
		{Path: "broker.tls.key_file", Flag: "broker-tls-key-file", Env: "RUNNEL_BROKER_TLS_KEY_FILE", Example: "/etc/runnel/client-key.pem",
			Doc:   "PEM private key of broker.tls.cert_file.",
			Value: settings.Path(func(c *Config) *string { return &c.Broker.TLS.KeyFile }, nil)},
		{Path: "broker.tls.insecure_skip_verify", Flag: "broker-tls-insecure-skip-verify", Env: "RUNNEL_BROKER_TLS_INSECURE_SKIP_VERIFY", Default: "false",
			Doc:   "Do not verify the broker's certificate. For tests only: anyone on the path can read and inject readings.",
			Value: settings.Bool(func(c *Config) *bool { return &c.Broker.TLS.InsecureSkipVerify })},
		{Path: "broker.tls.server_name", Flag: "broker-tls-server-name", Env: "RUNNEL_BROKER_TLS_SERVER_NAME", Example: "broker.internal",
			Doc:   "Name to verify the broker's certificate against, when it differs from the host in broker.url.",
			Value: settings.String(func(c *Config) *string { return &c.Broker.TLS.ServerName }, nil)},
		{Path: "broker.receive_maximum", Flag: "broker-receive-maximum", Env: "RUNNEL_BROKER_RECEIVE_MAXIMUM", Default: "1024",
			Doc:   "How many QoS 1 messages the broker may send before the edge acknowledges them (1 to 65535): the bound that turns a slow pipeline into back-pressure on the broker. A message is acknowledged once its ingest log fsync is done, so this also caps the rate at receive_maximum / acknowledgement latency, which ingest_log.sync_delay bounds (1024 / 20 ms is 51k msg/s; 64 would be 3.2k msg/s, less on a slow SD card). MQTT v5 only: not allowed with broker.protocol 3.1.1.",
			Value: settings.Int(func(c *Config) *int { return &c.Broker.ReceiveMaximum }, 1, math.MaxUint16)},
		{Path: "broker.batch_wait", Flag: "broker-batch-wait", Env: "RUNNEL_BROKER_BATCH_WAIT", Default: "5ms",
			Doc:   "How long the edge waits after a read of the MQTT connection before the next one, so that the messages that arrived meanwhile are taken in one go (0 to 100ms; 0: no wait). CPU per message is set mostly by how many messages each wake-up handles, so this is the CPU/latency knob: it adds at most this much to a message's latency, and is skipped while the connection has more to read.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Broker.BatchWait }, settings.Between(0, 100*time.Millisecond))},
		{Path: "broker.session_expiry", Flag: "broker-session-expiry", Env: "RUNNEL_BROKER_SESSION_EXPIRY", Default: "24h",
			Doc:   "How long the broker keeps the session, and queues messages, while the edge is away. Whole seconds. MQTT v5 only: not allowed with broker.protocol 3.1.1, where the broker's own setting decides.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Broker.SessionExpiry }, mqttSeconds(math.MaxUint32))},
		{Path: "broker.keep_alive", Flag: "broker-keep-alive", Env: "RUNNEL_BROKER_KEEP_ALIVE", Default: "30s",
			Doc:   "MQTT keep-alive: the longest silence on the connection before a ping. Whole seconds, 1s to 65535s.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Broker.KeepAlive }, mqttSeconds(math.MaxUint16))},
		{Path: "broker.reconnect.min", Flag: "broker-reconnect-min", Env: "RUNNEL_BROKER_RECONNECT_MIN", Default: "250ms",
			Doc:   "First wait before reconnecting to the broker; each failure doubles it, with jitter.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Broker.Reconnect.Min }, settings.Between(time.Millisecond, 24*time.Hour))},
		{Path: "broker.reconnect.max", Flag: "broker-reconnect-max", Env: "RUNNEL_BROKER_RECONNECT_MAX", Default: "30s",
			Doc:   "Longest wait between reconnection attempts; at least broker.reconnect.min.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Broker.Reconnect.Max }, settings.Between(time.Millisecond, 24*time.Hour))},

		{Path: "checkpoint.interval", Flag: "checkpoint-interval", Env: "RUNNEL_CHECKPOINT_INTERVAL", Default: "1s",
			Doc:   "Time between checkpoints. Results reach the outbox only at a checkpoint, and a crash replays the ingest log since the last one.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Checkpoint.Interval }, settings.Positive)},

		{Path: "ingest_log.segment_size", Flag: "ingest-log-segment-size", Env: "RUNNEL_INGEST_LOG_SEGMENT_SIZE", Default: "64MiB",
			Doc:   "Size at which the ingest log starts a new segment file. Space is freed a whole segment at a time, once a checkpoint covers it.",
			Value: settings.Size(func(c *Config) *int64 { return &c.IngestLog.SegmentSize }, atLeast(minSegmentSize))},
		{Path: "ingest_log.spare_segments", Flag: "ingest-log-spare-segments", Env: "RUNNEL_INGEST_LOG_SPARE_SEGMENTS", Default: "1",
			Doc:   "Segment files a checkpoint frees that the log keeps (renamed *.seg.free) to write its next segments over: an fsync of blocks a file already has costs the file system no allocation and no journal commit, in CPU and in writes to the card. They count toward disk_cap.bytes, and the edge removes them first when it nears the cap. 0: every freed segment is deleted.",
			Value: settings.Int(func(c *Config) *int { return &c.IngestLog.SpareSegments }, 0, 16)},
		{Path: "ingest_log.sync", Flag: "ingest-log-sync", Env: "RUNNEL_INGEST_LOG_SYNC", Default: "group",
			Doc:   "When the ingest log fsyncs, which a message must pass before it is acknowledged: group (one fsync per batch or per sync_delay), always (per write), never (tests only: a power cut loses acknowledged messages).",
			Value: settings.Enum(func(c *Config) *SyncMode { return &c.IngestLog.Sync }, SyncGroup, SyncAlways, SyncNever)},
		{Path: "ingest_log.sync_delay", Flag: "ingest-log-sync-delay", Env: "RUNNEL_INGEST_LOG_SYNC_DELAY", Default: "20ms",
			Doc:   "Under sync: group, the longest a message waits for others to share its fsync (1ms to 1s): the reads of the MQTT connection within it share one (when the connection falls silent with half the broker's window unacknowledged, or any silence with MQTT 3.1.1, its messages are committed at once). It adds to the acknowledgement latency, and to when the pipelines see a message: the CPU/latency knob with broker.batch_wait (an fsync costs about as much CPU as 100 messages on a VM: at 20 ms rather than per 5-ms read, 0.49-0.51 rather than 0.62-0.78 CPU-s per 100k messages). With MQTT v5 it also bounds the rate at broker.receive_maximum / sync_delay (1024 / 20 ms is 51k msg/s).",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.IngestLog.SyncDelay }, settings.Between(time.Millisecond, time.Second))},
		{Path: "ingest_log.max_lag", Flag: "ingest-log-max-lag", Env: "RUNNEL_INGEST_LOG_MAX_LAG", Default: "100000",
			Doc:   "Most records the ingest log may hold that the pipelines have not processed yet (runnel_edge_ingest_lag_records). Past it the edge stops acknowledging MQTT, as at the disk cap, so that a pipeline slower than its input makes the broker hold the backlog rather than the gateway's disk; also after a restart, while the edge replays. 0: no bound (the disk cap still holds).",
			Value: settings.Int(func(c *Config) *int { return &c.IngestLog.MaxLag }, 0, 1<<30)},
		{Path: "ingest_log.compression", Flag: "ingest-log-compression", Env: "RUNNEL_INGEST_LOG_COMPRESSION", Default: "none",
			Doc:   "Compression of ingest log blocks: none or zstd. zstd trades CPU for SD card wear and space; logs written either way stay readable.",
			Value: settings.Enum(func(c *Config) *Compression { return &c.IngestLog.Compression }, CompressionNone, CompressionZstd)},

		{Path: "disk_cap.bytes", Flag: "disk-cap-bytes", Env: "RUNNEL_DISK_CAP_BYTES", Default: "1GiB",
			Doc:   "Most disk the ingest log and the state file (outbox, side outputs, operator state) may use together (runnel_edge_disk_used_bytes); 0: no cap. Near it the lanes yield in priority order: the raw archive first (segments deleted unarchived), then the side outputs (oldest first, runnel_edge_side_output_yielded_total), never the aggregates: at the cap the edge holds messages at the broker (or drops them: disk_cap.policy). It counts the log's segments and the state file's pages less its free ones: the file does not shrink while the edge runs (a start compacts it when at least half its pages are free), so after an outage the disk can hold up to the file's peak on top of what is counted; leave the card about twice this much free (docs/design.md, The disk cap and a week offline). At least two ingest log segments, and twice side_outputs.max_bytes.",
			Value: settings.Size(func(c *Config) *int64 { return &c.DiskCap.Bytes }, nil)},
		{Path: "disk_cap.policy", Flag: "disk-cap-policy", Env: "RUNNEL_DISK_CAP_POLICY", Default: "block",
			Doc:   "At the cap: block (stop acknowledging MQTT; the broker holds the data, up to its own limits) or drop_raw (acknowledge and drop incoming readings while at the cap, counted in runnel_edge_disk_cap_dropped_total; the outbox's aggregates are never dropped).",
			Value: settings.Enum(func(c *Config) *DiskPolicy { return &c.DiskCap.Policy }, PolicyBlock, PolicyDropRaw)},

		{Path: "side_outputs.max_bytes", Flag: "side-outputs-max-bytes", Env: "RUNNEL_SIDE_OUTPUTS_MAX_BYTES", Default: "64MiB",
			Doc:   "Most bytes the dead letters, late records and quarantined outbox entries may take together in the state file. They count toward disk_cap.bytes and yield their room to the aggregates there. Past it the oldest entries of the side output holding the most go first, so a flood of garbage dead letters does not push out quarantined results; counted in runnel_edge_side_output_dropped_total. Greater than 0, and at most half of disk_cap.bytes when that is set.",
			Value: settings.Size(func(c *Config) *int64 { return &c.SideOutputs.MaxBytes }, positiveSize)},
		{Path: "side_outputs.max_age", Flag: "side-outputs-max-age", Env: "RUNNEL_SIDE_OUTPUTS_MAX_AGE", Default: "7d",
			Doc:   "How long side output entries are kept; older ones are dropped, counted. 0: kept until max_bytes pushes them out.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.SideOutputs.MaxAge }, nil)},

		{Path: "dedup.ids", Flag: "dedup-ids", Env: "RUNNEL_DEDUP_IDS", Default: "16384",
			Doc:   "How many of the latest event ids each pipeline that declares event_id remembers to drop MQTT redeliveries (1 to 16777216). Redeliveries are the unacknowledged tail, bounded by the receive maximum and one group commit, so a few thousand suffice; a redelivery older than this many messages counts twice.",
			Value: settings.Int(func(c *Config) *int { return &c.Dedup.IDs }, 1, 1<<24)},

		{Path: "state.max_resident_keys", Flag: "state-max-resident-keys", Env: "RUNNEL_STATE_MAX_RESIDENT_KEYS", Default: "0", Example: "100000",
			Doc:   "Most window keys each pipeline keeps in memory (0 to 1073741824; 0: all of them, unless memory_limit is set, see below; 1073741824: all of them in any case). Beyond it, keys whose windows have all fired (state kept only for allowed_lateness) and whose state the last checkpoint stored are evicted, and read back from the state file on their next record, counted in runnel_edge_window_evictions_total and runnel_edge_window_reloads_total. Keys with a window still to fire stay, so the bound can be exceeded (runnel_edge_window_resident_keys). Each resident key of a tumbling window takes about 150 bytes; a reload costs about 10 µs of CPU (docs/design.md, eviction). When new keys come faster than checkpoints, the edge checkpoints early (past a quarter again the bound) and, at half again the bound, waits for the commit. Session windows keep every key. 0 with memory_limit set: a third of memory_limit at 256 bytes a key, shared among the pipelines configured at start (at least 1000 each).",
			Value: settings.Int(func(c *Config) *int { return &c.State.MaxResidentKeys }, 0, 1<<30)},

		{Path: "snapshot.store", Flag: "snapshot-store", Env: "RUNNEL_SNAPSHOT_STORE", Example: "s3://backups/runnel",
			Doc:   "Where the edge uploads snapshots of its state (each a consistent copy of the state file as of a checkpoint, zstd-compressed, with a manifest), under `<edge_id>/snapshots/<checkpoint id>/`: file:///path or an absolute path (a directory, say on another disk or a network mount), or s3://bucket/prefix. `runnel-edge restore --from <store>/<edge_id>` rebuilds a data directory from the latest. Empty: no snapshots.",
			Value: settings.String(func(c *Config) *string { return &c.Snapshot.Store }, checkSnapshotStore)},
		{Path: "snapshot.interval", Flag: "snapshot-interval", Env: "RUNNEL_SNAPSHOT_INTERVAL", Default: "1h",
			Doc:   "Time between snapshots (at least 10s), each of the last checkpoint; 0: only on demand (POST /admin/snapshot on http.addr). A restore loses what the edge took in after its snapshot's checkpoint, so this bounds the loss. Ingestion and checkpoints go on while a snapshot uploads.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Snapshot.Interval }, checkSnapshotInterval)},
		{Path: "snapshot.keep", Flag: "snapshot-keep", Env: "RUNNEL_SNAPSHOT_KEEP", Default: "3",
			Doc:   "How many complete snapshots stay in the store (1 to 1000); older ones are deleted once a new one is complete.",
			Value: settings.Int(func(c *Config) *int { return &c.Snapshot.Keep }, 1, 1000)},

		{Path: "raw_archive.store", Flag: "raw-archive-store", Env: "RUNNEL_RAW_ARCHIVE_STORE", Example: "s3://lake/runnel",
			Doc:   "Where sealed ingest-log segments go, compressed, before the edge deletes them, under `<edge_id>/raw/<yyyy>/<mm>/<dd>/` with a manifest each (docs/formats/raw-archive.md): file:///path, an absolute path, or s3://bucket/prefix. `runnel-edge replay --input <store>/<edge_id>` re-runs a pipeline over them. The lane yields to the uplink (raw_archive.yield_outbox_bytes) and to the disk cap. Empty: no raw archive.",
			Value: settings.String(func(c *Config) *string { return &c.RawArchive.Store }, checkSnapshotStore)},
		{Path: "raw_archive.topics", Flag: "raw-archive-topics", Env: "RUNNEL_RAW_ARCHIVE_TOPICS", Example: "[plant/+/vibration]",
			Doc:   "MQTT topic filters: archive only the messages whose topic matches one (each segment is re-written to hold just them, in order, numbered from its first position). Empty: every message the edge takes in. The flag can be repeated; the variable is comma-separated.",
			Value: settings.Strings(func(c *Config) *[]string { return &c.RawArchive.Topics }, checkTopicFilter)},
		{Path: "raw_archive.interval", Flag: "raw-archive-interval", Env: "RUNNEL_RAW_ARCHIVE_INTERVAL", Default: "10s",
			Doc:   "How often the raw lane looks for sealed segments, and retries after a failed upload.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.RawArchive.Interval }, settings.Positive)},
		{Path: "raw_archive.yield_outbox_bytes", Flag: "raw-archive-yield-outbox-bytes", Env: "RUNNEL_RAW_ARCHIVE_YIELD_OUTBOX_BYTES", Default: "256KiB",
			Doc:   "The raw lane uploads only while the outbox holds at most this much: on a constrained link the aggregates go first.",
			Value: settings.Size(func(c *Config) *int64 { return &c.RawArchive.YieldOutboxBytes }, positiveSize)},
		{Path: "raw_archive.max_bytes", Flag: "raw-archive-max-bytes", Env: "RUNNEL_RAW_ARCHIVE_MAX_BYTES", Default: "1GiB",
			Doc:   "Most bytes of segments a checkpoint already covers that the edge keeps only for the raw lane (say while the store is down). Past it, and when the disk cap has no room for two more segments, the oldest are deleted unarchived, counted in runnel_edge_raw_skipped_segments_total and logged: the archive then has a gap, the aggregates lose nothing.",
			Value: settings.Size(func(c *Config) *int64 { return &c.RawArchive.MaxBytes }, positiveSize)},

		{Path: "uplink.hub", Flag: "uplink-hub", Env: "RUNNEL_UPLINK_HUB", Example: "hub.example.com:7443",
			Doc:   "host:port of the hub's gRPC listener. Committed window results are sent there and deleted once the hub has made them durable. Empty: no uplink (the outbox grows up to the disk cap).",
			Value: settings.String(func(c *Config) *string { return &c.Uplink.Hub }, settings.OrEmpty(checkAddr))},
		{Path: "uplink.token", Flag: "uplink-token", Env: "RUNNEL_UPLINK_TOKEN", Secret: true, Example: "\"...\"",
			Doc:   "Bearer token the hub knows this edge by (not needed with a client certificate, uplink.tls.cert_file, that the hub accepts alone). A flag is visible to every user of the host (ps); prefer the variable or uplink.token_file.",
			Value: settings.String(func(c *Config) *string { return &c.Uplink.Token }, nil)},
		{Path: "uplink.token_file", Flag: "uplink-token-file", Env: "RUNNEL_UPLINK_TOKEN_FILE", Example: "/etc/runnel/hub-token",
			Doc:   "File holding the hub token (a final line break is dropped). Not together with uplink.token.",
			Value: settings.Path(func(c *Config) *string { return &c.Uplink.TokenFile }, nil)},
		{Path: "uplink.tls.ca_file", Flag: "uplink-tls-ca-file", Env: "RUNNEL_UPLINK_TLS_CA_FILE", Example: "/etc/runnel/hub-ca.pem",
			Doc:   "PEM certificates to verify the hub with. Empty: the system roots.",
			Value: settings.Path(func(c *Config) *string { return &c.Uplink.CAFile }, nil)},
		{Path: "uplink.tls.server_name", Flag: "uplink-tls-server-name", Env: "RUNNEL_UPLINK_TLS_SERVER_NAME", Example: "hub.internal",
			Doc:   "Name to verify the hub's certificate against, when it differs from uplink.hub's host.",
			Value: settings.String(func(c *Config) *string { return &c.Uplink.ServerName }, nil)},
		{Path: "uplink.tls.cert_file", Flag: "uplink-tls-cert-file", Env: "RUNNEL_UPLINK_TLS_CERT_FILE", Example: "/etc/runnel/edge.pem",
			Doc:   "PEM client certificate the edge authenticates to the hub with (the hub's tls.client_auth), beside or instead of uplink.token; needs uplink.tls.key_file. Its subject CN must be edge_id. The uplink and the control stream share it. A renewed file is used from the next connection on, without a restart; one that does not load or names another edge is logged and the previous one kept. An expired certificate is only a warning at start: the edge runs, the hub refuses it until it is renewed.",
			Value: settings.Path(func(c *Config) *string { return &c.Uplink.CertFile }, nil)},
		{Path: "uplink.tls.key_file", Flag: "uplink-tls-key-file", Env: "RUNNEL_UPLINK_TLS_KEY_FILE", Example: "/etc/runnel/edge-key.pem",
			Doc:   "PEM private key of uplink.tls.cert_file.",
			Value: settings.Path(func(c *Config) *string { return &c.Uplink.KeyFile }, nil)},
		{Path: "uplink.insecure", Flag: "uplink-insecure", Env: "RUNNEL_UPLINK_INSECURE", Default: "false",
			Doc:   "Talk to the hub in plaintext, without TLS. For loopback tests and demos only: the token and the results cross the network readable.",
			Value: settings.Bool(func(c *Config) *bool { return &c.Uplink.Insecure })},
		{Path: "uplink.batch_entries", Flag: "uplink-batch-entries", Env: "RUNNEL_UPLINK_BATCH_ENTRIES", Default: "500",
			Doc:   "Outbox entries per batch sent to the hub (1 to 100000).",
			Value: settings.Int(func(c *Config) *int { return &c.Uplink.BatchEntries }, 1, 100000)},

		{Path: "labels", Flag: "labels", Env: "RUNNEL_LABELS", Example: "[site=plant-7, hw=rpi4]",
			Doc:   "Labels of this edge as key=value, reported to the hub when it registers; deployments pick edges by them (label selectors). Keys are [prefix/]name and values at most 63 letters, digits, '-', '_' or '.', as Kubernetes labels. The hub may add or override labels of its own. The flag can be repeated; the variable is comma-separated.",
			Value: settings.Strings(func(c *Config) *[]string { return &c.Labels }, checkLabel)},
		{Path: "fleet.enabled", Flag: "fleet-enabled", Env: "RUNNEL_FLEET_ENABLED", Default: "true",
			Doc:   "With uplink.hub set, keep a control stream to the hub: register with the labels, run the pipeline revisions the hub deploys to this edge (beside those of local files, which the hub may not also manage) and report status. The last applied set is kept in the state file and runs on the next start, hub or not. With no pipelines configured, the edge then runs only what the hub sends (not the demo pipeline). false: the hub only receives results.",
			Value: settings.Bool(func(c *Config) *bool { return &c.Fleet.Enabled })},
		{Path: "fleet.status_interval", Flag: "fleet-status-interval", Env: "RUNNEL_FLEET_STATUS_INTERVAL", Default: "10s",
			Doc:   "How often the edge reports its status to the hub (it also reports at once after applying a change).",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Fleet.StatusInterval }, settings.Positive)},

		{Path: "http.addr", Flag: "http-addr", Env: "RUNNEL_HTTP_ADDR", Default: "127.0.0.1:9464",
			Doc:   "host:port of the HTTP server for /metrics (Prometheus), /healthz, /debug/pprof and POST /admin/snapshot (a snapshot now, with snapshot.store set; the answer names its checkpoint). Loopback only, unless http.allow_remote is true. Empty: no HTTP server.",
			Value: settings.String(func(c *Config) *string { return &c.HTTP.Addr }, settings.OrEmpty(checkAddr))},
		{Path: "http.allow_remote", Flag: "http-allow-remote", Env: "RUNNEL_HTTP_ALLOW_REMOTE", Default: "false",
			Doc:   "Let http.addr be beyond loopback. /metrics, /healthz, /debug/pprof and /admin/snapshot have no authentication: anyone who can reach them can read the edge's metrics, profile it and make it take snapshots. Put a proxy with authentication in front, or scrape over loopback, rather than set this.",
			Value: settings.Bool(func(c *Config) *bool { return &c.HTTP.AllowRemote })},
	}, append(settings.ObjectStoreSettings("RUNNEL_", func(c *Config) *settings.ObjectStore { return &c.ObjectStore }),
		settings.LogSettings("RUNNEL_", func(c *Config) *settings.Log { return &c.Log })...)...),
})

// minSegmentSize is the smallest segment the ingest log accepts
// (ingestlog.MinSegmentSize; not imported, so that config stays a leaf
// package the command wires to the others).
const minSegmentSize = 1 << 10

// --- per-value rules ---

// snapshotSchemes are the URL schemes of snapshot.store.
var snapshotSchemes = []string{"file", "s3"}

func checkSnapshotStore(s string) error {
	if s == "" {
		return nil
	}
	scheme, rest, isURL := strings.Cut(s, "://")
	switch {
	case !isURL && !strings.HasPrefix(s, "/"):
		return fmt.Errorf("%q is a relative path; write an absolute path or file:///path", s)
	case !isURL:
		return nil
	case !slices.Contains(snapshotSchemes, scheme):
		return fmt.Errorf("%q: scheme %q is not supported; use file:///path, a path, or s3://bucket/prefix", s, scheme)
	case scheme == "file" && !strings.HasPrefix(rest, "/"):
		return fmt.Errorf("%q: a file URL names a local path: file:///path (three slashes)", s)
	case scheme == "s3" && (rest == "" || rest[0] == '/'):
		return fmt.Errorf("%q has no bucket: s3://bucket/prefix", s)
	case strings.ContainsAny(s, "?#"):
		return fmt.Errorf("%q: a snapshot store URL has no query or fragment", s)
	}
	return nil
}

func checkSnapshotInterval(d time.Duration) error {
	if d != 0 && d < 10*time.Second {
		return fmt.Errorf("%s is too short; at least 10s, or 0 for on demand only", settings.ShowDuration(d))
	}
	return nil
}

var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// checkLabel checks one key=value label, with Kubernetes' syntax.
func checkLabel(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%q: want key=value", kv)
	}
	name := k
	if prefix, n, has := strings.Cut(k, "/"); has {
		if len(prefix) > 253 || !labelPrefix.MatchString(prefix) {
			return fmt.Errorf("label key %q: the prefix must be a DNS subdomain (lower-case letters, digits, '-' and '.')", k)
		}
		name = n
	}
	if !labelName.MatchString(name) {
		return fmt.Errorf("label key %q: want at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k)
	}
	if v != "" && !labelName.MatchString(v) {
		return fmt.Errorf("label %s: value %q: want at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k, v)
	}
	return nil
}

// checkAddr checks a listen address of the edge.
var checkAddr = settings.ListenAddr("127.0.0.1:1883")

var edgeIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func checkEdgeID(s string) error {
	switch {
	case s == "":
		return errors.New("empty; leave it out to use the hostname")
	case len(s) > 64:
		return fmt.Errorf("%d characters long; at most 64 are allowed", len(s))
	case !edgeIDRE.MatchString(s):
		for _, r := range s {
			if !(r < utf8.RuneSelf && edgeIDRE.MatchString(string(r))) {
				return fmt.Errorf("%q contains %q; use letters, digits, '.', '_' and '-'", s, r)
			}
		}
	}
	return nil
}

// checkMQTTString applies MQTT's rules for UTF-8 strings (client id, user
// name): valid UTF-8 without NUL, at most 65535 bytes.
func checkMQTTString(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL character")
	case len(s) > math.MaxUint16:
		return fmt.Errorf("%d bytes long; MQTT allows at most %d", len(s), math.MaxUint16)
	}
	return nil
}

func checkClientID(s string) error {
	if s == "" {
		return errors.New(`empty; leave it out to use "runnel-" + edge_id`)
	}
	if err := checkMQTTString(s); err != nil {
		return err
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%q contains a control character", s)
	}
	return nil
}

// brokerSchemes are the URL schemes of broker.url and whether they use TLS.
var brokerSchemes = map[string]bool{"mqtt": false, "tcp": false, "mqtts": true}

func checkBrokerURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%q is not a URL: %v", redact(s), err)
	}
	shown := u.Redacted()
	_, ok := brokerSchemes[u.Scheme]
	switch {
	case u.Scheme == "" || u.Opaque != "" && strings.Trim(u.Opaque, "0123456789") == "":
		// "broker.local:1883" parses as scheme "broker.local".
		bare := strings.TrimPrefix(s, "//")
		return fmt.Errorf("%q has no scheme; write mqtt://%s, or mqtts://%s for TLS", shown, bare, bare)
	case !ok:
		hint := ""
		switch u.Scheme { // url.Parse lower-cases it
		case "ssl", "tls", "mqtt+ssl", "mqtt+tls":
			hint = " (use mqtts:// for TLS)"
		case "ws", "wss", "http", "https":
			hint = " (MQTT over WebSocket is not supported)"
		}
		return fmt.Errorf("%q: scheme %q is not supported%s; use mqtt://, mqtts:// or tcp://", shown, u.Scheme, hint)
	case u.User != nil:
		return fmt.Errorf("%q has credentials in it; set broker.username and broker.password (or password_file) instead", shown)
	case u.Hostname() == "":
		return fmt.Errorf("%q has no host", shown)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return fmt.Errorf("%q: a broker URL is scheme://host:port, without a path or query", shown)
	}
	if p := u.Port(); p != "" {
		if err := settings.CheckPort(p); err != nil {
			return fmt.Errorf("%q: %v", shown, err)
		}
	}
	return nil
}

// redact hides what looks like a password in a URL that did not parse.
func redact(s string) string {
	at := strings.LastIndexByte(s, '@')
	scheme := strings.Index(s, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return s
	}
	userinfo := s[scheme+3 : at]
	if i := strings.IndexByte(userinfo, ':'); i >= 0 {
		return s[:scheme+3] + userinfo[:i] + ":xxxxx" + s[at:]
	}
	return s
}

// mqttSeconds is the rule of MQTT intervals, which are sent as a whole
// number of seconds from 1 to hi. The bound is shown in seconds, as the
// MQTT spec gives it.
func mqttSeconds(hi int64) func(time.Duration) error {
	return func(d time.Duration) error {
		switch {
		case d < time.Second || d > time.Duration(hi)*time.Second:
			return fmt.Errorf("%s is out of range; must be 1s to %ds", settings.ShowDuration(d), hi)
		case d%time.Second != 0:
			return fmt.Errorf("%s is not a whole number of seconds (MQTT sends it in seconds)", settings.ShowDuration(d))
		}
		return nil
	}
}

// positiveSize refuses a size of 0.
func positiveSize(n int64) error {
	if n <= 0 {
		return fmt.Errorf("must be greater than 0, got %s", settings.ShowBytes(n))
	}
	return nil
}

func atLeast(lo int64) func(int64) error {
	return func(n int64) error {
		if n < lo {
			return fmt.Errorf("%s is too small; must be at least %s", settings.ShowBytes(n), settings.ShowBytes(lo))
		}
		return nil
	}
}

// checkTopicFilter accepts an MQTT topic filter: not empty, '#' only as the
// whole last level, '+' only as a whole level.
func checkTopicFilter(f string) error {
	if f == "" {
		return fmt.Errorf("empty topic filter")
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case strings.Contains(l, "#") && (l != "#" || i != len(levels)-1):
			return fmt.Errorf("%q: '#' must be the whole last level", f)
		case strings.Contains(l, "+") && l != "+":
			return fmt.Errorf("%q: '+' must be a whole level", f)
		}
	}
	return nil
}
