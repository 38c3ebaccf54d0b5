package manifest

import (
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// problems decodes text and returns its problems, one string each.
func problems(t *testing.T, text string) []string {
	t.Helper()
	m, err := Decode("f.yaml", []byte(text))
	if err == nil {
		t.Fatalf("Decode accepted:\n%s", text)
	}
	if m != nil {
		t.Errorf("Decode returned a manifest with its problems")
	}
	if !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("error %v does not match spec.ErrInvalid", err)
	}
	var ps spec.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %T is not spec.Problems", err)
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Error()
	}
	return out
}

// TestPlainSpecFile: a pipeline spec file, exactly what an edge reads, is
// a pipeline whose text is the file.
func TestPlainSpecFile(t *testing.T) {
	data := readFile(t, "testdata/line-temps.yaml")
	m, err := Decode("examples/line-temps.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Pipelines) != 1 || len(m.Deployments) != 0 {
		t.Fatalf("got %d pipelines, %d deployments; want 1, 0", len(m.Pipelines), len(m.Deployments))
	}
	p := m.Pipelines[0]
	if p.Name != "line-temps" || !p.Plain || p.File != "examples/line-temps.yaml" || string(p.Spec) != string(data) {
		t.Errorf("got %+v; want the file as it is, named line-temps", p)
	}
}

// TestFleetFile decodes a file of three documents: a plain spec, a
// wrapped one and a deployment, with its durations in milliseconds.
func TestFleetFile(t *testing.T) {
	data := readFile(t, "testdata/fleet.yaml")
	m, err := Decode("fleet.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Pipelines) != 2 || len(m.Deployments) != 1 {
		t.Fatalf("got %d pipelines, %d deployments; want 2, 1", len(m.Pipelines), len(m.Deployments))
	}
	if a, b := m.Pipelines[0], m.Pipelines[1]; a.Name != "line-co2" || !a.Plain || b.Name != "line-hum" || b.Plain {
		t.Errorf("pipelines %s (plain %v), %s (plain %v)", a.Name, a.Plain, b.Name, b.Plain)
	}
	want := &runnelv1.DeploymentSpec{
		Name:     "plant-7",
		Selector: "site=plant-7,hw in (rpi4,cm4),!legacy",
		Pipelines: []*runnelv1.PipelineRef{
			{Name: "line-co2", Revision: 2},
			{Name: "line-hum"},
		},
		Strategy: &runnelv1.Strategy{
			Staged: true, Canary: 1, BatchPercent: 25, SoakMs: 30_000, MaxDeadLetterRate: 0.01,
			RollbackOnFailure: true, ProgressDeadlineMs: 600_000,
		},
	}
	if strings.Contains(string(m.Pipelines[1].Spec), "---") {
		t.Errorf("the --- line is sent: %q", m.Pipelines[1].Spec)
	}
	dep := m.Deployments[0]
	if !proto.Equal(dep.Spec, want) {
		t.Errorf("deployment\n got %v\nwant %v", dep.Spec, want)
	}
	if dep.File != "fleet.yaml" || dep.Pos != (spec.Pos{Line: 21, Column: 1}) {
		t.Errorf("deployment at %s:%s; want fleet.yaml:21:1", dep.File, dep.Pos)
	}
}

