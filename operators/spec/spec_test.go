package spec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// example is the spec from the design brief, verbatim.
const example = `name: line-temps
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
format: json
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 5s, idle_timeout: 30s}
filter: "temp > -40 && temp < 150"
window: {tumbling: 1m}            # or {sliding: {size: 10m, slide: 1m}} or {session: {gap: 30s}}
allowed_lateness: 30s
aggregates:
  readings: count()
  avg_temp: avg(temp)
  max_temp: max(temp)
  p95_temp: quantile(temp, 0.95)
  devices_seen: distinct(device)
`

func TestParseExample(t *testing.T) {
	got, err := Parse("line-temps.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	want := &Pipeline{
		File:      "line-temps.yaml",
		Name:      "line-temps",
		Source:    Source{MQTT: &MQTTSource{Topic: "plant/+/temp", QoS: 1}},
		Format:    "json",
		EventTime: EventTime{Field: "ts", Unit: UnitMS, MaxFuture: DefaultMaxFuture},
		Key:       []string{"device"},
		Watermark: Watermark{MaxOutOfOrder: 5000, IdleTimeout: 30000},
		Filter:    "temp > -40 && temp < 150",
		FilterPos: Pos{7, 9},
		Window:    Window{Kind: Tumbling, Size: 60000, Slide: 60000},

		AllowedLateness: 30000,
		Aggregates: []Aggregate{
			{Name: "readings", Func: "count", Pos: Pos{11, 13}},
			{Name: "avg_temp", Func: "avg", Args: []string{"temp"}, Pos: Pos{12, 13}},
			{Name: "max_temp", Func: "max", Args: []string{"temp"}, Pos: Pos{13, 13}},
			{Name: "p95_temp", Func: "quantile", Args: []string{"temp", "0.95"}, Quantile: 0.95, Pos: Pos{14, 13}},
			{Name: "devices_seen", Func: "distinct", Args: []string{"device"}, Pos: Pos{15, 17}},
		},
		Outputs: []Output{{Kind: OutputHub}},
	}
	// Positions of every field are checked by TestWhere; the rest of the
	// struct must match exactly, defaults included.
	gotPos := got.pos
	got.pos = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(example):\n got %#v\nwant %#v", got, want)
		if !reflect.DeepEqual(got.Source.MQTT, want.Source.MQTT) {
			t.Errorf("source: got %#v, want %#v", got.Source.MQTT, want.Source.MQTT)
		}
	}
	if len(gotPos) == 0 {
		t.Error("no positions recorded")
	}
	if got, want := got.Fields(), []string{"ts", "device", "temp"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Fields() = %q, want %q", got, want)
	}
}

func TestWhere(t *testing.T) {
	p, err := Parse("x.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		want  Pos
	}{
		{"name", Pos{1, 7}},
		{"source.mqtt.topic", Pos{2, 24}},
		{"source.mqtt.qos", Pos{2, 45}},
		{"key[0]", Pos{5, 7}},
		{"watermark.idle_timeout", Pos{6, 49}},
		{"window.tumbling", Pos{8, 20}},
		{"aggregates.p95_temp", Pos{14, 13}},
		{"aggregates", Pos{11, 3}},
		{"event_time.unit", Pos{4, 31}},
		// Not written: the nearest written parent.
		{"source.mqtt.topic_fields", Pos{2, 16}},
		{"window.sliding.size", Pos{8, 9}},
		{"outputs[0]", Pos{1, 1}},
		{"nonsense", Pos{1, 1}},
	} {
		if got := p.Where(tc.field); got != tc.want {
			t.Errorf("Where(%q) = %v, want %v", tc.field, got, tc.want)
		}
	}
	if got := (&Pipeline{}).Where("name"); !got.IsZero() {
		t.Errorf("Where on a built Pipeline = %v, want zero", got)
	}
}

