// Package settings is the machinery behind runnel's program
// configurations (edge/config, hub/config): one table of settings drives
// YAML decoding, environment variables, flags, defaults, --help and the
// generated docs, and every problem is reported at once, named by where
// it came from.
//
// # Model
//
// A program declares its config struct C and a Table[C]: its name, its
// environment prefix and config-file variable, its sentinel error, and
// one Setting[C] per field: YAML path, flag, variable, default, doc line
// and a Value (String, Path, Paths, Bool, Int, Duration, Size, Enum) that
// parses text and fills the field. The program keeps what is its own:
// the struct, the rows, the rules that span settings, and the intro text
// of its --help and docs.
//
//	c, ch, err := table.Load(path, args, environ, settings.ReadFile)
//	// err is only flag.ErrHelp
//	crossChecks(ch, c) // the program's rules: ch.Add, ch.OK, ch.Show, ...
//	return c, ch.Err()  // nil, or an *Error listing every problem
//
// Load reads the flags, the EnvPrefix variables and the YAML file (named
// by path, --config or ConfigEnv), each into per-setting values with the
// origin of each (file:line:col, variable, flag), and merges them by
// precedence: flag > environment variable > file > default.
//
// # Invariants
//
//   - The same Value parses the YAML scalar, the variable, the flag and
//     the table's default, so the four never disagree on syntax.
//   - A value is checked in every source it is given in, even when a
//     higher source overrides it; a setting that had a problem is marked,
//     and Checker.OK lets the rules across settings skip it, so one
//     mistake is one problem.
//   - Problems sort the way a user fixes them: the file by position, then
//     variables by name, then flags in command-line order, then the rest;
//     at most MaxProblems are listed. A secret's value is never shown.
//   - Unknown YAML fields, unknown flags and prefixed variables that look
//     like a misspelt setting are problems with a did-you-mean hint.
//   - Relative paths from the file are relative to its directory; from
//     flags, variables and defaults, to the working directory.
//
// # Caveats
//
//   - YAML syntax errors are positioned by operators/spec, so that a
//     config and a pipeline spec report them alike.
//   - The flag package stops at the first unknown flag; Load reports it and
//     resumes after it (and after its value, when the next argument does
//     not start with -).
//   - Durations are spec.ParseDuration's: whole milliseconds, never
//     negative.
package settings
