// Package config reads the configuration of runnel-hub: from a YAML file,
// environment variables (RUNNEL_HUB_*) and command-line flags.
// docs/hub-config.md is the user's reference; this note is for the code.
//
// # Model
//
// As edge/config, on the same machinery (internal/settings): one table
// (settings.go) is the single source of truth. Each row is a
// setting: its YAML path, flag, environment variable, type, default and
// doc line, and the Config field it fills. YAML decoding, flag
// registration, environment lookup, defaults, Usage (--help) and
// docs/hub-config.md are derived from it; TestDocsUpToDate fails when the
// docs are stale (go test ./hub/config -run TestDocsUpToDate -update
// rewrites them).
//
// Load merges flag > environment variable > file > default, then checks
// the rules across settings and reads the files settings name (TLS
// certificate and key, the token files), so a config that loads does not
// fail at start for a reason in the config.
//
// # Invariants
//
//   - Load returns a Config or an error, never both; the error is an
//     *Error (matching ErrInvalid) listing every problem of all three
//     sources, each named by where it came from: "hub.yaml:4:12:
//     merge.commit_interval: ...", "env RUNNEL_HUB_LOG_LEVEL: ...",
//     "flag --grpc-addr: ...", and an edge tokens file by its own line.
//   - An empty config is valid and runs: both listeners on loopback,
//     plaintext (loopback traffic does not leave the host), the built-in
//     demo pipeline. A listener beyond loopback needs a TLS certificate,
//     or insecure: true, so plaintext on a network is always a decision
//     someone wrote down.
//   - Unknown YAML fields, unknown flags and RUNNEL_HUB_* variables that
//     look like a misspelt setting are errors, with a did-you-mean hint.
//   - Relative paths written in the file are relative to the file's
//     directory; from flags, variables and defaults, to the working
//     directory.
//
// # Caveats
//
//   - Edge tokens come from a file only (a map in the YAML would put
//     secrets in the file that is most often shared and versioned).
//   - Load checks only that plain pipeline paths exist; the files are
//     parsed and compiled by the check LoadWithPipelines is given
//     (operators.LoadFiles, in runnel-hub), whose problems are listed
//     after the config's, so that a refusal says everything at once.
//   - Tokens are never echoed in messages.
package config
