package spec

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/expr-lang/expr/builtin"
	yaml "go.yaml.in/yaml/v4"
)

// MaxSize is the largest spec Parse and Load accept. Real specs are a few
// hundred bytes; the cap keeps a wrong file (a log, a binary) from costing
// seconds of YAML parsing at start-up.
const MaxSize = 1 << 20

// Load reads and parses the spec file at path. An unreadable file is an
// ordinary I/O error; an invalid spec is Problems (errors.Is(err,
// ErrInvalid)).
func Load(path string) (*Pipeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("spec: read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses and validates a pipeline spec. file names the spec in
// messages. When the spec is invalid the error is Problems listing every
// problem found, sorted by position; the Pipeline is then nil.
func Parse(file string, data []byte) (*Pipeline, error) {
	d := &decoder{file: file, data: data, p: &Pipeline{File: file, pos: map[string]Pos{}}}
	d.decode()
	if d.dropped > 0 {
		// Appended after the limit on purpose; it sorts first (no position).
		d.probs = append(d.probs, Problem{File: file, Msg: fmt.Sprintf("showing the first %d problems; %d more not shown", maxProblems, d.dropped)})
	}
	if err := d.probs.Err(); err != nil {
		return nil, err
	}
	return d.p, nil
}

// decoder walks the YAML node tree of one spec, filling in a Pipeline and
// collecting problems. It never stops at the first problem: each section is
// checked on its own, and a section that is broken is skipped (not
// guessed at) so one mistake produces one problem.
type decoder struct {
	file    string
	data    []byte
	lines   []string // data split into lines, for mapping columns inside scalars
	p       *Pipeline
	probs   Problems
	dropped int // problems past maxProblems

	// Nodes kept for the checks that span sections.
	computeNodes []*yaml.Node // value nodes, parallel to p.Compute
	aggNodes     []*yaml.Node // key nodes, parallel to p.Aggregates
	topicNodes   []*yaml.Node // key nodes, parallel to TopicFields
	sourceLevels []string     // the source's topic filter, if valid
}

// entry is one field of a mapping.
type entry struct {
	name     string
	key, val *yaml.Node // val has aliases resolved
}

// fieldMap is a decoded mapping of known fields, in spec order.
type fieldMap struct {
	list []entry
	// unknown counts the unknown fields (reported); guessed holds the
	// fields they were taken for ("did you mean"), so that a misspelt
	// required field is one problem, not also "required field is missing".
	unknown int
	guessed map[string]bool
}

func (m fieldMap) get(name string) *entry {
	for i := range m.list {
		if m.list[i].name == name {
			return &m.list[i]
		}
	}
	return nil
}

var topFields = []string{"name", "source", "format", "event_time", "event_id", "key", "watermark",
	"compute", "filter", "window", "allowed_lateness", "aggregates", "outputs", "late_output", "dead_letter"}

// examples of each required field, shown when it is missing or mistyped.
const (
	exName       = "name: line-temps"
	exSource     = `source: {mqtt: {topic: "plant/+/temp"}}`
	exEventTime  = "event_time: {field: ts, unit: ms}"
	exWindow     = "window: {tumbling: 1m}"
	exAggregates = "aggregates: {readings: count(), avg_temp: avg(temp)}"
)

func (d *decoder) decode() {
	if len(d.data) > MaxSize {
		d.probs = append(d.probs, Problem{File: d.file, Msg: fmt.Sprintf("spec is larger than %d bytes; is this the right file?", MaxSize)})
		return
	}
	root, ok := d.parseYAML()
	if !ok {
		return
	}
	if root == nil || isNull(root) {
		d.probs = append(d.probs, Problem{File: d.file, Msg: "spec is empty; it needs at least name, source, event_time, window and aggregates"})
		return
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a spec is a mapping of fields (name, source, event_time, window, aggregates, ...), got %s", kindName(root))
		return
	}
	m, ok := d.fields(root, "", topFields, "")
	if !ok {
		return
	}
	d.at("", root)
	p := d.p

	if e := d.required(root, m, "", "name", exName); e != nil {
		if s, ok := d.str(e.val, "name", exName); ok {
			p.Name = s
			switch {
			case len(s) > maxNameLen:
				d.errorf(e.val, "name", "%d characters long; at most %d are allowed", len(s), maxNameLen)
			case !pipelineNameRE.MatchString(s):
				d.errorf(e.val, "name", "%q is not a valid name: use lower-case letters, digits, _ and -, starting with a letter or digit (e.g. line-temps)", s)
			}
		}
	}
	if e := d.required(root, m, "", "source", exSource); e != nil {
		d.source(e.val)
	}
	p.Format = "json"
	if e := d.optional(m, "format"); e != nil {
		if s, ok := d.str(e.val, "format", "format: json"); ok && s != "json" {
			d.errorf(e.val, "format", "%q is not supported; only json for now", s)
		}
	}
	if e := d.required(root, m, "", "event_time", exEventTime); e != nil {
		d.eventTime(e.val)
	}
	if e := d.optional(m, "event_id"); e != nil {
		p.EventID = d.paths(e.val, "event_id")
		if len(p.EventID) == 0 && e.val.Kind == yaml.SequenceNode {
			d.errorf(e.val, "event_id", "empty list; list the fields that together identify a reading (e.g. [device, seq]), or leave event_id out")
		}
	}
	if e := d.optional(m, "key"); e != nil {
		p.Key = d.paths(e.val, "key")
	}
	if e := d.optional(m, "watermark"); e != nil {
		d.watermark(e.val)
	}
	if e := d.optional(m, "compute"); e != nil {
		d.compute(e.val)
	}
	if e := d.optional(m, "filter"); e != nil {
		d.filter(e.val)
	}
	if e := d.required(root, m, "", "window", exWindow); e != nil {
		d.window(e.val)
	}
	if e := d.optional(m, "allowed_lateness"); e != nil {
		p.AllowedLateness, _ = d.duration(e.val, "allowed_lateness", false)
	}
	if e := d.required(root, m, "", "aggregates", exAggregates); e != nil {
		d.aggregates(e.val)
	}
	if e := d.optional(m, "outputs"); e != nil {
		d.outputs(e.val)
	} else {
		p.Outputs = []Output{{Kind: OutputHub}}
	}
	if e := d.optional(m, "late_output"); e != nil {
		p.LateOutput = d.output(e.val, "late_output", true)
	}
	if e := d.optional(m, "dead_letter"); e != nil {
		p.DeadLetter = d.output(e.val, "dead_letter", true)
	}
	d.crossChecks()
}

// --- sections ---

func (d *decoder) source(n *yaml.Node) {
	m, ok := d.fields(n, "source", []string{"mqtt"}, exSource)
	if !ok {
		return
	}
	e := m.get("mqtt")
	if e == nil {
		if m.unknown == 0 {
			d.errorf(n, "source", "needs a kind of source: mqtt (e.g. %s)", exSource)
		}
		return
	}
	const ex = `mqtt: {topic: "plant/+/temp", qos: 1}`
	mm, ok := d.fields(e.val, "source.mqtt", []string{"topic", "qos", "topic_fields"}, ex)
	if !ok {
		return
	}
	src := &MQTTSource{QoS: 1}
	d.p.Source.MQTT = src
	var levels []string
	if t := d.required(e.val, mm, "source.mqtt", "topic", `topic: "plant/+/temp"`); t != nil {
		if s, ok := d.str(t.val, "source.mqtt.topic", `topic: "plant/+/temp"`); ok {
			src.Topic = s
			var err error
			if levels, err = checkTopicFilter(s); err != nil {
				d.errorf(t.val, "source.mqtt.topic", "%v", err)
			}
			d.sourceLevels = levels
		}
	}
	if q := d.optional(mm, "qos"); q != nil {
		src.QoS, _ = d.qos(q.val, "source.mqtt.qos")
	}
	if tf := d.optional(mm, "topic_fields"); tf != nil {
		d.topicFields(tf.val, src, levels)
	}
}

func (d *decoder) topicFields(n *yaml.Node, src *MQTTSource, levels []string) {
	entries, ok := d.mapping(n, "source.mqtt.topic_fields", "topic field", "topic_fields: {device: 1}")
	if !ok {
		return
	}
	for _, e := range entries {
		field := "source.mqtt.topic_fields." + e.name
		d.at(field, e.val)
		if !nameRE.MatchString(e.name) {
			d.errorf(e.key, field, "%q is not a valid field name: use letters, digits and _, not starting with a digit", e.name)
		}
		level, ok := d.int(e.val, field, "a level number counting from 0")
		if !ok {
			continue
		}
		src.TopicFields = append(src.TopicFields, TopicField{Name: e.name, Level: level})
		d.topicNodes = append(d.topicNodes, e.key)
		switch {
		case level < 0:
			d.errorf(e.val, field, "level %d is negative; levels count from 0", level)
		case levels == nil: // topic missing or invalid, already reported
		case level >= len(levels):
			d.errorf(e.val, field, "level %d is out of range: topic %q has %d levels (0 to %d)", level, src.Topic, len(levels), len(levels)-1)
		case levels[level] == "#":
			d.errorf(e.val, field, "level %d of %q is #, which matches any number of levels; a topic field must name a + level", level, src.Topic)
		case levels[level] != "+":
			d.errorf(e.val, field, "level %d of %q is %q, not a + wildcard, so the field would always be %q (levels count from 0; + levels here: %s)",
				level, src.Topic, levels[level], levels[level], plusLevels(levels))
		}
	}
}

// plusLevels lists the indexes of the + levels of a topic filter.
func plusLevels(levels []string) string {
	var idx []string
	for i, l := range levels {
		if l == "+" {
			idx = append(idx, fmt.Sprint(i))
		}
	}
	if len(idx) == 0 {
		return "none"
	}
	return strings.Join(idx, ", ")
}

var unitSynonyms = map[string]string{
	"sec": "s", "secs": "s", "second": "s", "seconds": "s", "epoch": "s", "unix": "s",
	"msec": "ms", "millis": "ms", "millisecond": "ms", "milliseconds": "ms",
	"usec": "us", "µs": "us", "micros": "us", "microsecond": "us", "microseconds": "us",
	"nsec": "ns", "nanos": "ns", "nanosecond": "ns", "nanoseconds": "ns",
	"iso8601": "rfc3339", "rfc3339nano": "rfc3339", "iso": "rfc3339",
}

func (d *decoder) eventTime(n *yaml.Node) {
	et := &d.p.EventTime
	et.Unit = UnitMS
	et.MaxFuture = DefaultMaxFuture
	m, ok := d.fields(n, "event_time", []string{"field", "unit", "max_future", "max_past"}, exEventTime)
	if !ok {
		return
	}
	if e := d.required(n, m, "event_time", "field", "field: ts"); e != nil {
		if s, ok := d.str(e.val, "event_time.field", "field: ts"); ok {
			et.Field = s
			if err := checkPath(s); err != nil {
				d.errorf(e.val, "event_time.field", "%v", err)
			}
		}
	}
	if e := d.optional(m, "unit"); e != nil {
		if s, ok := d.str(e.val, "event_time.unit", "unit: ms"); ok {
			if u, ok := unitNames[s]; ok {
				et.Unit = u
			} else if alt, ok := unitSynonyms[strings.ToLower(s)]; ok {
				d.errorf(e.val, "event_time.unit", "unknown unit %q (use %s); units are s, ms, us, ns and rfc3339", s, alt)
			} else {
				d.errorf(e.val, "event_time.unit", "unknown unit %q%s; units are s, ms, us, ns and rfc3339", s, didYouMean(s, []string{"s", "ms", "us", "ns", "rfc3339"}))
			}
		}
	}
	if e := d.optional(m, "max_future"); e != nil {
		et.MaxFuture, _ = d.duration(e.val, "event_time.max_future", false)
	}
	if e := d.optional(m, "max_past"); e != nil {
		et.MaxPast, _ = d.duration(e.val, "event_time.max_past", false)
	}
}

func (d *decoder) watermark(n *yaml.Node) {
	m, ok := d.fields(n, "watermark", []string{"max_out_of_order", "idle_timeout"}, "watermark: {max_out_of_order: 5s, idle_timeout: 30s}")
	if !ok {
		return
	}
	if e := d.optional(m, "max_out_of_order"); e != nil {
		d.p.Watermark.MaxOutOfOrder, _ = d.duration(e.val, "watermark.max_out_of_order", false)
	}
	if e := d.optional(m, "idle_timeout"); e != nil {
		d.p.Watermark.IdleTimeout, _ = d.duration(e.val, "watermark.idle_timeout", false)
	}
}

func (d *decoder) compute(n *yaml.Node) {
	entries, ok := d.mapping(n, "compute", "computed field", `compute: {temp_f: "temp * 1.8 + 32"}`)
	if !ok {
		return
	}
	for _, e := range entries {
		field := "compute." + e.name
		if !nameRE.MatchString(e.name) {
			d.errorf(e.key, field, "%q is not a valid field name: use letters, digits and _, not starting with a digit, so expressions can refer to it", e.name)
		}
		src, ok := d.str(e.val, field, e.name+`: "temp * 1.8 + 32"`)
		if !ok {
			continue
		}
		d.p.Compute = append(d.p.Compute, Computed{Name: e.name, Expr: src, Pos: nodePos(e.val)})
		d.computeNodes = append(d.computeNodes, e.val)
		// References to other computed fields are checked in crossChecks,
		// once every name is known.
		d.expr(e.val, field, src, false)
	}
}

func (d *decoder) filter(n *yaml.Node) {
	src, ok := d.str(n, "filter", `filter: "temp > -40"`)
	if !ok {
		return
	}
	if strings.TrimSpace(src) == "" {
		d.errorf(n, "filter", "empty expression; leave filter out to keep every record")
		return
	}
	d.p.Filter, d.p.FilterPos = src, nodePos(n)
	d.expr(n, "filter", src, true)
}

// expr checks one expression and reports its problem at the exact spot in
// the file where that can be worked out.
func (d *decoder) expr(n *yaml.Node, field, src string, asBool bool) {
	_, err := checkExpr(src, asBool)
	if err == nil {
		return
	}
	ee, ok := err.(*ExprError)
	if !ok {
		d.errorf(n, field, "%v", err)
		return
	}
	msg := "invalid expression: " + ee.Msg
	if got, ok := strings.CutPrefix(ee.Msg, "expected bool, but got "); ok && asBool {
		msg = fmt.Sprintf("must be a boolean expression (true keeps the record), but it gives %s", got)
	}
	// A payload field named like a builtin (date, len) reads as the
	// builtin and fails to type-check; say how to reach the field.
	if refs, err := exprRefs(src); err == nil {
		for _, r := range refs {
			if root := rootOf(r.path); reserved[root] {
				msg += fmt.Sprintf(" (%s is an expr-lang builtin; to read a field of that name, write $env.%s)", root, root)
				break
			}
		}
	}
	d.errorAt(n, ee.Line, ee.Column, field, "%s", msg)
}

var windowKinds = []string{"tumbling", "sliding", "session"}

func (d *decoder) window(n *yaml.Node) {
	m, ok := d.fields(n, "window", windowKinds, exWindow+", or {sliding: {size: 10m, slide: 1m}}, or {session: {gap: 30s}}")
	if !ok {
		return
	}
	if len(m.list) == 0 {
		if m.unknown == 0 {
			d.errorf(n, "window", "needs one of tumbling, sliding or session (e.g. %s)", exWindow)
		}
		return
	}
	for i := 1; i < len(m.list); i++ {
		d.errorf(m.list[i].key, "window", "choose one of tumbling, sliding and session; got both %s and %s", m.list[0].name, m.list[i].name)
	}
	// Every kind given is checked, so its own mistakes are reported too;
	// the first one is the window.
	for i, e := range m.list {
		var w Window
		ok := true
		switch e.name {
		case "tumbling":
			w.Kind = Tumbling
			w.Size, ok = d.duration(e.val, "window.tumbling", true)
			w.Slide = w.Size
		case "sliding":
			w.Kind = Sliding
			w.Size, w.Slide, ok = d.sliding(e.val)
		case "session":
			w.Kind = Session
			w.Gap, ok = d.session(e.val)
		}
		if ok && i == 0 {
			d.p.Window = w
		}
	}
}

func (d *decoder) sliding(n *yaml.Node) (size, slide Duration, ok bool) {
	const ex = "sliding: {size: 10m, slide: 1m}"
	m, ok := d.fields(n, "window.sliding", []string{"size", "slide"}, ex)
	if !ok {
		return 0, 0, false
	}
	okSize, okSlide := false, false
	e := d.required(n, m, "window.sliding", "size", ex)
	if e != nil {
		size, okSize = d.duration(e.val, "window.sliding.size", true)
	}
	es := d.required(n, m, "window.sliding", "slide", ex)
	if es != nil {
		slide, okSlide = d.duration(es.val, "window.sliding.slide", true)
	}
	if !okSize || !okSlide {
		return 0, 0, false
	}
	if slide > size {
		d.errorf(es.val, "window.sliding.slide", "slide %s is longer than size %s, which would leave gaps between windows; slide must be at most size", slide, size)
		return 0, 0, false
	}
	if w := (Window{Kind: Sliding, Size: size, Slide: slide}); w.Slices() > MaxSlices {
		if size%slide != 0 {
			d.errorf(es.val, "window.sliding.slide", "%s does not divide size %s, so each window would be cut into %d slices (size / gcd(size, slide)); at most %d are allowed: choose a slide that divides the size",
				slide, size, w.Slices(), MaxSlices)
		} else {
			d.errorf(es.val, "window.sliding.slide", "size %s / slide %s = %d slices per window; at most %d are allowed: choose a longer slide",
				size, slide, w.Slices(), MaxSlices)
		}
		return 0, 0, false
	}
	return size, slide, true
}

func (d *decoder) session(n *yaml.Node) (Duration, bool) {
	const ex = "session: {gap: 30s}"
	m, ok := d.fields(n, "window.session", []string{"gap"}, ex)
	if !ok {
		return 0, false
	}
	if e := d.required(n, m, "window.session", "gap", ex); e != nil {
		return d.duration(e.val, "window.session.gap", true)
	}
	return 0, false
}

func (d *decoder) aggregates(n *yaml.Node) {
	entries, ok := d.mapping(n, "aggregates", "aggregate", exAggregates)
	if !ok {
		return
	}
	if len(entries) == 0 {
		d.errorf(n, "aggregates", "empty; list at least one, e.g. readings: count()")
		return
	}
	for _, e := range entries {
		field := "aggregates." + e.name
		if !nameRE.MatchString(e.name) {
			d.errorf(e.key, field, "%q is not a valid output name: use letters, digits and _, not starting with a digit", e.name)
		}
		text, ok := d.str(e.val, field, e.name+": avg(temp)")
		if !ok {
			continue
		}
		a, errs := parseAggregate(text)
		for _, ae := range errs {
			line, col := runePos(text, ae.off)
			d.errorAt(e.val, line, col, field, "%s", ae.msg)
		}
		if len(errs) > 0 {
			continue
		}
		a.Name, a.Pos = e.name, nodePos(e.val)
		d.p.Aggregates = append(d.p.Aggregates, a)
		d.aggNodes = append(d.aggNodes, e.key)
	}
}

var outputKinds = []string{"hub", "mqtt", "file", "stdout", "stderr"}

func (d *decoder) outputs(n *yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "outputs", "expected a list of outputs, e.g. outputs: [{hub: {}}, {mqtt: {topic: results/temps}}], got %s", kindName(n))
		return
	}
	if len(n.Content) == 0 {
		d.errorf(n, "outputs", "empty list; leave outputs out to send results to the hub")
		return
	}
	d.at("outputs", n)
	seen := map[Output]int{}
	for i, c := range n.Content {
		field := fmt.Sprintf("outputs[%d]", i)
		o := d.output(resolve(c), field, false)
		if o == nil {
			continue
		}
		if j, dup := seen[*o]; dup {
			d.errorf(c, field, "same output as outputs[%d]; results would be written twice", j)
			continue
		}
		seen[*o] = i
		d.p.Outputs = append(d.p.Outputs, *o)
	}
}

