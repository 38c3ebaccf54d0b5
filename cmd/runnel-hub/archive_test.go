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

	"github.com/runnel-io/runnel/internal/tests3"
	"github.com/runnel-io/runnel/sync/archive"
)

// TestArchiveStatus runs a hub with an archive, in a directory and in a
// bucket of a real S3 server (versitygw), asks the running hub for the
// archive's status (runnel-hub archive status, and GET
// /v1/archive/status), stops it and reads the status from its store; and
// refuses at start an s3:// archive whose bucket does not exist, naming it.
func TestArchiveStatus(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		testArchiveStatus(t, "--archive-url", "file://"+filepath.Join(t.TempDir(), "archive"))
	})
	srv := tests3.Start(t)
	s3 := []string{"--object-store-endpoint", srv.Endpoint(), "--object-store-access-key-id", srv.AccessKey(),
		"--object-store-secret-access-key", srv.SecretKey(), "--object-store-region", "us-east-1"}
	t.Run("s3", func(t *testing.T) {
		testArchiveStatus(t, append([]string{"--archive-url", "s3://runnel-test/results"}, s3...)...)
	})
	t.Run("s3 missing bucket", func(t *testing.T) {
		dir := t.TempDir()
		err := run(context.Background(), append([]string{"--data-dir", filepath.Join(dir, "s3"), "--fleet-enabled=false",
			"--archive-url", "s3://no-such-bucket/results"}, s3...), nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "no-such-bucket") || strings.Contains(err.Error(), srv.SecretKey()) {
			t.Fatalf("an s3:// archive in a missing bucket: %v; want a refusal naming the bucket (and not the secret)", err)
		}
	})
}

func testArchiveStatus(t *testing.T, archiveArgs ...string) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("gw-1 0123456789abcdef0123\n"), 0o600)
	httpAddr := freeAddr(t)
	args := append([]string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", freeAddr(t), "--http-addr", httpAddr,
		"--edge-tokens-file", tokens, "--fleet-enabled=false"}, archiveArgs...)
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

}
