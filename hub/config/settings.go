package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// setting is one row of the table every source of configuration is derived
// from: YAML decoding, environment lookup, flag registration, defaults,
// --help and docs/hub-config.md. Adding a setting is adding a row (and the
// Config field); TestSettingsTable checks that every field has exactly one.
type setting struct {
	path    string // YAML path, dotted: "tls.cert_file"
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
	{path: "data_dir", flag: "data-dir", env: "RUNNEL_HUB_DATA_DIR", def: "./runnel-hub-data",
		doc: "Directory of the hub's store (hub.db): merged windows, results and every edge's applied sequence numbers; created if missing. Losing it loses the dedup record, so back it up with the results.",
		val: pathVal(func(c *Config) *string { return &c.DataDir }, nonEmpty)},
	{path: "pipelines", flag: "pipeline", env: "RUNNEL_HUB_PIPELINES", defDoc: "the built-in demo pipeline (line-temps, as runnel-edge runs)", example: "[pipelines/*.yaml]",
		doc: "Pipeline spec files, or globs such as pipelines/*.yaml: the same specs the edges run; the hub merges what they send by pipeline name. The flag can be repeated; the variable is comma-separated.",
		val: pathsVal(func(c *Config) *[]string { return &c.Pipelines }, checkPipeline)},
	{path: "shutdown_timeout", flag: "shutdown-timeout", env: "RUNNEL_HUB_SHUTDOWN_TIMEOUT", def: "10s",
		doc: "How long a stop (SIGTERM) waits for API calls in flight before cutting them; edge streams and subscriptions end at once.",
		val: durVal(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, positive)},

	{path: "grpc.addr", flag: "grpc-addr", env: "RUNNEL_HUB_GRPC_ADDR", def: "127.0.0.1:7443",
		doc: "host:port of the gRPC listener: the edges' uplink and the Results and Health services. Listening beyond loopback needs TLS, or insecure: true.",
		val: strVal(func(c *Config) *string { return &c.GRPC.Addr }, checkAddr)},
	{path: "http.addr", flag: "http-addr", env: "RUNNEL_HUB_HTTP_ADDR", def: "127.0.0.1:7080",
		doc: "host:port of the HTTP listener: the REST API under /v1/, Server-Sent Events, /healthz and /metrics (the last two without a token). Listening beyond loopback needs TLS, or insecure: true.",
		val: strVal(func(c *Config) *string { return &c.HTTP.Addr }, checkAddr)},

	{path: "tls.cert_file", flag: "tls-cert-file", env: "RUNNEL_HUB_TLS_CERT_FILE", example: "/etc/runnel/hub.pem",
		doc: "PEM certificate (chain) both listeners present; needs tls.key_file. Read at start: a renewed certificate needs a restart.",
		val: pathVal(func(c *Config) *string { return &c.TLS.CertFile }, nil)},
	{path: "tls.key_file", flag: "tls-key-file", env: "RUNNEL_HUB_TLS_KEY_FILE", example: "/etc/runnel/hub-key.pem",
		doc: "PEM private key of tls.cert_file.",
		val: pathVal(func(c *Config) *string { return &c.TLS.KeyFile }, nil)},
	{path: "insecure", flag: "insecure", env: "RUNNEL_HUB_INSECURE", def: "false",
		doc: "Serve plaintext on non-loopback addresses when no certificate is set (logged as a warning): edge tokens and results cross the network readable. Loopback-only listeners are served plaintext without it.",
		val: boolVal(func(c *Config) *bool { return &c.Insecure })},

	{path: "auth.edge_tokens_file", flag: "edge-tokens-file", env: "RUNNEL_HUB_EDGE_TOKENS_FILE", example: "/etc/runnel/edge-tokens",
		doc: "File of edge tokens, one 'edge-id token' pair a line ('#' starts a comment). An edge's uplink sends its token as a bearer token and may only send data under its own id. Without it every edge is refused.",
		val: pathVal(func(c *Config) *string { return &c.Auth.EdgeTokensFile }, nil)},
	{path: "auth.api_token", flag: "api-token", env: "RUNNEL_HUB_API_TOKEN", secret: true, example: "\"...\"",
		doc: "Bearer token the read API (REST, SSE, Results and Health over gRPC) requires; empty: the read API is open. A flag is visible to every user of the host (ps); prefer the variable or auth.api_token_file.",
		val: strVal(func(c *Config) *string { return &c.Auth.APIToken }, nil)},
	{path: "auth.api_token_file", flag: "api-token-file", env: "RUNNEL_HUB_API_TOKEN_FILE", example: "/etc/runnel/api-token",
		doc: "File holding the API token (a final line break is dropped). Not together with auth.api_token.",
		val: pathVal(func(c *Config) *string { return &c.Auth.APITokenFile }, nil)},

	{path: "merge.edge_timeout", flag: "edge-timeout", env: "RUNNEL_HUB_EDGE_TIMEOUT", def: "1m",
		doc: "An edge silent for longer stops holding the hub watermark back, so results of the others are emitted; its late data still merges, as new result versions.",
		val: durVal(func(c *Config) *time.Duration { return &c.Merge.EdgeTimeout }, positive)},
	{path: "merge.retention", flag: "retention", env: "RUNNEL_HUB_RETENTION", def: "7d",
		doc: "How long windows and results are kept past the hub watermark. Data an edge sends for an older window is dropped, so keep it above the longest time an edge may be offline.",
		val: durVal(func(c *Config) *time.Duration { return &c.Merge.Retention }, positive)},
	{path: "merge.commit_interval", flag: "commit-interval", env: "RUNNEL_HUB_COMMIT_INTERVAL", def: "20ms",
		doc: "Group commit period of the store (1ms to 10s): batches wait up to this long to be durable and acked, and share one fsync.",
		val: durVal(func(c *Config) *time.Duration { return &c.Merge.CommitInterval }, between(time.Millisecond, 10*time.Second))},
	{path: "merge.key_groups", flag: "key-groups", env: "RUNNEL_HUB_KEY_GROUPS", def: "128",
		doc: "Key groups the merge state is partitioned into (1 to 32768), the unit a scaled-out hub moves between processes. Fixed when the store is created.",
		val: intVal(func(c *Config) *int { return &c.Merge.KeyGroups }, 1, 1<<15)},

	{path: "log.level", flag: "log-level", env: "RUNNEL_HUB_LOG_LEVEL", def: "info",
		doc: "Least severe level logged: debug, info, warn or error.",
		val: enumVal(func(c *Config) *LogLevel { return &c.Log.Level }, LevelInfo, LevelDebug, LevelWarn, LevelError)},
	{path: "log.format", flag: "log-format", env: "RUNNEL_HUB_LOG_FORMAT", def: "text",
		doc: "Log format: text (key=value) or json.",
		val: enumVal(func(c *Config) *LogFormat { return &c.Log.Format }, FormatText, FormatJSON)},
}

