// Package config reads the configuration of runnel-edge, which runs
// unattended on gateways: from a YAML file, environment variables and
// command-line flags. docs/edge-config.md is the user's reference; this
// note is for the code.
//
// # Model
//
// One table (settings.go) is the single source of truth. Each row is a
// setting: its YAML path, flag, environment variable, type, default and
// doc line, and the Config field it fills. YAML decoding, flag
// registration, environment lookup, defaults, Usage (--help) and
// docs/edge-config.md are all derived from it by internal/settings, which
// hub/config shares; TestDocsUpToDate fails when the docs are stale
// (go test ./edge/config -run TestDocsUpToDate -update rewrites them).
// This package keeps what is the edge's: Config, the rows, the per-value
// rules (edge id, broker URL, MQTT intervals), the rules across settings
// (validate.go), the hostname default and the text of --help and docs.
//
// Load reads the three sources, each into per-setting values with the
// origin of each (file:line:col, variable, flag), and merges them in order
// of precedence: flag > environment variable > file > default. It then
// applies the defaults that depend on other settings (edge_id is the
// hostname, the client id "runnel-" + edge_id) and checks the rules that
// span settings and the files settings name.
//
//	Load(path, args, environ)
//	  flags (FlagSet "runnel-edge") ─┐
//	  RUNNEL_* variables ────────────┼─> per-setting values + origins ─> merge ─> cross checks ─> *Config
//	  the YAML file (yaml.Node) ─────┘          (each value checked alone)
//
// # Invariants
//
//   - Load returns a Config or an error, never both. A returned Config has
//     every default applied and passes Validate. An empty config (no file,
//     no flags, no variables) is valid: the embedded broker on
//     127.0.0.1:1883, data in ./runnel-data, the hostname as edge id.
//   - Load never stops at the first problem: it returns an *Error (matching
//     ErrInvalid) listing every problem in all three sources, each named by
//     where it came from, so an unattended gateway is fixed in one round
//     trip: "edge.yaml:12:3: checkpoint.interval: ...", "env
//     RUNNEL_CHECKPOINT_INTERVAL: ...", "flag --checkpoint-interval: ...".
//     Problems are spec.Problem values, in the pipeline spec's format.
//   - A value is checked in every source it is given in, even when a
//     higher source overrides it: a wrong file stays wrong when the flag
//     that hides it is removed. A setting that had a problem is left out
//     of the checks across settings, so one mistake is one problem.
//   - Neither the embedded broker nor the HTTP server (/metrics, /healthz,
//     /debug/pprof) has authentication, so each listens beyond loopback
//     only when its allow_remote setting says so in so many words
//     (settings.IsLoopbackAddr, which hub/config's plaintext rule shares).
//   - Unknown YAML fields are errors, with a did-you-mean hint. So are
//     unknown flags, and RUNNEL_* variables that look like a misspelt
//     setting.
//   - Durations are parsed by spec.ParseDuration: Go syntax plus d for
//     days, whole milliseconds, as in pipeline specs. Sizes take B, KiB,
//     MiB, GiB, TiB, KB, MB, GB, TB.
//   - Relative paths written in the file are relative to the file's
//     directory, so /etc/runnel/edge.yaml can say pipelines/*.yaml; paths
//     from flags, variables and defaults are relative to the working
//     directory.
//
// # Caveats
//
//   - Load and Validate read the files a config names (TLS certificates
//     and key, the password file, plain pipeline paths) and stat data_dir,
//     so that a config that loads does not fail at start for a reason in
//     the config. Pipeline globs are only checked for syntax: pipelines
//     may be pushed by the hub later. The pipeline files themselves are
//     parsed and compiled by the check LoadWithPipelines is given
//     (operators.LoadFiles, in runnel-edge), which runs even when other
//     settings have problems; its problems follow the config's.
//   - The flag package stops at the first unknown flag; Load reports it and
//     resumes after it (and after its value, when the next argument does
//     not start with -).
//   - A RUNNEL_* variable that is not a setting and not close to one is
//     ignored, since other tools may share the prefix. Where a variable
//     repeats in environ, the first wins, as with os.Getenv.
//   - Sub-millisecond durations are refused (spec.ParseDuration's
//     resolution); no edge setting needs finer.
//   - YAML syntax errors are worded and positioned by operators/spec
//     (spec.YAMLProblem), at a line and column, as in pipeline specs.
//   - Broker.Password is never echoed in messages; give it by variable or
//     file, since flags show in ps.
package config
