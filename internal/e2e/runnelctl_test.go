package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/testproc"
)

// TestRunnelctlAgainstHub runs the runnelctl binary against a real
// runnel-hub process: apply a pipeline and a deployment, read them back,
// and check that every refusal (a spec with errors, an unknown manifest
// field, a selector that does not parse, a viewer deploying, an unknown
// deployment) exits with its documented code, says where the problem is,
// and changes nothing.
func TestRunnelctlAgainstHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs runnel-hub and runnelctl")
	}
	dir := t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-hub", "../../cmd/runnelctl")
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("gw-1 edge-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freePort(t)
	hub := &testproc.Proc{Name: "hub", Args: []string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--grpc-addr", grpcAddr, "--http-addr", freePort(t), "--edge-tokens-file", tokens, "--api-token", "admin-token-0123456789"}}
	hub.Start(t)
	defer hub.Kill()
	hub.WaitLog(t, "hub: listening")

	ctl := func(token string, stdin string, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, "runnelctl"), args...)
		cmd.Env = append(os.Environ(), "RUNNEL_HUB="+grpcAddr, "RUNNEL_TOKEN="+token, "XDG_CONFIG_HOME="+dir)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	const admin = "admin-token-0123456789"
	revisions := func() int {
		t.Helper()
		code, out, errs := ctl(admin, "", "get", "revisions", "line-temps", "-o", "json")
		if code == 3 {
			return 0
		}
		if code != 0 {
			t.Fatalf("get revisions: %d %s", code, errs)
		}
		var v struct {
			Revisions []json.RawMessage `json:"revisions"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("get revisions -o json: %v\n%s", err, out)
		}
		return len(v.Revisions)
	}

	// A spec with errors: every problem with its file and line, nothing stored.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: line-temps\nsource: {mqtt: {topic: \"plant/+/temp\"}}\nevent_time: {field: ts}\nwindow: {tumbling: soon}\naggregates: {n: cnt()}\n"), 0o644)
	code, _, errs := ctl(admin, "", "apply", "-f", bad)
	if code != 2 || !strings.Contains(errs, "bad.yaml:4:") || !strings.Contains(errs, "bad.yaml:5:") {
		t.Errorf("apply of a bad spec: exit %d\n%s", code, errs)
	}
	if n := revisions(); n != 0 {
		t.Errorf("a refused spec stored %d revisions", n)
	}

	// The pipeline and a deployment.
	deploy := filepath.Join(dir, "deploy.yaml")
	os.WriteFile(deploy, []byte("kind: Deployment\nname: line-temps\nselector: site=plant-7\npipelines: [{name: line-temps}]\nstrategy: {staged: true, canary: 1, batch_percent: 50, soak: 1s}\n"), 0o644)
	code, out, errs := ctl(admin, "", "apply", "-f", "../../examples/line-temps.yaml", "-f", deploy)
	if code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errs)
	}
	if n := revisions(); n != 1 {
		t.Fatalf("%d revisions after apply, want 1", n)
	}
	code, out, _ = ctl(admin, "", "get", "deployments")
	if code != 0 || !strings.Contains(out, "line-temps") {
		t.Errorf("get deployments: %d\n%s", code, out)
	}
	// Again: nothing changes.
	if code, out, errs = ctl(admin, "", "apply", "-f", "../../examples/line-temps.yaml", "-f", deploy); code != 0 || revisions() != 1 {
		t.Errorf("apply again: exit %d, %d revisions\n%s%s", code, revisions(), out, errs)
	}

	// An unknown field in a manifest: file:line:col, nothing sent.
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("kind: Deployment\nname: other\nselectr: site=x\npipelines: [{name: line-temps}]\n"), 0o644)
	if code, _, errs = ctl(admin, "", "apply", "-f", typo); code != 2 || !strings.Contains(errs, "typo.yaml:3:1") {
		t.Errorf("apply with an unknown field: exit %d\n%s", code, errs)
	}
	// A selector that does not parse, at the hub.
	if code, _, errs = ctl(admin, "", "get", "edges", "-l", "hw in (rpi4"); code != 2 {
		t.Errorf("get edges with a bad selector: exit %d\n%s", code, errs)
	}
	// A viewer cannot deploy.
	code, secret, errs := ctl(admin, "", "token", "create", "watcher", "--role", "viewer")
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errs)
	}
	viewer := strings.TrimSpace(secret)
	if code, _, _ = ctl(viewer, "", "get", "pipelines"); code != 0 {
		t.Errorf("a viewer cannot read: exit %d", code)
	}
	v2 := filepath.Join(dir, "v2.yaml")
	src, _ := os.ReadFile("../../examples/line-temps.yaml")
	os.WriteFile(v2, bytes.Replace(src, []byte("allowed_lateness: 30s"), []byte("allowed_lateness: 1m"), 1), 0o644)
	if code, _, errs = ctl(viewer, "", "apply", "-f", v2); code != 4 {
		t.Errorf("a viewer's apply: exit %d, want 4\n%s", code, errs)
	}
	// An edge token calls nothing here.
	if code, _, _ = ctl("edge-token-0123456789", "", "get", "pipelines"); code != 4 {
		t.Errorf("an edge token's get: exit %d, want 4", code)
	}
	if n := revisions(); n != 1 {
		t.Errorf("refusals changed the revisions: %d", n)
	}
	// Not found, and a diff between revisions.
	if code, _, _ = ctl(admin, "", "rollout", "status", "nope"); code != 3 {
		t.Errorf("rollout status of an unknown deployment: exit %d, want 3", code)
	}
	if code, out, errs = ctl(admin, "", "apply", "-f", v2); code != 0 {
		t.Fatalf("apply revision 2: %d %s", code, errs)
	}
	if code, out, _ = ctl(admin, "", "diff", "pipeline", "line-temps", "1", "2"); code != 0 || !strings.Contains(out, "+allowed_lateness: 1m") {
		t.Errorf("diff: exit %d\n%s", code, out)
	}
	// Delete is refused while the deployment names the pipeline.
	if code, _, errs = ctl(admin, "", "delete", "pipeline", "line-temps"); code != 5 || revisions() != 2 {
		t.Errorf("delete of a deployed pipeline: exit %d, want 5\n%s", code, errs)
	}
	code, out, _ = ctl(admin, "", "audit")
	if code != 0 || strings.Count(out, "pipeline.apply") != 2 || !strings.Contains(out, "token.create") {
		t.Errorf("audit: exit %d\n%s", code, out)
	}
}
