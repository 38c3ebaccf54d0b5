package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/fakehub"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// transcript renders a run for a golden file.
func transcript(args []string, r result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ runnelctl %s\n%s", strings.Join(args, " "), r.stdout)
	if r.stderr != "" {
		fmt.Fprintf(&b, "--- stderr\n%s", r.stderr)
	}
	fmt.Fprintf(&b, "--- exit %d\n", r.code)
	return b.String()
}

// writeFile writes a file under dir and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGolden runs each command against the seeded fake hub and compares
// its output with testdata/NAME.golden (go test -update rewrites them).
func TestGolden(t *testing.T) {
	dir := t.TempDir()
	changed := writeFile(t, dir, "changed.yaml", "# line-temps, with a new aggregate\n"+tempsV2+"  max_temp: max(temp)\n---\n"+co2+
		"---\nkind: Deployment\nname: plant-7\nselector: site=plant-7\npipelines: [{name: line-temps}, {name: line-co2}]\n"+
		"strategy: {staged: true, canary: 1, batch_percent: 50, soak: 30s, rollback_on_failure: true, progress_deadline: 10m}\n")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"get-pipelines", []string{"get", "pipelines"}},
		{"get-pipelines-wide", []string{"get", "pipelines", "-o", "wide"}},
		{"get-pipeline", []string{"get", "pipeline", "line-co2"}},
		{"get-revisions", []string{"get", "revisions", "line-temps"}},
		{"get-edges", []string{"get", "edges"}},
		{"get-edges-wide", []string{"get", "edges", "-o", "wide"}},
		{"get-edges-selector", []string{"get", "edges", "-l", "site=plant-9"}},
		{"get-deployments", []string{"get", "deployments"}},
		{"get-deployments-wide", []string{"get", "deploy", "-o", "wide"}},
		{"get-deployment-yaml", []string{"get", "deployment", "co2-all", "-o", "yaml"}},
		{"describe-pipeline", []string{"describe", "pipeline", "line-temps"}},
		{"describe-edge", []string{"describe", "edge", "gw-001"}},
		{"describe-edge-failed", []string{"describe", "edge", "gw-002"}},
		{"describe-edge-new", []string{"describe", "edge", "gw-003"}},
		{"describe-deployment", []string{"describe", "deployment", "plant-7"}},
		{"rollout-status", []string{"rollout", "status", "plant-7"}},
		{"diff-pipeline", []string{"diff", "pipeline", "line-temps", "1", "2"}},
		{"apply-dry-run", []string{"apply", "-f", changed, "--dry-run"}},
		{"diff-file", []string{"diff", "-f", changed}},
		{"results", []string{"results", "line-temps"}},
		{"results-all-versions", []string{"results", "line-temps", "--all-versions", "--key", "device=d1"}},
		{"audit", []string{"audit", "--limit", "2"}},
		{"token-list", []string{"token", "list"}},
		{"version", []string{"version"}},
		{"not-found", []string{"describe", "deployment", "nope"}},
		{"usage", []string{"get", "pipelines", "a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehub.Start(t)
			seed(h)
			r := newRunner(t, h).run(tc.args...)
			out := strings.ReplaceAll(transcript(tc.args, r), h.Addr, "HUB")
			out = strings.ReplaceAll(out, dir, "DIR")
			golden(t, tc.name, out)
		})
	}
}

