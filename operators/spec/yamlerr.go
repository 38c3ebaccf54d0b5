package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// parseYAML parses d.data into a node tree and returns its root, or nil for
// an empty document. ok is false when the YAML itself is broken (reported).
func (d *decoder) parseYAML() (root *yaml.Node, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(d.data))
	var doc yaml.Node
	switch err := decodeNode(dec, &doc); {
	case errors.Is(err, io.EOF):
		return nil, true
	case err != nil:
		d.yamlError(err)
		return nil, false
	}
	var next yaml.Node
	switch err := decodeNode(dec, &next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.yamlError(err)
		return nil, false
	default:
		d.errorf(&next, "", "a second YAML document starts here; a spec file holds one pipeline")
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, true
	}
	return resolve(doc.Content[0]), true
}

// decodeNode is dec.Decode, with a panic in the YAML library turned into an
// error: a spec comes from users, and a bad one must never crash the edge.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

var (
	yamlLineRE   = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)
)

// yamlParserProblems are the messages of the YAML library's parser (as
// opposed to its scanner). The library reports their line 0-based, so one
// is added; scanner lines are already 1-based. Both omit the line when it
// is the first one.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// yamlHints explain the YAML library's terse messages in terms of what
// people usually did wrong.
var yamlHints = map[string]string{
	"did not find expected key":                       "check the indentation of this block",
	"mapping values are not allowed in this context":  `a value contains ": "; quote it, or check the indentation`,
	"found character that cannot start any token":     "a value starts with a character YAML reserves (such as @, ` or a tab); quote the value, and indent with spaces",
	"did not find expected ',' or ']'":                "a [ list is not closed",
	"did not find expected ',' or '}'":                "a { mapping is not closed",
	"found unexpected end of stream":                  "a quote is not closed",
	"found a tab character that violates indentation": "indent with spaces, not tabs",
	"found unknown escape character":                  `in double quotes, \ starts an escape; use single quotes or write \\`,
}

// yamlError turns an error from the YAML library into a Problem with the
// best position that can be recovered from its message.
func (d *decoder) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var pos Pos
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		msg = m[2]
		if yamlParserProblems[msg] {
			line++
		}
		pos.Line = line
	} else if m := yamlAnchorRE.FindStringSubmatch(msg); m != nil {
		pos = d.find("*" + m[1])
		msg = fmt.Sprintf("alias *%s refers to an anchor &%s that is not defined before it", m[1], m[1])
	} else if yamlParserProblems[msg] || yamlHints[msg] != "" {
		pos.Line = 1
	}
	if last := bytes.Count(d.data, []byte("\n")) + 1; pos.Line > last {
		pos.Line = last // the library's guess past the end: the end
	}
	if h := yamlHints[msg]; h != "" {
		msg += " (" + h + ")"
	}
	d.probs = append(d.probs, Problem{File: d.file, Pos: pos, Msg: "invalid YAML: " + msg})
}

// find returns the position of the first occurrence of s in the spec.
func (d *decoder) find(s string) Pos {
	i := bytes.Index(d.data, []byte(s))
	if i < 0 {
		return Pos{}
	}
	before := d.data[:i]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len([]rune(string(before[bytes.LastIndexByte(before, '\n')+1:]))) + 1
	return Pos{Line: line, Column: col}
}
