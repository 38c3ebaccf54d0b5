package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/fakehub"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the clock of every run: five minutes after the fake hub stored
// what it stores.
var now = fakehub.Now.Add(5 * time.Minute)

// syncBuffer is a bytes.Buffer safe for a run in another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one run printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// runner runs runnelctl in process against a hub.
type runner struct {
	t     *testing.T
	env   map[string]string
	stdin string
	hub   *fakehub.Hub
}

func newRunner(t *testing.T, h *fakehub.Hub) *runner {
	// An empty HOME: no config file of the machine is read.
	return &runner{t: t, hub: h, env: map[string]string{"HOME": t.TempDir()}}
}

func (r *runner) envOf(stdout, stderr *syncBuffer) Env {
	return Env{
		Stdin: strings.NewReader(r.stdin), Stdout: stdout, Stderr: stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := r.env[k]; return v, ok },
		Now:       func() time.Time { return now }, Location: time.UTC, Version: "v1.2.3-test", ReadFile: ReadFile,
	}
}

// run runs runnelctl --hub HUB args... and waits for it.
func (r *runner) run(args ...string) result {
	r.t.Helper()
	return r.runCtx(context.Background(), args...)
}

func (r *runner) runCtx(ctx context.Context, args ...string) result {
	var stdout, stderr syncBuffer
	if r.hub != nil {
		args = append([]string{"--hub", r.hub.Addr}, args...)
	}
	code := Main(ctx, args, r.envOf(&stdout, &stderr))
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// golden compares got with testdata/name.golden, or rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

const tempsV1 = `name: line-temps
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts, unit: ms}
key: [device]
window: {tumbling: 1m}
aggregates:
  readings: count()
  avg_temp: avg(temp)
`

const tempsV2 = `name: line-temps
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts, unit: ms}
key: [device]
filter: "temp > -40"
window: {tumbling: 1m}
aggregates:
  readings: count()
  avg_temp: avg(temp)
`

const co2 = `name: line-co2
source: {mqtt: {topic: "plant/+/co2"}}
event_time: {field: ts}
window: {tumbling: 5m}
aggregates:
  max_co2: max(co2)
`

func ago(d time.Duration) int64 { return fakehub.Now.Add(-d).UnixMilli() }

// seed fills the hub with a small fleet: two pipelines (one of two
// revisions), three edges in different states, a staged deployment of
// two versions and an all-at-once one, tokens, audit entries and results.
func seed(h *fakehub.Hub) {
	h.AddPipeline("line-temps", tempsV1, "alice")
	h.AddPipeline("line-temps", tempsV2, "bob")
	h.AddPipeline("line-co2", co2, "alice")
	h.Do(func(h *fakehub.Hub) {
		h.Pipelines["line-temps"][1].CompatClass = 1
		h.Created["line-temps"] = ago(72 * time.Hour)
		h.Pipelines["line-temps"][0].CreatedMs = ago(72 * time.Hour)
		h.Pipelines["line-temps"][1].CreatedMs = ago(2 * time.Hour)
		h.Edges["gw-001"] = &runnelv1.FleetEdge{
			EdgeId: "gw-001", Labels: map[string]string{"site": "plant-7", "hw": "rpi4"},
			EdgeLabels: map[string]string{"site": "plant-7", "hw": "cm4"}, HubLabels: map[string]string{"hw": "rpi4"},
			Version: "v0.4.0", Os: "linux", Arch: "arm64", RegisteredMs: ago(240 * time.Hour), LastSeenMs: ago(3 * time.Second),
			Connected: true, DesiredGeneration: 7,
			Desired: []*runnelv1.PipelineRef{{Name: "line-temps", Revision: 2}, {Name: "line-co2", Revision: 1}},
			Status: &runnelv1.EdgeStatus{
				AppliedGeneration: 7, OutboxEntries: 12, OldestUnsentMs: 1500,
				DiskUsedBytes: 1288490188, DiskCapBytes: 8 << 30, RecordsPerMin: 1200, DeadPerMin: 0.5, LatePerMin: 3,
				AtMs: ago(3 * time.Second),
				Pipelines: []*runnelv1.PipelineStatus{
					{Name: "line-temps", Revision: 2, State: "running", WatermarkMs: ago(10 * time.Second), WatermarkLagMs: 10_000},
					{Name: "line-co2", Revision: 1, State: "running", WatermarkMs: ago(20 * time.Second), WatermarkLagMs: 20_000},
					{Name: "local-debug", Revision: 0, State: "running"},
				},
			},
		}
		h.Edges["gw-002"] = &runnelv1.FleetEdge{
			EdgeId: "gw-002", Labels: map[string]string{"site": "plant-7", "hw": "cm4"}, EdgeLabels: map[string]string{"site": "plant-7", "hw": "cm4"},
			Version: "v0.4.0", Os: "linux", Arch: "arm", RegisteredMs: ago(200 * time.Hour), LastSeenMs: ago(90 * time.Minute),
			Connected: false, DesiredGeneration: 8,
			Desired: []*runnelv1.PipelineRef{{Name: "line-temps", Revision: 2}},
			Status: &runnelv1.EdgeStatus{
				AppliedGeneration: 7, DiskUsedBytes: 500 << 20, AtMs: ago(90 * time.Minute),
				ApplyError: "line-temps revision 2: filter: unknown field \"temp\"",
				Pipelines: []*runnelv1.PipelineStatus{
					{Name: "line-temps", Revision: 1, State: "failed", Error: "filter: unknown field \"temp\""},
				},
			},
		}
		h.Edges["gw-003"] = &runnelv1.FleetEdge{
			EdgeId: "gw-003", Labels: map[string]string{"site": "plant-9"}, Version: "v0.3.9",
			RegisteredMs: ago(time.Minute), LastSeenMs: ago(time.Minute),
			Desired: []*runnelv1.PipelineRef{{Name: "line-co2", Revision: 1}},
		}
		staged := &runnelv1.Strategy{Staged: true, Canary: 1, BatchPercent: 50, SoakMs: 30_000, RollbackOnFailure: true, ProgressDeadlineMs: 600_000}
		h.Deployments["plant-7"] = []*runnelv1.Deployment{
			{Spec: &runnelv1.DeploymentSpec{Name: "plant-7", Selector: "site=plant-7", Strategy: staged,
				Pipelines: []*runnelv1.PipelineRef{{Name: "line-temps", Revision: 1}}},
				Version: 1, Author: "alice", CreatedMs: ago(48 * time.Hour),
				Resolved: []*runnelv1.PipelineRef{{Name: "line-temps", Revision: 1}},
				Rollout:  &runnelv1.RolloutStatus{Phase: "superseded", Step: 2, Steps: 3, Targeted: 2, Applied: 2}},
			{Spec: &runnelv1.DeploymentSpec{Name: "plant-7", Selector: "site=plant-7", Strategy: staged,
				Pipelines: []*runnelv1.PipelineRef{{Name: "line-temps"}}},
				Version: 2, Author: "bob", CreatedMs: ago(10 * time.Minute),
				Resolved: []*runnelv1.PipelineRef{{Name: "line-temps", Revision: 2}},
				Rollout: &runnelv1.RolloutStatus{Phase: "progressing", Step: 1, Steps: 3, Targeted: 2, Pending: 1, Applied: 1,
					StepStartedMs: ago(2 * time.Minute), HealthySinceMs: 0, Message: "waiting for gw-002 to apply line-temps@2"}},
		}
		h.Deployments["co2-all"] = []*runnelv1.Deployment{
			{Spec: &runnelv1.DeploymentSpec{Name: "co2-all", Pipelines: []*runnelv1.PipelineRef{{Name: "line-co2", Revision: 1}}},
				Version: 1, Author: "alice", CreatedMs: ago(30 * time.Hour),
				Resolved: []*runnelv1.PipelineRef{{Name: "line-co2", Revision: 1}},
				Rollout:  &runnelv1.RolloutStatus{Phase: "succeeded", Steps: 1, Targeted: 2, Applied: 2}},
		}
		h.Tokens["ci"] = &runnelv1.Token{Name: "ci", Role: "operator", CreatedMs: ago(24 * time.Hour), CreatedBy: "admin"}
		h.Tokens["grafana"] = &runnelv1.Token{Name: "grafana", Role: "viewer", CreatedMs: ago(100 * time.Hour), CreatedBy: "admin"}
		for i, e := range []struct{ who, action, object, before, after string }{
			{"alice", "apply pipeline", "pipeline/line-temps", "", "1"},
			{"bob", "apply pipeline", "pipeline/line-temps", "1", "2"},
			{"bob", "apply deployment", "deployment/plant-7", "1", "2"},
		} {
			h.Audit = append(h.Audit, &runnelv1.AuditEntry{Id: uint64(i + 1), AtMs: ago(time.Duration(30-i) * time.Minute),
				Who: e.who, Action: e.action, Object: e.object, Before: e.before, After: e.after})
		}
		w := fakehub.Now.Truncate(time.Minute).Add(-10 * time.Minute).UnixMilli()
		res := func(dev string, start int64, version uint32, n, avg float64, revs ...uint32) *runnelv1.Result {
			key, _ := structpb.NewStruct(map[string]any{"device": dev})
			vals, _ := structpb.NewStruct(map[string]any{"readings": n, "avg_temp": avg})
			return &runnelv1.Result{Pipeline: "line-temps", Key: key, WindowStart: start, WindowEnd: start + 60_000,
				Version: version, Values: vals, Edges: 1, EmittedMs: start + 61_000, Revisions: revs}
		}
		h.Results = []*runnelv1.Result{
			res("d1", w, 1, 12, 21.25, 1),
			res("d2", w, 1, 3, 19.5, 1),
			res("d1", w+60_000, 1, 10, 21.4333333, 1, 2),
			res("d1", w+60_000, 2, 11, 21.5, 1, 2),
		}
		h.Live = []*runnelv1.Result{res("d1", w+120_000, 1, 9, 22, 2)}
	})
}
