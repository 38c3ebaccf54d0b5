package config

import (
	"errors"

	"github.com/runnel-io/runnel/internal/settings"
)

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
	return load(path, args, environ, settings.ReadFile, nil)
}

// CheckPipelines reads, parses and compiles pipeline spec files, given as
// files and globs in the order of the pipelines setting, and returns every
// problem of every file at once, or nil. runnel-hub passes a function
// around operators.LoadFiles that keeps the pipelines it compiles; the
// type is a function so that config imports none of the packages the
// command wires it to.
type CheckPipelines func(globs []string) error

// LoadWithPipelines is Load, and also checks the pipeline files the config
// names with check, so that a hub that will not start says at once
// everything that keeps it from starting: its config's problems and each
// pipeline file's.
//
// check runs whenever the pipelines setting has no problem of its own and
// is not empty, even when other settings have problems. It is given the
// items that passed the config's checks: a plain path that does not exist,
// or one listed twice, is the config's problem, placed at the line, flag
// or variable that gave it, and is not read again.
//
// The error joins (errors.Join) Load's *Error and then check's error, the
// order a user fixes them in. errors.As finds the *Error; errors.Is
// matches ErrInvalid, and whatever check's error matches
// (spec.ErrInvalid). As with Load, a Config comes back only without error.
func LoadWithPipelines(path string, args, environ []string, check CheckPipelines) (*Config, error) {
	return load(path, args, environ, settings.ReadFile, check)
}

// load is LoadWithPipelines with the file system as a parameter, for
// tests; check may be nil.
func load(path string, args, environ []string, read func(string) ([]byte, error), check CheckPipelines) (*Config, error) {
	c, ch, err := table.Load(path, args, environ, read)
	if err != nil {
		return nil, err
	}
	pipelines := crossChecks(ch, c)
	err = ch.Err() // nil, or an *Error: Load's contract
	if check != nil && len(pipelines) > 0 {
		if perr := check(pipelines); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}