// output decodes one output. stderr is allowed only where stderrOK (late
// and dead-letter outputs: a diagnostic stream, not a result stream).
func (d *decoder) output(n *yaml.Node, field string, stderrOK bool) *Output {
	const ex = `{hub: {}}, {mqtt: {topic: results/temps}}, {file: {path: /var/lib/runnel/out.jsonl}} or {stdout: {}}`
	if n.Kind == yaml.ScalarNode && slices.Contains(outputKinds, n.Value) {
		d.errorf(n, field, "expected a mapping: write {%s: {}}", n.Value)
		return nil
	}
	m, ok := d.fields(n, field, outputKinds, ex)
	if !ok {
		return nil
	}
	d.at(field, n)
	if len(m.list) == 0 {
		if m.unknown == 0 {
			d.errorf(n, field, "needs one kind of output: %s", ex)
		}
		return nil
	}
	for i := 1; i < len(m.list); i++ {
		d.errorf(m.list[i].key, field, "one kind per output; got both %s and %s (use a list entry per output)", m.list[0].name, m.list[i].name)
	}
	if len(m.list) > 1 {
		return nil
	}
	e := m.list[0]
	kfield := field + "." + e.name
	var o Output
	switch e.name {
	case "hub", "stdout", "stderr":
		o.Kind = map[string]OutputKind{"hub": OutputHub, "stdout": OutputStdout, "stderr": OutputStderr}[e.name]
		if o.Kind == OutputStderr && !stderrOK {
			d.errorf(e.key, field, "stderr is only for late_output and dead_letter; results go to stdout")
			return nil
		}
		if o.Kind == OutputHub && stderrOK {
			d.errorf(e.key, field, "the hub takes window results only; write %s to mqtt, a file, stdout or stderr (the edge also keeps them: runnel-edge outbox --side)", field)
			return nil
		}
		if !isNull(e.val) {
			if m, ok := d.fields(e.val, kfield, nil, e.name+": {}"); !ok || m.unknown > 0 {
				return nil
			}
		}
	case "mqtt":
		const ex = "mqtt: {topic: results/temps, qos: 1, retain: false}"
		mm, ok := d.fields(e.val, kfield, []string{"topic", "qos", "retain"}, ex)
		if !ok {
			return nil
		}
		o.Kind, o.QoS = OutputMQTT, 1
		if t := d.required(e.val, mm, kfield, "topic", ex); t != nil {
			if s, ok := d.str(t.val, kfield+".topic", ex); ok {
				o.Topic = s
				if err := checkTopicName(s); err != nil {
					d.errorf(t.val, kfield+".topic", "%v", err)
				} else if d.sourceLevels != nil && topicMatches(d.sourceLevels, s) {
					d.errorf(t.val, kfield+".topic", "%q matches the source's topic filter %q, so the pipeline would read its own output back", s, d.p.Source.MQTT.Topic)
				}
			}
		}
		if q := d.optional(mm, "qos"); q != nil {
			o.QoS, _ = d.qos(q.val, kfield+".qos")
		}
		if r := d.optional(mm, "retain"); r != nil {
			o.Retain, _ = d.bool(r.val, kfield+".retain")
		}
	case "file":
		const ex = "file: {path: /var/lib/runnel/out.jsonl}"
		mm, ok := d.fields(e.val, kfield, []string{"path"}, ex)
		if !ok {
			return nil
		}
		o.Kind = OutputFile
		if t := d.required(e.val, mm, kfield, "path", ex); t != nil {
			if s, ok := d.str(t.val, kfield+".path", ex); ok {
				o.Path = s
				if strings.TrimSpace(s) == "" {
					d.errorf(t.val, kfield+".path", "empty path")
				}
			}
		}
	}
	return &o
}

