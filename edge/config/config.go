package config

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/runnel-io/runnel/internal/settings"
)

// ErrInvalid is matched (errors.Is) by every error Load and Validate return
// for a config that is wrong: a bad value, an unknown field, flag or
// variable, an unreadable file it names, or a config file that is missing
// or is not YAML. The error is an *Error listing every problem.
var ErrInvalid = errors.New("config: invalid edge configuration")

// Config is the edge node's configuration, as Load returns it: merged from
// the config file, environment variables and flags, with every default
// applied and every relative path in the file resolved against the file's
// directory. The YAML name of each field is in settings.go, and
// docs/edge-config.md (generated from it) is the user's reference.
//
// Unlike Options structs elsewhere in runnel, a zero field is not a
// default: an empty Broker.URL means the embedded broker and a zero
// DiskCap.Bytes means no cap. Build a Config in code from Default().
type Config struct {
	EdgeID          string   // names this gateway to the hub; [A-Za-z0-9._-]{1,64}
	DataDir         string   // state, checkpoints, ingest log and outbox live here
	Pipelines       []string // pipeline spec files or globs; empty: the built-in demo pipeline
	Broker          Broker
	Checkpoint      Checkpoint
	IngestLog       IngestLog
	DiskCap         DiskCap
	SideOutputs     SideOutputs
	Dedup           Dedup
	State           State
	Snapshot        Snapshot
	RawArchive      RawArchive
	ObjectStore     settings.ObjectStore
	Uplink          Uplink
	Labels          []string // key=value
	Fleet           Fleet
	HTTP            HTTP
	Log             settings.Log
	ShutdownTimeout time.Duration
	MemoryLimit     int64 // bytes; 0: none
}

// Broker says which MQTT broker the edge reads from.
type Broker struct {
	// URL of an external broker: mqtt://host:port or tcp://host:port
	// (plain), mqtts://host:port (TLS). Empty: start the embedded broker
	// on EmbeddedAddr and read from it.
	URL          string
	Protocol     Protocol // MQTT version
	EmbeddedAddr string
	// EmbeddedAllowRemote lets EmbeddedAddr be beyond loopback. The
	// embedded broker has no authentication, so that is a decision
	// someone must write down.
	EmbeddedAllowRemote bool
	ClientID            string // default "runnel-" + EdgeID
	Username            string
	// Password holds the password however it was given: after Load, the
	// contents of PasswordFile (without its final line break) when that
	// was set. Never log it.
	Password     string
	PasswordFile string
	TLS          TLS
	// ReceiveMaximum is how many QoS 1 messages the broker may have in
	// flight to the edge: the end of the back-pressure path. MQTT v5
	// only.
	ReceiveMaximum int
	SessionExpiry  time.Duration // whole seconds; MQTT v5 only
	KeepAlive      time.Duration // whole seconds
	Reconnect      Reconnect
	// BatchWait is how long the MQTT source waits between reads of the
	// connection for more messages to share a wake-up; 0: none.
	BatchWait time.Duration
}

// TLS configures mqtts:// connections. Files are PEM.
type TLS struct {
	CAFile             string // roots to verify the broker with; empty: the system roots
	CertFile, KeyFile  string // client certificate and its key; both or neither
	InsecureSkipVerify bool   // do not verify the broker's certificate (tests only)
	ServerName         string // name to verify, when it differs from the URL's host
}

// IsSet reports whether any TLS setting differs from its zero value.
func (t TLS) IsSet() bool { return t != TLS{} }

// Reconnect bounds the jittered exponential back-off between connection
// attempts to the broker.
type Reconnect struct{ Min, Max time.Duration }

// Checkpoint configures the checkpoint coordinator.
type Checkpoint struct {
	// Interval between checkpoints. It bounds the work replayed after a
	// crash and how long results wait in operator state before they reach
	// the outbox.
	Interval time.Duration
}

// IngestLog configures the log every MQTT message is appended to before it
// is acknowledged.
type IngestLog struct {
	SegmentSize   int64    // bytes; the log starts a new file past this size
	SpareSegments int      // freed segment files kept to be written over
	Sync          SyncMode // when to fsync
	SyncDelay     time.Duration
	Compression   Compression
	MaxLag        int // records appended but not processed; 0: no bound
}

// DiskCap bounds the disk the ingest log, the outbox and the side outputs
// may use together.
type DiskCap struct {
	Bytes  int64 // 0: no cap
	Policy DiskPolicy
}

// SideOutputs bounds the dead letters, late records and quarantined
// outbox entries the edge keeps in its state file (edge.SideOutputs).
type SideOutputs struct {
	MaxBytes int64         // > 0, and at most half of DiskCap.Bytes when that is set
	MaxAge   time.Duration // 0: no age limit, only MaxBytes
}

// Dedup configures the dropping of MQTT redeliveries by event id.
type Dedup struct {
	IDs int // how many of the latest event ids are remembered
}

// State configures the pipelines' operator state in memory.
type State struct {
	// MaxResidentKeys bounds the window keys each pipeline keeps in
	// memory; beyond it, keys whose windows have all fired and whose state
	// the last checkpoint stored are evicted, and read back from the state
	// file on their next record. 0: every key stays in memory.
	MaxResidentKeys int
}

// residentKeyBytes is what one resident window key is reckoned to cost
// when the key bound is derived from memory_limit: about 150 bytes of
// state, its share of the key index and dedup ids, and the collector's
// headroom.
const residentKeyBytes = 256

