package settings

import (
	"fmt"
	"slices"
	"strings"
)

// Setting is one row of a table: everything every source of configuration
// is derived from. Adding a setting to a program is adding a row (and the
// field of C it fills).
type Setting[C any] struct {
	Path       string // YAML path, dotted: "checkpoint.interval"
	Flag       string // flag name without dashes
	Env        string // environment variable, starting with Table.EnvPrefix
	Default    string // default, in the syntax a user writes; "" for none
	DefaultDoc string // how a default computed at load time is described
	Example    string // a value for the docs' example config, when Default is ""
	Doc        string // what it does, and what a user must know; one or two sentences
	Secret     bool   // never echoed in messages
	Value      Value[C]
}

// ConfigFlag is the flag that names the config file, in every program.
// It is not a setting (the file cannot name itself) but is parsed
// alongside them; Table.ConfigEnv is its variable.
const ConfigFlag = "config"

// Table is a program's settings and the names it is known by. Build it
// with New, once, in a package variable.
type Table[C any] struct {
	Program   string // the command, "runnel-edge": names the flag set and --help
	File      string // an example config file name, "edge.yaml", for hints
	EnvPrefix string // what every variable starts with, "RUNNEL_": others are not read
	ConfigEnv string // the variable naming the config file, "RUNNEL_CONFIG"
	// Invalid is the program's sentinel: every *Error the table returns
	// matches it (errors.Is).
	Invalid error
	// Settings in the order of --help, the docs and an example file. A
	// section's settings must be together.
	Settings []*Setting[C]

	byPath, byFlag, byEnv map[string]*Setting[C]
	// children lists, for each section path ("" for the top level,
	// "broker", "broker.tls"), the names that may appear in it, in table
	// order.
	children map[string][]string
}

// New indexes t. It panics when two settings share a path, flag or
// variable, or a default does not parse: a bug in the table, caught by
// the first test that loads the package.
func New[C any](t Table[C]) *Table[C] {
	t.byPath = map[string]*Setting[C]{}
	t.byFlag = map[string]*Setting[C]{}
	t.byEnv = map[string]*Setting[C]{}
	t.children = map[string][]string{}
	for _, st := range t.Settings {
		if t.byPath[st.Path] != nil || t.byFlag[st.Flag] != nil || t.byEnv[st.Env] != nil || st.Flag == ConfigFlag || st.Env == t.ConfigEnv {
			panic(fmt.Sprintf("settings: %s: path, flag or variable used twice", st.Path))
		}
		t.byPath[st.Path], t.byFlag[st.Flag], t.byEnv[st.Env] = st, st, st
		parent := ""
		for _, part := range strings.Split(st.Path, ".") {
			if !slices.Contains(t.children[parent], part) {
				t.children[parent] = append(t.children[parent], part)
			}
			parent = joinPath(parent, part)
		}
	}
	t.Defaults() // panics on a bad default
	return &t
}

// Lookup returns the setting at a YAML path, or nil.
func (t *Table[C]) Lookup(path string) *Setting[C] { return t.byPath[path] }

// Defaults returns a config holding the table's defaults. Defaults
// computed at load time (DefaultDoc) are the caller's to fill.
func (t *Table[C]) Defaults() *C {
	c := new(C)
	for _, st := range t.Settings {
		if st.Default != "" {
			v, err := st.Value.Parse(st.Default)
			if err != nil {
				panic("settings: default of " + st.Path + ": " + err.Error()) // a bug in the table
			}
			st.Value.Set(c, v)
		}
	}
	return c
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}
