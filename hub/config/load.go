package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxFileSize is the largest config file Load reads. A real one is a few
// hundred bytes; the cap keeps a wrong file (a log, a binary) from costing
// seconds of YAML parsing and a thousand problems.
const MaxFileSize = 1 << 20

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
	return load(path, args, environ, readConfigFile)
}

// load is Load with the file system as a parameter, for tests.
func load(path string, args, environ []string, read func(string) ([]byte, error)) (*Config, error) {
	l := &loader{vals: map[*setting]found{}, where: map[string]origin{}, bad: map[string]bool{}}
	flags, err := l.parseFlags(args)
	if err != nil {
		return nil, err
	}
	env := l.parseEnv(environ)

	file, fileOrigin := path, origin{}
	switch {
	case flags.config != nil:
		file, fileOrigin = *flags.config, origin{src: fromFlag, name: configFlag}
	case env.config != nil:
		file, fileOrigin = *env.config, origin{src: fromEnv, name: configEnv}
	}
	if file != "" {
		data, err := read(file)
		switch {
		case err != nil && fileOrigin.src == fromDefault:
			l.probs.add(origin{src: fromFile, file: file}, "", "cannot read the config file: %v", describeIOError(err))
		case err != nil:
			l.probs.add(fileOrigin, "", "cannot read the config file %s: %v", file, describeIOError(err))
		default:
			l.parseFile(file, data)
		}
	}
	// In order of precedence: each overrides the values of the last.
	l.applyEnv(env)
	l.applyFlags(flags)

	c := defaults()
	for st, f := range l.vals {
		st.val.set(c, f.v)
	}
	v := validator{c: c, probs: &l.probs, loaded: true, where: l.where, bad: l.bad}
	v.crossChecks()
	if err := l.probs.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// defaults returns a Config holding the table's defaults.
func defaults() *Config {
	c := new(Config)
	for _, st := range settings {
		if st.def != "" {
			v, err := st.val.parse(st.def)
			if err != nil {
				panic("config: default of " + st.path + ": " + err.Error()) // a bug in the table; TestSettingsTable catches it
			}
			st.val.set(c, v)
		}
	}
	return c
}

func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("is a directory")}
	}
	return io.ReadAll(io.LimitReader(f, MaxFileSize+1))
}

// describeIOError drops the operation and path that the message already
// has from an *fs.PathError.
func describeIOError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// loader merges the sources of one Load.
type loader struct {
	probs problems
	vals  map[*setting]found
	// argOrder counts flags as they are parsed, by twos: a flag's value
	// gets an even number, a problem found between two flags the odd one
	// between, so that problems list in the order of the command line.
	argOrder int
	// where is the origin of each setting's winning value, by path, and
	// of each list item ("pipelines[1]"); bad marks the settings that had
	// a problem in any source, which the checks across settings skip.
	where map[string]origin
	bad   map[string]bool
}

// found is one setting's value from the highest source seen so far. For a
// list, v is []any of the items.
type found struct {
	v any
	o origin
}

// store records v as the value of st from o, overriding lower sources.
// items are the origins of a list's items, when they differ from o.
func (l *loader) store(st *setting, o origin, v any, items []origin) {
	l.vals[st] = found{v: v, o: o}
	l.where[st.path] = o
	for k := range l.where {
		if strings.HasPrefix(k, st.path+"[") {
			delete(l.where, k)
		}
	}
	for i, item := range items {
		l.where[fmt.Sprintf("%s[%d]", st.path, i)] = item
	}
}

func (l *loader) markBad(st *setting) {
	l.bad[st.path] = true
}

// parseText parses one text for st from o, reporting a problem. For
// paths set in the file, dir resolves relative ones.
func (l *loader) parseText(st *setting, o origin, text, dir string) (any, bool) {
	v, err := st.val.parse(text)
	if err != nil {
		l.probs.add(o, st.path, "%v", err)
		l.markBad(st)
		return nil, false
	}
	if dir != "" && (st.val.typ() == "path" || st.val.typ() == "paths") {
		if s := v.(string); s != "" && !filepath.IsAbs(s) {
			v = filepath.Join(dir, s)
		}
	}
	return v, true
}

// --- environment ---

type envValues struct {
	config *string
	vals   []envValue // in table order
}

type envValue struct {
	st   *setting
	text string
}

// parseEnv picks the RUNNEL_HUB_* variables out of environ. Where a variable
// repeats, the first wins, as with os.Getenv. A variable that is not a
// setting is an error only when it looks like a misspelt one: other tools
// may use the prefix, but RUNNEL_HUB_COMMIT_INTERVL is a setting silently
// ignored.
func (l *loader) parseEnv(environ []string) envValues {
	var out envValues
	seen := map[string]bool{}
	names := make([]string, 0, len(settings)+1)
	for _, st := range settings {
		names = append(names, st.env)
	}
	names = append(names, configEnv)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, envPrefix) || seen[k] {
			continue
		}
		seen[k] = true
		if k == configEnv {
			out.config = &v
			continue
		}
		st := byEnv[k]
		if st == nil {
			if s := suggest(k, names); s != "" {
				l.probs.add(origin{src: fromEnv, name: k}, "", "unknown setting (did you mean %s?)", s)
			}
			continue
		}
		out.vals = append(out.vals, envValue{st: st, text: v})
	}
	slices.SortFunc(out.vals, func(a, b envValue) int { return slices.Index(settings, a.st) - slices.Index(settings, b.st) })
	return out
}

