package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// setting is one row of the table every source of configuration is derived
// from: YAML decoding, environment lookup, flag registration, defaults,
// --help and docs/edge-config.md. Adding a setting is adding a row (and the
// Config field); TestSettingsTable checks that every field has exactly one.
type setting struct {
	path    string // YAML path, dotted: "checkpoint.interval"
	flag    string // flag name without dashes
	env     string // environment variable
	def     string // default, in the syntax a user writes; "" for none
	defDoc  string // how a default computed at load time is described
	example string // a value for the docs' example config, when def is ""
	doc     string // what it does, and what a user must know; one or two sentences
	secret  bool   // never echoed in messages
	val     value
}

// settings is the table, in the order of the docs and of a config file.
var settings = []*setting{
	{path: "edge_id", flag: "edge-id", env: "RUNNEL_EDGE_ID", defDoc: "the hostname", example: "gw-001",
		doc: "Names this gateway to the hub: 1 to 64 letters, digits, '.', '_' or '-'. Set it when gateways share a hostname (cloned images); the hub cannot tell such edges apart.",
		val: strVal(func(c *Config) *string { return &c.EdgeID }, checkEdgeID)},
	{path: "data_dir", flag: "data-dir", env: "RUNNEL_DATA_DIR", def: "./runnel-data",
		doc: "Directory of the state, checkpoints, ingest log and outbox; created if missing. Keep it on the same disk across restarts: it is what makes a restart resume.",
		val: pathVal(func(c *Config) *string { return &c.DataDir }, nonEmpty)},
	{path: "pipelines", flag: "pipeline", env: "RUNNEL_PIPELINES", defDoc: "the built-in demo pipeline", example: "[pipelines/*.yaml]",
		doc: "Pipeline spec files, or globs such as pipelines/*.yaml. The flag can be repeated; the variable is comma-separated.",
		val: pathsVal(func(c *Config) *[]string { return &c.Pipelines }, checkPipeline)},

	{path: "shutdown_timeout", flag: "shutdown-timeout", env: "RUNNEL_SHUTDOWN_TIMEOUT", def: "10s",
		doc: "How long a stop (SIGTERM) may take to checkpoint and drain before the edge exits anyway; the next start replays from the last checkpoint.",
		val: durVal(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, positive)},

	{path: "broker.url", flag: "broker-url", env: "RUNNEL_BROKER_URL", example: "mqtts://broker.example.com:8883",
		doc: "MQTT broker to read from: mqtt://host:port or tcp://host:port (plain), mqtts://host:port (TLS). Empty: start the embedded broker on broker.embedded_addr.",
		val: strVal(func(c *Config) *string { return &c.Broker.URL }, checkBrokerURL)},
	{path: "broker.protocol", flag: "broker-protocol", env: "RUNNEL_BROKER_PROTOCOL", def: "5",
		doc: "MQTT version spoken to the broker: 5, or 3.1.1 for brokers or policies that allow nothing newer. 3.1.1 lacks Receive Maximum, so back-pressure is the broker's own in-flight limit (Mosquitto: max_inflight_messages; keep it at most 1024) and then TCP; it lacks session expiry, so the broker's policy (Mosquitto: persistent_client_expiration) decides how long it keeps the session; and it lacks user properties, so mqtt outputs publish without their result_id.",
		val: enumVal(func(c *Config) *Protocol { return &c.Broker.Protocol }, ProtocolV5, ProtocolV311)},
	{path: "broker.embedded_addr", flag: "embedded-broker-addr", env: "RUNNEL_EMBEDDED_BROKER_ADDR", def: "127.0.0.1:1883",
		doc: "Where the embedded broker listens when broker.url is empty. Binding beyond loopback lets other hosts publish without authentication.",
		val: strVal(func(c *Config) *string { return &c.Broker.EmbeddedAddr }, checkAddr)},
	{path: "broker.client_id", flag: "broker-client-id", env: "RUNNEL_BROKER_CLIENT_ID", defDoc: `"runnel-" + edge_id`, example: "runnel-gw-001",
		doc: "MQTT client id; the broker keeps the persistent session under it, so changing it loses messages queued for the old one.",
		val: strVal(func(c *Config) *string { return &c.Broker.ClientID }, checkClientID)},
	{path: "broker.username", flag: "broker-username", env: "RUNNEL_BROKER_USERNAME", example: "gw-001",
		doc: "MQTT user name.",
		val: strVal(func(c *Config) *string { return &c.Broker.Username }, checkMQTTString)},
	{path: "broker.password", flag: "broker-password", env: "RUNNEL_BROKER_PASSWORD", secret: true, example: "\"...\"",
		doc: "MQTT password. A flag is visible to every user of the host (ps); prefer the variable or broker.password_file.",
		val: strVal(func(c *Config) *string { return &c.Broker.Password }, nil)},
	{path: "broker.password_file", flag: "broker-password-file", env: "RUNNEL_BROKER_PASSWORD_FILE", example: "/etc/runnel/mqtt-password",
		doc: "File holding the MQTT password (a final line break is dropped). Not together with broker.password.",
		val: pathVal(func(c *Config) *string { return &c.Broker.PasswordFile }, nil)},
	{path: "broker.tls.ca_file", flag: "broker-tls-ca-file", env: "RUNNEL_BROKER_TLS_CA_FILE", example: "/etc/runnel/ca.pem",
		doc: "PEM certificates to verify the broker with (mqtts:// only). Empty: the system roots.",
		val: pathVal(func(c *Config) *string { return &c.Broker.TLS.CAFile }, nil)},
	{path: "broker.tls.cert_file", flag: "broker-tls-cert-file", env: "RUNNEL_BROKER_TLS_CERT_FILE", example: "/etc/runnel/client.pem",
		doc: "PEM client certificate, for brokers that require one; needs broker.tls.key_file.",
		val: pathVal(func(c *Config) *string { return &c.Broker.TLS.CertFile }, nil)},
	{path: "broker.tls.key_file", flag: "broker-tls-key-file", env: "RUNNEL_BROKER_TLS_KEY_FILE", example: "/etc/runnel/client-key.pem",
		doc: "PEM private key of broker.tls.cert_file.",
		val: pathVal(func(c *Config) *string { return &c.Broker.TLS.KeyFile }, nil)},
	{path: "broker.tls.insecure_skip_verify", flag: "broker-tls-insecure-skip-verify", env: "RUNNEL_BROKER_TLS_INSECURE_SKIP_VERIFY", def: "false",
		doc: "Do not verify the broker's certificate. For tests only: anyone on the path can read and inject readings.",
		val: boolVal(func(c *Config) *bool { return &c.Broker.TLS.InsecureSkipVerify })},
	{path: "broker.tls.server_name", flag: "broker-tls-server-name", env: "RUNNEL_BROKER_TLS_SERVER_NAME", example: "broker.internal",
		doc: "Name to verify the broker's certificate against, when it differs from the host in broker.url.",
		val: strVal(func(c *Config) *string { return &c.Broker.TLS.ServerName }, nil)},
	{path: "broker.receive_maximum", flag: "broker-receive-maximum", env: "RUNNEL_BROKER_RECEIVE_MAXIMUM", def: "64",
		doc: "How many QoS 1 messages the broker may send before the edge acknowledges them (1 to 65535): the bound that turns a slow pipeline into back-pressure on the broker. MQTT v5 only: not allowed with broker.protocol 3.1.1.",
		val: intVal(func(c *Config) *int { return &c.Broker.ReceiveMaximum }, 1, math.MaxUint16)},
	{path: "broker.session_expiry", flag: "broker-session-expiry", env: "RUNNEL_BROKER_SESSION_EXPIRY", def: "24h",
		doc: "How long the broker keeps the session, and queues messages, while the edge is away. Whole seconds. MQTT v5 only: not allowed with broker.protocol 3.1.1, where the broker's own setting decides.",
		val: durVal(func(c *Config) *time.Duration { return &c.Broker.SessionExpiry }, mqttSeconds(math.MaxUint32))},
	{path: "broker.keep_alive", flag: "broker-keep-alive", env: "RUNNEL_BROKER_KEEP_ALIVE", def: "30s",
		doc: "MQTT keep-alive: the longest silence on the connection before a ping. Whole seconds, 1s to 65535s.",
		val: durVal(func(c *Config) *time.Duration { return &c.Broker.KeepAlive }, mqttSeconds(math.MaxUint16))},
	{path: "broker.reconnect.min", flag: "broker-reconnect-min", env: "RUNNEL_BROKER_RECONNECT_MIN", def: "250ms",
		doc: "First wait before reconnecting to the broker; each failure doubles it, with jitter.",
		val: durVal(func(c *Config) *time.Duration { return &c.Broker.Reconnect.Min }, between(time.Millisecond, 24*time.Hour))},
	{path: "broker.reconnect.max", flag: "broker-reconnect-max", env: "RUNNEL_BROKER_RECONNECT_MAX", def: "30s",
		doc: "Longest wait between reconnection attempts; at least broker.reconnect.min.",
		val: durVal(func(c *Config) *time.Duration { return &c.Broker.Reconnect.Max }, between(time.Millisecond, 24*time.Hour))},

	{path: "checkpoint.interval", flag: "checkpoint-interval", env: "RUNNEL_CHECKPOINT_INTERVAL", def: "1s",
		doc: "Time between checkpoints. Results reach the outbox only at a checkpoint, and a crash replays the ingest log since the last one.",
		val: durVal(func(c *Config) *time.Duration { return &c.Checkpoint.Interval }, positive)},

	{path: "ingest_log.segment_size", flag: "ingest-log-segment-size", env: "RUNNEL_INGEST_LOG_SEGMENT_SIZE", def: "64MiB",
		doc: "Size at which the ingest log starts a new segment file. Space is freed a whole segment at a time, once a checkpoint covers it.",
		val: sizeVal(func(c *Config) *int64 { return &c.IngestLog.SegmentSize }, atLeast(minSegmentSize))},
	{path: "ingest_log.sync", flag: "ingest-log-sync", env: "RUNNEL_INGEST_LOG_SYNC", def: "group",
		doc: "When the ingest log fsyncs, which a message must pass before it is acknowledged: group (one fsync per batch or per sync_delay), always (per write), never (tests only: a power cut loses acknowledged messages).",
		val: enumVal(func(c *Config) *SyncMode { return &c.IngestLog.Sync }, SyncGroup, SyncAlways, SyncNever)},
	{path: "ingest_log.sync_delay", flag: "ingest-log-sync-delay", env: "RUNNEL_INGEST_LOG_SYNC_DELAY", def: "2ms",
		doc: "Under sync: group, the longest a message waits for others to share its fsync (1ms to 1s). It adds to the acknowledgement latency.",
		val: durVal(func(c *Config) *time.Duration { return &c.IngestLog.SyncDelay }, between(time.Millisecond, time.Second))},
	{path: "ingest_log.compression", flag: "ingest-log-compression", env: "RUNNEL_INGEST_LOG_COMPRESSION", def: "none",
		doc: "Compression of ingest log blocks: none or zstd. zstd trades CPU for SD card wear and space; logs written either way stay readable.",
		val: enumVal(func(c *Config) *Compression { return &c.IngestLog.Compression }, CompressionNone, CompressionZstd)},

	{path: "disk_cap.bytes", flag: "disk-cap-bytes", env: "RUNNEL_DISK_CAP_BYTES", def: "1GiB",
		doc: "Most disk the ingest log and the outbox may use together; 0: no cap. At least two ingest log segments.",
		val: sizeVal(func(c *Config) *int64 { return &c.DiskCap.Bytes }, nil)},
	{path: "disk_cap.policy", flag: "disk-cap-policy", env: "RUNNEL_DISK_CAP_POLICY", def: "block",
		doc: "At the cap: block (stop acknowledging MQTT; the broker holds the data, up to its own limits) or drop_raw (acknowledge and drop incoming readings while at the cap, counted in runnel_edge_disk_cap_dropped_total; the outbox's aggregates are never dropped).",
		val: enumVal(func(c *Config) *DiskPolicy { return &c.DiskCap.Policy }, PolicyBlock, PolicyDropRaw)},

	{path: "dedup.ids", flag: "dedup-ids", env: "RUNNEL_DEDUP_IDS", def: "16384",
		doc: "How many of the latest event ids each pipeline that declares event_id remembers to drop MQTT redeliveries (1 to 16777216). Redeliveries are the unacknowledged tail, bounded by the receive maximum and one group commit, so a few thousand suffice; a redelivery older than this many messages counts twice.",
		val: intVal(func(c *Config) *int { return &c.Dedup.IDs }, 1, 1<<24)},

	{path: "uplink.hub", flag: "uplink-hub", env: "RUNNEL_UPLINK_HUB", example: "hub.example.com:7443",
		doc: "host:port of the hub's gRPC listener. Committed window results are sent there and deleted once the hub has made them durable. Empty: no uplink (the outbox grows up to the disk cap).",
		val: strVal(func(c *Config) *string { return &c.Uplink.Hub }, orEmpty(checkAddr))},
	{path: "uplink.token", flag: "uplink-token", env: "RUNNEL_UPLINK_TOKEN", secret: true, example: "\"...\"",
		doc: "Bearer token the hub knows this edge by. A flag is visible to every user of the host (ps); prefer the variable or uplink.token_file.",
		val: strVal(func(c *Config) *string { return &c.Uplink.Token }, nil)},
	{path: "uplink.token_file", flag: "uplink-token-file", env: "RUNNEL_UPLINK_TOKEN_FILE", example: "/etc/runnel/hub-token",
		doc: "File holding the hub token (a final line break is dropped). Not together with uplink.token.",
		val: pathVal(func(c *Config) *string { return &c.Uplink.TokenFile }, nil)},
	{path: "uplink.tls.ca_file", flag: "uplink-tls-ca-file", env: "RUNNEL_UPLINK_TLS_CA_FILE", example: "/etc/runnel/hub-ca.pem",
		doc: "PEM certificates to verify the hub with. Empty: the system roots.",
		val: pathVal(func(c *Config) *string { return &c.Uplink.CAFile }, nil)},
	{path: "uplink.tls.server_name", flag: "uplink-tls-server-name", env: "RUNNEL_UPLINK_TLS_SERVER_NAME", example: "hub.internal",
		doc: "Name to verify the hub's certificate against, when it differs from uplink.hub's host.",
		val: strVal(func(c *Config) *string { return &c.Uplink.ServerName }, nil)},
	{path: "uplink.insecure", flag: "uplink-insecure", env: "RUNNEL_UPLINK_INSECURE", def: "false",
		doc: "Talk to the hub in plaintext, without TLS. For loopback tests and demos only: the token and the results cross the network readable.",
		val: boolVal(func(c *Config) *bool { return &c.Uplink.Insecure })},
	{path: "uplink.batch_entries", flag: "uplink-batch-entries", env: "RUNNEL_UPLINK_BATCH_ENTRIES", def: "500",
		doc: "Outbox entries per batch sent to the hub (1 to 100000).",
		val: intVal(func(c *Config) *int { return &c.Uplink.BatchEntries }, 1, 100000)},

	{path: "http.addr", flag: "http-addr", env: "RUNNEL_HTTP_ADDR", def: "127.0.0.1:9464",
		doc: "host:port of the HTTP server for /metrics (Prometheus) and /healthz. Empty: no HTTP server.",
		val: strVal(func(c *Config) *string { return &c.HTTP.Addr }, orEmpty(checkAddr))},

	{path: "log.level", flag: "log-level", env: "RUNNEL_LOG_LEVEL", def: "info",
		doc: "Least severe level logged: debug, info, warn or error.",
		val: enumVal(func(c *Config) *LogLevel { return &c.Log.Level }, LevelInfo, LevelDebug, LevelWarn, LevelError)},
	{path: "log.format", flag: "log-format", env: "RUNNEL_LOG_FORMAT", def: "text",
		doc: "Log format: text (key=value) or json.",
		val: enumVal(func(c *Config) *LogFormat { return &c.Log.Format }, FormatText, FormatJSON)},
}

