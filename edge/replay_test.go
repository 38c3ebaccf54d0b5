package edge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) {
	if hp := os.Getenv(bareSubscriberEnv); hp != "" {
		runBareSubscriber(hp)
	}
	goleak.VerifyTestMain(m)
}

func loadPipeline(t *testing.T, path string) *operators.Pipeline {
	t.Helper()
	s, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := operators.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sortedLines makes output comparable: keys are spread over workers, so only
// each key's own order is fixed; sorting by (key, window, version) is stable.
func sortedLines(b []byte) []string {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(lines)
	return lines
}

// TestReplayExample replays the README's example and compares every output
// with golden files, for several worker counts: the results must not depend
// on how keys are spread.
func TestReplayExample(t *testing.T) {
	p := loadPipeline(t, "../examples/line-temps.yaml")
	for _, workers := range []int{1, 2, 5} {
		in, err := os.Open("../examples/line-temps.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		var res, late, dead bytes.Buffer
		st, err := edge.Replay(context.Background(), edge.ReplayConfig{
			Pipeline: p, Input: in, Results: &res, Late: &late, Dead: &dead,
			Runtime: operators.Options{Workers: workers, BatchSize: 7},
		})
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Dead != 3 || st.Filtered == 0 || st.Late == 0 || st.Updates == 0 {
			t.Errorf("workers=%d: stats %+v: the sample stream has 3 dead letters, filtered, late records and late updates", workers, st)
		}
		for _, out := range []struct {
			name string
			b    []byte
		}{{"results", res.Bytes()}, {"late", late.Bytes()}, {"dead", dead.Bytes()}} {
			golden := filepath.Join("testdata", "line-temps."+out.name+".golden")
			got := strings.Join(sortedLines(out.b), "\n") + "\n"
			if *update && workers == 1 {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("workers=%d: %s differ from %s (run with -update to see)", workers, out.name, golden)
			}
			for _, line := range sortedLines(out.b) {
				if !json.Valid([]byte(line)) {
					t.Errorf("%s: invalid JSON line %q", out.name, line)
				}
			}
		}
	}
}

// TestReplayCommand runs the real binary: results on stdout, a bad spec
// refused with exit code 2 and every problem listed.
func TestReplayCommand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "runnel-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/runnel-edge").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "replay", "--pipeline", "../examples/line-temps.yaml", "--input", "../examples/line-temps.jsonl",
		"--late", filepath.Join(t.TempDir(), "late.jsonl"), "--dead-letter", filepath.Join(t.TempDir(), "dead.jsonl"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	want, err := os.ReadFile("testdata/line-temps.results.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sortedLines(stdout.Bytes()), "\n") + "\n"; got != string(want) {
		t.Errorf("stdout differs from the golden results")
	}
	if !strings.Contains(stderr.String(), "3 dead letters") {
		t.Errorf("summary missing from stderr: %q", stderr.String())
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: Bad Name\nsource: {mqtt: {topic: \"a/#/b\"}}\nevent_time: {field: ts, unit: hours}\nwindow: {tumbling: -1m}\naggregates: {n: count(x, y)}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "replay", "--pipeline", bad, "--input", "../examples/line-temps.jsonl")
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("bad spec: %v, want exit code 2\n%s", err, stderr.String())
	}
	for _, want := range []string{"bad.yaml:1:", "name", "bad.yaml:2:", "source.mqtt.topic", "bad.yaml:3:", "event_time.unit", "bad.yaml:4:", "window.tumbling", "bad.yaml:5:", "aggregates.n"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("problem list lacks %q:\n%s", want, stderr.String())
		}
	}
}
