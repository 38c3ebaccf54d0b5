package objstore

// Tests against the real server (versitygw, internal/tests3): the errors a
// misconfigured gateway meets, never-overwrite under a race, resumed
// uploads across server outages, TLS.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/runnel-io/runnel/internal/tests3"
)

// lockedBuffer collects a logger's output.
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

func debugLogger(w *lockedBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestOpenWrongCredentials(t *testing.T) {
	srv := tests3.Start(t)
	var logs lockedBuffer
	const secret = "not-the-secret-0123456789abcdef"
	for _, c := range []struct{ name, access, secret string }{
		{"wrong secret", srv.AccessKey(), secret},
		{"unknown key", "nobody-here", secret},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(srv.Endpoint(), c.access, c.secret, "s3://runnel-test/p")
			cfg.Logger = debugLogger(&logs)
			_, err := Open(context.Background(), cfg)
			var e *Error
			if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || e.Cause != CauseAccess || e.Attempts != 1 {
				t.Fatalf("Open: %v, want ErrRefused (access) at once", err)
			}
			for _, want := range []string{"open", "s3://runnel-test/", "access refused"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), c.secret) || strings.Contains(err.Error(), srv.SecretKey()) {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
	// A Bucket opened with good keys, then used with bad ones: every
	// operation names itself and its key.
	cfg := testConfig(srv.Endpoint(), srv.AccessKey(), secret, "s3://runnel-test/p")
	cfg.Logger = debugLogger(&logs)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Put(context.Background(), "snap/1", strings.NewReader("x"), 1)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "put s3://runnel-test/p/snap/1") {
		t.Fatalf("put: %v", err)
	}
	if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), srv.SecretKey()) {
		t.Fatalf("a secret was logged:\n%s", logs.String())
	}
}

func TestOpenMissingBucket(t *testing.T) {
	srv := tests3.Start(t)
	_, err := Open(context.Background(), testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://no-such-bucket/p"))
	var e *Error
	if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || e.Cause != CauseNoBucket {
		t.Fatalf("Open: %v, want ErrRefused (no_bucket)", err)
	}
	if !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
		t.Fatalf("error %q does not name the bucket", err)
	}
	// And an upload to it, with New: the same class.
	b, err := New(testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://no-such-bucket/p"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Put(context.Background(), "k", strings.NewReader("x"), 1)
	if !errors.As(err, &e) || e.Cause != CauseNoBucket || b.Stats().Failures[CauseNoBucket] != 1 {
		t.Fatalf("put: %v (%+v)", err, b.Stats())
	}
}

// An endpoint that does not answer is retried within the policy, then
// ErrUnavailable naming the endpoint's refusal.
func TestOpenEndpointDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	clock := newFakeClock()
	cfg := testConfig("http://"+addr, "a", "b", "s3://runnel-test")
	cfg.Clock, cfg.Attempts = clock, 4
	_, err = Open(context.Background(), cfg)
	var e *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Attempts != 4 || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Open: %v, want ErrUnavailable after 4 attempts", err)
	}
	if len(clock.waits()) != 3 {
		t.Fatalf("waits %v", clock.waits())
	}
	// A ctx that ends first wins.
	ctx, cancel := context.WithCancel(context.Background())
	clock.onSleep = cancel
	if _, err := Open(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a canceled ctx: %v", err)
	}
}

