package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/sync/archive"
)

// TestArchiveStatus runs a hub with an archive, asks the running hub for
// the archive's status (runnel-hub archive status, and GET
// /v1/archive/status), stops it and reads the status from its store; and
// refuses an s3:// archive until sync/objstore is wired.
func TestArchiveStatus(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("gw-1 0123456789abcdef0123\n"), 0o600)
	httpAddr := freeAddr(t)
	arch := filepath.Join(dir, "archive")
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", freeAddr(t), "--http-addr", httpAddr,
		"--edge-tokens-file", tokens, "--fleet-enabled=false", "--archive-url", "file://" + arch}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, nil, &logs) }()

	client := &http.Client{Timeout: time.Second}
	var st archive.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + httpAddr + "/v1/archive/status")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && json.Unmarshal(body, &st) == nil {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /v1/archive/status: %v\n%s", err, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(st.LogID) != 16 {
		t.Fatalf("status of the running hub: %+v", st)
	}
	var out bytes.Buffer
	if err := runArchive(append([]string{"status"}, args...), nil, &out); err != nil {
		t.Fatalf("archive status of the running hub: %v", err)
	}
	if !strings.Contains(out.String(), "log "+st.LogID) || !strings.Contains(out.String(), "pending:          0") {
		t.Errorf("archive status of the running hub:\n%s", out.String())
	}
	resp, _ := client.Get("http://" + httpAddr + "/metrics")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"runnel_hub_archive_pending 0", "runnel_hub_archive_rows_total 0", `runnel_hub_archive_failures_total{cause="store"} 0`, "runnel_hub_archive_refused_total 0"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	client.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	out.Reset()
	if err := runArchive(append([]string{"status", "--json"}, args...), nil, &out); err != nil {
		t.Fatalf("archive status of the stopped hub: %v", err)
	}
	var off archive.Status
	if err := json.Unmarshal(out.Bytes(), &off); err != nil || off.LogID != st.LogID {
		t.Fatalf("archive status --json of the stopped hub: %v\n%s", err, out.String())
	}

	err := run(context.Background(), []string{"--data-dir", filepath.Join(dir, "s3"), "--fleet-enabled=false", "--archive-url", "s3://bucket/results"}, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "sync/objstore") {
		t.Fatalf("an s3:// archive: %v", err)
	}
}