// TestLineOffsets: the text sent for each pipeline has the file's line
// and column for every character, so positions the hub's parser finds
// are the file's. Checked two ways: line by line against the file, and
// through spec.Parse's positions.
func TestLineOffsets(t *testing.T) {
	data := readFile(t, "testdata/fleet.yaml")
	m, err := Decode("fleet.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	file := strings.SplitAfter(string(data), "\n")
	for _, p := range m.Pipelines {
		lines := strings.SplitAfter(string(p.Spec), "\n")
		for i, l := range lines {
			if strings.TrimSpace(l) == "" {
				continue
			}
			if i >= len(file) || !strings.HasSuffix(file[i], strings.TrimLeft(l, " ")) || len(l) != len(file[i]) {
				t.Errorf("%s: line %d sent as %q; the file has %q", p.Name, i+1, l, file[i])
			}
		}
		parsed, err := spec.Parse(p.File, p.Spec)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		// The window field's value, found in the file by hand.
		wantLine := map[string]int{"line-co2": 6, "line-hum": 17}[p.Name]
		if got := parsed.Where("window"); got.Line != wantLine {
			t.Errorf("%s: window at line %d; the file has it at %d", p.Name, got.Line, wantLine)
		}
	}
	if got := m.Pipelines[1].Pos; got != (spec.Pos{Line: 14, Column: 3}) {
		t.Errorf("wrapped spec at %s, want 14:3", got)
	}
}

// TestSpecProblemsAtFileLines: a spec's problems name the file's lines,
// in a plain document after another and inside a wrapper.
func TestSpecProblemsAtFileLines(t *testing.T) {
	text := `kind: Deployment
name: d
pipelines: []
---
name: p1
source: {mqtt: {topic: "a/+"}}
format: xml
event_time: {field: ts}
window: {tumbling: 1m}
aggregates: {n: count()}
---
kind: Pipeline
spec:
    name: p2
    source: {mqtt: {topic: "b/+"}}
    event_time: {field: ts}
    window: {tumbling: 1m}
    aggregates: {n: cuont()}
`
	got := problems(t, text)
	want := []string{
		`f.yaml:7:9: format: "xml" is not supported; only json for now`,
		`f.yaml:18:21: aggregates.n: unknown function "cuont" (did you mean "count"?)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems\n got %q\nwant %q", got, want)
	}
}

// TestProblems: every refusal names file:line:col and the field, all of
// a file's problems at once.
func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"unknown deployment field", "kind: Deployment\nname: d\nselectr: a=b\npipelines: []\n",
			[]string{`f.yaml:3:1: unknown field "selectr" (did you mean "selector"? known fields: kind, name, selector, pipelines, strategy)`}},
		{"unknown strategy field", "kind: Deployment\nname: d\npipelines: []\nstrategy: {staged: true, canery: 1}\n",
			[]string{`f.yaml:4:26: strategy: unknown field "canery" (did you mean "canary"? known fields: staged, canary, canary_percent, batch, batch_percent, soak, max_dead_letter_rate, rollback_on_failure, progress_deadline)`}},
		{"unknown ref field", "kind: Deployment\nname: d\npipelines:\n  - {name: p, rev: 2}\n",
			[]string{`f.yaml:4:15: pipelines[0]: unknown field "rev" (known fields: name, revision)`}},
		{"unknown wrapper field", "kind: Pipeline\nname: x\nspec: {name: p, source: {mqtt: {topic: a}}, event_time: {field: ts}, window: {tumbling: 1m}, aggregates: {n: count()}}\n",
			[]string{`f.yaml:2:1: unknown field "name" (known fields: kind, spec)`}},
		{"kind misspelt", "kind: deployment\nname: d\n",
			[]string{`f.yaml:1:7: kind: unknown kind "deployment" (did you mean Deployment?); runnelctl applies Deployment and Pipeline`}},
		{"kind not a string", "kind: [a]\n",
			[]string{`f.yaml:1:7: kind: expected Deployment or Pipeline, got a list`}},
		{"no kind", "name: x\nselector: a=b\n",
			[]string{`f.yaml:1:1: no kind: a document is kind: Deployment, kind: Pipeline (with spec:), or a pipeline spec with name and source`}},
		{"a list", "- a\n- b\n",
			[]string{`f.yaml:1:1: a document is a mapping: kind: Deployment, kind: Pipeline, or a pipeline spec (name, source, ...); got a list`}},
		{"missing name and pipelines", "kind: Deployment\n",
			[]string{`f.yaml:1:1: missing name: the deployment's name (name: plant-7)`,
				`f.yaml:1:1: missing pipelines: the pipeline revisions to run (pipelines: [{name: line-temps, revision: 2}])`}},
		{"bad name", "kind: Deployment\nname: Plant 7\npipelines: []\n",
			[]string{`f.yaml:2:7: name: "Plant 7" is not a valid name: use lower-case letters, digits, _ and -, starting with a letter or digit (e.g. plant-7)`}},
		{"name a number", "kind: Deployment\nname: 7\npipelines: []\n",
			[]string{`f.yaml:2:7: name: expected a string, got the number 7`}},
		{"bad revisions", "kind: Deployment\nname: d\npipelines:\n- {name: a, revision: 0}\n- {name: b, revision: -1}\n- {name: c, revision: x}\n- {name: a}\n- {revision: 2}\n",
			[]string{
				`f.yaml:4:23: pipelines[0].revision: revisions count from 1; leave revision out for the latest`,
				`f.yaml:5:23: pipelines[1].revision: expected a whole number, 0 or more, got the number -1`,
				`f.yaml:6:23: pipelines[2].revision: expected a whole number, 0 or more, got the string "x"`,
				`f.yaml:7:10: pipelines[3].name: pipeline a is listed twice (first at line 4); a deployment runs one revision of each`,
				`f.yaml:8:3: pipelines[4]: missing name: the pipeline's name`,
			}},
		{"pipelines not a list", "kind: Deployment\nname: d\npipelines: line-temps\n",
			[]string{`f.yaml:3:12: pipelines: expected a list of {name, revision}, got the string "line-temps"`}},
		{"durations", "kind: Deployment\nname: d\npipelines: []\nstrategy:\n  soak: 30\n  progress_deadline: -5s\n",
			[]string{
				`f.yaml:5:9: strategy.soak: invalid duration "30": missing unit (write e.g. 30s or 30ms)`,
				`f.yaml:6:22: strategy.progress_deadline: -5s is negative`,
			}},
		{"duration not a scalar", "kind: Deployment\nname: d\npipelines: []\nstrategy: {soak: [1s]}\n",
			[]string{`f.yaml:4:18: strategy.soak: expected a duration such as 30s or 10m, got a list`}},
		{"staged fields without staged", "kind: Deployment\nname: d\npipelines: []\nstrategy: {canary: 1, batch: 2}\n",
			[]string{
				`f.yaml:4:12: strategy.canary: applies to a staged rollout only; add staged: true (without it, every edge gets the deployment at once)`,
				`f.yaml:4:23: strategy.batch: applies to a staged rollout only; add staged: true (without it, every edge gets the deployment at once)`,
			}},
		{"count and percent", "kind: Deployment\nname: d\npipelines: []\nstrategy: {staged: true, canary: 1, canary_percent: 150}\n",
			[]string{
				`f.yaml:4:37: strategy.canary_percent: canary and canary_percent are both set; give a count or a percentage`,
				`f.yaml:4:53: strategy.canary_percent: 150 is not a percentage from 1 to 100`,
			}},
		{"rate and bools", "kind: Deployment\nname: d\npipelines: []\nstrategy: {staged: yes, max_dead_letter_rate: 2, rollback_on_failure: 1}\n",
			[]string{
				`f.yaml:4:20: strategy.staged: expected true or false, got the string "yes"`,
				`f.yaml:4:47: strategy.max_dead_letter_rate: 2 is not a fraction between 0 and 1 (0.05 is 5% of the records)`,
				`f.yaml:4:71: strategy.rollback_on_failure: expected true or false, got the number 1`,
			}},
		{"selector read as a tag", "kind: Deployment\nname: d\nselector: !legacy\npipelines: []\n",
			[]string{`f.yaml:3:11: selector: !legacy is read by YAML as a tag; quote the selector: selector: "!legacy "`}},
		{"set twice", "kind: Deployment\nname: d\nname: e\npipelines: []\n",
			[]string{`f.yaml:3:1: name: set twice (first at line 2); YAML keeps only one, so remove the other`}},
		{"merge key", "kind: Deployment\nname: d\npipelines: []\nstrategy: {<<: {staged: true}}\n",
			[]string{`f.yaml:4:12: strategy: merge keys (<<) are not supported; write the fields out`}},
		{"wrapper without spec", "kind: Pipeline\n",
			[]string{`f.yaml:1:1: kind: Pipeline needs spec:, the pipeline spec as a mapping (spec: {name: line-temps, source: ...})`}},
		{"wrapper spec not a mapping", "kind: Pipeline\nspec: line-temps.yaml\n",
			[]string{`f.yaml:2:7: spec: expected the pipeline spec as a mapping (name, source, event_time, ...), got the string "line-temps.yaml"`}},
		{"wrapper on one line", "{kind: Pipeline, spec: {name: p, source: {mqtt: {topic: a}}, event_time: {field: ts}, window: {tumbling: 1m}, aggregates: {n: count()}}, x: 1}\n",
			[]string{
				`f.yaml:1:24: spec: cannot be sent with the file's line numbers: it shares a line with another field, or uses an anchor defined outside it; write spec: as a block mapping of its own lines`,
				`f.yaml:1:138: unknown field "x" (known fields: kind, spec)`,
			}},
		{"YAML error in the second document", "kind: Deployment\nname: d\npipelines: []\n---\nkind: Deployment\nname: [d\npipelines: []\n",
			[]string{`f.yaml:6:7: invalid YAML: did not find expected ',' or ']' (a [ list is not closed)`}},
		{"defined twice", "kind: Deployment\nname: d\npipelines: []\n---\nkind: Deployment\nname: d\npipelines: []\n" +
			"---\nname: p\nsource: {mqtt: {topic: a}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates: {n: count()}\n" +
			"---\nkind: Pipeline\nspec:\n  name: p\n  source: {mqtt: {topic: b}}\n  event_time: {field: ts}\n  window: {tumbling: 1m}\n  aggregates: {n: count()}\n",
			[]string{
				`f.yaml:5:1: name: deployment d is also defined at f.yaml:1:1; a manifest defines each deployment once`,
				`f.yaml:17:3: name: pipeline p is also defined at f.yaml:9:1; a manifest defines each pipeline once`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := problems(t, tc.text)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestTooLarge: a file past MaxSize is refused before it is parsed.
func TestTooLarge(t *testing.T) {
	got := problems(t, strings.Repeat("#", MaxSize+1))
	if len(got) != 1 || !strings.Contains(got[0], "larger than") {
		t.Errorf("got %q", got)
	}
}

// TestEmpty: files with no documents, or only empty ones, hold nothing.
func TestEmpty(t *testing.T) {
	for _, text := range []string{"", "# nothing\n", "---\n", "---\n...\n---\n# c\n", "\n\n"} {
		m, err := Decode("f.yaml", []byte(text))
		if err != nil || len(m.Pipelines)+len(m.Deployments) != 0 {
			t.Errorf("%q: %v, %+v", text, err, m)
		}
	}
}

// TestSplit: documents are cut at --- and ..., directives and comments
// before a --- go with the document it starts, and a --- inside a block
// scalar's text is not a marker because it is indented.
func TestSplit(t *testing.T) {
	text := "%YAML 1.1\n# a\n---\na: 1\n...\n%YAML 1.1\n--- # b\nb: |\n  ---\n  x\n---\r\nc: 3\n"
	got := splitDocuments([]byte(text))
	want := []chunk{
		{first: 1, lines: []string{"%YAML 1.1\n", "# a\n", "---\n", "a: 1\n", "...\n"}},
		{first: 6, lines: []string{"%YAML 1.1\n", "--- # b\n", "b: |\n", "  ---\n", "  x\n"}},
		{first: 11, lines: []string{"---\r\n", "c: 3\n"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d chunks %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].first != want[i].first || strings.Join(got[i].lines, "") != strings.Join(want[i].lines, "") {
			t.Errorf("chunk %d: got %d %q, want %d %q", i, got[i].first, got[i].lines, want[i].first, want[i].lines)
		}
	}
	// Each chunk parses on its own, its root at the file's line.
	for i, line := range []int{4, 8, 12} {
		if r, ok := parseQuiet(got[i].text()); !ok || r.Line != line {
			t.Errorf("chunk %d: root %+v (ok %v), want it at line %d", i, r, ok, line)
		}
	}
}

// TestMerge: names are checked across files, and a refused merge leaves
// the first manifest as it was.
func TestMerge(t *testing.T) {
	a, err := Decode("a.yaml", readFile(t, "testdata/line-temps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode("b.yaml", readFile(t, "testdata/line-temps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	err = Merge(a, b)
	if err == nil || err.Error() != "b.yaml:2:1: name: pipeline line-temps is also defined at a.yaml:2:1; a manifest defines each pipeline once" {
		t.Fatalf("Merge: %v", err)
	}
	if len(a.Pipelines) != 1 {
		t.Errorf("a refused Merge changed the manifest: %d pipelines", len(a.Pipelines))
	}
	c, err := Decode("c.yaml", readFile(t, "testdata/fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Merge(a, c); err != nil || len(a.Pipelines) != 3 || len(a.Deployments) != 1 {
		t.Fatalf("Merge: %v, %d pipelines", err, len(a.Pipelines))
	}
}

// TestEncodeRoundTrip: Encode writes what Decode reads back the same.
func TestEncodeRoundTrip(t *testing.T) {
	m, err := Decode("fleet.yaml", readFile(t, "testdata/fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, m)
}

func checkRoundTrip(t *testing.T, m *Manifest) {
	t.Helper()
	enc, err := m.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	m2, err := Decode("enc.yaml", enc)
	if err != nil {
		t.Fatalf("Decode(Encode) refused:\n%s\n%v", enc, err)
	}
	if len(m2.Pipelines) != len(m.Pipelines) || len(m2.Deployments) != len(m.Deployments) {
		t.Fatalf("Decode(Encode): %d pipelines, %d deployments; want %d, %d\n%s", len(m2.Pipelines), len(m2.Deployments), len(m.Pipelines), len(m.Deployments), enc)
	}
	for i := range m.Pipelines {
		if m.Pipelines[i].Name != m2.Pipelines[i].Name {
			t.Errorf("pipeline %d: %s, then %s", i, m.Pipelines[i].Name, m2.Pipelines[i].Name)
		}
	}
	for i := range m.Deployments {
		if !proto.Equal(m.Deployments[i].Spec, m2.Deployments[i].Spec) {
			t.Errorf("deployment %d:\n%v\nthen\n%v\n%s", i, m.Deployments[i].Spec, m2.Deployments[i].Spec, enc)
		}
	}
	enc2, err := m2.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if string(enc) != string(enc2) {
		t.Errorf("Encode is not stable:\n%s\nthen\n%s", enc, enc2)
	}
}
