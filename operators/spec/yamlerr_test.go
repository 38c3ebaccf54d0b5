package spec

import (
	"errors"
	"testing"
)

// TestYAMLSyntaxPositions: every YAML syntax error is reported at a line
// and a column, at the spot a user has to fix: the opening quote or
// bracket of one that is not closed, otherwise the character the YAML
// library stopped at.
func TestYAMLSyntaxPositions(t *testing.T) {
	const head = "name: line-temps\nsource: {mqtt: {topic: \"plant/+/temp\"}}\n"
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"unclosed double quote", head + "event_time: {field: \"ts}\nwindow: {tumbling: 1m}\n",
			`p.yaml:3:21: invalid YAML: found unexpected end of stream (a quote is not closed)`},
		{"unclosed single quote", head + "filter: 'temp > 1\n",
			`p.yaml:3:9: invalid YAML: found unexpected end of stream (a quote is not closed)`},
		{"bad indentation", "name: line-temps\nsource:\n  mqtt:\n    topic: x\n   qos: 1\n",
			`p.yaml:5:4: invalid YAML: did not find expected key (check the indentation of this line)`},
		{"tab indenting a key", "name: line-temps\nsource:\n\tmqtt: {topic: x}\n",
			"p.yaml:3:1: invalid YAML: found character that cannot start any token (a value starts with a character YAML reserves (such as @, ` or a tab); quote the value, and indent with spaces)"},
		{"tab after a value", "name: line-temps\n\tsource: x\n",
			`p.yaml:2:1: invalid YAML: found a tab character that violates indentation (indent with spaces, not tabs)`},
		{"unclosed [", head + "key: [device, site\nwindow: {tumbling: 1m}\n",
			`p.yaml:3:6: invalid YAML: did not find expected ',' or ']' (a [ list is not closed)`},
		{"unclosed [ at the end", head + "key: [device",
			`p.yaml:3:6: invalid YAML: did not find expected ',' or ']' (a [ list is not closed)`},
		{"unclosed {", head + "window: {tumbling: 1m\naggregates: {n: count()}\n",
			`p.yaml:3:9: invalid YAML: did not find expected ',' or '}' (a { mapping is not closed)`},
		{"value with \": \"", head + "filter: site == \"a\": b\n",
			`p.yaml:3:20: invalid YAML: mapping values are not allowed in this context (a value contains ": "; quote it, or check the indentation)`},
		{"value with \": \" on line 1", "name: a: b\n",
			`p.yaml:1:8: invalid YAML: mapping values are not allowed in this context (a value contains ": "; quote it, or check the indentation)`},
		{"columns count characters", "name: \"née\" x\n",
			`p.yaml:1:13: invalid YAML: did not find expected key (check the indentation of this line)`},
		{"unknown escape", head + "filter: \"a \\q\"\n",
			`p.yaml:3:12: invalid YAML: found unknown escape character (in double quotes, \ starts an escape; use single quotes or write \\)`},
		{"list and mapping mixed", "key:\n  - device\n  site: x\n",
			`p.yaml:3:3: invalid YAML: did not find expected '-' indicator (the items of a list start with - at the same indentation)`},
		{"unknown alias", head + "outputs: [*hub]\n",
			`p.yaml:3:11: invalid YAML: alias *hub refers to an anchor &hub that is not defined before it`},
		{"control character", head + "name: a\x01b\n",
			`p.yaml:3:8: invalid YAML: control characters are not allowed (value: 1) (is this a text file, saved as UTF-8?)`},
		{"not UTF-8", head + "name: a\xffb\n",
			`p.yaml:3:8: invalid YAML: invalid leading UTF-8 octet (value: 255) (is this a text file, saved as UTF-8?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.spec))
			var ps Problems
			if !errors.As(err, &ps) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want Problems", err)
			}
			if len(ps) != 1 || ps[0].Error() != tc.want {
				t.Errorf("got\n  %v\nwant\n  %s", err, tc.want)
			}
			if ps[0].Pos.Column == 0 {
				t.Errorf("no column: %v", ps[0])
			}
		})
	}
}