// A user that may only read: reads work, writes are refused at once with
// the operation and key named.
func TestReadOnlyBucket(t *testing.T) {
	reader := tests3.User{Access: "reader", Secret: "reader-secret-0123456789"}
	srv := tests3.StartWith(t, tests3.Options{Buckets: []string{"runnel-test"}, Users: []tests3.User{reader}})
	root, err := Open(context.Background(), testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/ro"))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.Put(context.Background(), "existing", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}

	// Before the policy the user may not even look.
	cfg := testConfig(srv.Endpoint(), reader.Access, reader.Secret, "s3://runnel-test/ro")
	if _, err := Open(context.Background(), cfg); !errors.Is(err, ErrRefused) {
		t.Fatalf("Open without a policy: %v, want ErrRefused", err)
	}
	srv.AllowRead("runnel-test", reader.Access)
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open with read access: %v", err)
	}
	defer b.Close()
	if got := mustGet(t, b, "existing"); string(got) != "hello" {
		t.Fatalf("get: %q", got)
	}
	if keys, err := b.List(context.Background(), ""); err != nil || len(keys) != 1 {
		t.Fatalf("list: %q, %v", keys, err)
	}
	for _, c := range []struct {
		op  string
		err error
	}{
		{"put", b.Put(context.Background(), "new", strings.NewReader("x"), 1)},
		{"put-file", b.PutFile(context.Background(), "new-file", writeFile(t, randBytes(10, 6<<20)))},
		{"delete", b.Delete(context.Background(), "existing")},
	} {
		var e *Error
		if !errors.Is(c.err, ErrRefused) || !errors.As(c.err, &e) || e.Cause != CauseAccess || e.Attempts != 1 || e.Op != c.op {
			t.Errorf("%s: %v, want ErrRefused (access) from %s at once", c.op, c.err, c.op)
		}
	}
	if got := mustGet(t, root, "existing"); string(got) != "hello" {
		t.Fatal("the object changed")
	}
}

// The key is taken between the check before a multipart upload and its
// completion: the server's If-None-Match refuses the completion, the other
// writer's object stays, and the upload is aborted.
func TestNeverOverwriteRace(t *testing.T) {
	b, srv := openVersity(t, nil)
	other, err := Open(context.Background(), testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/pre"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, c := range []struct {
		name string
		put  func(key string) error
	}{
		{"Put", func(key string) error {
			return b.Put(context.Background(), key, onlyReader{bytes.NewReader(randBytes(11, 11<<20))}, -1)
		}},
		{"PutFile", func(key string) error {
			return b.PutFile(context.Background(), key, writeFile(t, randBytes(12, 11<<20)))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "race-" + c.name
			b.beforeComplete = func() {
				if err := other.Put(context.Background(), key, strings.NewReader("theirs"), 6); err != nil {
					t.Errorf("the other writer: %v", err)
				}
			}
			defer func() { b.beforeComplete = nil }()
			if err := c.put(key); !errors.Is(err, ErrExists) {
				t.Fatalf("%s: %v, want ErrExists", c.name, err)
			}
			if got := mustGet(t, b, key); string(got) != "theirs" {
				t.Fatalf("the other writer's object was overwritten (%d bytes)", len(got))
			}
			uploads, err := b.listUploads(context.Background(), "test", "pre/"+key)
			if err != nil || len(uploads) != 0 {
				t.Fatalf("uploads left: %v, %v", uploads, err)
			}
		})
	}
}

