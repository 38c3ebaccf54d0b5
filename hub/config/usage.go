package config

import "io"

// Usage writes the --help text: every setting with its flag, environment
// variable, YAML path, default and doc line, in the order of the table
// (and of docs/hub-config.md, which is generated from the same table).
func Usage(w io.Writer) {
	table.Usage(w, `Every setting can be given as a flag, as an environment variable, or in the
YAML config file: a flag overrides a variable, which overrides the file.
Anything not given takes its default, so an empty config runs: gRPC on
127.0.0.1:7443 and HTTP on 127.0.0.1:7080 (plaintext, loopback only), data in
./runnel-hub-data, the built-in demo pipeline. Durations read like 250ms,
1m30s or 7d.

`)
}
