package spec

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

var (
	// pipelineNameRE: pipeline names appear in file names, metric labels,
	// MQTT topics and URLs, so they are kept to a safe alphabet.
	pipelineNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	// nameRE is for names that expressions and outputs refer to: aggregate
	// outputs, computed fields and topic fields.
	nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

const maxNameLen = 64

// checkPath checks a field path: dot-separated object keys, each non-empty
// and made of letters, digits, '_', '-', '@' or '$'. The alphabet keeps
// paths unambiguous inside aggregate calls and lists; a payload key outside
// it cannot be addressed (see Caveats in doc.go).
func checkPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty field path")
	}
	for i, seg := range strings.Split(p, ".") {
		if seg == "" {
			return fmt.Errorf("field path %q has an empty part at position %d (write a.b, not a..b, .a or a.)", p, i+1)
		}
		if r, ok := badSegmentRune(seg); ok {
			return fmt.Errorf("field path %q: character %q is not allowed (use letters, digits, _, -, @, $ and . between parts)", p, r)
		}
	}
	return nil
}

// badSegmentRune returns the first character of seg that a path segment
// cannot hold. Letters and digits include non-ASCII ones (température),
// as payload keys and expr-lang identifiers do.
func badSegmentRune(seg string) (rune, bool) {
	for _, r := range seg {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '@' || r == '$') {
			return r, true
		}
	}
	return 0, false
}

// rootOf returns the first segment of a field path.
func rootOf(path string) string {
	root, _, _ := strings.Cut(path, ".")
	return root
}

// Fields returns every record field the pipeline reads from the payload, each
// once, in a stable order: the event time field, key fields, event_id fields,
// then fields used by compute expressions (in order), the filter, and
// aggregate arguments (in order). Computed fields and topic fields, and paths
// below them, are left out: they do not come from the payload. The decoder
// extracts exactly these and nothing else.
func (p *Pipeline) Fields() []string {
	skip := make(map[string]bool)
	for _, c := range p.Compute {
		skip[c.Name] = true
	}
	if p.Source.MQTT != nil {
		for _, tf := range p.Source.MQTT.TopicFields {
			skip[tf.Name] = true
		}
	}
	seen := make(map[string]bool)
	var out []string
	add := func(paths ...string) {
		for _, f := range paths {
			if f != "" && !seen[f] && !skip[rootOf(f)] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	add(p.EventTime.Field)
	add(p.Key...)
	add(p.EventID...)
	for _, c := range p.Compute {
		fs, _ := ExprFields(c.Expr) // a parsed Pipeline's expressions are valid
		add(fs...)
	}
	if p.Filter != "" {
		fs, _ := ExprFields(p.Filter)
		add(fs...)
	}
	for _, a := range p.Aggregates {
		if len(a.Args) > 0 {
			add(a.Args[0])
		}
	}
	return out
}
