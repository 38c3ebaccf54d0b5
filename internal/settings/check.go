package settings

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Checker collects the problems of one config and knows where each of its
// values came from; a program's rules across settings run on it. From
// Load, a problem is placed at the file line, variable or flag that gave
// the value; from Validate (a config built in code), at the setting's
// YAML path.
type Checker[C any] struct {
	t      *Table[C]
	c      *C
	probs  *problems
	loaded bool              // by Load: files a setting names fill other fields
	where  map[string]Origin // by path (and "pipelines[i]"); absent: default
	bad    map[string]bool   // settings that already had a problem
}

// Validate checks every field of c on its own (ranges, enums, syntax),
// and returns the Checker for the program's rules across settings.
func (t *Table[C]) Validate(c *C) *Checker[C] {
	ch := &Checker[C]{t: t, c: c, probs: &problems{}, where: map[string]Origin{}, bad: map[string]bool{}}
	for _, st := range t.Settings {
		if err := st.Value.Check(c); err != nil {
			ch.Add(st.Path, "%v", err)
			ch.bad[st.Path] = true
		}
	}
	return ch
}

// Err returns every problem found, as an *Error matching the table's
// Invalid, or nil.
func (ch *Checker[C]) Err() error { return ch.probs.err(ch.t.Invalid) }

// Loaded reports whether the config came from Load, rather than from
// code (Validate). Only a loaded config has its secrets read from the
// files that hold them.
func (ch *Checker[C]) Loaded() bool { return ch.loaded }

// Add reports a problem with the setting at path, placed where its value
// came from.
func (ch *Checker[C]) Add(path, format string, args ...any) {
	ch.probs.add(ch.where[path], path, format, args...)
}

// AddAt reports a problem at o (see InFile), about field ("" for none).
func (ch *Checker[C]) AddAt(o Origin, field, format string, args ...any) {
	ch.probs.add(o, field, format, args...)
}

// MarkBad records that the setting at path has a problem of its own, so
// that OK is false for it.
func (ch *Checker[C]) MarkBad(path string) { ch.bad[path] = true }

// OK reports whether none of paths had a problem of its own: a check that
// spans settings is skipped when one of them is already reported, rather
// than reported again against a value that is not the user's.
func (ch *Checker[C]) OK(paths ...string) bool {
	for _, p := range paths {
		if ch.bad[p] {
			return false
		}
	}
	return true
}

// Where returns the origin of the value at path (or of a list item,
// "pipelines[1]"); the zero Origin for a default.
func (ch *Checker[C]) Where(path string) Origin { return ch.where[path] }

// IsSet reports whether a source gave the setting at path.
func (ch *Checker[C]) IsSet(path string) bool { return ch.where[path].src != fromDefault }

// Blame picks which of the settings in a conflict the problem is placed
// at: the first one set by a source (a default is not what the user must
// fix), or the first.
func (ch *Checker[C]) Blame(paths ...string) string {
	for _, p := range paths {
		if ch.IsSet(p) {
			return p
		}
	}
	return paths[0]
}

// Value renders the value of the setting at path, "set" for a secret.
func (ch *Checker[C]) Value(path string) string {
	st := ch.t.byPath[path]
	if st.Secret {
		return "set"
	}
	return st.Value.Show(ch.c)
}

// Show names another setting in a message, with its value and where that
// came from: `broker.reconnect.max (30s, from flag --broker-reconnect-max)`.
func (ch *Checker[C]) Show(path string) string {
	val := ch.Value(path)
	switch o := ch.where[path]; {
	case !ch.loaded:
		return fmt.Sprintf("%s (%s)", path, val)
	case o.src == fromDefault:
		return fmt.Sprintf("%s (%s, the default)", path, val)
	default:
		return fmt.Sprintf("%s (%s, from %s)", path, val, o)
	}
}

// ReadFile reads a small file that the setting at path names, reporting a
// problem and returning nil when it cannot. Only regular files of at most
// limit bytes are read: a device or a FIFO would block or never end.
func (ch *Checker[C]) ReadFile(path, name string, limit int64) []byte {
	if name == "" || !ch.OK(path) {
		return nil
	}
	data, err := readSmall(name, limit)
	if err != nil {
		ch.Add(path, "cannot read %s: %v", name, err)
		return nil
	}
	return data
}

// SecretFile applies the rules of a secret that is given either inline
// (the setting at valuePath) or by a file (filePath, naming file): not
// both, and the file readable and not empty. It returns the file's
// contents without a final line break, and whether to store them: only a
// loaded config is filled from the file. noun names the secret in
// messages ("password", "token").
func (ch *Checker[C]) SecretFile(valuePath, filePath, file, noun string, limit int64) (string, bool) {
	switch {
	case ch.loaded && ch.IsSet(valuePath) && ch.IsSet(filePath):
		ch.Add(filePath, "%s is also set (from %s); give the %s one way only", valuePath, ch.where[valuePath], noun)
	case file != "":
		if data := ch.ReadFile(filePath, file, limit); data != nil {
			s := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
			switch {
			case s == "":
				ch.Add(filePath, "%s is empty", file)
			case ch.loaded:
				return s, true
			}
		}
	}
	return "", false
}

// DataDir checks that the directory the setting at path names is one, or
// does not exist yet (the program creates it).
func (ch *Checker[C]) DataDir(path, dir string) {
	if dir == "" || !ch.OK(path) {
		return
	}
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		ch.Add(path, "%s exists and is not a directory", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		ch.Add(path, "cannot use %s: %v", dir, IOCause(err))
	}
}

// SpecFiles checks a list of pipeline spec files and globs (a Paths
// setting at path): no item twice, and every plain path a readable file.
// Globs are not expanded: they may match nothing yet, since specs can be
// added (or, on an edge, pushed by the hub) later.
//
// It returns the items fit to be read, for the program to parse and
// compile (see edge/config.LoadWithPipelines): every item but those
// reported here, and none when the setting had a problem of its own (its
// value is then not the one the user gave).
func (ch *Checker[C]) SpecFiles(path string, files []string) []string {
	if !ch.OK(path) {
		return nil
	}
	var fit []string
	first := map[string]int{}
	for i, p := range files {
		at := fmt.Sprintf("%s[%d]", path, i)
		if _, ok := ch.where[at]; !ok {
			at = path
		}
		if j, dup := first[p]; dup {
			ch.Add(at, "%s is listed twice (also item %d)", p, j+1)
			continue
		}
		first[p] = i
		if strings.ContainsAny(p, `*?[\`) {
			fit = append(fit, p)
			continue
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			ch.Add(at, "cannot read pipeline %s: %v", p, IOCause(err))
		case fi.IsDir():
			ch.Add(at, "%s is a directory; to load every spec in it, write %s", p, strings.TrimSuffix(p, "/")+"/*.yaml")
		default:
			fit = append(fit, p)
		}
	}
	return fit
}

func readSmall(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, IOCause(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, IOCause(err)
	case fi.IsDir():
		return nil, errors.New("is a directory")
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > limit:
		return nil, fmt.Errorf("larger than %d bytes; is it the right file?", limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, IOCause(err)
	}
	return data, nil
}
