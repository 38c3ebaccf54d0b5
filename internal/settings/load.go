package settings

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

// Load reads the three sources and merges them (flag > environment
// variable > file > default) into a config holding every default. Each
// value is checked on its own in every source it is given in; the rules
// across settings are the caller's, run on the returned Checker, whose
// Err then lists every problem of every source.
//
// path is the config file, "" for none; --config and then ConfigEnv, when
// given, name it instead (an empty value: no file). read reads it
// (ReadFile, or a fake in tests). args are the command-line flags,
// environ the environment, of which only EnvPrefix variables are read.
//
// The only error Load returns is flag.ErrHelp, when args ask for help.
func (t *Table[C]) Load(path string, args, environ []string, read func(string) ([]byte, error)) (*C, *Checker[C], error) {
	l := &loader[C]{t: t, vals: map[*Setting[C]]found{}, where: map[string]Origin{}, bad: map[string]bool{}}
	flags, err := l.parseFlags(args)
	if err != nil {
		return nil, nil, err
	}
	env := l.parseEnv(environ)

	file, fileOrigin := path, Origin{}
	switch {
	case flags.config != nil:
		file, fileOrigin = *flags.config, Origin{src: fromFlag, name: ConfigFlag}
	case env.config != nil:
		file, fileOrigin = *env.config, Origin{src: fromEnv, name: t.ConfigEnv}
	}
	if file != "" {
		data, err := read(file)
		switch {
		case err != nil && fileOrigin.src == fromDefault:
			l.probs.add(Origin{src: fromFile, file: file}, "", "cannot read the config file: %v", IOCause(err))
		case err != nil:
			l.probs.add(fileOrigin, "", "cannot read the config file %s: %v", file, IOCause(err))
		default:
			l.parseFile(file, data)
		}
	}
	// In order of precedence: each overrides the values of the last.
	l.applyEnv(env)
	l.applyFlags(flags)

	c := t.Defaults()
	for st, f := range l.vals {
		st.Value.Set(c, f.v)
	}
	return c, &Checker[C]{t: t, c: c, probs: &l.probs, loaded: true, where: l.where, bad: l.bad}, nil
}

// ReadFile reads a config file for Load: at most MaxFileSize+1 bytes (so
// that Load can say it is too large), and not a directory.
func ReadFile(path string) ([]byte, error) {
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

// IOCause drops the operation and path, which a message already names,
// from an *fs.PathError.
func IOCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// loader merges the sources of one Load.
type loader[C any] struct {
	t     *Table[C]
	probs problems
	vals  map[*Setting[C]]found
	// argOrder counts flags as they are parsed, by twos: a flag's value
	// gets an even number, a problem found between two flags the odd one
	// between, so that problems list in the order of the command line.
	argOrder int
	// where is the origin of each setting's winning value, by path, and
	// of each list item ("pipelines[1]"); bad marks the settings that had
	// a problem in any source, which the checks across settings skip.
	where map[string]Origin
	bad   map[string]bool
}

// found is one setting's value from the highest source seen so far. For a
// list, v is []any of the items.
type found struct {
	v any
	o Origin
}

// store records v as the value of st from o, overriding lower sources.
// items are the origins of a list's items, when they differ from o.
func (l *loader[C]) store(st *Setting[C], o Origin, v any, items []Origin) {
	l.vals[st] = found{v: v, o: o}
	l.where[st.Path] = o
	for k := range l.where {
		if strings.HasPrefix(k, st.Path+"[") {
			delete(l.where, k)
		}
	}
	for i, item := range items {
		l.where[fmt.Sprintf("%s[%d]", st.Path, i)] = item
	}
}

func (l *loader[C]) markBad(st *Setting[C]) {
	l.bad[st.Path] = true
}

// parseText parses one text for st from o, reporting a problem. For
// paths set in the file, dir resolves relative ones.
func (l *loader[C]) parseText(st *Setting[C], o Origin, text, dir string) (any, bool) {
	v, err := st.Value.Parse(text)
	if err != nil {
		l.probs.add(o, st.Path, "%v", err)
		l.markBad(st)
		return nil, false
	}
	if k := st.Value.Kind(); dir != "" && (k == KindPath || k == KindPaths) {
		if s := v.(string); s != "" && !filepath.IsAbs(s) {
			v = filepath.Join(dir, s)
		}
	}
	return v, true
}

// --- environment ---

type envValues[C any] struct {
	config *string
	vals   []envValue[C] // in table order
}

type envValue[C any] struct {
	st   *Setting[C]
	text string
}

// parseEnv picks the EnvPrefix variables out of environ. Where a variable
// repeats, the first wins, as with os.Getenv. A variable that is not a
// setting is an error only when it looks like a misspelt one: other tools
// may use the prefix, but RUNNEL_CHEKPOINT_INTERVAL is a setting silently
// ignored.
func (l *loader[C]) parseEnv(environ []string) envValues[C] {
	var out envValues[C]
	seen := map[string]bool{}
	names := make([]string, 0, len(l.t.Settings)+1)
	for _, st := range l.t.Settings {
		names = append(names, st.Env)
	}
	names = append(names, l.t.ConfigEnv)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, l.t.EnvPrefix) || seen[k] {
			continue
		}
		seen[k] = true
		if k == l.t.ConfigEnv {
			out.config = &v
			continue
		}
		st := l.t.byEnv[k]
		if st == nil {
			if s := suggest(k, names); s != "" {
				l.probs.add(Origin{src: fromEnv, name: k}, "", "unknown setting (did you mean %s?)", s)
			}
			continue
		}
		out.vals = append(out.vals, envValue[C]{st: st, text: v})
	}
	slices.SortFunc(out.vals, func(a, b envValue[C]) int {
		return slices.Index(l.t.Settings, a.st) - slices.Index(l.t.Settings, b.st)
	})
	return out
}

