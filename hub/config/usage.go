package config

import (
	"fmt"
	"io"
	"strings"
)

// Usage writes the --help text: every setting with its flag, environment
// variable, YAML path, default and doc line, in the order of the table
// (and of docs/hub-config.md, which is generated from the same table).
func Usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`Usage: runnel-hub [flags]

Every setting can be given as a flag, as an environment variable, or in the
YAML config file: a flag overrides a variable, which overrides the file.
Anything not given takes its default, so an empty config runs: gRPC on
127.0.0.1:7443 and HTTP on 127.0.0.1:7080 (plaintext, loopback only), data in
./runnel-hub-data, the built-in demo pipeline. Durations read like 250ms,
1m30s or 7d.

`)
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
	entry("--config PATH", "env "+configEnv, "none",
		"The YAML config file. Relative paths in it are relative to its directory.")
	for _, st := range settings {
		entry(flagSyntax(st), "env "+st.env+", yaml "+st.path, defaultText(st), st.doc)
	}
	io.WriteString(w, b.String())
}

// flagSyntax renders a setting's flag as typed: "--commit-interval
// DURATION", "--log-level info|debug|warn|error", "--pipeline PATH
// (repeatable)", "--insecure[=true|false]".
func flagSyntax(st *setting) string {
	s := "--" + st.flag
	switch st.val.typ() {
	case "bool":
		return s + "[=true|false]"
	case "enum":
		return s + " " + strings.Join(st.val.choices(), "|")
	case "paths":
		return s + " PATH (repeatable)"
	case "bytes":
		return s + " SIZE"
	}
	return s + " " + strings.ToUpper(st.val.typ())
}

// defaultText describes a setting's default for people: the table's text,
// what a computed default is, or "" when the default is empty.
func defaultText(st *setting) string {
	switch {
	case st.defDoc != "":
		return st.defDoc
	case st.def != "":
		return st.def
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