// configFlag and configEnv name the config file; they are not settings
// (the file cannot name itself) but are parsed alongside them. envPrefix
// is what every variable of the hub starts with.
const (
	configFlag = "config"
	configEnv  = "RUNNEL_HUB_CONFIG"
	envPrefix  = "RUNNEL_HUB_"
)

// Lookups into the table, built once.
var (
	byPath = map[string]*setting{}
	byFlag = map[string]*setting{}
	byEnv  = map[string]*setting{}
	// children lists, for each section path ("" for the top level,
	// "tls"), the names that may appear in it, in table order.
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

func nonEmpty(s string) error {
	if s == "" {
		return errors.New("empty")
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

// checkAddr checks a listen address, host:port. The host may be empty (all
// interfaces); the port must be a number (0: any free port).
func checkAddr(s string) error {
	if s == "" {
		return errors.New("empty; expected host:port such as 127.0.0.1:7443")
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%q is not host:port: %s", s, ae.Err)
		}
		return fmt.Errorf("%q is not host:port", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > math.MaxUint16 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	return nil
}

func between(lo, hi time.Duration) func(time.Duration) error {
	return func(d time.Duration) error {
		if d < lo || d > hi {
			return fmt.Errorf("%s is out of range; must be %s to %s", showDuration(d), showDuration(lo), showDuration(hi))
		}
		return nil
	}
}