// reserved are names an expression cannot use as a field: expr-lang's
// keywords and builtins. A computed or topic field with such a name could
// never be read.
var reserved = func() map[string]bool {
	r := map[string]bool{}
	for _, w := range []string{"true", "false", "nil", "not", "and", "or", "in", "matches",
		"contains", "startsWith", "endsWith", "let", "if", "else", "$env"} {
		r[w] = true
	}
	for _, f := range builtin.Builtins {
		r[f.Name] = true
	}
	for _, f := range []string{"all", "none", "any", "one", "filter", "map", "count", "sum", "find",
		"findIndex", "findLast", "findLastIndex", "groupBy", "sortBy", "reduce"} {
		r[f] = true // predicates, parsed specially
	}
	return r
}()

// crossChecks are the rules that involve more than one section.
func (d *decoder) crossChecks() {
	p := d.p
	var topicFields []TopicField
	if p.Source.MQTT != nil {
		topicFields = p.Source.MQTT.TopicFields
	}
	for i, tf := range topicFields {
		if reserved[tf.Name] {
			d.errorf(d.topicNodes[i], "source.mqtt.topic_fields."+tf.Name, "%s is an expr-lang keyword or builtin, so expressions could not use the field; choose another name", tf.Name)
		}
	}

	// Fields read from the payload before compute runs: a computed field
	// of the same name would look like it changes them, and would not.
	payloadRead := map[string]string{}
	read := func(what string, paths ...string) {
		for _, f := range paths {
			if _, ok := payloadRead[rootOf(f)]; ok || f == "" {
				continue
			}
			if rootOf(f) == f {
				payloadRead[f] = f + " is " + what
			} else {
				payloadRead[rootOf(f)] = fmt.Sprintf("%s holds %s %s", rootOf(f), what, f)
			}
		}
	}
	read("the event_time field", p.EventTime.Field)
	read("a key field", p.Key...)
	read("an event_id field", p.EventID...)
	computed := map[string]int{}
	for i, c := range p.Compute {
		computed[c.Name] = i
	}
	for i, c := range p.Compute {
		field := "compute." + c.Name
		n := d.computeNodes[i]
		switch {
		case reserved[c.Name]:
			d.errorf(n, field, "%s is an expr-lang keyword or builtin, so expressions could not use the field; choose another name", c.Name)
		case slices.ContainsFunc(topicFields, func(tf TopicField) bool { return tf.Name == c.Name }):
			d.errorf(n, field, "%s is already a topic field; choose another name", c.Name)
		case payloadRead[c.Name] != "":
			d.errorf(n, field, "%s, which is read from the payload before compute runs; choose another name", payloadRead[c.Name])
		}
		refs, err := exprRefs(c.Expr)
		if err != nil {
			continue // reported by compute
		}
		for _, r := range refs {
			j, ok := computed[rootOf(r.path)]
			if !ok || j < i {
				continue
			}
			line, col := runePos(c.Expr, r.from)
			if j == i {
				d.errorAt(n, line, col, field, "uses its own name %s; a computed field cannot replace a payload field, name it differently (e.g. %s_2)", c.Name, c.Name)
			} else {
				d.errorAt(n, line, col, field, "uses %s, which is computed later (line %d); computed fields are evaluated in order", p.Compute[j].Name, p.Compute[j].Pos.Line)
			}
		}
	}

	keys := map[string]bool{}
	for _, k := range p.Key {
		keys[k] = true
	}
	for i, a := range p.Aggregates {
		if keys[a.Name] {
			d.errorf(d.aggNodes[i], "aggregates."+a.Name, "%s is also a key field, and results carry the key; name the aggregate differently", a.Name)
		}
	}
}