// TestExitCodes: each gRPC code of a refusal gives its exit code, and
// the error is one line on stderr that names the object.
func TestExitCodes(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	for _, tc := range []struct {
		code codes.Code
		exit int
	}{
		{codes.InvalidArgument, ExitUsage}, {codes.OutOfRange, ExitUsage},
		{codes.NotFound, ExitNotFound},
		{codes.Unauthenticated, ExitPermission}, {codes.PermissionDenied, ExitPermission},
		{codes.FailedPrecondition, ExitConflict}, {codes.AlreadyExists, ExitConflict}, {codes.Aborted, ExitConflict},
		{codes.Unavailable, ExitError}, {codes.Internal, ExitError}, {codes.Unknown, ExitError},
		{codes.DeadlineExceeded, ExitError}, {codes.ResourceExhausted, ExitError}, {codes.Unimplemented, ExitError},
		{codes.DataLoss, ExitError}, {codes.Canceled, ExitError},
	} {
		h.Fail("GetPipeline", status.Error(tc.code, "the hub says no\nfor a reason"))
		res := r.run("get", "pipeline", "line-temps")
		if res.code != tc.exit {
			t.Errorf("%v: exit %d, want %d", tc.code, res.code, tc.exit)
		}
		lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "runnelctl: get pipeline line-temps: the hub says no; for a reason ("+tc.code.String()+")") {
			t.Errorf("%v: stderr %q", tc.code, res.stderr)
		}
		if res.stdout != "" {
			t.Errorf("%v: stdout %q", tc.code, res.stdout)
		}
	}
	h.Fail("GetPipeline", nil)
	if res := r.run("get", "pipeline", "line-temps"); res.code != ExitOK {
		t.Errorf("after the failures: exit %d, %s", res.code, res.stderr)
	}
}

// TestUsageErrors: bad command lines exit 2 before any call.
func TestUsageErrors(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	for _, args := range [][]string{
		{"get"}, {"get", "things"}, {"get", "pipelines", "--bogus"}, {"get", "pipelines", "-o", "xml"},
		{"get", "pipelines", "-l", "a=b"}, {"get", "revisions"}, {"describe", "pipeline"}, {"apply"},
		{"apply", "-f", "/nonexistent/x.yaml"}, {"rollout", "status"}, {"rollout", "status", "x", "--interval", "0s"},
		{"label", "edge", "gw-001"}, {"label", "edge", "gw-001", "a=b", "a-"}, {"label", "edge", "gw-001", "a-", "a=b"}, {"label", "edge", "gw-001", "junk"},
		{"diff", "pipeline", "x", "1", "two"}, {"diff"}, {"results", "p", "--from", "yesterday"}, {"results", "p", "--key", "x"},
		{"results", "p", "-o", "yaml"}, {"token", "create", "x"}, {"token", "create", "x", "--role", "root"},
		{"audit", "--limit", "0"}, {"bogus"}, {"--timeout", "x", "version"}, {"--insecure", "--ca-file", "ca.pem", "version"},
	} {
		res := r.run(args...)
		if res.code != ExitUsage {
			t.Errorf("%q: exit %d, want %d; stderr %q", args, res.code, ExitUsage, res.stderr)
		}
		if !strings.HasPrefix(res.stderr, "runnelctl: ") {
			t.Errorf("%q: stderr %q", args, res.stderr)
		}
	}
	if n := len(h.Reqs); n != 0 {
		t.Errorf("usage errors made %d calls to the hub", n)
	}
}

// state is what the fake hub holds, for comparisons before and after.
func state(h *fakehub.Hub) string {
	var b strings.Builder
	h.Do(func(h *fakehub.Hub) {
		for _, name := range []string{"line-temps", "line-co2", "line-hum"} {
			for _, r := range h.Pipelines[name] {
				fmt.Fprintf(&b, "pipeline %s@%d %s\n", name, r.Revision, r.Hash)
			}
		}
		for _, name := range []string{"plant-7", "co2-all"} {
			for _, d := range h.Deployments[name] {
				fmt.Fprintf(&b, "deployment %s v%d %s\n", name, d.Version, d.Rollout.GetPhase())
			}
		}
		fmt.Fprintf(&b, "audit %d\n", len(h.Audit))
	})
	return b.String()
}

const fleetManifest = `# pipelines first in the file, deployment last
kind: Deployment
name: plant-9
selector: site=plant-9
pipelines: [{name: line-hum}]
---
kind: Pipeline
spec:
  name: line-hum
  source: {mqtt: {topic: "plant/+/hum"}}
  event_time: {field: ts}
  window: {tumbling: 1m}
  aggregates: {avg_hum: avg(hum)}
`

