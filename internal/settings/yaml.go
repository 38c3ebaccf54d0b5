package settings

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/runnel-io/runnel/operators/spec"
	yaml "go.yaml.in/yaml/v4"
)

// parseFile decodes the config file. It walks the yaml.Node tree rather
// than decoding into structs, so that every value and every unknown field
// is reported at its line and column, and the shape of the file is the
// table's: a section per dotted prefix, a scalar (or, for a list, a
// sequence) per setting.
func (l *loader[C]) parseFile(file string, data []byte) {
	fileOrigin := Origin{src: fromFile, file: file}
	if len(data) > MaxFileSize {
		l.probs.add(fileOrigin, "", "larger than %d bytes; is this the right file?", MaxFileSize)
		return
	}
	dir := filepath.Dir(file)
	if dir == "." {
		dir = "" // keep "./runnel-data" as written
	}
	f := fileDecoder[C]{l: l, file: file, dir: dir}

	dec, err := yaml.NewLoader(bytes.NewReader(data))
	if err != nil { // only bad options fail here
		f.yamlError(data, err)
		return
	}
	var doc yaml.Node
	switch err := decodeNode(dec, &doc); {
	case errors.Is(err, io.EOF):
		return // an empty file: every default
	case err != nil:
		f.yamlError(data, err)
		return
	}
	var next yaml.Node
	switch err := decodeNode(dec, &next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		f.yamlError(data, err)
		return
	default:
		f.add(&next, "", "a second YAML document starts here; the config is one document")
		return
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return
	}
	root := resolve(doc.Content[0])
	if isNull(root) {
		return // only comments
	}
	f.section(root, "")
}

// decodeNode is dec.Load with a panic in the YAML library turned into
// an error: a bad config must be refused, never crash the program.
func decodeNode(dec *yaml.Loader, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return dec.Load(n)
}

type fileDecoder[C any] struct {
	l    *loader[C]
	file string
	dir  string // the file's directory, for relative paths; "" for "."
}

func (f *fileDecoder[C]) origin(n *yaml.Node) Origin {
	return Origin{src: fromFile, file: f.file, pos: spec.Pos{Line: n.Line, Column: n.Column}}
}

func (f *fileDecoder[C]) add(n *yaml.Node, field, format string, args ...any) {
	f.l.probs.add(f.origin(n), field, format, args...)
}

// yamlError reports a YAML syntax error at the line and column the YAML
// library names, in operators/spec's words (spec.YAMLProblem), so that a
// config and a pipeline spec report the same mistake alike.
func (f *fileDecoder[C]) yamlError(data []byte, err error) {
	p := spec.YAMLProblem(f.file, data, err)
	f.l.probs.add(Origin{src: fromFile, file: f.file, pos: p.Pos}, "", "%s", p.Msg)
}

// section decodes a mapping of settings and subsections at prefix ("" for
// the top level).
func (f *fileDecoder[C]) section(n *yaml.Node, prefix string) {
	if n.Kind != yaml.MappingNode {
		f.add(n, prefix, "expected a mapping of settings such as %s, got %s", f.l.t.sectionExample(prefix), kindName(n))
		return
	}
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			f.add(k, prefix, "setting names must be plain strings, got %s", kindName(k))
			continue
		case k.Tag == "!!merge":
			f.add(k, prefix, "merge keys (<<) are not supported; write the settings out")
			continue
		case first[k.Value] != nil:
			f.add(k, joinPath(prefix, k.Value), "set twice (first at line %d); YAML keeps only one, so remove the other", first[k.Value].Line)
			continue
		}
		first[k.Value] = k
		p := joinPath(prefix, k.Value)
		switch {
		case !slices.Contains(f.l.t.children[prefix], k.Value):
			// Not a name of this section; "checkpoint.interval" written
			// flat included, which would let two values of one setting in.
			f.add(k, prefix, "unknown field %q%s", k.Value, f.l.t.fieldHint(k.Value, prefix))
		case f.l.t.byPath[p] != nil:
			f.leaf(f.l.t.byPath[p], v)
		case f.l.t.children[p] != nil:
			if !isNull(v) { // an empty section: its defaults
				f.section(v, p)
			}
		}
	}
}

