package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, and returns either a Pipeline or an error
// that matches ErrInvalid (it does no I/O, so there is no other kind). An
// accepted spec must also satisfy the invariants consumers rely on.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("window: &w {tumbling: *w}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			if p != nil {
				t.Fatal("both a Pipeline and an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error is not a non-empty Problems: %T", err)
			}
			_ = err.Error()
			return
		}
		checkInvariants(t, p)
	})
}

// checkInvariants asserts what Parse promises about a valid Pipeline.
func checkInvariants(t *testing.T, p *Pipeline) {
	t.Helper()
	if p.Name == "" || p.Source.MQTT == nil || p.EventTime.Field == "" || len(p.Aggregates) == 0 || len(p.Outputs) == 0 {
		t.Fatalf("required field empty: %+v", p)
	}
	if q := p.Source.MQTT.QoS; q != 0 && q != 1 {
		t.Fatalf("qos %d", q)
	}
	w := p.Window
	switch w.Kind {
	case Tumbling:
		if w.Size <= 0 || w.Slide != w.Size {
			t.Fatalf("tumbling %+v", w)
		}
	case Sliding:
		if w.Size <= 0 || w.Slide <= 0 || w.Slide > w.Size || w.Slices() > MaxSlices {
			t.Fatalf("sliding %+v", w)
		}
	case Session:
		if w.Gap <= 0 {
			t.Fatalf("session %+v", w)
		}
	default:
		t.Fatalf("window kind %v", w.Kind)
	}
	if p.Watermark.MaxOutOfOrder < 0 || p.Watermark.IdleTimeout < 0 || p.AllowedLateness < 0 {
		t.Fatalf("negative duration: %+v %v", p.Watermark, p.AllowedLateness)
	}
	for _, c := range p.Compute {
		if _, err := ExprFields(c.Expr); err != nil {
			t.Fatalf("accepted compute %q: %v", c.Expr, err)
		}
	}
	for _, f := range p.Fields() {
		if err := checkPath(f); err != nil {
			t.Fatalf("Fields() returned %q: %v", f, err)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "1m30s", "2d", "1.5h", "-5s", "1000us", "1.5ms", ".5s", "5", "1e3s", "µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		// What parses round-trips through String.
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %d; String %q parses to %d, %v", s, d, d.String(), back, err)
		}
	})
}

func FuzzExprFields(f *testing.F) {
	for _, s := range []string{"temp > 1", "a.b[c].d", "let x = a; x", "all(xs, .v > #)", "$env.x", "f(x)", `{a: b}["a"]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		fields, err := ExprFields(src)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, f := range fields {
			if f == "" || seen[f] {
				t.Fatalf("ExprFields(%q) = %q: empty or repeated field", src, fields)
			}
			seen[f] = true
		}
	})
}

// FuzzParseValues keeps the shape of a valid spec and fuzzes its values, so
// that the fuzzer spends its time past the YAML syntax, in the checks, and
// accepted specs are checked against the invariants.
func FuzzParseValues(f *testing.F) {
	f.Add("plant/+/temp", int64(1), "ts", "device", "temp > 0", "10m", "1m", "quantile(temp, 0.95)", "x * 2")
	f.Add("a/#", int64(2), "a..b", "", "", "0", "-1s", "mean(x)", "foo(")
	f.Add("+/+", int64(0), "t", "k", "k != ''", "1d", "7s", "count()", "$env.v")
	f.Fuzz(func(t *testing.T, topic string, level int64, tsField, key, filter, size, slide, agg, comp string) {
		q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
		spec := fmt.Sprintf(`name: fz
source: {mqtt: {topic: %s, topic_fields: {lvl: %d}}}
event_time: {field: %s}
key: [%s]
compute: {c: %s}
filter: %s
window: {sliding: {size: %s, slide: %s}}
aggregates: {a: %s, b: count(c)}
`, q(topic), level, q(tsField), q(key), q(comp), q(filter), q(size), q(slide), q(agg))
		p, err := Parse("fz.yaml", []byte(spec))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			return
		}
		checkInvariants(t, p)
	})
}
