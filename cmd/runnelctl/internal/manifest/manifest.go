package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v4"

	"github.com/runnel-io/runnel/internal/typo"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// MaxSize is the largest manifest file Decode reads: many pipeline specs
// (each at most spec.MaxSize) and deployments. Past it the file is not a
// manifest someone wrote.
const MaxSize = 8 << 20

// maxProblems bounds the problems of one Decode; past it the list buries
// what matters.
const maxProblems = 100

// Pipeline is a pipeline document: a plain spec file, or kind: Pipeline.
type Pipeline struct {
	// Name is the spec's name.
	Name string
	// File is the file as named in problems and sent to the hub.
	File string
	// Pos is where the spec starts: the document, or the value of spec:.
	Pos spec.Pos
	// Spec is the text to send (ApplyPipelineRequest.spec): each line and
	// column is the file's, the lines before the spec empty.
	Spec []byte
	// Plain is true for a document without kind (a spec file as an edge
	// reads it).
	Plain bool

	node *yaml.Node // the spec mapping, for Encode
}

// Deployment is a kind: Deployment document.
type Deployment struct {
	// File and Pos name the document in messages.
	File string
	Pos  spec.Pos
	// Spec is what ApplyDeploymentRequest sends.
	Spec *runnelv1.DeploymentSpec
}

// Manifest is the documents of one or more files, in file order.
type Manifest struct {
	Pipelines   []*Pipeline
	Deployments []*Deployment
}

// Kinds of document.
const (
	KindDeployment = "Deployment"
	KindPipeline   = "Pipeline"
)

var kinds = []string{KindDeployment, KindPipeline}

