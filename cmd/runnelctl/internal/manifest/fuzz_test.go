package manifest

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzManifest: Decode never panics, and a manifest it accepts encodes to
// one it accepts again, with the same pipelines and deployments, whose
// encoding is the same (Encode after Decode is stable).
func FuzzManifest(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"kind: Deployment\nname: d\npipelines: [{name: a}]\n",
		"kind: Deployment\nname: d\nselector: a=b\npipelines: []\nstrategy: {staged: true, canary_percent: 10, batch: 3, soak: 1m30s}\n",
		"kind: Pipeline\nspec: &s\n  name: p\n  source: {mqtt: {topic: a}}\n  event_time: {field: ts}\n  window: {tumbling: 1m}\n  aggregates: {n: count()}\n",
		"kind: Pipeline\nspec: {name: p, source: {mqtt: {topic: a}}, event_time: {field: ts}, window: {tumbling: 1m}, aggregates: {n: count()}}\n",
		"---\n...\n%YAML 1.1\n---\nkind: Deployment\nname: x\npipelines: []\n",
		"kind: Deployment\nname: d\npipelines: [{name: a, revision: 0x10}]\nstrategy: {max_dead_letter_rate: .5}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode("fuzz.yaml", data)
		if err != nil {
			if m != nil {
				t.Fatalf("a refused manifest decoded to %+v", m)
			}
			_ = err.Error()
			return
		}
		checkRoundTrip(t, m)
	})
}
