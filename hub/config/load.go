package config

import "github.com/runnel-io/runnel/internal/settings"

// MaxFileSize is the largest config file Load reads. A real one is a few
// hundred bytes; the cap keeps a wrong file (a log, a binary) from costing
// seconds of YAML parsing and a thousand problems.
const MaxFileSize = settings.MaxFileSize

// Load returns the configuration given by the config file, the environment
// and the flags, merged (flag > environment variable > file > default),
// defaulted and validated; or an *Error (errors.Is(err, ErrInvalid)) that
// lists every problem in all three, each named by where it came from:
//
//	hub.yaml:12:3: checkpoint.interval: must be greater than 0, got 0s
//	env RUNNEL_HUB_LOG_LEVEL: unknown value "verbose"; use info, debug, warn or error
//	flag --grpc-addr: "7443" is not host:port: missing port in address
//
// path is the config file, "" for none. args are the command-line flags
// (os.Args[1:]); environ is the environment (os.Environ()), of which only
// RUNNEL_HUB_* variables are read. --config and then RUNNEL_HUB_CONFIG, when
// given, name the config file instead of path; an empty value means no
// file. So Load("", os.Args[1:], os.Environ()) is a complete command line.
//
// Relative paths set in the file are relative to the file's directory;
// from flags, variables and defaults, to the working directory.
//
// When args ask for help (-h, --help), Load returns flag.ErrHelp; print
// Usage then.
func Load(path string, args, environ []string) (*Config, error) {
	return load(path, args, environ, settings.ReadFile)
}

// load is Load with the file system as a parameter, for tests.
func load(path string, args, environ []string, read func(string) ([]byte, error)) (*Config, error) {
	c, ch, err := table.Load(path, args, environ, read)
	if err != nil {
		return nil, err
	}
	crossChecks(ch, c)
	if err := ch.Err(); err != nil {
		return nil, err
	}
	return c, nil
}