// --- generic helpers ---

// fields decodes a mapping whose keys must be among known, reporting unknown
// and duplicate keys. ok is false when n is not a mapping (reported).
func (d *decoder) fields(n *yaml.Node, field string, known []string, example string) (fieldMap, bool) {
	entries, ok := d.mapping(n, field, "field", example)
	if !ok {
		return fieldMap{}, false
	}
	var m fieldMap
	for _, e := range entries {
		if slices.Contains(known, e.name) {
			m.list = append(m.list, e)
			continue
		}
		m.unknown++
		guess := synonyms[e.name]
		if !slices.Contains(known, guess) {
			guess = suggest(e.name, known)
		}
		if guess != "" {
			if m.guessed == nil {
				m.guessed = map[string]bool{}
			}
			m.guessed[guess] = true
		}
		msg := fmt.Sprintf("unknown field %q", e.name)
		switch {
		case len(known) == 0:
			msg += " (this takes no settings: write {})"
		case guess != "":
			msg += fmt.Sprintf(" (did you mean %q?)", guess)
		default:
			msg += " (known fields: " + strings.Join(known, ", ") + ")"
		}
		d.errorf(e.key, field, "%s", msg)
	}
	return m, true
}

// synonyms are field names from other stream processors mapped to ours.
var synonyms = map[string]string{
	"hopping": "sliding", "fixed": "tumbling", "sink": "outputs", "sinks": "outputs", "output": "outputs",
	"where": "filter", "group_by": "key", "groupby": "key", "keys": "key", "key_by": "key",
	"timestamp": "event_time", "aggregations": "aggregates", "aggregate": "aggregates", "metrics": "aggregates",
	"lateness": "allowed_lateness", "late": "late_output", "dlq": "dead_letter", "deadletter": "dead_letter",
	"dead_letters": "dead_letter", "topics": "topic", "interval": "size", "every": "slide", "timeout": "gap",
}