// leaf decodes the value of one setting. A null value (`interval:` with
// nothing after it) leaves the setting at its default.
func (f *fileDecoder[C]) leaf(st *Setting[C], n *yaml.Node) {
	if isNull(n) {
		return
	}
	o := f.origin(n)
	if !isList(st.Value.Kind()) {
		if n.Kind != yaml.ScalarNode {
			f.add(n, st.Path, "expected %s, got %s", valueExample(st), kindName(n))
			f.l.markBad(st)
			return
		}
		if v, ok := f.l.parseText(st, o, n.Value, f.dir); ok {
			f.l.store(st, o, v, nil)
		}
		return
	}
	// A list; a single scalar is a list of one, as in pipelines: x.yaml.
	items := []*yaml.Node{n}
	switch n.Kind {
	case yaml.ScalarNode:
	case yaml.SequenceNode:
		items = n.Content
	default:
		f.add(n, st.Path, "expected %s, got %s", valueExample(st), kindName(n))
		f.l.markBad(st)
		return
	}
	vals := make([]any, 0, len(items))
	origins := make([]Origin, 0, len(items))
	ok := true
	for i, item := range items {
		item = resolve(item)
		field := st.Path
		if n.Kind == yaml.SequenceNode {
			field = fmt.Sprintf("%s[%d]", st.Path, i)
		}
		if item.Kind != yaml.ScalarNode || isNull(item) {
			f.add(item, field, "expected a path, got %s", kindName(item))
			f.l.markBad(st)
			ok = false
			continue
		}
		itemOrigin := f.origin(item)
		v, good := f.l.parseText(st, itemOrigin, item.Value, f.dir)
		if !good {
			ok = false
			continue
		}
		vals = append(vals, v)
		origins = append(origins, itemOrigin)
	}
	if ok {
		f.l.store(st, o, vals, origins)
	}
}

// fieldHint suggests what an unknown field name at prefix was meant to be.
func (t *Table[C]) fieldHint(name, prefix string) string {
	known := t.children[prefix]
	norm := strings.ToLower(strings.ReplaceAll(name, "-", "_"))
	// A typo of a field that belongs here.
	if s := suggest(norm, known); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	// A dotted or flag-style path written flat: checkpoint.interval.
	flat := strings.NewReplacer("-", "_").Replace(strings.ToLower(joinPath(prefix, name)))
	for _, st := range t.Settings {
		if st.Path == flat || strings.ReplaceAll(st.Path, ".", "_") == flat {
			return fmt.Sprintf(" (write it nested: %s)", Nested(st.Path, "..."))
		}
	}
	// A field of another section: interval at the top level.
	var elsewhere []string
	for _, st := range t.Settings {
		parts := strings.Split(st.Path, ".")
		for i, part := range parts {
			if part == norm {
				elsewhere = append(elsewhere, strings.Join(parts[:i+1], "."))
			}
		}
	}
	slices.Sort(elsewhere)
	elsewhere = slices.Compact(elsewhere)
	if len(elsewhere) > 0 && len(elsewhere) <= 3 {
		return fmt.Sprintf(" (did you mean %s? it belongs in another section)", orList(elsewhere))
	}
	if len(known) == 0 {
		return ""
	}
	where := "here"
	if prefix != "" {
		where = "in " + prefix
	}
	return fmt.Sprintf(" (known fields %s: %s)", where, strings.Join(known, ", "))
}

// Nested renders a dotted path as nested YAML flow mappings:
// "checkpoint.interval", "1s" -> "checkpoint: {interval: 1s}".
func Nested(path, value string) string {
	parts := strings.Split(path, ".")
	s := parts[len(parts)-1] + ": " + value
	for i := len(parts) - 2; i >= 0; i-- {
		s = parts[i] + ": {" + s + "}"
	}
	return s
}

// sectionExample shows a section with its first setting, for messages.
func (t *Table[C]) sectionExample(prefix string) string {
	for _, st := range t.Settings {
		if prefix == "" || strings.HasPrefix(st.Path, prefix+".") {
			ex := cmp.Or(st.Default, st.Example, "...")
			return Nested(strings.TrimPrefix(st.Path, prefix+"."), ex)
		}
	}
	return "{}"
}

// valueExample describes the value a setting takes, for messages.
func valueExample[C any](st *Setting[C]) string {
	switch st.Value.Kind() {
	case KindDuration:
		return "a duration such as " + st.Default
	case KindBytes:
		return "a size such as " + st.Default
	case KindInt:
		return "a whole number such as " + st.Default
	case KindBool:
		return "true or false"
	case KindEnum:
		return "one of " + orList(st.Value.Choices())
	case KindPath:
		return "a path"
	case KindPaths:
		return "a list of paths, such as [pipelines/*.yaml]"
	case KindStrings:
		return "a list of strings"
	}
	return "a string"
}

// resolve follows aliases (*name) to the anchored node. The walk follows
// the table's fixed depth, so a cycle of anchors cannot loop it; the bound
// guards chains of aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; i < 100 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kindName describes a node's YAML type for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing (null)"
		case "!!int", "!!float":
			return fmt.Sprintf("the number %s", n.Value)
		case "!!bool":
			return n.Value
		}
		return fmt.Sprintf("the string %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}