// Decode decodes the manifest file named file holding data. When any
// document has a problem it returns nil and spec.Problems listing every
// problem of the file (errors.Is(err, spec.ErrInvalid)).
func Decode(file string, data []byte) (*Manifest, error) {
	d := &decoder{file: file, m: &Manifest{}}
	if len(data) > MaxSize {
		d.probs = append(d.probs, spec.Problem{File: file, Msg: fmt.Sprintf("larger than %d bytes; is this a manifest?", MaxSize)})
		return nil, d.probs.Err()
	}
	for _, c := range splitDocuments(data) {
		d.document(c)
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	if err := Merge(d.m); err != nil { // names defined twice in the file
		return nil, err
	}
	return d.m, nil
}

// Merge appends the documents of ms[1:] to ms[0], in order, and checks
// the names across them: a pipeline or deployment defined twice is a
// problem at its second definition. On a problem ms[0] is unchanged.
func Merge(ms ...*Manifest) error {
	if len(ms) == 0 {
		return nil
	}
	var all Manifest
	for _, m := range ms {
		all.Pipelines = append(all.Pipelines, m.Pipelines...)
		all.Deployments = append(all.Deployments, m.Deployments...)
	}
	var probs spec.Problems
	seen := map[string]*Pipeline{}
	for _, p := range all.Pipelines {
		if first := seen[p.Name]; first != nil {
			probs = append(probs, spec.Problem{File: p.File, Pos: p.Pos, Field: "name",
				Msg: fmt.Sprintf("pipeline %s is also defined at %s; a manifest defines each pipeline once", p.Name, where(first.File, first.Pos))})
			continue
		}
		seen[p.Name] = p
	}
	seenD := map[string]*Deployment{}
	for _, dep := range all.Deployments {
		if first := seenD[dep.Spec.Name]; first != nil {
			probs = append(probs, spec.Problem{File: dep.File, Pos: dep.Pos, Field: "name",
				Msg: fmt.Sprintf("deployment %s is also defined at %s; a manifest defines each deployment once", dep.Spec.Name, where(first.File, first.Pos))})
			continue
		}
		seenD[dep.Spec.Name] = dep
	}
	if err := probs.Err(); err != nil {
		return err
	}
	*ms[0] = all
	return nil
}

func where(file string, pos spec.Pos) string {
	if pos.IsZero() {
		return file
	}
	return file + ":" + pos.String()
}

// decoder collects the documents and problems of one file.
type decoder struct {
	file    string
	m       *Manifest
	probs   spec.Problems
	dropped int
}

func (d *decoder) add(p spec.Problem) {
	if len(d.probs) >= maxProblems {
		d.dropped++
		return
	}
	d.probs = append(d.probs, p)
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	d.add(spec.Problem{File: d.file, Pos: pos(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) err() error {
	if d.dropped > 0 {
		d.probs = append(d.probs, spec.Problem{File: d.file, Msg: fmt.Sprintf("showing the first %d problems; %d more not shown", maxProblems, d.dropped)})
	}
	return d.probs.Err()
}

func pos(n *yaml.Node) spec.Pos {
	if n == nil {
		return spec.Pos{}
	}
	return spec.Pos{Line: n.Line, Column: n.Column}
}

// document decodes one chunk.
func (d *decoder) document(c chunk) {
	text := c.text()
	root, ok := d.parse(text)
	if !ok || root == nil || isNull(root) {
		return // broken YAML (reported), or an empty document
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a document is a mapping: kind: Deployment, kind: Pipeline, or a pipeline spec (name, source, ...); got %s", kindName(root))
		return
	}
	var kindNode *yaml.Node
	hasName, hasSource := false, false
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if k.Kind != yaml.ScalarNode {
			continue
		}
		switch k.Value {
		case "kind":
			kindNode = resolve(root.Content[i+1])
		case "name":
			hasName = true
		case "source":
			hasSource = true
		}
	}
	switch {
	case kindNode == nil && hasName && hasSource:
		d.plain(root, text)
	case kindNode == nil:
		d.errorf(root, "", "no kind: a document is kind: Deployment, kind: Pipeline (with spec:), or a pipeline spec with name and source")
	case kindNode.Kind != yaml.ScalarNode || isNull(kindNode):
		d.errorf(kindNode, "kind", "expected Deployment or Pipeline, got %s", kindName(kindNode))
	case kindNode.Value == KindDeployment:
		d.deployment(root)
	case kindNode.Value == KindPipeline:
		d.wrapper(root, c, text)
	default:
		hint := ""
		if s := typo.Suggest(kindNode.Value, kinds); s != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", s)
		}
		d.errorf(kindNode, "kind", "unknown kind %q%s; runnelctl applies Deployment and Pipeline", kindNode.Value, hint)
	}
}

// parse parses text, one YAML document, and returns its root, or nil for
// an empty one. ok is false when the YAML is broken (reported).
func (d *decoder) parse(text []byte) (root *yaml.Node, ok bool) {
	dec, err := yaml.NewLoader(bytes.NewReader(text))
	if err != nil {
		d.add(spec.YAMLProblem(d.file, text, err))
		return nil, false
	}
	var doc yaml.Node
	switch err := load(dec, &doc); {
	case errors.Is(err, io.EOF):
		return nil, true
	case err != nil:
		d.add(spec.YAMLProblem(d.file, text, err))
		return nil, false
	}
	var next yaml.Node
	switch err := load(dec, &next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.add(spec.YAMLProblem(d.file, text, err))
		return nil, false
	default:
		// The split cuts at every marker, so this is a document the
		// splitter did not see start; say so rather than drop it.
		d.errorf(&next, "", "a second YAML document starts here without a --- line of its own")
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, true
	}
	return resolve(doc.Content[0]), true
}

// load is dec.Load with a panic of the YAML library turned into an error:
// a bad manifest is refused, never a crash.
func load(dec *yaml.Loader, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return dec.Load(n)
}

// plain takes a document without kind as a pipeline spec file.
func (d *decoder) plain(root *yaml.Node, text []byte) {
	d.pipeline(&Pipeline{File: d.file, Pos: pos(root), Spec: text, Plain: true, node: root})
}

// pipeline checks p.Spec as an edge would and records p.
func (d *decoder) pipeline(p *Pipeline) {
	parsed, err := spec.Parse(d.file, p.Spec)
	if err != nil {
		var ps spec.Problems
		if errors.As(err, &ps) {
			for _, pr := range ps {
				d.add(pr)
			}
			return
		}
		d.add(spec.Problem{File: d.file, Pos: p.Pos, Msg: err.Error()})
		return
	}
	p.Name = parsed.Name
	d.m.Pipelines = append(d.m.Pipelines, p)
}

var wrapperFields = []string{"kind", "spec"}

// wrapper decodes kind: Pipeline. The spec is sent as the file's own text
// from where the spec: value starts to the line before the next field (or
// the end of the document), the text before it on its first line turned
// into spaces; the text is accepted only if it parses to the very nodes,
// at the very positions, of the spec: value.
func (d *decoder) wrapper(root *yaml.Node, c chunk, text []byte) {
	m, ok := d.fields(root, "", wrapperFields)
	if !ok {
		return
	}
	e, ok := m["spec"]
	if !ok {
		d.errorf(root, "", "kind: Pipeline needs spec:, the pipeline spec as a mapping (spec: {name: line-temps, source: ...})")
		return
	}
	sn := e.val
	if sn.Kind != yaml.MappingNode {
		d.errorf(sn, "spec", "expected the pipeline spec as a mapping (name, source, event_time, ...), got %s", kindName(sn))
		return
	}
	end := c.last()
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Line > e.key.Line && k.Line-1 < end {
			end = k.Line - 1
		}
	}
	sub, ok := cut(text, sn.Line, sn.Column, end)
	if ok {
		r, okParse := parseQuiet(sub)
		ok = okParse && sameTree(r, sn, 0)
	}
	if !ok {
		d.errorf(sn, "spec", "cannot be sent with the file's line numbers: it shares a line with another field, or uses an anchor defined outside it; write spec: as a block mapping of its own lines")
		return
	}
	d.pipeline(&Pipeline{File: d.file, Pos: pos(sn), Spec: sub, node: sn})
}

// cut returns text's lines line..end (1-based), those before it empty and
// the first one's characters before col turned into spaces.
func cut(text []byte, line, col, end int) ([]byte, bool) {
	if line < 1 || col < 1 || end < line {
		return nil, false
	}
	lines := bytes.SplitAfter(text, []byte("\n"))
	if end > len(lines) {
		end = len(lines)
	}
	if line > end {
		return nil, false
	}
	var b bytes.Buffer
	for range line - 1 {
		b.WriteByte('\n')
	}
	first := lines[line-1]
	off := 0
	for range col - 1 {
		if off >= len(first) {
			return nil, false
		}
		_, size := utf8.DecodeRune(first[off:])
		off += size
	}
	b.WriteString(strings.Repeat(" ", col-1))
	b.Write(first[off:])
	for _, l := range lines[line:end] {
		b.Write(l)
	}
	return b.Bytes(), true
}

// parseQuiet parses text as one YAML document, reporting nothing.
func parseQuiet(text []byte) (*yaml.Node, bool) {
	q := &decoder{m: &Manifest{}}
	r, ok := q.parse(text)
	return r, ok && r != nil && len(q.probs) == 0
}

// sameTree reports whether a and b are the same YAML: kinds, tags,
// values, styles and positions, all the way down.
func sameTree(a, b *yaml.Node, depth int) bool {
	if depth > 10000 {
		return false
	}
	if a.Kind != b.Kind || a.Tag != b.Tag || a.Value != b.Value || a.Anchor != b.Anchor ||
		a.Line != b.Line || a.Column != b.Column || a.Style != b.Style || len(a.Content) != len(b.Content) {
		return false
	}
	for i := range a.Content {
		if !sameTree(a.Content[i], b.Content[i], depth+1) {
			return false
		}
	}
	return true
}

// field is one field of a mapping: its key node and its value, with
// aliases resolved.
type field struct {
	key, val *yaml.Node
}

// fields decodes the mapping n of known fields; every unknown field,
// repeated field and key that is not a plain string is a problem. ok is
// false when n is not a mapping (reported).
func (d *decoder) fields(n *yaml.Node, prefix string, known []string) (map[string]field, bool) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, prefix, "expected a mapping of %s, got %s", strings.Join(known, ", "), kindName(n))
		return nil, false
	}
	m := map[string]field{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			d.errorf(k, prefix, "field names are plain strings, got %s", kindName(k))
			continue
		case k.ShortTag() == "!!merge":
			d.errorf(k, prefix, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		name := k.Value
		path := join(prefix, name)
		if first, dup := m[name]; dup {
			d.errorf(k, path, "set twice (first at line %d); YAML keeps only one, so remove the other", first.key.Line)
			continue
		}
		isKnown := false
		for _, f := range known {
			if f == name {
				isKnown = true
			}
		}
		if !isKnown {
			hint := ""
			if s := typo.Suggest(name, known); s != "" {
				hint = fmt.Sprintf("did you mean %q? ", s)
			}
			d.errorf(k, prefix, "unknown field %q (%sknown fields: %s)", name, hint, strings.Join(known, ", "))
			continue
		}
		m[name] = field{key: k, val: v}
	}
	return m, true
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// resolve follows aliases to the anchored node; the bound guards chains.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; i < 100 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// kindName describes a node's YAML type for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing (null)"
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return n.Value
		}
		return fmt.Sprintf("the string %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}