// mapping decodes any mapping with string keys, in order, refusing
// duplicate keys (YAML itself allows them into a node tree and would let
// the last one silently win). what names a key in messages.
func (d *decoder) mapping(n *yaml.Node, field, what, example string) ([]entry, bool) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "expected a mapping such as %s, got %s", example, kindName(n))
		return nil, false
	}
	d.at(field, n)
	var out []entry
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		sub := joinPath(field, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode:
			d.errorf(k, field, "%s names must be plain strings, got %s", what, kindName(k))
			continue
		case k.Tag == "!!merge":
			d.errorf(k, field, "merge keys (<<) are not supported; write the fields out")
			continue
		case first[k.Value] != nil:
			d.errorf(k, sub, "duplicate %s %q (first defined at line %d)", what, k.Value, first[k.Value].Line)
			continue
		}
		first[k.Value] = k
		out = append(out, entry{name: k.Value, key: k, val: v})
		d.at(sub, v)
	}
	return out, true
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// required returns the field, or reports it missing (at the mapping that
// should hold it) and returns nil. A field given as null counts as missing.
func (d *decoder) required(parent *yaml.Node, m fieldMap, parentField, name, example string) *entry {
	e := m.get(name)
	field := joinPath(parentField, name)
	switch {
	case e == nil && m.guessed[name]:
		return nil // the misspelt field was reported as unknown
	case e == nil:
		d.errorf(parent, field, "required field is missing (e.g. %s)", example)
		return nil
	case isNull(e.val):
		d.errorf(e.key, field, "missing value (e.g. %s)", example)
		return nil
	}
	return e
}