// TestApplyDryRun: --dry-run sends dry_run on every change call and
// stores nothing.
func TestApplyDryRun(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	before := state(h)
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", fleetManifest)
	writeFile(t, dir, "b.yml", tempsV2+"  max_temp: max(temp)\n")
	writeFile(t, dir, "c.yaml", "kind: Deployment\nname: co2-all\npipelines: [{name: line-co2, revision: 1}]\n")
	writeFile(t, dir, "ignored.txt", "not yaml")
	res := newRunner(t, h).run("apply", "-f", dir, "--dry-run")
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{
		"pipeline/line-hum created (revision 1, dry run)",
		"pipeline/line-temps changed (revision 3, dry run)",
		"deployment/plant-9 created (not checked by the hub: pipeline line-hum does not exist on it yet, dry run)",
		"deployment/co2-all unchanged (version 1, dry run)",
	} {
		if !strings.Contains(res.stdout, want+"\n") {
			t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
		}
	}
	if after := state(h); after != before {
		t.Errorf("a dry run changed the hub:\n%s\nthen\n%s", before, after)
	}
	h.Do(func(h *fakehub.Hub) {
		n := 0
		for _, m := range h.Reqs {
			switch req := m.(type) {
			case *runnelv1.ApplyPipelineRequest:
				n++
				if !req.DryRun {
					t.Errorf("ApplyPipeline without dry_run: %v", req)
				}
			case *runnelv1.ApplyDeploymentRequest:
				n++
				if !req.DryRun {
					t.Errorf("ApplyDeployment without dry_run: %v", req)
				}
			}
		}
		if n != 3 {
			t.Errorf("%d apply calls, want 3 (two pipelines, one deployment)", n)
		}
	})
}

// TestApply: pipelines are applied before deployments, each says what
// happened, and applying again changes nothing.
func TestApply(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	path := writeFile(t, t.TempDir(), "fleet.yaml", fleetManifest)
	r := newRunner(t, h)
	res := r.run("apply", "-f", path)
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if want := "pipeline/line-hum created (revision 1)\ndeployment/plant-9 created (version 1)\n"; res.stdout != want {
		t.Errorf("stdout\n%s\nwant\n%s", res.stdout, want)
	}
	h.Do(func(h *fakehub.Hub) {
		var order []string
		for _, m := range h.Reqs {
			switch req := m.(type) {
			case *runnelv1.ApplyPipelineRequest:
				order = append(order, fmt.Sprintf("pipeline dry=%v", req.DryRun))
				// The spec keeps the file's line numbers: the wrapper's
				// spec: starts at line 9.
				if req.File != path || !strings.HasPrefix(req.Spec, strings.Repeat("\n", 8)+"  name: line-hum\n") {
					t.Errorf("ApplyPipeline file %q spec %q", req.File, req.Spec)
				}
			case *runnelv1.ApplyDeploymentRequest:
				order = append(order, fmt.Sprintf("deployment dry=%v", req.DryRun))
			}
		}
		if got := strings.Join(order, ", "); got != "pipeline dry=true, pipeline dry=false, deployment dry=false" {
			t.Errorf("calls: %s", got)
		}
	})
	before := state(h)
	res = r.run("apply", "-f", path)
	if want := "pipeline/line-hum unchanged (revision 1)\ndeployment/plant-9 unchanged (version 1)\n"; res.code != ExitOK || res.stdout != want {
		t.Errorf("again: exit %d\n%s\nwant\n%s%s", res.code, res.stdout, want, res.stderr)
	}
	if after := state(h); after != before {
		t.Errorf("applying the same manifest again changed the hub:\n%s\nthen\n%s", before, after)
	}
	// The same spec at other lines (here: moved to a file of its own) is
	// unchanged too; it would otherwise differ in its leading lines.
	moved := writeFile(t, t.TempDir(), "hum.yaml", "kind: Pipeline\nspec:\n  name: line-hum\n  source: {mqtt: {topic: \"plant/+/hum\"}}\n"+
		"  event_time: {field: ts}\n  window: {tumbling: 1m}\n  aggregates: {avg_hum: avg(hum)}\n")
	if res := r.run("apply", "-f", moved); res.code != ExitOK || res.stdout != "pipeline/line-hum unchanged (revision 1)\n" {
		t.Errorf("moved: exit %d %q %s", res.code, res.stdout, res.stderr)
	}
	if after := state(h); after != before {
		t.Errorf("applying the same spec at other lines changed the hub:\n%s\nthen\n%s", before, after)
	}
}