func TestProblemFormat(t *testing.T) {
	p := &Pipeline{File: "a.yaml"}
	for _, tc := range []struct {
		pr   Problem
		want string
	}{
		{p.Problemf(Pos{3, 5}, "window.sliding.slide", "bad %s", "slide"), "a.yaml:3:5: window.sliding.slide: bad slide"},
		{p.Problemf(Pos{3, 0}, "", "invalid YAML"), "a.yaml:3: invalid YAML"},
		{p.Problemf(Pos{}, "", "empty"), "a.yaml: empty"},
		{Problem{Pos: Pos{1, 2}, Field: "f", Msg: "m"}, "1:2: f: m"},
		{Problem{Msg: "m"}, "m"},
	} {
		if got := tc.pr.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.pr, ErrInvalid) {
			t.Errorf("%q does not match ErrInvalid", tc.want)
		}
	}
	ps := Problems{
		{File: "a", Pos: Pos{5, 1}, Msg: "third"},
		{File: "a", Pos: Pos{2, 9}, Msg: "second"},
		{File: "a", Msg: "first"},
		{File: "a", Pos: Pos{5, 1}, Msg: "fourth"},
	}
	want := "a: first\na:2:9: second\na:5:1: third\na:5:1: fourth"
	if got := ps.Error(); got != want {
		t.Errorf("Problems.Error() =\n%s\nwant\n%s", got, want)
	}
	if ps[0].Msg != "third" {
		t.Error("Error() reordered the receiver")
	}
	if err := (Problems{}).Err(); err != nil {
		t.Errorf("empty Problems.Err() = %v, want nil", err)
	}
}

func TestParseAllProblemsAtOnce(t *testing.T) {
	// One spec with a mistake in every section: each must be reported.
	spec := strings.Join([]string{
		"name: Bad Name",
		"source: {mqtt: {topic: a/#/b, qos: 2}}",
		"event_time: {field: ts, unit: sec}",
		"watermark: {max_out_of_order: -1s}",
		"filter: 'a >'",
		"window: {sliding: {size: 1m, slide: 2m}}",
		"allowed_lateness: 1.5ms",
		"aggregates: {a: mean(x), b: quantile(x)}",
		"outputs: [{mqtt: {topic: a/+}}]",
	}, "\n")
	_, err := Parse("bad.yaml", []byte(spec))
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("got %v, want Problems", err)
	}
	fields := map[string]bool{}
	for _, p := range ps {
		fields[p.Field] = true
	}
	for _, f := range []string{"name", "source.mqtt.topic", "source.mqtt.qos", "event_time.unit", "watermark.max_out_of_order",
		"filter", "window.sliding.slide", "allowed_lateness", "aggregates.a", "aggregates.b", "outputs[0].mqtt.topic"} {
		if !fields[f] {
			t.Errorf("no problem reported for %s; got:\n%v", f, err)
		}
	}
	if len(ps) != 11 {
		t.Errorf("got %d problems, want 11:\n%v", len(ps), err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil || p.File != path || p.Name != "line-temps" {
		t.Fatalf("Load = %+v, %v", p, err)
	}

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Errorf("Load(missing) = %v; want a not-exist error that is not ErrInvalid", err)
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#\n", MaxSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, want a size problem", err)
	}
}