// configFlag and configEnv name the config file; they are not settings
// (the file cannot name itself) but are parsed alongside them.
const (
	configFlag = "config"
	configEnv  = "RUNNEL_CONFIG"
)

// minSegmentSize is the smallest segment the ingest log accepts
// (ingestlog.MinSegmentSize; not imported, so that config stays a leaf
// package the command wires to the others).
const minSegmentSize = 1 << 10

// Lookups into the table, built once.
var (
	byPath = map[string]*setting{}
	byFlag = map[string]*setting{}
	byEnv  = map[string]*setting{}
	// children lists, for each section path ("" for the top level,
	// "broker", "broker.tls"), the names that may appear in it, in table
	// order.
	children = map[string][]string{}
)

func init() {
	for _, st := range settings {
		byPath[st.path], byFlag[st.flag], byEnv[st.env] = st, st, st
		parent := ""
		for _, part := range strings.Split(st.path, ".") {
			if !containsStr(children[parent], part) {
				children[parent] = append(children[parent], part)
			}
			parent = joinPath(parent, part)
		}
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// --- per-value rules ---

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

func nonEmpty(s string) error {
	if s == "" {
		return errors.New("empty")
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

// checkPipeline checks one pipeline path or glob. Whether a plain path
// exists is checked with the other files (crossChecks).
func checkPipeline(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty path")
	}
	if _, err := filepath.Match(s, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob: %v", s, err)
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
		if err := checkPort(p); err != nil {
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

// checkAddr checks a listen address, host:port. The host may be empty (all
// interfaces); the port must be a number (0: any free port).
func checkAddr(s string) error {
	if s == "" {
		return errors.New("empty; expected host:port such as 127.0.0.1:1883")
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%q is not host:port: %s", s, ae.Err)
		}
		return fmt.Errorf("%q is not host:port", s)
	}
	if err := checkPort(port); err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	return nil
}

func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > math.MaxUint16 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return nil
}

func orEmpty(check func(string) error) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		return check(s)
	}
}

func between(lo, hi time.Duration) func(time.Duration) error {
	return func(d time.Duration) error {
		if d < lo || d > hi {
			return fmt.Errorf("%s is out of range; must be %s to %s", showDuration(d), showDuration(lo), showDuration(hi))
		}
		return nil
	}
}

// mqttSeconds is the rule of MQTT intervals, which are sent as a whole
// number of seconds from 1 to hi. The bound is shown in seconds, as the
// MQTT spec gives it.
func mqttSeconds(hi int64) func(time.Duration) error {
	return func(d time.Duration) error {
		switch {
		case d < time.Second || d > time.Duration(hi)*time.Second:
			return fmt.Errorf("%s is out of range; must be 1s to %ds", showDuration(d), hi)
		case d%time.Second != 0:
			return fmt.Errorf("%s is not a whole number of seconds (MQTT sends it in seconds)", showDuration(d))
		}
		return nil
	}
}

func atLeast(lo int64) func(int64) error {
	return func(n int64) error {
		if n < lo {
			return fmt.Errorf("%s is too small; must be at least %s", showBytes(n), showBytes(lo))
		}
		return nil
	}
}