// TestApplyLocalProblems: a manifest with problems is refused with every
// problem of every file, and the hub is not called at all.
func TestApplyLocalProblems(t *testing.T) {
	h := fakehub.Start(t)
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", "kind: Deployment\nname: d\nselectr: x\npipelines: []\n")
	b := writeFile(t, dir, "b.yaml", tempsV1+"---\nkind: Pipeline\nspec:\n  name: p\n  source: {mqtt: {topic: a}}\n  event_time: {field: ts}\n  window: {tumbling: 1m}\n  aggregates: {n: count(}\n")
	res := newRunner(t, h).run("apply", "-f", a, "-f", b)
	want := "runnelctl: 2 problems; nothing applied:\n" +
		a + `:3:1: unknown field "selectr" (did you mean "selector"? known fields: kind, name, selector, pipelines, strategy)` + "\n" +
		b + `:16:24: aggregates.n: missing ")" to close the argument list` + "\n"
	if res.code != ExitUsage || res.stderr != want || res.stdout != "" {
		t.Errorf("exit %d, stderr:\n%s\nwant\n%s", res.code, res.stderr, want)
	}
	if len(h.Reqs) != 0 {
		t.Errorf("the hub was called %d times", len(h.Reqs))
	}
}

// TestApplyRefusedByHub: when the hub refuses a spec, every problem of
// its SpecProblems detail is printed, the exit code is 2, and nothing is
// stored: no call without dry_run was made.
func TestApplyRefusedByHub(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	before := state(h)
	st, _ := status.New(codes.InvalidArgument, "invalid pipeline spec:\nf.yaml:3:9: x: y").WithDetails(&runnelv1.SpecProblems{Problems: []*runnelv1.SpecProblem{
		{File: "fleet.yaml", Line: 11, Column: 3, Field: "source.mqtt.topic", Message: "topic plant/+/hum is taken by pipeline line-temps"},
		{File: "fleet.yaml", Line: 13, Column: 15, Field: "aggregates.avg_hum", Message: "too many aggregates"},
	}})
	h.Fail("ApplyPipeline", st.Err())
	path := writeFile(t, t.TempDir(), "fleet.yaml", fleetManifest)
	res := newRunner(t, h).run("apply", "-f", path)
	want := "runnelctl: apply pipeline line-hum (" + path + ":9:3): invalid pipeline spec (InvalidArgument)\n" +
		"fleet.yaml:11:3: source.mqtt.topic: topic plant/+/hum is taken by pipeline line-temps\n" +
		"fleet.yaml:13:15: aggregates.avg_hum: too many aggregates\n" +
		"(nothing applied: the hub did not accept 1 pipeline)\n"
	if res.code != ExitUsage || res.stderr != want {
		t.Errorf("exit %d, stderr\n%s\nwant\n%s", res.code, res.stderr, want)
	}
	if after := state(h); after != before {
		t.Errorf("a refused apply changed the hub")
	}
	if n := h.Count("ApplyDeployment"); n != 0 {
		t.Errorf("%d ApplyDeployment calls after the refusal", n)
	}
}

