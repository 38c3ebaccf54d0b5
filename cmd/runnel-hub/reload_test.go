package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestRunReloadsEdgeTokensOnHangup: the hub re-reads its edge tokens file
// on SIGHUP: an edge added comes in, one removed is cut off, and a file
// with a problem is refused, logged with its line, the tokens before it
// kept.
func TestRunReloadsEdgeTokensOnHangup(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	write := func(s string) {
		if err := os.WriteFile(tokens, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("gw-1 token-one-0123456789\n")
	grpcAddr := freeAddr(t)
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", grpcAddr, "--http-addr", freeAddr(t),
		"--edge-tokens-file", tokens, "--fleet-enabled=false"}
	ctx, cancel := context.WithCancel(context.Background())
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, nil, &logs) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("log lacks %q:\n%s", want, logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLog("runnel-hub: ready")

	// Each stream on a connection of its own, as an edge's.
	hello := func(edge, tok string) (grpc.BidiStreamingClient[runnelv1.SyncRequest, runnelv1.SyncResponse], error) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		s, err := runnelv1.NewUplinkClient(conn).Sync(sctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: edge, Epoch: 1, NextSeq: 1}}})
		_, err = s.Recv()
		return s, err
	}
	gw1, err := hello("gw-1", "token-one-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hello("gw-2", "token-two-0123456789"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gw-2 before its token: %v", err)
	}

	write("# gw-1 retired\ngw-2 token-two-0123456789\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog("edge tokens reloaded")
	for err == nil {
		_, err = gw1.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("gw-1's stream after its token went: %v", err)
	}
	if _, err := hello("gw-2", "token-two-0123456789"); err != nil {
		t.Errorf("gw-2 after its token came: %v", err)
	}

	write("gw-2 token-two-0123456789\ngw-3 short\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog("edge tokens not reloaded")
	if !strings.Contains(logs.String(), "tokens:2:") {
		t.Errorf("the refusal does not name the line:\n%s", logs.String())
	}
	if _, err := hello("gw-2", "token-two-0123456789"); err != nil {
		t.Errorf("gw-2 after a refused reload: %v", err)
	}
}
