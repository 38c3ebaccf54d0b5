package config

import (
	"errors"
	"time"

	"github.com/runnel-io/runnel/internal/settings"
)

// ErrInvalid is matched (errors.Is) by every error Load and Validate return
// for a config that is wrong: a bad value, an unknown field, flag or
// variable, an unreadable file it names, or a config file that is missing
// or is not YAML. The error is an *Error listing every problem.
var ErrInvalid = errors.New("config: invalid hub configuration")

// Config is the hub's configuration, as Load returns it: merged from the
// config file, environment variables and flags, with every default
// applied and every relative path in the file resolved against the file's
// directory. The YAML name of each field is in settings.go, and
// docs/hub-config.md (generated from it) is the user's reference.
//
// A zero field is not a default (a zero Auth.APIToken means an open read
// API): build a Config in code from Default().
type Config struct {
	DataDir         string
	Pipelines       []string // spec files or globs; empty: the built-in demo pipeline
	ShutdownTimeout time.Duration
	MemoryLimit     int64 // bytes; 0: none
	GCPercent       int   // debug.SetGCPercent unless GOGC is set
	GRPC            GRPCListener
	HTTP            Listener
	TLS             TLS
	Insecure        bool
	Auth            Auth
	Merge           Merge
	Fleet           Fleet
	Archive         Archive
	ObjectStore     settings.ObjectStore // how s3:// URLs are reached
	Log             settings.Log
}

// Archive configures the results archive (sync/archive). After Load,
// StagingDir is set (default: DataDir/archive-staging).
type Archive struct {
	URL              string // "": no archive
	StagingDir       string
	FlushInterval    time.Duration
	MaxRowsPerFile   int
	MaxPending       int
	Compaction       bool
	CompactionDelay  time.Duration
	CompactionMemory int64
	Retention        time.Duration
}

// Listener is a listen address, host:port.
type Listener struct{ Addr string }

// GRPCListener is the gRPC listener, where the edges connect: PollDelay
// is its epoll loop's (wire.Config.PollDelay); 0: a goroutine a
// connection.
type GRPCListener struct {
	Addr      string
	PollDelay time.Duration
}

// TLS is the certificate both listeners present (both files or
// neither) and whether edges authenticate with client certificates of
// ClientCAFile (server.Config's fields of the same names).
type TLS struct {
	CertFile, KeyFile string
	ClientAuth        ClientAuth
	ClientCAFile      string
}

// ClientAuth is tls.client_auth. The values are server.ClientAuth's,
// which runnel-hub passes it as.
type ClientAuth string

const (
	ClientAuthNone     ClientAuth = "none"     // edges send tokens; no client certificates
	ClientAuthOptional ClientAuth = "optional" // a certificate, a token, or both
	ClientAuthRequire  ClientAuth = "require"  // edges need a certificate
)

// Auth holds the tokens. After Load, EdgeTokens holds the pairs read from
// EdgeTokensFile and APIToken the contents of APITokenFile when that was
// set. Never log them.
type Auth struct {
	EdgeTokensFile string
	EdgeTokens     map[string]string // edge id -> token
	APIToken       string
	APITokenFile   string
}

// Merge configures the hub core (hub.Config).
type Merge struct {
	EdgeTimeout    time.Duration
	MaxFuture      time.Duration // how far ahead of the hub's clock a watermark may stand and a window may start
	Retention      time.Duration
	Resident       time.Duration
	CommitInterval time.Duration
	KeyGroups      int
}

// Fleet configures the control plane (hub/fleet), whose store lives in
// DataDir.
type Fleet struct {
	Enabled     bool          // serve the Fleet API and the control streams
	Tick        time.Duration // how often rollouts advance
	EdgeMetrics EdgeMetrics   // when /metrics has per-edge series
}

// EdgeMetrics is fleet.edge_metrics: when /metrics carries the fleet's
// per-edge series. The values are server.EdgeMetrics's, which runnel-hub
// passes it as.
type EdgeMetrics string

const (
	EdgeMetricsAuto   EdgeMetrics = "auto"   // per-edge series while the fleet has at most 1,000 edges
	EdgeMetricsAlways EdgeMetrics = "always" // whatever the fleet's size
	EdgeMetricsNever  EdgeMetrics = "never"  // aggregates only
)

// Default returns the configuration an empty config file gives.
func Default() *Config { return table.Defaults() }

// Plaintext reports whether the hub serves without TLS: no certificate is
// set, and either insecure is or both listeners are on loopback (Load
// refuses the rest).
func (c *Config) Plaintext() bool { return c.TLS.CertFile == "" }

// Validate reports every problem with c at once, as an *Error matching
// ErrInvalid: each setting on its own, then the rules across settings.
// It reads the files c names, so a Config that validates does not fail at
// start for a reason in the config. Problems name the setting by its YAML
// path; use Load to have them name the file line, variable or flag.
func (c *Config) Validate() error {
	ch := table.Validate(c)
	crossChecks(ch, c)
	return ch.Err()
}

// Error is a refused configuration: every problem found, one per line, in
// the order a user fixes them: the config file's by position, then
// environment variables, then flags, then the problems that belong to no
// source. It matches ErrInvalid.
type Error = settings.Error