func (l *loader[C]) applyEnv(env envValues[C]) {
	for _, e := range env.vals {
		o := Origin{src: fromEnv, name: e.st.Env}
		if !isList(e.st.Value.Kind()) {
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
					l.probs.add(o, e.st.Path, "item %d of the comma-separated list is empty", i+1)
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

type flagValues[C any] struct {
	config *string
	vals   []*flagValue[C] // in table order
}

// flagValue records what a flag was given; parsing waits until every
// flag is in, so that one bad value does not stop the flag package from
// reading the rest, and all their problems are listed.
type flagValue[C any] struct {
	st    *Setting[C] // nil for --config
	texts []string    // every occurrence, in order
	args  []int       // their order among all flags (see loader.argOrder)
	order *int
}

func (f *flagValue[C]) String() string { return "" }

func (f *flagValue[C]) Set(s string) error {
	*f.order += 2
	f.texts = append(f.texts, s)
	f.args = append(f.args, *f.order)
	return nil
}

// IsBoolFlag lets a bool setting be given as a bare --flag.
func (f *flagValue[C]) IsBoolFlag() bool { return f.st != nil && f.st.Value.Kind() == KindBool }

// parseFlags parses args with a FlagSet named after the program. The flag
// package stops at the first unknown flag or argument; parseFlags reports
// it and carries on with the rest, so that every problem is listed.
func (l *loader[C]) parseFlags(args []string) (flagValues[C], error) {
	fs := flag.NewFlagSet(l.t.Program, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var out flagValues[C]
	all := make([]*flagValue[C], len(l.t.Settings))
	names := make([]string, 0, len(l.t.Settings)+1)
	for i, st := range l.t.Settings {
		all[i] = &flagValue[C]{st: st, order: &l.argOrder}
		fs.Var(all[i], st.Flag, st.Doc)
		names = append(names, st.Flag)
	}
	cfg := &flagValue[C]{order: &l.argOrder}
	fs.Var(cfg, ConfigFlag, "the YAML config file")
	names = append(names, ConfigFlag)

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
				l.probs.add(Origin{src: fromFlag, arg: l.argOrder + 1}, "", "unexpected argument %q after --", arg)
			}
			rest = nil
		case len(rest) > 0:
			arg := rest[0]
			rest = rest[1:]
			hint := "settings are given as flags, such as --config " + l.t.File
			if ext := filepath.Ext(arg); ext == ".yaml" || ext == ".yml" {
				hint = fmt.Sprintf("did you mean --config %s?", arg)
			}
			l.probs.add(Origin{src: fromFlag, arg: l.argOrder + 1}, "", "unexpected argument %q (%s)", arg, hint)
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
func (l *loader[C]) flagError(err error, names []string) {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		hint := ""
		alt := strings.NewReplacer("_", "-", ".", "-").Replace(name)
		if s := suggest(alt, names); s != "" {
			hint = fmt.Sprintf(" (did you mean --%s?)", s)
		}
		l.probs.add(Origin{src: fromFlag, name: name, arg: l.argOrder + 1}, "", "unknown flag%s", hint)
		return
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		name = strings.TrimPrefix(name, "-")
		l.probs.add(Origin{src: fromFlag, name: name, arg: l.argOrder + 1}, "", "needs a value (--%s=VALUE)", name)
		return
	}
	l.probs.add(Origin{src: fromFlag, arg: l.argOrder + 1}, "", "%s", msg)
}

// applyFlags parses the flags' values. A flag given twice keeps its last
// value, as with the flag package; a list flag (--pipeline) collects all.
func (l *loader[C]) applyFlags(flags flagValues[C]) {
	for _, f := range flags.vals {
		last := len(f.texts) - 1
		o := Origin{src: fromFlag, name: f.st.Flag, arg: f.args[last]}
		if !isList(f.st.Value.Kind()) {
			if v, ok := l.parseText(f.st, o, f.texts[last], ""); ok {
				l.store(f.st, o, v, nil)
			}
			continue
		}
		var items []any
		var origins []Origin
		ok := true
		for i, text := range f.texts {
			itemOrigin := Origin{src: fromFlag, name: f.st.Flag, arg: f.args[i]}
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