func TestDefaults(t *testing.T) {
	p, err := Parse("min.yaml", []byte(`name: m
source: {mqtt: {topic: t}}
event_time: {field: ts}
window: {session: {gap: 30s}}
aggregates: {n: count()}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Format != "json" || p.EventTime.Unit != UnitMS || p.Source.MQTT.QoS != 1 ||
		p.Key != nil || p.EventID != nil || p.Watermark != (Watermark{}) || p.AllowedLateness != 0 ||
		p.Filter != "" || p.LateOutput != nil || p.DeadLetter != nil ||
		!reflect.DeepEqual(p.Outputs, []Output{{Kind: OutputHub}}) ||
		p.Window != (Window{Kind: Session, Gap: 30000}) {
		t.Errorf("defaults not applied: %+v", p)
	}
}

func TestAggregateParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Aggregate
		err  string // substring of the first problem; "" = valid
		off  int
	}{
		{in: "count()", want: Aggregate{Func: "count"}},
		{in: "  count (  ) ", want: Aggregate{Func: "count"}},
		{in: "count(device)", want: Aggregate{Func: "count", Args: []string{"device"}}},
		{in: "quantile(temp,0.5)", want: Aggregate{Func: "quantile", Args: []string{"temp", "0.5"}, Quantile: 0.5}},
		{in: "quantile( meta.temp ,  1 )", want: Aggregate{Func: "quantile", Args: []string{"meta.temp", "1"}, Quantile: 1}},
		{in: "quantile(t, 0)", want: Aggregate{Func: "quantile", Args: []string{"t", "0"}}},
		{in: "quantile(t, 1e-3)", want: Aggregate{Func: "quantile", Args: []string{"t", "1e-3"}, Quantile: 0.001}},
		{in: "last(@ts)", want: Aggregate{Func: "last", Args: []string{"@ts"}}},
		{in: "", err: "expected a function call", off: 0},
		{in: "avg", err: "missing argument list", off: 3},
		{in: "avg[temp]", err: `expected "(" after avg`, off: 3},
		{in: "avg(temp", err: `missing ")"`, off: 3},
		{in: "avg(temp))", err: `unexpected ")"`, off: 9},
		{in: "avg(f(x))", err: "not expressions", off: 5},
		{in: "avg(,)", err: "argument 1 is empty", off: 4},
		{in: "avg(a b)", err: "character ' ' is not allowed", off: 4},
		{in: "AVG(x)", err: `did you mean "avg"?`, off: 0},
		{in: "quantile(x, 0.95, 1)", err: "quantile needs 2 arguments (field, q), got 3", off: 8},
		{in: "quantile(x, 99.9)", err: "did you mean 0.999?", off: 12},
		{in: "quantile(x, Inf)", err: "a number in [0, 1]", off: 12},
		{in: "count(a, b)", err: "count needs 0 or 1 arguments", off: 5},
	} {
		got, errs := parseAggregate(tc.in)
		switch {
		case tc.err == "" && len(errs) > 0:
			t.Errorf("parseAggregate(%q): unexpected %v", tc.in, errs)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("parseAggregate(%q) = %+v, want %+v", tc.in, got, tc.want)
		case tc.err != "" && len(errs) == 0:
			t.Errorf("parseAggregate(%q) = %+v, want error %q", tc.in, got, tc.err)
		case tc.err != "" && (!strings.Contains(errs[0].msg, tc.err) || errs[0].off != tc.off):
			t.Errorf("parseAggregate(%q): got %q at %d, want %q at %d", tc.in, errs[0].msg, errs[0].off, tc.err, tc.off)
		}
	}
}

func TestTopics(t *testing.T) {
	for _, tc := range []struct {
		topic  string
		filter bool // valid as a subscription filter
		name   bool // valid to publish to
	}{
		{"a/b/c", true, true},
		{"a/+/c", true, false},
		{"+", true, false},
		{"#", true, false},
		{"a/#", true, false},
		{"+/+/#", true, false},
		{"a//b", true, true},
		{"/a", true, true},
		{"$SYS/broker/#", true, false},
		{"a/#/c", false, false},
		{"a/b#", false, false},
		{"a/b+/c", false, false},
		{"a+", false, false},
		{"", false, false},
		{"a\x00b", false, false},
		{"a/\xff", false, false},
		{strings.Repeat("a", maxTopicLen+1), false, false},
	} {
		_, err := checkTopicFilter(tc.topic)
		if (err == nil) != tc.filter {
			t.Errorf("checkTopicFilter(%.20q) = %v, want valid=%v", tc.topic, err, tc.filter)
		}
		err = checkTopicName(tc.topic)
		if (err == nil) != tc.name {
			t.Errorf("checkTopicName(%.20q) = %v, want valid=%v", tc.topic, err, tc.name)
		}
	}
}

func TestTopicMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+", "a", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"+/b", "a/b", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a//b", "a//b", true},
		{"a/+/b", "a//b", true},
	} {
		levels, err := checkTopicFilter(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got := topicMatches(levels, tc.topic); got != tc.want {
			t.Errorf("topicMatches(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"name", "source", "filter", "window", "aggregates", "qos", "topic", "event_time"}
	for _, tc := range []struct{ in, want string }{
		{"filtr", "filter"},
		{"Window", "window"},
		{"qso", "qos"},
		{"aggregate", "aggregates"},
		{"eventtime", "event_time"},
		{"topc", "topic"},
		{"foo", ""},
		{"colour", ""},
		{"x", ""},
	} {
		if got := suggest(tc.in, known); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLimits(t *testing.T) {
	// A flood of problems is cut at maxProblems, with a note.
	flood := "aggregates:\n" + strings.Repeat("  a: count()\n", 3*maxProblems)
	_, err := Parse("flood.yaml", []byte(flood))
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != maxProblems+1 || !strings.Contains(ps[0].Msg, "more not shown") {
		t.Errorf("got %d problems, want %d with a note first", len(ps), maxProblems+1)
	}
	// Runaway values are refused quickly, not compiled.
	long := example + "compute: {x: \"" + strings.Repeat("a + ", MaxExprLen) + "a\"}\n"
	if _, err := Parse("long.yaml", []byte(long)); err == nil || !strings.Contains(err.Error(), "at most 4096 are allowed") {
		t.Errorf("long expression: got %v", err)
	}
	if _, err := ParseDuration(strings.Repeat("1", 100) + "s"); err == nil {
		t.Error("100-digit duration accepted")
	}
}
