package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/fakehub"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBinary builds runnelctl and runs it as a process against the fake
// hub: the exit codes and streams a script sees.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "runnelctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	h := fakehub.Start(t)
	h.Token = "s3cret"
	h.AddPipeline("line-temps", "name: line-temps\nsource: {mqtt: {topic: \"t/+\"}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates: {n: count()}\n", "alice")
	h.Do(func(h *fakehub.Hub) {
		h.Deployments["d"] = []*runnelv1.Deployment{{Spec: &runnelv1.DeploymentSpec{Name: "d"}, Version: 1,
			Rollout: &runnelv1.RolloutStatus{Phase: "failed", Message: "canary gw-1 failed"}}}
	})
	home := t.TempDir()
	tokenFile := filepath.Join(home, "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	run := func(env []string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "RUNNEL_HUB=" + h.Addr}, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%q: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	auth := []string{"RUNNEL_TOKEN_FILE=" + tokenFile}
	for _, tc := range []struct {
		env  []string
		args []string
		exit int
		out  string // in stdout (exit 0) or stderr
	}{
		{auth, []string{"get", "pipelines"}, 0, "line-temps   1"},
		{auth, []string{"get", "pipeline", "nope"}, 3, "runnelctl: get pipeline nope: pipeline nope not found (NotFound)"},
		{nil, []string{"get", "pipelines"}, 4, "(Unauthenticated); give an API token"},
		{auth, []string{"get", "pipelines", "--frobnicate"}, 2, "unknown flag: --frobnicate"},
		{auth, []string{"rollout", "status", "d", "--watch", "--interval", "1ms"}, 6, "rollout of deployment d version 1 failed"},
		{auth, []string{"rollout", "resume", "d"}, 5, "(FailedPrecondition)"},
		{auth, []string{"--hub", "127.0.0.1:1", "version", "--timeout", "2s"}, 1, "(Unavailable)"},
		{auth, []string{"version", "--client"}, 0, "runnelctl "},
		{auth, []string{"--help"}, 0, "Exit codes:"},
	} {
		code, stdout, stderr := run(tc.env, tc.args...)
		where := stdout
		if tc.exit != 0 {
			where = stderr
		}
		if code != tc.exit || !strings.Contains(where, tc.out) {
			t.Errorf("%q: exit %d (want %d)\nstdout %s\nstderr %s", tc.args, code, tc.exit, stdout, stderr)
		}
		if strings.Contains(stdout+stderr, "s3cret") {
			t.Errorf("%q printed the token", tc.args)
		}
	}
	// apply through stdin, refused by the hub.
	h.Fail("ApplyPipeline", status.Error(codes.PermissionDenied, "viewer tokens cannot apply"))
	cmd := exec.Command(bin, "apply", "-f", "-")
	cmd.Env = append([]string{"HOME=" + home, "RUNNEL_HUB=" + h.Addr}, auth...)
	cmd.Stdin = strings.NewReader("name: p\nsource: {mqtt: {topic: a}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates: {n: count()}\n")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 4 || !strings.Contains(string(out), "apply pipeline p (<stdin>:1:1): viewer tokens cannot apply (PermissionDenied)") {
		t.Errorf("apply -f -: exit %d\n%s", code, out)
	}
}
