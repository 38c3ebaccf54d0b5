package spec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestExprFields(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
		err  string // substring; "" = valid
	}{
		{src: "temp > -40 && temp < 150", want: []string{"temp"}},
		{src: "meta.device == 'a' && meta.site.name != b", want: []string{"meta.device", "meta.site.name", "b"}},
		{src: `meta["device"] + x`, want: []string{"meta.device", "x"}},
		{src: "a?.b?.c", want: []string{"a.b.c"}},
		{src: "a[0].b + c[i]", want: []string{"a", "c", "i"}},
		{src: `a["x.y"]`, want: []string{"a"}},
		{src: "a[1:n]", want: []string{"a", "n"}},
		{src: "$env.temp > 1 && $env.meta.x", want: []string{"temp", "meta.x"}},
		{src: "let x = temp * 2; x > limit", want: []string{"temp", "limit"}},
		{src: "let x = 1; let y = x + a; y + x", want: []string{"a"}},
		{src: "all(readings, .v > lim) && any(tags, # == 'hot')", want: []string{"readings", "lim", "tags"}},
		{src: "reduce(xs, #acc + #, 0)", want: []string{"xs"}},
		{src: "len(name) > 3 && upper(site) == 'A' && abs(t) < 1", want: []string{"name", "site", "t"}},
		{src: "count(items, .ok) > n", want: []string{"items", "n"}},
		{src: "x ? y : z", want: []string{"x", "y", "z"}},
		{src: "if x { y } else { z }", want: []string{"x", "y", "z"}},
		{src: "{k: v, (kk): 1}.k", want: []string{"v", "kk"}},
		{src: "[a, b, a]", want: []string{"a", "b"}},
		{src: "b | filter(# > a)", want: []string{"b", "a"}},
		{src: "temp in [1, 2] and not hot", want: []string{"temp", "hot"}},
		{src: `name matches "^a" || name startsWith "b"`, want: []string{"name"}},
		{src: "1 + 2", want: []string{}},
		{src: "temp >", err: "unexpected token EOF"},
		{src: "foo(x)", err: "unknown function foo"},
		{src: "a.b()", err: "method calls are not supported"},
		{src: "now() - ts > 1000", err: "now() reads the wall clock"},
		{src: "$env", err: "$env must be followed by a field name"},
		{src: "$env[k]", err: "$env must be followed by a field name"},
	} {
		got, err := ExprFields(tc.src)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ExprFields(%q): %v", tc.src, err)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("ExprFields(%q) = %q, want %q", tc.src, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ExprFields(%q) = %q, %v; want error %q", tc.src, got, err, tc.err)
		case tc.err != "" && !errors.Is(err, ErrInvalid):
			t.Errorf("ExprFields(%q) error %v does not match ErrInvalid", tc.src, err)
		}
	}
}

func TestExprErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		src       string
		line, col int
	}{
		{"temp >> 3", 1, 7},
		{"a +\n  * b", 2, 3},
		{"ok && foo(x)", 1, 7},
	} {
		_, err := checkExpr(tc.src, false)
		var ee *ExprError
		if !errors.As(err, &ee) || ee.Line != tc.line || ee.Column != tc.col {
			t.Errorf("checkExpr(%q) = %v; want position %d:%d", tc.src, err, tc.line, tc.col)
		}
	}
}

// TestPositionsCRLF checks that positions inside values hold for files
// written on Windows.
func TestPositionsCRLF(t *testing.T) {
	spec := strings.ReplaceAll(example, "\n", "\r\n")
	spec = strings.Replace(spec, `"temp > -40 && temp < 150"`, `"temp > -40 &&& temp"`, 1)
	_, err := Parse("crlf.yaml", []byte(spec))
	want := `crlf.yaml:7:23: filter: invalid expression: unexpected token Operator("&")`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestFieldsExcludesComputedAndTopicFields(t *testing.T) {
	p, err := Parse("f.yaml", []byte(`name: f
source: {mqtt: {topic: "s/+/t", topic_fields: {site: 1}}}
event_time: {field: meta.ts, unit: rfc3339}
event_id: [dev, seq]
key: [site, dev]
compute:
  f: c * 1.8 + 32
  hot: f > limit.hi && site != "x"
  o: "{a: 1}"
filter: hot || o.a > 0 || meta.force
window: {tumbling: 1m}
aggregates:
  n: count()
  nf: count(f)
  m: max(c)
  s: distinct(site)
  q: quantile(meta.raw, 0.5)
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"meta.ts", "dev", "seq", "c", "limit.hi", "meta.force", "meta.raw"}
	if got := p.Fields(); !reflect.DeepEqual(got, want) {
		t.Errorf("Fields() = %q, want %q", got, want)
	}
}

func TestExprFieldsUnusualNames(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
		err  string
	}{
		{src: "température > 1", want: []string{"température"}},
		{src: `meta["some key"] == 1`, want: []string{"meta"}},
		{src: `meta["a-b"] == 1`, want: []string{"meta.a-b"}},
		{src: `$env["a b"]`, err: "$env must be followed by a field name"},
	} {
		got, err := ExprFields(tc.src)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ExprFields(%q) = %q, %v; want error %q", tc.src, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ExprFields(%q) = %q, %v; want %q", tc.src, got, err, tc.want)
		}
		for _, f := range got {
			if err := checkPath(f); err != nil {
				t.Errorf("ExprFields(%q) returned %q, which is not a valid path: %v", tc.src, f, err)
			}
		}
	}
}
