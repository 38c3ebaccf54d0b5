package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/config"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/operators/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const goodSpec = `name: %s
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts}
window: {tumbling: 1m}
aggregates: {n: count()}
`

// badSetup writes a config with a bad setting that names two bad pipeline
// files, one with a YAML syntax error and one with a semantic error, and
// returns the arguments that run it and the problems, one per line, that
// the refusal must list, in order.
func badSetup(t *testing.T) (args, want []string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := write("edge.yaml", "data_dir: data\ncheckpoint: {interval: 0s}\npipelines: [syntax.yaml, semantic.yaml]\n")
	syntax := write("syntax.yaml", strings.Replace(goodSpec, "%s", "one", 1)+"key: [device\n")
	semantic := write("semantic.yaml", strings.Replace(strings.Replace(goodSpec, "%s", "two", 1), "tumbling: 1m", "tumbling: 0s", 1))
	return []string{"--config", cfg}, []string{
		cfg + ":2:24: checkpoint.interval: must be greater than 0, got 0s",
		syntax + ":6:6: invalid YAML: did not find expected ',' or ']' (a [ list is not closed)",
		semantic + ":4:20: window.tumbling: must be greater than 0",
	}
}

// TestRunListsEveryProblem: a bad config and two bad pipeline files are
// refused together, every problem listed with its position.
func TestRunListsEveryProblem(t *testing.T) {
	args, want := badSetup(t)
	err := run(context.Background(), args, nil)
	if !errors.Is(err, config.ErrInvalid) || !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("error matches not both config.ErrInvalid and spec.ErrInvalid: %v", err)
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

// TestBinaryListsEveryProblem runs the real binary on the same setup: it
// must exit with status 2 and print every problem, one per line.
func TestBinaryListsEveryProblem(t *testing.T) {
	if testing.Short() {
		t.Skip("builds runnel-edge")
	}
	bin := t.TempDir()
	testproc.Build(t, bin, ".")
	args, want := badSetup(t)
	cmd := exec.Command(filepath.Join(bin, "runnel-edge"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no RUNNEL_* from the test's environment
	testproc.DieWithParent(cmd)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("exit: %v, want status 2\n%s", err, out)
	}
	if got := strings.TrimSuffix(string(out), "\n"); got != "runnel-edge: "+strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\nrunnel-edge: %s", got, strings.Join(want, "\n"))
	}
}

// TestNodeConfigSideOutputs: the side outputs' bounds reach the node; the
// config's max_age 0 (no age limit) is the node's negative MaxAge, since
// the node takes 0 for its default.
func TestNodeConfigSideOutputs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want edge.SideOutputs
	}{
		{nil, edge.SideOutputs{MaxBytes: 64 << 20, MaxAge: 7 * 24 * time.Hour}},
		{[]string{"--side-outputs-max-bytes", "10MiB", "--side-outputs-max-age", "36h"}, edge.SideOutputs{MaxBytes: 10 << 20, MaxAge: 36 * time.Hour}},
		{[]string{"--side-outputs-max-age", "0s"}, edge.SideOutputs{MaxBytes: 64 << 20, MaxAge: -1}},
	} {
		c, err := config.Load("", append([]string{"--edge-id", "gw-1", "--data-dir", t.TempDir()}, tc.args...), nil)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nodeConfig(context.Background(), c, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if nc.SideOutputs != tc.want {
			t.Errorf("%q: SideOutputs %+v, want %+v", tc.args, nc.SideOutputs, tc.want)
		}
	}
}

// TestLinksNothingOfTheHub: the gateway binary does not link what only
// the hub or the demo uses (issue 14: a smaller binary): the hub's
// packages, the REST gateway (grpc-gateway and runnelv1gw, which hold the
// hub's REST API and its OpenAPI document), the demo.
func TestLinksNothingOfTheHub(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, not := range []string{"github.com/runnel-io/runnel/hub", "github.com/runnel-io/runnel/cmd/runnel-demo",
			"github.com/runnel-io/runnel/proto/runnelv1gw", "github.com/grpc-ecosystem/grpc-gateway"} {
			if pkg == not || strings.HasPrefix(pkg, not+"/") {
				t.Errorf("runnel-edge links %s", pkg)
			}
		}
	}
}
