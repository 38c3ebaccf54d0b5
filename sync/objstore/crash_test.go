package objstore

// A real process killed with SIGKILL in the middle of a multipart upload,
// twice; the upload resumes and the object is the file, byte for byte.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/internal/tests3"
)

// crashChildEnv, when set, makes the test binary the child of
// TestCrashMidUpload instead of running tests (see TestMain).
const crashChildEnv = "RUNNEL_OBJSTORE_CRASH_CHILD"

// crashChild uploads one file with PutFile, slowly, until it is killed.
func crashChild() {
	cfg := Config{
		URL:             os.Getenv("CRASH_URL"),
		Endpoint:        os.Getenv("CRASH_ENDPOINT"),
		Region:          "us-east-1",
		AccessKeyID:     os.Getenv("CRASH_ACCESS"),
		SecretAccessKey: os.Getenv("CRASH_SECRET"),
		PartSize:        MinPartSize,
		Concurrency:     1,
		BandwidthLimit:  8 << 20,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	err = b.PutFile(context.Background(), os.Getenv("CRASH_KEY"), os.Getenv("CRASH_FILE"))
	fmt.Fprintln(os.Stderr, "child: PutFile returned", err)
	os.Exit(3) // it should have been killed before
}

func TestCrashMidUpload(t *testing.T) {
	srv := tests3.Start(t)
	data := randBytes(18, 8*MinPartSize+1234) // 9 parts, ~5 s at the child's cap
	path := writeFile(t, data)
	const key = "crash/snapshot"
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	core := minio.Core{Client: srv.Client()}
	partsUploaded := func() int {
		res, err := core.ListMultipartUploads(context.Background(), "runnel-test", "pre/"+key, "", "", "", 100)
		if err != nil || len(res.Uploads) == 0 {
			return 0
		}
		if len(res.Uploads) > 1 {
			t.Errorf("%d uploads of one key", len(res.Uploads))
		}
		parts, err := core.ListObjectParts(context.Background(), "runnel-test", "pre/"+key, res.Uploads[0].UploadID, 0, 1000)
		if err != nil {
			return 0
		}
		return len(parts.ObjectParts)
	}

	for round, killAt := range []int{2, 5} {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=1",
			"CRASH_URL=s3://runnel-test/pre", "CRASH_ENDPOINT="+srv.Endpoint(),
			"CRASH_ACCESS="+srv.AccessKey(), "CRASH_SECRET="+srv.SecretKey(),
			"CRASH_KEY="+key, "CRASH_FILE="+path)
		logs := &testproc.Buffer{}
		cmd.Stderr = logs
		testproc.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for partsUploaded() < killAt {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: the child uploaded %d parts in 30 s; its log:\n%s", round, partsUploaded(), logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: the child was not killed (%v); its log:\n%s", round, err, logs)
		}
		got := partsUploaded()
		t.Logf("round %d: killed with %d parts uploaded", round, got)
		if got >= 9 {
			t.Fatalf("round %d: the child finished before it was killed", round)
		}
		if _, err := core.StatObject(context.Background(), "runnel-test", "pre/"+key, minio.StatObjectOptions{}); err == nil {
			t.Fatalf("round %d: the object exists after a kill mid-upload", round)
		}
	}

	b, err := Open(context.Background(), testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/pre"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.PutFile(context.Background(), key, path); err != nil {
		t.Fatalf("PutFile after the crashes: %v", err)
	}
	s := b.Stats()
	if s.ResumedParts < 5 {
		t.Fatalf("resumed %d parts, want at least the 5 uploaded before the last kill", s.ResumedParts)
	}
	if s.UploadedBytes > int64(len(data))-5*MinPartSize {
		t.Fatalf("sent %d bytes after the crashes; at most %d were missing", s.UploadedBytes, int64(len(data))-5*MinPartSize)
	}
	if got := mustGet(t, b, key); !bytes.Equal(got, data) {
		t.Fatalf("the object (%d bytes) is not the file (%d bytes)", len(got), len(data))
	}
	if n := partsUploaded(); n != 0 {
		t.Fatalf("an upload is left with %d parts", n)
	}
}
