package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/examples"
	"github.com/runnel-io/runnel/hub/config"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/operators/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRun starts the hub from an empty config plus addresses (without the
// fleet API: the built-in demo pipeline is merged), waits for
// /healthz and stops it as SIGTERM does (the context ends).
func TestRun(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("gw-1 0123456789abcdef0123\n"), 0o600)
	httpAddr := freeAddr(t)
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", freeAddr(t), "--edge-tokens-file", tokens, "--fleet-enabled=false"}
	env := []string{"RUNNEL_HUB_HTTP_ADDR=" + httpAddr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, env, &logs) }()

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.HasPrefix(string(body), `{"status":"ok"`) {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthz: %v\n%s", err, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := client.Get("http://" + httpAddr + "/v1/pipelines")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"name":"line-temps"`) {
		t.Errorf("the demo pipeline is not served: %s", body)
	}
	client.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no shutdown")
	}
	for _, want := range []string{"serving without TLS", "merging the built-in demo pipeline", "runnel-hub: ready", "runnel-hub: stopping"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "hub.db")); err != nil {
		t.Error(err)
	}
}

func TestRunRefuses(t *testing.T) {
	ctx := context.Background()
	if err := run(ctx, []string{"--help"}, nil, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	err := run(ctx, []string{"--grpc-addr", "0.0.0.0:7443", "--merge-retention", "1d"}, nil, io.Discard)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "not a loopback address") || !strings.Contains(err.Error(), "--merge-retention: unknown flag") {
		t.Errorf("bad flags: %v", err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "p.yaml")
	os.WriteFile(bad, []byte("name: p\nwindow: {tumbling: 0s}\n"), 0o600)
	err = run(ctx, []string{"--pipeline", bad, "--data-dir", dir}, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad pipeline: %v", err)
	}
}

// TestRunListsEveryProblem: the hub refuses a bad config and its bad
// pipeline files together, every problem listed with its position, the
// config's first and then each file's in the order the config names them.
func TestRunListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const good = "name: %s\nsource: {mqtt: {topic: \"plant/+/temp\"}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates: {n: count()}\n"
	named := func(name string) string { return strings.Replace(good, "%s", name, 1) }
	cfg := write("hub.yaml", "data_dir: data\nmerge: {key_groups: 0}\npipelines: [syntax.yaml, semantic.yaml, a.yaml, b.yaml]\n")
	syntax := write("syntax.yaml", named("one")+"filter: 'temp > 1\n")
	semantic := write("semantic.yaml", strings.Replace(named("two"), "count()", "count(", 1))
	a := write("a.yaml", named("three"))
	b := write("b.yaml", named("three"))
	err := run(context.Background(), []string{"--config", cfg}, []string{"RUNNEL_HUB_LOG_LEVEL=loud"}, io.Discard)
	want := []string{
		cfg + ":2:21: merge.key_groups: 0 is out of range; must be 1 to 32768",
		`env RUNNEL_HUB_LOG_LEVEL: unknown value "loud"; use info, debug, warn or error`,
		syntax + ":6:9: invalid YAML: found unexpected end of stream (a quote is not closed)",
		semantic + `:5:22: aggregates.n: missing ")" to close the argument list`,
		b + `:1:7: name: "three" is also the name of ` + a + "; pipelines are kept by name, so each needs its own",
	}
	if !errors.Is(err, config.ErrInvalid) || !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("error matches not both config.ErrInvalid and spec.ErrInvalid: %v", err)
	}
	var lines []string
	if err != nil {
		lines = strings.Split(err.Error(), "\n")
	}
	if len(lines) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d:\n got %s\nwant %s...", i+1, lines[i], w)
		}
	}
}