// optional returns the field, or nil when it is absent or null (then its
// default applies).
func (d *decoder) optional(m fieldMap, name string) *entry {
	e := m.get(name)
	if e == nil || isNull(e.val) {
		return nil
	}
	return e
}

// str returns the text of a scalar. Numbers and booleans are accepted as
// their text: a pipeline may well be named 2024 or filter on true.
func (d *decoder) str(n *yaml.Node, field, example string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n, field, "expected a string (e.g. %s), got %s", example, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) int(n *yaml.Node, field, what string) (int, bool) {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.errorf(n, field, "expected %s, got %s", what, describe(n))
		return 0, false
	}
	return v, true
}

func (d *decoder) bool(n *yaml.Node, field string) (bool, bool) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		d.errorf(n, field, "expected true or false, got %s", describe(n))
		return false, false
	}
	return v, true
}

func (d *decoder) qos(n *yaml.Node, field string) (int, bool) {
	q, ok := d.int(n, field, "QoS 0 or 1")
	if !ok {
		return 1, false
	}
	if q != 0 && q != 1 {
		msg := fmt.Sprintf("QoS %d is not supported; use 0 or 1", q)
		if q == 2 {
			msg += " (QoS 1 redeliveries are dropped by event_id instead)"
		}
		d.errorf(n, field, "%s", msg)
		return 1, false
	}
	return q, true
}

