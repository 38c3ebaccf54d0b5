package tests3

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Objects survive a restart on the same port; a stopped server refuses
// connections.
func TestRestartKeepsData(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	cli := s.Client()
	if _, err := cli.PutObject(ctx, "runnel-test", "a/b", strings.NewReader("hello"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if _, err := cli.ListBuckets(ctx); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start()
	port := s.Port()
	s.Restart()
	if s.Port() != port {
		t.Fatal("the port changed")
	}
	obj, err := cli.GetObject(ctx, "runnel-test", "a/b", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, err := io.ReadAll(obj); err != nil || string(b) != "hello" {
		t.Fatalf("after restarts: %q, %v", b, err)
	}
	if !strings.Contains(s.Dump(), "runnel-test") {
		t.Fatalf("dump: %s", s.Dump())
	}
}

func TestFindBinary(t *testing.T) {
	if _, err := findBinary("/nonexistent/versitygw"); err == nil {
		t.Fatal("found a binary that is not there")
	}
	t.Setenv("RUNNEL_VERSITYGW", "/nonexistent/versitygw")
	if _, err := findBinary(""); err == nil {
		t.Fatal("RUNNEL_VERSITYGW ignored")
	}
}

func TestRequired(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "yes": true} {
		t.Setenv("RUNNEL_REQUIRE_SERVERS", v)
		if Required() != want {
			t.Errorf("RUNNEL_REQUIRE_SERVERS=%q: Required() = %v", v, !want)
		}
	}
}