// ResidentKeys is the bound on the window keys each of pipelines keeps in
// memory: state.max_resident_keys when set; else, with memory_limit set, a
// third of the limit shared among the pipelines at residentKeyBytes a key
// (at least 1,000 each); else 0, no bound.
func (c *Config) ResidentKeys(pipelines int) int {
	switch {
	case c.State.MaxResidentKeys > 0:
		return c.State.MaxResidentKeys
	case c.MemoryLimit <= 0:
		return 0
	}
	return max(int(c.MemoryLimit/3/residentKeyBytes)/max(pipelines, 1), 1000)
}

// RawArchive configures the raw archive lane (edge.RawArchive).
type RawArchive struct {
	Store            string   // URL; empty: off
	Topics           []string // MQTT topic filters; empty: every message
	Interval         time.Duration
	YieldOutboxBytes int64
	MaxBytes         int64
}

// Snapshot configures the snapshots of the edge's state to a store, which
// `runnel-edge restore` rebuilds a data directory from.
type Snapshot struct {
	// Store is file:///path, a path, or s3://bucket/prefix; the edge's
	// snapshots go under <edge_id>/snapshots/ in it. Empty: no snapshots.
	Store    string
	Interval time.Duration // between snapshots; 0: only on demand (POST /admin/snapshot)
	Keep     int           // complete snapshots kept
}

// Uplink configures the sending of committed results to the hub.
type Uplink struct {
	Hub string // host:port of the hub's gRPC listener; empty: no uplink
	// Token holds the edge's bearer token however it was given: after
	// Load, the contents of TokenFile when that was set. Never log it.
	Token      string
	TokenFile  string
	CAFile     string // PEM roots to verify the hub with; empty: the system roots
	ServerName string // name to verify, when it differs from the address's host
	// CertFile and KeyFile are the edge's TLS client certificate (subject
	// CN = EdgeID, internal/edgecert) and its key; both or neither.
	CertFile, KeyFile string
	Insecure          bool // plaintext, no TLS (loopback tests and demos only)
	BatchEntries      int
}

// Fleet configures the edge agent: the control stream to the hub.
type Fleet struct {
	Enabled        bool
	StatusInterval time.Duration
}

// LabelMap returns the labels as a map.
func (c *Config) LabelMap() map[string]string {
	m := make(map[string]string, len(c.Labels))
	for _, kv := range c.Labels {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// HTTP configures the metrics and health endpoint.
type HTTP struct {
	Addr string // host:port for /metrics, /healthz and /debug/pprof; empty: off
	// AllowRemote lets Addr be beyond loopback. The endpoints have no
	// authentication, so that is a decision someone must write down.
	AllowRemote bool
}

// Protocol is the MQTT version the edge speaks to the broker.
type Protocol string

const (
	ProtocolV5 Protocol = "5"
	// ProtocolV311 is for brokers or policies that allow nothing newer:
	// no Receive Maximum, no session expiry, no user properties.
	ProtocolV311 Protocol = "3.1.1"
)

// SyncMode is when the ingest log fsyncs.
type SyncMode string

const (
	// SyncGroup fsyncs once per batch of messages, or after SyncDelay,
	// whichever comes first: durable before PUBACK at a fraction of the
	// fsyncs.
	SyncGroup SyncMode = "group"
	// SyncAlways fsyncs as soon as anything is buffered.
	SyncAlways SyncMode = "always"
	// SyncNever never fsyncs: a power cut loses acknowledged messages.
	// For tests and benchmarks.
	SyncNever SyncMode = "never"
)

// Compression is how ingest log blocks are compressed.
type Compression string

const (
	CompressionNone Compression = "none"
	CompressionZstd Compression = "zstd"
)

// DiskPolicy is what the edge does when DiskCap.Bytes is reached.
type DiskPolicy string

const (
	// PolicyBlock stops acknowledging MQTT messages until space is freed
	// (by a checkpoint, or the uplink draining the outbox): the broker
	// holds the data meanwhile.
	PolicyBlock DiskPolicy = "block"
	// PolicyDropRaw acknowledges and drops incoming messages while the
	// cap is reached (counted in runnel_edge_disk_cap_dropped_total), so
	// the broker does not fill up; aggregates in the outbox are never
	// dropped.
	PolicyDropRaw DiskPolicy = "drop_raw"
)

// Default returns the configuration an empty config file gives: every
// setting at its default, EdgeID the hostname and Broker.ClientID
// "runnel-" + EdgeID. If the hostname cannot be read EdgeID is empty, and
// Validate says so.
func Default() *Config {
	c := table.Defaults()
	host, _ := os.Hostname()
	c.fillDerived(host)
	return c
}

// fillDerived fills the settings whose defaults depend on others.
func (c *Config) fillDerived(hostname string) {
	if c.EdgeID == "" {
		c.EdgeID = hostname
	}
	if c.Broker.ClientID == "" && c.EdgeID != "" {
		c.Broker.ClientID = "runnel-" + c.EdgeID
	}
}

// Validate reports every problem with c at once, as an *Error matching
// ErrInvalid: each setting on its own (ranges, enums, syntax), then the
// rules across settings. It reads the files c names (TLS files, the
// password file, plain pipeline paths) to check that they exist and are
// readable, so a Config that validates fails at start for no reason in the
// config. Problems name the setting by its YAML path; use Load to have
// them name the file line, variable or flag instead.
func (c *Config) Validate() error {
	ch := table.Validate(c)
	crossChecks(ch, c)
	return ch.Err()
}

// Error is a refused configuration: every problem found, one per line, in
// the order a user fixes them: the config file's by position, then
// environment variables, then flags, then the problems that belong to no
// source (a Config built in code, a bad hostname). It matches ErrInvalid.
type Error = settings.Error