// duration decodes a duration that must be >= 0, or > 0 when positive.
func (d *decoder) duration(n *yaml.Node, field string, positive bool) (Duration, bool) {
	s, ok := d.str(n, field, "1m30s")
	if !ok {
		return 0, false
	}
	v, err := ParseDuration(s)
	switch {
	case err != nil:
		d.errorf(n, field, "%v", err)
		return 0, false
	case v < 0:
		d.errorf(n, field, "%s is negative; a duration must be 0 or more", s)
		return 0, false
	case v == 0 && positive:
		d.errorf(n, field, "must be greater than 0")
		return 0, false
	}
	return v, true
}

// paths decodes a list of field paths; a single string is a list of one.
func (d *decoder) paths(n *yaml.Node, field string) []string {
	if n.Kind == yaml.ScalarNode {
		s, ok := d.str(n, field, "device")
		if !ok {
			return nil
		}
		d.at(field+"[0]", n)
		if err := checkPath(s); err != nil {
			d.errorf(n, field, "%v", err)
		}
		return []string{s}
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "expected a list of field names, e.g. [device, meta.site], got %s", kindName(n))
		return nil
	}
	var out []string
	first := map[string]int{}
	for i, c := range n.Content {
		c = resolve(c)
		sub := fmt.Sprintf("%s[%d]", field, i)
		s, ok := d.str(c, sub, "device")
		if !ok {
			continue
		}
		d.at(sub, c)
		if err := checkPath(s); err != nil {
			d.errorf(c, sub, "%v", err)
			continue
		}
		if j, dup := first[s]; dup {
			d.errorf(c, sub, "%s is listed twice (also %s[%d])", s, field, j)
			continue
		}
		first[s] = i
		out = append(out, s)
	}
	return out
}