// An interrupted PutFile (the server failing every part after the second)
// leaves its upload; the next PutFile keeps the parts that match the file
// and sends only the others. A part whose bytes changed in the file is
// sent again.
func TestPutFileResumes(t *testing.T) {
	srv := tests3.Start(t)
	p := newFaultProxy(t, srv.Endpoint())
	cfg := testConfig(p.URL(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/pre")
	cfg.Attempts, cfg.Concurrency = 2, 1
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	data := randBytes(13, 5*MinPartSize+123) // 6 parts
	path := writeFile(t, data)
	p.setScript(func(kind string, r *http.Request, n int) action {
		if n, _ := strconv.Atoi(r.URL.Query().Get("partNumber")); kind == "part" && n > 2 {
			return fail503
		}
		return pass
	})
	if err := b.PutFile(context.Background(), "f", path); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("first PutFile: %v, want ErrUnavailable", err)
	}
	uploads, err := b.listUploads(context.Background(), "test", "pre/f")
	if err != nil || len(uploads) != 1 {
		t.Fatalf("uploads after the failure: %v, %v", uploads, err)
	}

	// Part 1's bytes change in the file before the retry.
	data[10] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p.setScript(nil)
	partsBefore := p.count("PUT part")
	before := b.Stats()
	if err := b.PutFile(context.Background(), "f", path); err != nil {
		t.Fatalf("second PutFile: %v", err)
	}
	after := b.Stats()
	if got := mustGet(t, b, "f"); !bytes.Equal(got, data) {
		t.Fatal("the object is not the file")
	}
	// Part 2 kept; parts 1 (changed) and 3-6 sent.
	if sent := p.count("PUT part") - partsBefore; sent != 5 {
		t.Fatalf("%d parts sent on resume, want 5", sent)
	}
	if kept := after.ResumedParts - before.ResumedParts; kept != 1 {
		t.Fatalf("%d parts kept, want 1", kept)
	}
	if up := after.UploadedBytes - before.UploadedBytes; up != int64(len(data))-MinPartSize {
		t.Fatalf("%d bytes sent on resume, want %d", up, len(data)-MinPartSize)
	}
	if uploads, _ := b.listUploads(context.Background(), "test", "pre/f"); len(uploads) != 0 {
		t.Fatalf("uploads left: %v", uploads)
	}
}

// The server stops mid-upload and comes back within the retry budget: the
// same call finishes. Down longer: the call fails, the next resumes.
func TestServerRestartMidUpload(t *testing.T) {
	srv := tests3.Start(t)
	data := randBytes(14, 8*MinPartSize) // 40 MiB, 8 parts
	path := writeFile(t, data)
	open := func(attempts int) *Bucket {
		cfg := testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/pre")
		cfg.Attempts, cfg.BackoffMin, cfg.BackoffMax = attempts, 50*time.Millisecond, 300*time.Millisecond
		cfg.Concurrency, cfg.BandwidthLimit = 1, 16<<20 // 2.5 s in all: time to stop it midway
		b, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	waitParts := func(b *Bucket, n int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for b.Stats().UploadedBytes < n*MinPartSize {
			if time.Now().After(deadline) {
				t.Fatalf("no progress: %+v", b.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	t.Run("back within the retries", func(t *testing.T) {
		b := open(40) // 40 attempts of at most 300 ms: ~10 s of outage
		done := make(chan error, 1)
		go func() { done <- b.PutFile(context.Background(), "same-call", path) }()
		waitParts(b, 2)
		srv.Stop()
		time.Sleep(time.Second)
		srv.Start()
		if err := <-done; err != nil {
			t.Fatalf("PutFile across the restart: %v", err)
		}
		if got := mustGet(t, b, "same-call"); !bytes.Equal(got, data) {
			t.Fatal("the object is not the file")
		}
		if b.Stats().Retries == 0 {
			t.Fatal("no retries across an outage")
		}
	})
	t.Run("down too long", func(t *testing.T) {
		b := open(3)
		done := make(chan error, 1)
		go func() { done <- b.PutFile(context.Background(), "next-call", path) }()
		waitParts(b, 3)
		srv.Stop()
		if err := <-done; !errors.Is(err, ErrUnavailable) {
			t.Fatalf("PutFile with the server down: %v, want ErrUnavailable", err)
		}
		srv.Start()
		sent := b.Stats().UploadedBytes
		if err := b.PutFile(context.Background(), "next-call", path); err != nil {
			t.Fatalf("PutFile after the restart: %v", err)
		}
		s := b.Stats()
		if s.ResumedParts < 3 || s.UploadedBytes-sent > int64(len(data))-3*MinPartSize {
			t.Fatalf("resumed %d parts, sent %d bytes again: %+v", s.ResumedParts, s.UploadedBytes-sent, s)
		}
		if got := mustGet(t, b, "next-call"); !bytes.Equal(got, data) {
			t.Fatal("the object is not the file")
		}
	})
}

func TestTLS(t *testing.T) {
	srv := tests3.StartWith(t, tests3.Options{Buckets: []string{"runnel-test"}, TLS: true})
	cfg := testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/tls")
	t.Run("with the CA", func(t *testing.T) {
		cfg := cfg
		cfg.CAFile = srv.CAFile()
		b, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		data := randBytes(15, 6<<20)
		if err := b.Put(context.Background(), "k", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, b, "k"); !bytes.Equal(got, data) {
			t.Fatal("object differs")
		}
	})
	t.Run("without it", func(t *testing.T) {
		clock := newFakeClock()
		cfg := cfg
		cfg.Clock = clock
		_, err := Open(context.Background(), cfg)
		var e *Error
		if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || e.Cause != CauseTLS || len(clock.waits()) != 0 {
			t.Fatalf("Open: %v, want ErrRefused (tls) at once", err)
		}
	})
	t.Run("a file that is no CA", func(t *testing.T) {
		cfg := cfg
		cfg.CAFile = writeFile(t, []byte("not pem"))
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("New: %v", err)
		}
	})
	t.Run("plain HTTP to a TLS port", func(t *testing.T) {
		cfg := cfg
		// versitygw hangs up on it: to the client, a server that keeps
		// dropping the connection.
		cfg.Endpoint = "http://" + srv.HostPort()
		cfg.Clock = newFakeClock()
		if _, err := Open(context.Background(), cfg); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open over plain HTTP: %v, want ErrUnavailable", err)
		}
	})
	t.Run("TLS to a plain HTTP port", func(t *testing.T) {
		plain := tests3.Start(t)
		cfg := testConfig("https://"+plain.HostPort(), plain.AccessKey(), plain.SecretKey(), "s3://runnel-test/tls")
		_, err := Open(context.Background(), cfg)
		var e *Error
		if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || e.Cause != CauseTLS || e.Attempts != 1 {
			t.Fatalf("Open over TLS to plain HTTP: %v, want ErrRefused (tls) at once", err)
		}
	})
}

// Keys from a credentials file, and from the environment.
func TestCredentialSources(t *testing.T) {
	srv := tests3.Start(t)
	file := filepath.Join(t.TempDir(), "credentials")
	os.WriteFile(file, fmt.Appendf(nil, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey(), srv.SecretKey()), 0o600)
	cfg := testConfig(srv.Endpoint(), "", "", "s3://runnel-test/creds")
	cfg.CredentialsFile = file
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("with a credentials file: %v", err)
	}
	b.Close()

	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	cfg.CredentialsFile = ""
	b, err = Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("from the environment: %v", err)
	}
	b.Close()
}

// Without a region, minio-go asks the server for the bucket's.
func TestNoRegion(t *testing.T) {
	b, _ := openVersity(t, func(c *Config) { c.Region = "" })
	if err := b.Put(context.Background(), "k", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, b, "k"); string(got) != "x" {
		t.Fatalf("get: %q", got)
	}
}

func TestAbortUploads(t *testing.T) {
	b, srv := openVersity(t, nil)
	clock := newFakeClock()
	b.cfg.Clock = clock
	core := minio.Core{Client: srv.Client()}
	for _, k := range []string{"pre/old/a", "pre/old/b", "pre/other/c"} {
		if _, err := core.NewMultipartUpload(context.Background(), "runnel-test", k, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Started "now" by the server's clock: younger than an hour.
	clock.now = time.Now()
	if n, err := b.AbortUploads(context.Background(), "old/", time.Hour); err != nil || n != 0 {
		t.Fatalf("AbortUploads of young uploads: %d, %v", n, err)
	}
	clock.now = time.Now().Add(2 * time.Hour)
	if n, err := b.AbortUploads(context.Background(), "old/", time.Hour); err != nil || n != 2 {
		t.Fatalf("AbortUploads: %d, %v; want 2", n, err)
	}
	if left, _ := b.listUploads(context.Background(), "test", "pre/other/c"); len(left) != 1 {
		t.Fatalf("the upload outside the prefix: %v", left)
	}
}