func (l *loader) applyEnv(env envValues) {
	for _, e := range env.vals {
		o := origin{src: fromEnv, name: e.st.env}
		if !e.st.val.list() {
			if v, ok := l.parseText(e.st, o, e.text, ""); ok {
				l.store(e.st, o, v, nil)
			}
			continue
		}
		// A comma-separated list; an empty variable is an empty list.
		var items []any
		ok := true
		if strings.TrimSpace(e.text) != "" {
			for i, part := range strings.Split(e.text, ",") {
				part = strings.TrimSpace(part)
				if part == "" {
					l.probs.add(o, e.st.path, "item %d of the comma-separated list is empty", i+1)
					l.markBad(e.st)
					ok = false
					continue
				}
				v, good := l.parseText(e.st, o, part, "")
				ok = ok && good
				items = append(items, v)
			}
		}
		if ok {
			l.store(e.st, o, items, nil)
		}
	}
}

// --- flags ---

type flagValues struct {
	config *string
	vals   []*flagValue // in table order
}

// flagValue records what a flag was given; parsing waits until every
// flag is in, so that one bad value does not stop the flag package from
// reading the rest, and all their problems are listed.
type flagValue struct {
	st    *setting // nil for --config
	texts []string // every occurrence, in order
	args  []int    // their order among all flags (see loader.argOrder)
	order *int
}

func (f *flagValue) String() string { return "" }

func (f *flagValue) Set(s string) error {
	*f.order += 2
	f.texts = append(f.texts, s)
	f.args = append(f.args, *f.order)
	return nil
}

// IsBoolFlag lets a bool setting be given as a bare --flag.
func (f *flagValue) IsBoolFlag() bool { return f.st != nil && f.st.val.typ() == "bool" }

// parseFlags parses args with a FlagSet named "runnel-hub". The flag
// package stops at the first unknown flag or argument; parseFlags reports
// it and carries on with the rest, so that every problem is listed.
func (l *loader) parseFlags(args []string) (flagValues, error) {
	fs := flag.NewFlagSet("runnel-hub", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var out flagValues
	all := make([]*flagValue, len(settings))
	names := make([]string, 0, len(settings)+1)
	for i, st := range settings {
		all[i] = &flagValue{st: st, order: &l.argOrder}
		fs.Var(all[i], st.flag, st.doc)
		names = append(names, st.flag)
	}
	cfg := &flagValue{order: &l.argOrder}
	fs.Var(cfg, configFlag, "the YAML config file")
	names = append(names, configFlag)

	for rest := args; len(rest) > 0; {
		before := rest
		err := fs.Parse(rest)
		rest = fs.Args()
		switch {
		case errors.Is(err, flag.ErrHelp):
			return out, flag.ErrHelp
		case err != nil:
			l.flagError(err, names)
			if len(rest) == len(before) {
				rest = rest[1:] // bad syntax (---x) is not consumed by the flag package
			}
			// "--unknown value": the value is the unknown flag's, not an
			// argument of its own.
			bad := before[len(before)-len(rest)-1]
			if strings.HasPrefix(err.Error(), "flag provided but not defined") && !strings.Contains(bad, "=") &&
				len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
				rest = rest[1:]
			}
		case len(rest) > 0 && len(before) > len(rest) && before[len(before)-len(rest)-1] == "--":
			// After --, nothing is a flag: every argument is unexpected.
			for _, arg := range rest {
				l.probs.add(origin{src: fromFlag, arg: l.argOrder + 1}, "", "unexpected argument %q after --", arg)
			}
			rest = nil
		case len(rest) > 0:
			arg := rest[0]
			rest = rest[1:]
			hint := "settings are given as flags, such as --config hub.yaml"
			if ext := filepath.Ext(arg); ext == ".yaml" || ext == ".yml" {
				hint = fmt.Sprintf("did you mean --config %s?", arg)
			}
			l.probs.add(origin{src: fromFlag, arg: l.argOrder + 1}, "", "unexpected argument %q (%s)", arg, hint)
		}
	}
	if n := len(cfg.texts); n > 0 {
		out.config = &cfg.texts[n-1]
	}
	for _, f := range all {
		if len(f.texts) > 0 {
			out.vals = append(out.vals, f)
		}
	}
	return out, nil
}

// flagError turns the flag package's error into a problem naming the flag.
func (l *loader) flagError(err error, names []string) {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		hint := ""
		alt := strings.NewReplacer("_", "-", ".", "-").Replace(name)
		if s := suggest(alt, names); s != "" {
			hint = fmt.Sprintf(" (did you mean --%s?)", s)
		}
		l.probs.add(origin{src: fromFlag, name: name, arg: l.argOrder + 1}, "", "unknown flag%s", hint)
		return
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		name = strings.TrimPrefix(name, "-")
		l.probs.add(origin{src: fromFlag, name: name, arg: l.argOrder + 1}, "", "needs a value (--%s=VALUE)", name)
		return
	}
	l.probs.add(origin{src: fromFlag, arg: l.argOrder + 1}, "", "%s", msg)
}

// applyFlags parses the flags' values. A flag given twice keeps its last
// value, as with the flag package; a list flag (--pipeline) collects all.
func (l *loader) applyFlags(flags flagValues) {
	for _, f := range flags.vals {
		last := len(f.texts) - 1
		o := origin{src: fromFlag, name: f.st.flag, arg: f.args[last]}
		if !f.st.val.list() {
			if v, ok := l.parseText(f.st, o, f.texts[last], ""); ok {
				l.store(f.st, o, v, nil)
			}
			continue
		}
		var items []any
		var origins []origin
		ok := true
		for i, text := range f.texts {
			itemOrigin := origin{src: fromFlag, name: f.st.flag, arg: f.args[i]}
			v, good := l.parseText(f.st, itemOrigin, text, "")
			ok = ok && good
			items = append(items, v)
			origins = append(origins, itemOrigin)
		}
		if ok {
			l.store(f.st, o, items, origins)
		}
	}
}
