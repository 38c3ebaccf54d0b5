package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v4"
)

// parseYAML parses d.data into a node tree and returns its root, or nil for
// an empty document. ok is false when the YAML itself is broken (reported).
func (d *decoder) parseYAML() (root *yaml.Node, ok bool) {
	dec, err := yaml.NewLoader(bytes.NewReader(d.data))
	if err != nil { // only bad options fail here
		d.yamlError(err)
		return nil, false
	}
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

// decodeNode is dec.Load, with a panic in the YAML library turned into an
// error: a spec comes from users, and a bad one must never crash the edge.
func decodeNode(dec *yaml.Loader, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return dec.Load(n)
}

// yamlHint explains one of the YAML library's terse messages in terms of
// what people usually did wrong.
type yamlHint struct {
	text string
	// atOpener places the problem at the library's context mark, where
	// the construct it gave up on starts (the opening quote or bracket),
	// rather than where it noticed: for an unclosed quote that is the end
	// of the file, which says nothing about where to look.
	atOpener bool
}

// yamlHints are keyed by the library's LoadError.Message.
var yamlHints = map[string]yamlHint{
	"did not find expected key":                       {text: "check the indentation of this line"},
	"mapping values are not allowed in this context":  {text: `a value contains ": "; quote it, or check the indentation`},
	"found character that cannot start any token":     {text: "a value starts with a character YAML reserves (such as @, ` or a tab); quote the value, and indent with spaces"},
	"did not find expected ',' or ']'":                {text: "a [ list is not closed", atOpener: true},
	"did not find expected ',' or '}'":                {text: "a { mapping is not closed", atOpener: true},
	"found unexpected end of stream":                  {text: "a quote is not closed", atOpener: true},
	"found a tab character that violates indentation": {text: "indent with spaces, not tabs"},
	"found unknown escape character":                  {text: `in double quotes, \ starts an escape; use single quotes or write \\`},
	"did not find expected '-' indicator":             {text: "the items of a list start with - at the same indentation"},
}

// readerHint is the hint of every error of the library's reader stage: the
// bytes are not UTF-8 text, or hold a control character.
const readerHint = "is this a text file, saved as UTF-8?"

var yamlAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// yamlError reports an error from the YAML library.
func (d *decoder) yamlError(err error) {
	d.probs = append(d.probs, YAMLProblem(d.file, d.data, err))
}

// YAMLProblem turns an error that go.yaml.in/yaml/v4 returned for data
// (the contents of file) into a Problem "invalid YAML: ...", at the line
// and column the library's *yaml.LoadError names, with a hint for the
// common mistakes (tabs, an unquoted ": ", an unclosed quote or bracket).
// internal/settings reports config files' syntax errors with it, so that a
// config and a pipeline spec say the same thing for the same mistake.
func YAMLProblem(file string, data []byte, err error) Problem {
	var le *yaml.LoadError
	if !errors.As(err, &le) {
		return Problem{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	msg := le.Message
	pos := Pos{Line: le.Mark.Line, Column: le.Mark.Column}
	hint := yamlHints[msg]
	if hint.atOpener && le.ContextMark.Line > 0 {
		pos = Pos{Line: le.ContextMark.Line, Column: le.ContextMark.Column}
	}
	switch {
	case le.Stage == yaml.ReaderStage:
		// The reader marks only the byte offset.
		if pos.Line == 0 {
			pos = offsetPos(data, le.Mark.Index)
		}
		hint.text = readerHint
	case yamlAnchorRE.MatchString(msg):
		name := yamlAnchorRE.FindStringSubmatch(msg)[1]
		msg = fmt.Sprintf("alias *%s refers to an anchor &%s that is not defined before it", name, name)
	}
	// A mark past the end (end of stream after the last line break) is
	// shown at the end of the last line.
	lines := bytes.Split(data, []byte("\n"))
	if pos.Line > len(lines) {
		last := bytes.TrimSuffix(lines[len(lines)-1], []byte("\r"))
		pos = Pos{Line: len(lines), Column: utf8.RuneCount(last) + 1}
	}
	if hint.text != "" {
		msg += " (" + hint.text + ")"
	}
	return Problem{File: file, Pos: pos, Msg: "invalid YAML: " + msg}
}

// offsetPos returns the line and column of byte offset i of data, or the
// zero Pos when i is out of range or data is not UTF-8 up to it (the
// reader's offsets count the bytes of the input as given, which for
// UTF-16 are not the bytes of the text).
func offsetPos(data []byte, i int) Pos {
	if i < 0 || i > len(data) || bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF}) {
		return Pos{}
	}
	before := data[:i]
	if !utf8.Valid(before) {
		return Pos{}
	}
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return Pos{Line: line, Column: col}
}
