package config

import "io"

// Usage writes the --help text: every setting with its flag, environment
// variable, YAML path, default and doc line, in the order of the table
// (and of docs/edge-config.md, which is generated from the same table).
func Usage(w io.Writer) {
	table.Usage(w, `Every setting can be given as a flag, as an environment variable, or in the
YAML config file: a flag overrides a variable, which overrides the file.
Anything not given takes its default, so an empty config runs: the embedded
MQTT broker on 127.0.0.1:1883, data in ./runnel-data, the hostname as edge id.
Durations read like 250ms, 1m30s or 1d; sizes like 64MiB or 1GB.

`)
}