// TestOutputParsesBack: -o json and -o yaml print the API objects, which
// parse back into the protos the hub sent.
func TestOutputParsesBack(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	for _, tc := range []struct {
		args []string
		msg  proto.Message
		want func() proto.Message
	}{
		{[]string{"get", "pipelines"}, &runnelv1.ListManagedPipelinesResponse{}, func() proto.Message {
			resp, _ := h.ListManagedPipelines(context.Background(), nil)
			return resp
		}},
		{[]string{"get", "revisions", "line-temps"}, &runnelv1.ListRevisionsResponse{}, func() proto.Message {
			return &runnelv1.ListRevisionsResponse{Revisions: h.Pipelines["line-temps"]}
		}},
		{[]string{"get", "edges"}, &runnelv1.ListFleetEdgesResponse{}, func() proto.Message {
			resp, _ := h.ListFleetEdges(context.Background(), &runnelv1.ListFleetEdgesRequest{})
			return resp
		}},
		{[]string{"get", "edge", "gw-001"}, &runnelv1.FleetEdge{}, func() proto.Message { return h.Edges["gw-001"] }},
		{[]string{"get", "deployments"}, &runnelv1.ListDeploymentsResponse{}, func() proto.Message {
			resp, _ := h.ListDeployments(context.Background(), nil)
			return resp
		}},
		{[]string{"results", "line-temps", "--all-versions"}, &runnelv1.QueryResultsResponse{}, func() proto.Message {
			return &runnelv1.QueryResultsResponse{Results: h.Results}
		}},
		{[]string{"audit"}, &runnelv1.ListAuditResponse{}, func() proto.Message { return &runnelv1.ListAuditResponse{Entries: h.Audit} }},
		{[]string{"token", "list"}, &runnelv1.ListTokensResponse{}, func() proto.Message {
			resp, _ := h.ListTokens(context.Background(), nil)
			return resp
		}},
	} {
		for _, format := range []string{"json", "yaml"} {
			if tc.args[0] == "results" && format == "yaml" {
				continue // results take table or json
			}
			res := r.run(append(tc.args, "-o", format)...)
			if res.code != ExitOK {
				t.Errorf("%q -o %s: exit %d: %s", tc.args, format, res.code, res.stderr)
				continue
			}
			data := []byte(res.stdout)
			if format == "yaml" {
				var v any
				if err := yaml.Unmarshal(data, &v); err != nil {
					t.Fatalf("%q -o yaml: %v", tc.args, err)
				}
				data = toJSON(t, v)
			}
			got := proto.Clone(tc.msg)
			if err := protojson.Unmarshal(data, got); err != nil {
				t.Errorf("%q -o %s does not parse back: %v\n%s", tc.args, format, err, res.stdout)
				continue
			}
			want := tc.want()
			if !proto.Equal(got, want) {
				t.Errorf("%q -o %s:\n got %v\nwant %v", tc.args, format, got, want)
			}
		}
	}
}

