package settings

import (
	"fmt"
	"io"
	"strings"
)

// Usage writes the --help text: "Usage: PROGRAM [flags]", intro (a
// paragraph on what an empty config does, ending in a blank line), then
// --config and every setting with its flag, environment variable, YAML
// path, default and doc line, in table order.
func (t *Table[C]) Usage(w io.Writer, intro string) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s [flags]\n\n%s", t.Program, intro)
	entry := func(flagPart, where, def, doc string) {
		fmt.Fprintf(&b, "  %s\n", flagPart)
		line := where
		if def != "" {
			line += "; default " + def
		}
		wrap(&b, line, "        ", 80)
		wrap(&b, doc, "        ", 80)
		b.WriteByte('\n')
	}
	entry("--"+ConfigFlag+" PATH", "env "+t.ConfigEnv, "none",
		"The YAML config file. Relative paths in it are relative to its directory.")
	for _, st := range t.Settings {
		entry(flagSyntax(st), "env "+st.Env+", yaml "+st.Path, defaultText(st), st.Doc)
	}
	io.WriteString(w, b.String())
}

// flagSyntax renders a setting's flag as typed: "--checkpoint-interval
// DURATION", "--log-level info|debug|warn|error", "--pipeline PATH
// (repeatable)", "--insecure[=true|false]".
func flagSyntax[C any](st *Setting[C]) string {
	s := "--" + st.Flag
	switch st.Value.Kind() {
	case KindBool:
		return s + "[=true|false]"
	case KindEnum:
		return s + " " + strings.Join(st.Value.Choices(), "|")
	case KindPaths:
		return s + " PATH (repeatable)"
	case KindStrings:
		return s + " VALUE (repeatable)"
	case KindBytes:
		return s + " SIZE"
	}
	return s + " " + strings.ToUpper(string(st.Value.Kind()))
}

// defaultText describes a setting's default for people: the table's text,
// what a computed default is, or "" when the default is empty.
func defaultText[C any](st *Setting[C]) string {
	switch {
	case st.DefaultDoc != "":
		return st.DefaultDoc
	case st.Default != "":
		return st.Default
	}
	return ""
}

// wrap writes text word-wrapped to width, each line indented.
func wrap(b *strings.Builder, text, indent string, width int) {
	n := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
			b.WriteString(indent)
			n = len(indent)
		case n+1+len(word) > width:
			b.WriteString("\n" + indent)
			n = len(indent)
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	if n > 0 {
		b.WriteByte('\n')
	}
}

// Markdown writes the reference part of a program's config docs: a
// "## Settings" section with a table per YAML section, then "## A complete
// config file" with ExampleYAML. The program's own intro goes before it.
func (t *Table[C]) Markdown(w io.Writer) {
	var b strings.Builder
	b.WriteString("## Settings\n")
	section := "-"
	for _, st := range t.Settings {
		sec := ""
		if i := strings.IndexByte(st.Path, '.'); i >= 0 {
			sec = st.Path[:i]
		}
		if sec != section {
			section = sec
			if sec == "" {
				b.WriteString("\n### Top level\n\n")
			} else {
				fmt.Fprintf(&b, "\n### %s\n\n", sec)
			}
			b.WriteString("| YAML | flag | environment | type | default | |\n|---|---|---|---|---|---|\n")
		}
		typ := string(st.Value.Kind())
		switch st.Value.Kind() {
		case KindEnum:
			typ = "`" + strings.Join(st.Value.Choices(), "` \\| `") + "`"
		case KindPaths:
			typ = "list of paths"
		case KindStrings:
			typ = "list"
		case KindBytes:
			typ = "size"
		}
		def := ""
		switch {
		case st.DefaultDoc != "":
			def = strings.ReplaceAll(st.DefaultDoc, "|", `\|`)
		case st.Default != "":
			def = "`" + st.Default + "`"
		default:
			def = "`\"\"`"
		}
		doc := strings.NewReplacer("|", `\|`, "*", `\*`).Replace(st.Doc)
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | %s | %s | %s |\n", st.Path, st.Flag, st.Env, typ, def, doc)
	}
	b.WriteString("\n## A complete config file\n\nEvery setting at its default; those without one are commented out, with an example value.\n\n")
	b.WriteString("```yaml\n" + t.ExampleYAML() + "```\n")
	io.WriteString(w, b.String())
}

// ExampleYAML writes every setting at its default, in table order, nested
// by section; a setting without a default is commented out with its
// example value. Loaded, it gives the defaults.
func (t *Table[C]) ExampleYAML() string {
	var b strings.Builder
	var open []string // the sections written so far, outermost first
	for _, st := range t.Settings {
		parts := strings.Split(st.Path, ".")
		sec := parts[:len(parts)-1]
		same := 0
		for same < len(open) && same < len(sec) && open[same] == sec[same] {
			same++
		}
		open = open[:same]
		for _, p := range sec[same:] {
			fmt.Fprintf(&b, "%s%s:\n", strings.Repeat("  ", len(open)), p)
			open = append(open, p)
		}
		indent := strings.Repeat("  ", len(open))
		if st.Default != "" {
			fmt.Fprintf(&b, "%s%s: %s\n", indent, parts[len(parts)-1], st.Default)
		} else {
			fmt.Fprintf(&b, "%s# %s: %s\n", indent, parts[len(parts)-1], st.Example)
		}
	}
	return b.String()
}