// TestRunFleet: with fleet.enabled the hub serves its fleet store
// (/v1/fleet/...) from fleet.db in the data dir, and a pipeline applied
// there is still there after a restart; with fleet.enabled false the
// Fleet API answers 501.
func TestRunFleet(t *testing.T) {
	dir := t.TempDir()
	for i, enabled := range []bool{true, true, false} {
		httpAddr := freeAddr(t)
		args := []string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", freeAddr(t), "--http-addr", httpAddr,
			"--fleet-tick", "250ms", fmt.Sprintf("--fleet-enabled=%v", enabled)}
		env := []string{"RUNNEL_HUB_API_TOKEN=admin-token-0123456789"}
		ctx, cancel := context.WithCancel(context.Background())
		var logs lockedBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, env, &logs) }()

		client := &http.Client{Timeout: time.Second}
		call := func(method, path, body string) (int, string) {
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				req, _ := http.NewRequest(method, "http://"+httpAddr+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer admin-token-0123456789")
				resp, err := client.Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					return resp.StatusCode, string(b)
				}
				if time.Now().After(deadline) {
					t.Fatalf("no HTTP listener: %v\n%s", err, logs.String())
				}
			}
		}
		if i == 0 {
			spec, _ := json.Marshal(map[string]string{"spec": string(examples.LineTemps), "file": "line-temps.yaml"})
			if code, body := call("POST", "/v1/fleet/pipelines", string(spec)); code != 200 {
				t.Fatalf("apply a pipeline: %d %s", code, body)
			}
		}
		code, body := call("GET", "/v1/fleet/pipelines", "")
		client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		switch {
		case enabled && (code != 200 || !strings.Contains(body, `"name":"line-temps"`)):
			t.Errorf("run %d: fleet pipelines: %d %s", i, code, body)
		case !enabled && code != 501:
			t.Errorf("fleet disabled: %d %s", code, body)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "fleet.db")); err != nil {
		t.Error(err)
	}
}

// TestRunFleetEdgeMetrics: fleet.edge_metrics reaches the server: by
// default (auto, and no edges) /metrics has the per-edge fleet series,
// with never only the aggregates; the config's values are the server's.
func TestRunFleetEdgeMetrics(t *testing.T) {
	for v, s := range map[config.EdgeMetrics]server.EdgeMetrics{config.EdgeMetricsAuto: server.EdgeMetricsAuto,
		config.EdgeMetricsAlways: server.EdgeMetricsAlways, config.EdgeMetricsNever: server.EdgeMetricsNever} {
		if server.EdgeMetrics(v) != s {
			t.Errorf("fleet.edge_metrics %q is server.EdgeMetrics %q", v, s)
		}
	}
	for _, tc := range []struct{ flag, want string }{{"", "runnel_hub_fleet_per_edge_metrics 1\n"}, {"never", "runnel_hub_fleet_per_edge_metrics 0\n"}} {
		dir := t.TempDir()
		httpAddr := freeAddr(t)
		args := []string{"--data-dir", dir, "--grpc-addr", freeAddr(t), "--http-addr", httpAddr}
		if tc.flag != "" {
			args = append(args, "--fleet-edge-metrics", tc.flag)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var logs lockedBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, nil, &logs) }()
		client := &http.Client{Timeout: time.Second}
		var body string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			resp, err := client.Get("http://" + httpAddr + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no /metrics: %v\n%s", err, logs.String())
			}
		}
		client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(body, tc.want) {
			t.Errorf("--fleet-edge-metrics %q: /metrics lacks %q", tc.flag, tc.want)
		}
	}
}

// TestGCPercentDefersToGOGC: gc_percent applies unless GOGC is in the
// environment, which the Go runtime has applied already.
func TestGCPercentDefersToGOGC(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want bool
	}{{nil, false}, {[]string{"GOGCX=1", "XGOGC=2"}, false}, {[]string{"HOME=/", "GOGC=200"}, true}, {[]string{"GOGC="}, true}} {
		if got := hasEnv(tc.env, "GOGC"); got != tc.want {
			t.Errorf("hasEnv(%q, GOGC) = %v", tc.env, got)
		}
	}
}