// TestRolloutWatch: --watch follows the rollout to its end; succeeded
// exits 0, failed and aborted 6, and a hub unreachable meanwhile is
// retried.
func TestRolloutWatch(t *testing.T) {
	for _, tc := range []struct {
		final string
		exit  int
	}{{"succeeded", ExitOK}, {"failed", ExitRolloutFailed}, {"aborted", ExitRolloutFailed}} {
		t.Run(tc.final, func(t *testing.T) {
			h := fakehub.Start(t)
			seed(h)
			h.Script("plant-7",
				&runnelv1.RolloutStatus{Phase: "progressing", Step: 0, Steps: 3, Targeted: 4, Pending: 4},
				&runnelv1.RolloutStatus{Phase: "progressing", Step: 0, Steps: 3, Targeted: 4, Pending: 4},
				&runnelv1.RolloutStatus{Phase: "progressing", Step: 1, Steps: 3, Targeted: 4, Pending: 3, Applied: 1},
				&runnelv1.RolloutStatus{Phase: tc.final, Step: 2, Steps: 3, Targeted: 4, Applied: 3, Failed: 1, FailedEdges: []string{"gw-004"}},
			)
			// Bounded, so that a watch that does not end fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := newRunner(t, h).runCtx(ctx, "rollout", "status", "plant-7", "--watch", "--interval", "1ms")
			if res.code != tc.exit {
				t.Errorf("exit %d, want %d; stderr %s", res.code, tc.exit, res.stderr)
			}
			lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
			if len(lines) != 3 || !strings.Contains(lines[2], tc.final+", step 3 of 3, 3 of 4 edges applied, 0 pending, 1 failed (failed: gw-004)") {
				t.Errorf("stdout (a line per change):\n%s", res.stdout)
			}
			if tc.exit != ExitOK && !strings.Contains(res.stderr, "rollout of deployment plant-7 version 2 "+tc.final) {
				t.Errorf("stderr %q", res.stderr)
			}
		})
	}
	t.Run("hub away for a while", func(t *testing.T) {
		h := fakehub.Start(t)
		seed(h)
		h.Fail("GetDeployment", status.Error(codes.Unavailable, "hub restarting"))
		h.Script("plant-7", &runnelv1.RolloutStatus{Phase: "succeeded", Steps: 3, Step: 2})
		go func() {
			for h.Count("GetDeployment") < 3 {
				time.Sleep(time.Millisecond)
			}
			h.Fail("GetDeployment", nil)
		}()
		res := newRunner(t, h).run("rollout", "status", "plant-7", "-w", "--interval", "1ms")
		if res.code != ExitOK || strings.Count(res.stderr, "hub restarting") != 1 || !strings.Contains(res.stderr, "answers again") {
			t.Errorf("exit %d; stderr %s", res.code, res.stderr)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		h := fakehub.Start(t)
		seed(h)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		res := newRunner(t, h).runCtx(ctx, "rollout", "status", "plant-7", "-w", "--interval", "1ms")
		if res.code != ExitError || !strings.Contains(res.stderr, "stopped watching") {
			t.Errorf("exit %d; stderr %s", res.code, res.stderr)
		}
	})
}

// TestRolloutActions: pause, resume, abort and undo, and a refusal the
// hub's state causes exits 5 and changes nothing.
func TestRolloutActions(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	for _, step := range []struct {
		args  []string
		exit  int
		phase string
	}{
		{[]string{"resume", "plant-7"}, ExitConflict, "progressing"},
		{[]string{"pause", "plant-7"}, ExitOK, "paused"},
		{[]string{"pause", "plant-7"}, ExitConflict, "paused"},
		{[]string{"resume", "plant-7"}, ExitOK, "progressing"},
		{[]string{"abort", "plant-7"}, ExitOK, "aborted"},
		{[]string{"abort", "plant-7"}, ExitConflict, "aborted"},
		{[]string{"undo", "plant-7"}, ExitOK, "progressing"},
		{[]string{"undo", "co2-all"}, ExitConflict, "succeeded"},
		{[]string{"pause", "nope"}, ExitNotFound, ""},
	} {
		res := r.run(append([]string{"rollout"}, step.args...)...)
		if res.code != step.exit {
			t.Errorf("%q: exit %d, want %d: %s", step.args, res.code, step.exit, res.stderr)
		}
		if step.phase == "" {
			continue
		}
		var phase string
		h.Do(func(h *fakehub.Hub) {
			vs := h.Deployments[step.args[1]]
			phase = vs[len(vs)-1].Rollout.GetPhase()
		})
		if phase != step.phase {
			t.Errorf("%q: phase %s, want %s", step.args, phase, step.phase)
		}
	}
	var versions int
	h.Do(func(h *fakehub.Hub) { versions = len(h.Deployments["plant-7"]) })
	if versions != 3 {
		t.Errorf("undo made %d versions of plant-7, want 3", versions)
	}
}

// TestLabel: k=v sets, k- removes, and the request says so.
func TestLabel(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	res := newRunner(t, h).run("label", "edge", "gw-003", "hw=rpi4", "site-", "zone=b")
	if res.code != ExitOK || res.stdout != "edge/gw-003 labeled: hw=rpi4,zone=b\n" {
		t.Errorf("exit %d: %q %s", res.code, res.stdout, res.stderr)
	}
	h.Do(func(h *fakehub.Hub) {
		req := h.Reqs[len(h.Reqs)-1].(*runnelv1.LabelEdgeRequest)
		want := &runnelv1.LabelEdgeRequest{EdgeId: "gw-003", Set: map[string]string{"hw": "rpi4", "zone": "b"}, Remove: []string{"site"}}
		if !proto.Equal(req, want) {
			t.Errorf("request %v, want %v", req, want)
		}
	})
	if res := newRunner(t, h).run("label", "edge", "gw-404", "a=b"); res.code != ExitNotFound {
		t.Errorf("unknown edge: exit %d", res.code)
	}
}

// TestTokenCreate: the secret is alone on stdout, printed once; the
// notice goes to stderr.
func TestTokenCreate(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	res := r.run("token", "create", "deployer", "--role", "operator")
	if res.code != ExitOK || res.stdout != "rt_deployer_s3cr3t\n" || !strings.Contains(res.stderr, "token/deployer created (role operator)") {
		t.Errorf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := r.run("token", "create", "deployer", "--role", "operator"); res.code != ExitConflict {
		t.Errorf("again: exit %d, want %d", res.code, ExitConflict)
	}
	if res := r.run("token", "revoke", "deployer"); res.code != ExitOK || res.stdout != "token/deployer revoked\n" {
		t.Errorf("revoke: exit %d %q", res.code, res.stdout)
	}
	if res := r.run("token", "revoke", "deployer"); res.code != ExitNotFound {
		t.Errorf("revoke again: exit %d", res.code)
	}
}

// TestResultsFollow: --follow prints the results so far, then the live
// ones, and ends cleanly when interrupted; when the hub drops the
// subscription it subscribes again.
func TestResultsFollow(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"--hub", h.Addr, "results", "line-temps", "--key", "device=d1", "--follow", "-o", "json"}, r.envOf(&stdout, &stderr))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(stdout.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 2 queried and 1 live:\n%s", len(lines), stdout.String())
	}
	for i, l := range lines {
		var res runnelv1.Result
		if err := protojson.Unmarshal([]byte(l), &res); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if want := []uint32{1, 2, 1}[i]; res.Version != want {
			t.Errorf("line %d: version %d, want %d", i, res.Version, want)
		}
	}

	// A dropped subscription: subscribe again and query from the last
	// window seen.
	var last int64
	h.Do(func(h *fakehub.Hub) { h.DropAfterLive, last = true, h.Live[0].WindowStart })
	// requeried counts the queries that started at the last window seen.
	requeried := func() int {
		n := 0
		h.Do(func(h *fakehub.Hub) {
			for _, m := range h.Reqs {
				if q, ok := m.(*runnelv1.QueryResultsRequest); ok && q.FromMs == last {
					n++
				}
			}
		})
		return n
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	var out2, err2 syncBuffer
	go func() {
		done <- Main(ctx2, []string{"--hub", h.Addr, "results", "line-temps", "--key", "device=d1", "--follow", "--resubscribe-delay", "1ms"}, r.envOf(&out2, &err2))
	}()
	for requeried() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel2()
	if code := <-done; code != ExitOK || !strings.Contains(err2.String(), "the hub dropped the subscription (fell behind); subscribing again") {
		t.Errorf("a dropped subscription: exit %d, stderr %s", code, err2.String())
	}
	if n := requeried(); n < 2 {
		t.Errorf("%d queries from the last window seen after drops; want 2 or more", n)
	}

	// A subscription refused outright is an error.
	h.Fail("Subscribe", status.Error(codes.PermissionDenied, "viewer tokens only"))
	if res := r.run("results", "line-temps", "--follow"); res.code != ExitPermission {
		t.Errorf("a refused subscription: exit %d, stderr %s", res.code, res.stderr)
	}
}

func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
