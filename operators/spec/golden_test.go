package spec

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestBadSpecs is datadriven: every testdata/bad/NAME.yaml is a spec with
// one or more mistakes, and NAME.golden holds the exact problem list Parse
// must return for it (Problems.Error(), one problem per line). Run with
// -update to rewrite the goldens after a deliberate message change, then
// read the diff.
func TestBadSpecs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad specs found: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(filepath.Base(f), data)
			if err == nil {
				t.Fatalf("Parse accepted a bad spec: %+v", p)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid: %v", err)
			}
			var probs Problems
			if !errors.As(err, &probs) || len(probs) == 0 {
				t.Fatalf("error is not Problems: %T %v", err, err)
			}
			checkGolden(t, strings.TrimSuffix(f, ".yaml")+".golden", err.Error()+"\n")
		})
	}
}

// TestGoodSpecs parses every testdata/good/NAME.yaml and compares a dump of
// the Pipeline (every field, with defaults filled in) and its Fields() with
// NAME.golden.
func TestGoodSpecs(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good specs found: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			p, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			checkGolden(t, strings.TrimSuffix(f, ".yaml")+".golden", dump(p))
		})
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("mismatch with %s (go test -update rewrites it)\n--- got:\n%s--- want:\n%s", path, got, want)
	}
}

// dump renders a Pipeline one field per line, for goldens and eyes.
func dump(p *Pipeline) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("name: %s", p.Name)
	if m := p.Source.MQTT; m != nil {
		w("source.mqtt: topic=%q qos=%d topic_fields=%v", m.Topic, m.QoS, m.TopicFields)
	}
	w("format: %s", p.Format)
	w("event_time: field=%s unit=%s", p.EventTime.Field, p.EventTime.Unit)
	w("event_id: %q", p.EventID)
	w("key: %q", p.Key)
	w("watermark: max_out_of_order=%s idle_timeout=%s", p.Watermark.MaxOutOfOrder, p.Watermark.IdleTimeout)
	for _, c := range p.Compute {
		w("compute %s @%s: %q", c.Name, c.Pos, c.Expr)
	}
	w("filter @%s: %q", p.FilterPos, p.Filter)
	w("window: kind=%s size=%s slide=%s gap=%s slices=%d", p.Window.Kind, p.Window.Size, p.Window.Slide, p.Window.Gap, p.Window.Slices())
	w("allowed_lateness: %s", p.AllowedLateness)
	for _, a := range p.Aggregates {
		w("aggregate %s @%s: %s%q q=%g", a.Name, a.Pos, a.Func, a.Args, a.Quantile)
	}
	for _, o := range p.Outputs {
		w("output: %+v", o)
	}
	if p.LateOutput != nil {
		w("late_output: %+v", *p.LateOutput)
	}
	if p.DeadLetter != nil {
		w("dead_letter: %+v", *p.DeadLetter)
	}
	w("fields: %q", p.Fields())
	return b.String()
}
