package config

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/runnel-io/runnel/internal/settings"
)

// table is the single source of truth every source of configuration is
// derived from: YAML decoding, environment lookup, flag registration,
// defaults, --help and docs/hub-config.md. Adding a setting is adding a
// row (and the Config field); TestSettingsTable checks that every field
// has exactly one. Rows are in the order of the docs and of a config file.
var table = settings.New(settings.Table[Config]{
	Program:   "runnel-hub",
	File:      "hub.yaml",
	EnvPrefix: "RUNNEL_HUB_",
	ConfigEnv: "RUNNEL_HUB_CONFIG",
	Invalid:   ErrInvalid,
	Settings: append([]*settings.Setting[Config]{
		{Path: "data_dir", Flag: "data-dir", Env: "RUNNEL_HUB_DATA_DIR", Default: "./runnel-hub-data",
			Doc:   "Directory of the hub's store (hub.db): merged windows, results and every edge's applied sequence numbers; created if missing. Losing it loses the dedup record, so back it up with the results.",
			Value: settings.Path(func(c *Config) *string { return &c.DataDir }, settings.NonEmpty)},
		{Path: "pipelines", Flag: "pipeline", Env: "RUNNEL_HUB_PIPELINES", DefaultDoc: "the built-in demo pipeline (line-temps, as runnel-edge runs)", Example: "[pipelines/*.yaml]",
			Doc:   "Pipeline spec files, or globs such as pipelines/*.yaml: the same specs the edges run; the hub merges what they send by pipeline name. The flag can be repeated; the variable is comma-separated.",
			Value: settings.Paths(func(c *Config) *[]string { return &c.Pipelines }, settings.PathOrGlob)},
		{Path: "shutdown_timeout", Flag: "shutdown-timeout", Env: "RUNNEL_HUB_SHUTDOWN_TIMEOUT", Default: "10s",
			Doc:   "How long a stop (SIGTERM) waits for API calls in flight before cutting them; edge streams and subscriptions end at once.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, settings.Positive)},
		{Path: "memory_limit", Flag: "memory-limit", Env: "RUNNEL_HUB_MEMORY_LIMIT", Default: "0", Example: "450MiB",
			Doc:   "Soft limit on the memory the Go runtime uses (debug.SetMemoryLimit, like GOMEMLIMIT): near it the garbage collector runs more often, trading CPU for memory; without it the heap grows to gc_percent past what is live (heap and goroutine stacks). Keep it well above the live heap and stacks (go_memstats_heap_inuse_bytes + go_memstats_stack_inuse_bytes just after a collection) or the collector runs all the time: a hub holding 10,000 edges over TLS, each with its control stream, has about 75 MiB of them over TLS and 45 MiB in plaintext (nearly all heap: on Linux the edges' connections have no goroutine of their own). 0: no limit (GOMEMLIMIT from the environment, if set, applies).",
			Value: settings.Size(func(c *Config) *int64 { return &c.MemoryLimit }, nil)},
		{Path: "gc_percent", Flag: "gc-percent", Env: "RUNNEL_HUB_GC_PERCENT", Default: "50",
			Doc:   "How far the heap grows past what is live before a garbage collection, in percent (debug.SetGCPercent, like GOGC, which wins when set in the environment). A hub's live heap is mostly its edges' long-lived state and its allocation rate low, so 50 (the Go runtime's default is 100) costs little: at 10,000 edges with a status every 10 s each, 182-188 MiB RSS instead of 208-241 for the same CPU (a collection every 20-30 s instead of every minute), and the commit path of a catch-up runs 5-10 % slower in BenchmarkCommit.",
			Value: settings.Int(func(c *Config) *int { return &c.GCPercent }, 10, 1000)},

		{Path: "grpc.addr", Flag: "grpc-addr", Env: "RUNNEL_HUB_GRPC_ADDR", Default: "127.0.0.1:7443",
			Doc:   "host:port of the gRPC listener: the edges' uplink and the Results and Health services. Listening beyond loopback needs TLS, or insecure: true.",
			Value: settings.String(func(c *Config) *string { return &c.GRPC.Addr }, checkAddr)},
		{Path: "grpc.poll_delay", Flag: "grpc-poll-delay", Env: "RUNNEL_HUB_GRPC_POLL_DELAY", Default: "20ms",
			Doc:   "How long the epoll loop that reads the edges' connections (Linux; over TLS too) waits after a round of reads before it looks again: one wake-up of the hub then takes what many edges sent, and each message waits at most this long (the edges' messages are asynchronous: statuses, and uplink batches sent up to 20,000 entries ahead of their acks). At 10,000 edges with a status every 10 s, 4.1-5.5 % of a core at 20ms, 4.5-5.3 % over TLS (README); measured when the edges still pinged every 20 s, 5.0-6.1 % at 20ms against 7.5-8.8 % at 5ms. 0: a goroutine parked in a read for each connection instead (4 KB of stack each, and a wake-up of the Go scheduler for every message: 7.8-10.5 %). At most 100ms.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.GRPC.PollDelay }, settings.Between(0, 100*time.Millisecond))},
		{Path: "http.addr", Flag: "http-addr", Env: "RUNNEL_HUB_HTTP_ADDR", Default: "127.0.0.1:7080",
			Doc:   "host:port of the HTTP listener: the REST API under /v1/, Server-Sent Events, /healthz and /metrics (the last two without a token). Listening beyond loopback needs TLS, or insecure: true.",
			Value: settings.String(func(c *Config) *string { return &c.HTTP.Addr }, checkAddr)},

		{Path: "tls.cert_file", Flag: "tls-cert-file", Env: "RUNNEL_HUB_TLS_CERT_FILE", Example: "/etc/runnel/hub.pem",
			Doc:   "PEM certificate (chain) both listeners present; needs tls.key_file. Read at start: a renewed certificate needs a restart.",
			Value: settings.Path(func(c *Config) *string { return &c.TLS.CertFile }, nil)},
		{Path: "tls.key_file", Flag: "tls-key-file", Env: "RUNNEL_HUB_TLS_KEY_FILE", Example: "/etc/runnel/hub-key.pem",
			Doc:   "PEM private key of tls.cert_file.",
			Value: settings.Path(func(c *Config) *string { return &c.TLS.KeyFile }, nil)},
		{Path: "tls.client_auth", Flag: "tls-client-auth", Env: "RUNNEL_HUB_TLS_CLIENT_AUTH", Default: "none",
			Doc:   "Whether edges authenticate with a TLS client certificate, verified against tls.client_ca_file, whose subject CN is the edge id: none (the default: edges send their token); optional (an edge sends a certificate, its token, or both of the same edge); require (the uplink and control stream refuse an edge without a verified certificate, whatever its token). Any edge id a valid certificate of the CA names is accepted, listed in auth.edge_tokens_file or not: the CA is the list of edges. API clients (runnelctl, REST) need no certificate in either mode, and a connection with an edge's certificate calls only that edge's streams. The HTTP listener never asks for one. Needs tls.cert_file.",
			Value: settings.Enum(func(c *Config) *ClientAuth { return &c.TLS.ClientAuth }, ClientAuthNone, ClientAuthOptional, ClientAuthRequire)},
		{Path: "tls.client_ca_file", Flag: "tls-client-ca-file", Env: "RUNNEL_HUB_TLS_CLIENT_CA_FILE", Example: "/etc/runnel/edge-ca.pem",
			Doc:   "PEM CA certificates edges' client certificates are verified against (chain, validity period, client-authentication usage); needs tls.client_auth optional or require. Use a CA that issues edge certificates only: every certificate it signed is an edge. Revocation is not checked: issue short-lived certificates (edges reload renewed files), or replace the CA. Read at start.",
			Value: settings.Path(func(c *Config) *string { return &c.TLS.ClientCAFile }, nil)},
		{Path: "insecure", Flag: "insecure", Env: "RUNNEL_HUB_INSECURE", Default: "false",
			Doc:   "Serve plaintext on non-loopback addresses when no certificate is set (logged as a warning): edge tokens and results cross the network readable. Loopback-only listeners are served plaintext without it.",
			Value: settings.Bool(func(c *Config) *bool { return &c.Insecure })},

		{Path: "auth.edge_tokens_file", Flag: "edge-tokens-file", Env: "RUNNEL_HUB_EDGE_TOKENS_FILE", Example: "/etc/runnel/edge-tokens",
			Doc:   "File of edge tokens, one 'edge-id token' pair a line ('#' starts a comment). An edge's uplink sends its token as a bearer token and may only send data under its own id. Without it every edge is refused. Read again on SIGHUP (kill -HUP): an edge added comes in at once, the streams of one removed or given another token end (unauthenticated) without a restart that would drop every edge; a file with a problem is refused whole, logged with its line, and the tokens before it stay (runnel_hub_edge_tokens_reloads_total{result}).",
			Value: settings.Path(func(c *Config) *string { return &c.Auth.EdgeTokensFile }, nil)},
		{Path: "auth.api_token", Flag: "api-token", Env: "RUNNEL_HUB_API_TOKEN", Secret: true, Example: "\"...\"",
			Doc:   "The admin API token (named \"api\" in the fleet's audit log). When set, the read API (REST, SSE, Results, Health and Fleet over gRPC) requires it or a token created with it through the Fleet API; empty: the read API is open and the Fleet API's changes are refused. A flag is visible to every user of the host (ps); prefer the variable or auth.api_token_file.",
			Value: settings.String(func(c *Config) *string { return &c.Auth.APIToken }, nil)},
		{Path: "auth.api_token_file", Flag: "api-token-file", Env: "RUNNEL_HUB_API_TOKEN_FILE", Example: "/etc/runnel/api-token",
			Doc:   "File holding the API token (a final line break is dropped). Not together with auth.api_token.",
			Value: settings.Path(func(c *Config) *string { return &c.Auth.APITokenFile }, nil)},

		{Path: "merge.edge_timeout", Flag: "edge-timeout", Env: "RUNNEL_HUB_EDGE_TIMEOUT", Default: "1m",
			Doc:   "An edge silent for longer stops holding the hub watermark back, so results of the others are emitted; once every edge is silent, the watermark moves to the highest any edge reported (at most merge.max_future past the hub's clock). A silent edge's late data still merges, as new result versions. The hub counts its own start as hearing from every edge, so a restart waits this long for them to reconnect.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Merge.EdgeTimeout }, settings.Positive)},
		{Path: "merge.max_future", Flag: "max-future", Env: "RUNNEL_HUB_MAX_FUTURE", Default: "1h",
			Doc:   "How far an edge's watermark or a window's start may lead the hub's clock: a later watermark is held at the bound (counted, logged, /healthz check clock), and a partial of a later window is refused, so the edge quarantines it. Keep it above the edges' event_time.max_future plus their clock skew.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Merge.MaxFuture }, settings.Positive)},
		{Path: "merge.retention", Flag: "retention", Env: "RUNNEL_HUB_RETENTION", Default: "7d",
			Doc:   "How long windows and results are kept: a window is deleted once it ended more than this before the hub watermark or the hub's clock, whichever is earlier, so a watermark far ahead of the clock deletes nothing recent and one far behind deletes nothing not yet emitted. Data an edge sends for an older window is dropped, so keep it above the longest time an edge may be offline. Partials parked for a pipeline the hub does not know are deleted after this long too.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Merge.Retention }, settings.Positive)},
		{Path: "merge.resident", Flag: "resident", Env: "RUNNEL_HUB_RESIDENT", Default: "1h",
			Doc:   "How long past the hub watermark an emitted window stays in memory; older ones live only in the store and are read back when a late partial arrives. Memory grows with keys x edges x windows within this period.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Merge.Resident }, settings.Positive)},
		{Path: "merge.commit_interval", Flag: "commit-interval", Env: "RUNNEL_HUB_COMMIT_INTERVAL", Default: "20ms",
			Doc:   "Group commit period of the store (1ms to 10s): batches wait up to this long to be durable and acked, and share one fsync.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Merge.CommitInterval }, settings.Between(time.Millisecond, 10*time.Second))},
		{Path: "merge.key_groups", Flag: "key-groups", Env: "RUNNEL_HUB_KEY_GROUPS", Default: "128",
			Doc:   "Key groups the merge state is partitioned into (1 to 32768), the unit a scaled-out hub moves between processes. Fixed when the store is created.",
			Value: settings.Int(func(c *Config) *int { return &c.Merge.KeyGroups }, 1, 1<<15)},

		{Path: "fleet.enabled", Flag: "fleet-enabled", Env: "RUNNEL_HUB_FLEET_ENABLED", Default: "true",
			Doc:   "Serve the control plane: the Fleet API (pipelines with revisions, edges and their labels, deployments, tokens, audit log) and the edges' control streams, from the fleet store in data_dir. false: both answer Unimplemented.",
			Value: settings.Bool(func(c *Config) *bool { return &c.Fleet.Enabled })},
		{Path: "fleet.tick", Flag: "fleet-tick", Env: "RUNNEL_HUB_FLEET_TICK", Default: "1s",
			Doc:   "How often the fleet store advances rollouts (10ms to 1m): steps' health gates, soak times and progress deadlines are checked at this period.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Fleet.Tick }, settings.Between(10*time.Millisecond, time.Minute))},
		{Path: "fleet.edge_metrics", Flag: "fleet-edge-metrics", Env: "RUNNEL_HUB_FLEET_EDGE_METRICS", Default: "auto",
			Doc:   "Whether /metrics carries the per-edge fleet series (runnel_hub_fleet_edge_*{edge}, about 15 an edge): auto: while the fleet has at most 1,000 registered edges; always; or never. At 10,000 edges they are 150,000 series and a scrape takes 0.2 to 0.4 s; without them the aggregates stay (edges registered and connected, each deployment's counts, step and phase), and runnel_hub_fleet_per_edge_metrics says which it is.",
			Value: settings.Enum(func(c *Config) *EdgeMetrics { return &c.Fleet.EdgeMetrics }, EdgeMetricsAuto, EdgeMetricsAlways, EdgeMetricsNever)},

		{Path: "archive.url", Flag: "archive-url", Env: "RUNNEL_HUB_ARCHIVE_URL", Example: "file:///var/lib/runnel/archive",
			Doc:   "Where the results archive goes, as Parquet files under pipeline=<p>/date=<yyyy-mm-dd>/hour=<hh>/ with a manifest per partition (docs/object-storage.md, Results archive): file:///absolute/dir, or s3://bucket/prefix. Empty: no archive (and no archive log).",
			Value: settings.String(func(c *Config) *string { return &c.Archive.URL }, checkArchiveURL)},
		{Path: "archive.staging_dir", Flag: "archive-staging-dir", Env: "RUNNEL_HUB_ARCHIVE_STAGING_DIR", DefaultDoc: "<data_dir>/archive-staging", Example: "/var/lib/runnel/archive-staging",
			Doc:   "Local directory where Parquet files are built before they are uploaded (staged: invisible to readers until a manifest names them), and where compaction spills its sorted runs. Needs room for one flush and for a partition's compaction.",
			Value: settings.Path(func(c *Config) *string { return &c.Archive.StagingDir }, nil)},
		{Path: "archive.flush_interval", Flag: "archive-flush-interval", Env: "RUNNEL_HUB_ARCHIVE_FLUSH_INTERVAL", Default: "1m",
			Doc:   "How often the results committed since the last flush are written to the archive and published (1s to 1h); earlier once archive.max_rows_per_file are waiting. Each flush adds a file to each partition it touches.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Archive.FlushInterval }, settings.Between(time.Second, time.Hour))},
		{Path: "archive.max_rows_per_file", Flag: "archive-max-rows-per-file", Env: "RUNNEL_HUB_ARCHIVE_MAX_ROWS_PER_FILE", Default: "1000000",
			Doc:   "Most result versions in one Parquet file a flush writes (1,000 to 100,000,000).",
			Value: settings.Int(func(c *Config) *int { return &c.Archive.MaxRowsPerFile }, 1000, 100_000_000)},
		{Path: "archive.max_pending", Flag: "archive-max-pending", Env: "RUNNEL_HUB_ARCHIVE_MAX_PENDING", Default: "10000000",
			Doc:   "Most results the hub's archive log holds that are not archived yet (object storage down or slow). At the bound the hub refuses edge batches (Unavailable; counted as runnel_hub_archive_refused_total and logged), so the edges keep their data and resend it later: nothing is dropped. About 100 bytes a result in data_dir.",
			Value: settings.Int(func(c *Config) *int { return &c.Archive.MaxPending }, 1000, min(1<<40, math.MaxInt))},
		{Path: "archive.compaction", Flag: "archive-compaction", Env: "RUNNEL_HUB_ARCHIVE_COMPACTION", Default: "true",
			Doc:   "Compact each closed hour: merge a partition's files into one per schema, sorted by key, window and version, once the hour ended archive.compaction_delay ago (again if late results added files).",
			Value: settings.Bool(func(c *Config) *bool { return &c.Archive.Compaction })},
		{Path: "archive.compaction_delay", Flag: "archive-compaction-delay", Env: "RUNNEL_HUB_ARCHIVE_COMPACTION_DELAY", Default: "1h",
			Doc:   "How long after its hour ends (by the hub's clock) a partition is compacted: make it cover most late corrections.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Archive.CompactionDelay }, settings.Positive)},
		{Path: "archive.compaction_memory", Flag: "archive-compaction-memory", Env: "RUNNEL_HUB_ARCHIVE_COMPACTION_MEMORY", Default: "64MiB",
			Doc:   "Memory a compaction sorts rows in before it spills a sorted run to archive.staging_dir (an external merge sort; 1MiB to 64GiB). The compaction's whole footprint is about this plus 4 MiB of run buffers plus one row group (65,536 rows) of the output.",
			Value: settings.Size(func(c *Config) *int64 { return &c.Archive.CompactionMemory }, checkCompactionMemory)},
		{Path: "archive.retention", Flag: "archive-retention", Env: "RUNNEL_HUB_ARCHIVE_RETENTION", Default: "0s",
			Doc:   "Partitions whose hour ended longer ago than this by the hub's clock are deleted with their manifests (at least 1h); 0s: kept for ever. Independent of merge.retention, which is how long the hub itself keeps results.",
			Value: settings.Duration(func(c *Config) *time.Duration { return &c.Archive.Retention }, checkArchiveRetention)},
	}, append(settings.ObjectStoreSettings("RUNNEL_HUB_", func(c *Config) *settings.ObjectStore { return &c.ObjectStore }),
		settings.LogSettings("RUNNEL_HUB_", func(c *Config) *settings.Log { return &c.Log })...)...),
})

// checkArchiveURL accepts "", file:///absolute/dir and s3://bucket[/prefix].
func checkArchiveURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", s, err)
	case u.Scheme == "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") || u.RawQuery != "" {
			return fmt.Errorf("%q: a file URL names an absolute directory, file:///var/lib/runnel/archive", s)
		}
	case u.Scheme == "s3":
		if u.Host == "" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("%q: an S3 URL is s3://bucket/prefix (credentials do not go in it)", s)
		}
	default:
		return fmt.Errorf("%q: use file:///dir or s3://bucket/prefix", s)
	}
	return nil
}

func checkCompactionMemory(n int64) error {
	if n < 1<<20 || n > 64<<30 {
		return fmt.Errorf("%s is out of range; must be 1MiB to 64GiB", settings.ShowBytes(n))
	}
	return nil
}

func checkArchiveRetention(d time.Duration) error {
	if d != 0 && d < time.Hour {
		return fmt.Errorf("%s is below 1h, the span of a partition; 0s keeps the archive for ever", settings.ShowDuration(d))
	}
	return nil
}

// checkAddr checks a listen address of the hub.
var checkAddr = settings.ListenAddr("127.0.0.1:7443")