func (d *decoder) at(field string, n *yaml.Node) { d.p.pos[field] = nodePos(n) }

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	d.add(Problem{File: d.file, Pos: nodePos(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

// maxProblems bounds the problem list. Past a hundred, the file is almost
// certainly not a spec at all, and a longer list only buries the first lines.
const maxProblems = 100

func (d *decoder) add(p Problem) {
	if len(d.probs) < maxProblems {
		d.probs = append(d.probs, p)
		return
	}
	d.dropped++
}

// errorAt reports a problem at line, col (1-based) inside scalar n's value.
// Where the spot in the file cannot be worked out exactly (escapes, folded
// text) the problem is placed at the scalar and the message says where.
func (d *decoder) errorAt(n *yaml.Node, line, col int, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	pos, exact := d.posIn(n, line, col)
	if !exact {
		if line > 1 {
			msg += fmt.Sprintf(" (at line %d, column %d of the value)", line, col)
		} else {
			msg += fmt.Sprintf(" (at column %d of the value)", col)
		}
	}
	d.add(Problem{File: d.file, Pos: pos, Field: field, Msg: msg})
}

// posIn maps line, col (1-based) inside scalar n's value to the spec file.
// It succeeds for one-line plain and quoted scalars without escapes and for
// literal block scalars (|), by checking that the file really holds the
// value's text there; otherwise it returns the scalar's own position.
func (d *decoder) posIn(n *yaml.Node, line, col int) (Pos, bool) {
	fallback := nodePos(n)
	if d.lines == nil {
		d.lines = strings.Split(string(d.data), "\n")
	}
	valueLines := strings.Split(n.Value, "\n")
	if line < 1 || line > len(valueLines) {
		return fallback, false
	}
	vl := []rune(valueLines[line-1])
	fileLine := func(no int) ([]rune, bool) {
		if no < 1 || no > len(d.lines) {
			return nil, false
		}
		return []rune(strings.TrimSuffix(d.lines[no-1], "\r")), true
	}
	switch {
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0:
		if len(valueLines) > 1 {
			return fallback, false
		}
		raw, ok := fileLine(n.Line)
		start := n.Column - 1
		if !ok || start < 0 || start > len(raw) {
			return fallback, false
		}
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			start++ // the opening quote
		}
		if start+len(vl) > len(raw) || string(raw[start:start+len(vl)]) != n.Value {
			return fallback, false
		}
		return Pos{Line: n.Line, Column: start + col}, true
	case n.Style&yaml.LiteralStyle != 0:
		// The node's position is the "|" indicator; the text starts on the
		// next line, one file line per value line.
		no := n.Line + line
		raw, ok := fileLine(no)
		if !ok || len(raw) < len(vl) {
			return fallback, false
		}
		indent := len(raw) - len(vl)
		if string(raw[indent:]) != string(vl) || strings.TrimLeft(string(raw[:indent]), " ") != "" {
			return fallback, false
		}
		return Pos{Line: no, Column: indent + col}, true
	}
	return fallback, false
}

func nodePos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{}
	}
	return Pos{Line: n.Line, Column: n.Column}
}

// resolve follows aliases (*name) to the anchored node. Anchors may form
// cycles (&a [*a]); the walk is driven by the spec's fixed shape, so it
// always ends, and the bound here only guards alias-to-alias chains.
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
			return "a number"
		case "!!bool":
			return "true/false"
		}
		return "a string"
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// describe is kindName plus the value, for scalars.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		return fmt.Sprintf("%s %q", kindName(n), n.Value)
	}
	return kindName(n)
}

// didYouMean formats suggest's answer as a message suffix.
func didYouMean(word string, options []string) string {
	if s := suggest(word, options); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}
