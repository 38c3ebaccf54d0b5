package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
)

// fakeClock records the waits asked of it and returns at once, moving its
// time forward by each; onSleep, when set, runs inside Sleep.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	sleeps  []time.Duration
	onSleep func()
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	f := c.onSleep
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return ctx.Err()
}

func (c *fakeClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// action is what a faultProxy does with one request.
type action int

const (
	pass         action = iota
	fail503             // answer 503 SlowDown without forwarding
	fail500             // answer 500 InternalError without forwarding
	deny403             // answer 403 AccessDenied without forwarding
	reset               // close the connection without forwarding
	dropResponse        // forward, then close the connection instead of answering
	cutBody             // forward, answer with the headers and half the body, close
	stall               // read the request, never answer (until the client hangs up)
)

// faultProxy forwards S3 requests to a server, doing to each what script
// says (nil script: pass). It counts requests by "METHOD kind", kind
// being "part", "complete", "uploads", "object" or "bucket".
type faultProxy struct {
	t      *testing.T
	target *url.URL
	tr     *http.Transport
	hs     *httptest.Server

	mu     sync.Mutex
	script func(kind string, r *http.Request, n int) action // n: how many requests of this kind before
	counts map[string]int
	log    []string
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, target: u, tr: &http.Transport{}, counts: map[string]int{}}
	p.hs = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.hs.CloseClientConnections()
		p.hs.Close()
		p.tr.CloseIdleConnections()
	})
	return p
}

func (p *faultProxy) URL() string { return p.hs.URL }

func (p *faultProxy) setScript(f func(kind string, r *http.Request, n int) action) {
	p.mu.Lock()
	p.script = f
	p.mu.Unlock()
}

func (p *faultProxy) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[key]
}

func requestKind(r *http.Request) string {
	q := r.URL.Query()
	path := strings.Trim(r.URL.Path, "/")
	switch {
	case q.Has("partNumber"):
		return "part"
	case q.Has("uploadId") && r.Method == http.MethodPost:
		return "complete"
	case q.Has("uploads") || q.Has("uploadId"):
		return "uploads"
	case strings.Contains(path, "/"):
		return "object"
	}
	return "bucket"
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	kind := requestKind(r)
	key := r.Method + " " + kind
	p.mu.Lock()
	n := p.counts[key]
	p.counts[key]++
	act := pass
	if p.script != nil {
		act = p.script(kind, r, n)
	}
	p.log = append(p.log, fmt.Sprintf("%s %s #%d: %d", key, r.URL.Path, n, act))
	p.mu.Unlock()

	s3err := func(status int, code string) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, code)
	}
	hangUp := func() {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	switch act {
	case fail503:
		s3err(http.StatusServiceUnavailable, "SlowDown")
		return
	case fail500:
		s3err(http.StatusInternalServerError, "InternalError")
		return
	case deny403:
		s3err(http.StatusForbidden, "AccessDenied")
		return
	case reset:
		hangUp()
		return
	case stall:
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return
	}
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	out.RequestURI = ""
	out.Host = r.Host // the client signed the proxy's host
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if act == dropResponse {
		io.Copy(io.Discard, resp.Body)
		hangUp()
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if act == cutBody && resp.ContentLength > 1 {
		io.CopyN(w, resp.Body, resp.ContentLength/2)
		http.NewResponseController(w).Flush()
		hangUp()
		return
	}
	io.Copy(w, resp.Body)
}

// fakeBehind starts gofakes3 behind a faultProxy and opens a Bucket on the
// proxy with a fake clock.
func fakeBehind(t *testing.T, mutate func(*Config)) (*Bucket, *faultProxy, *fakeClock) {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket("runnel-test"); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(dechunkParts(gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()))
	t.Cleanup(hs.Close)
	p := newFaultProxy(t, hs.URL)
	clock := newFakeClock()
	cfg := testConfig(p.URL(), "fake", "fake-secret", "s3://runnel-test/pre")
	cfg.Clock = clock
	cfg.BackoffMin, cfg.BackoffMax = 100*time.Millisecond, 400*time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, p, clock
}

// checkBackoff: the n-th wait is within [d/2, d], d = min(lo·2^(n-1), hi).
func checkBackoff(t *testing.T, waits []time.Duration, lo, hi time.Duration) {
	t.Helper()
	d := lo
	for i, w := range waits {
		if w < d/2 || w > d {
			t.Errorf("wait %d: %v, want within [%v, %v]", i+1, w, d/2, d)
		}
		d = min(2*d, hi)
	}
}

func TestRetryThenSucceed(t *testing.T) {
	for _, act := range []action{fail503, fail500, reset} {
		t.Run(fmt.Sprint(act), func(t *testing.T) {
			b, p, clock := fakeBehind(t, nil)
			p.setScript(func(kind string, r *http.Request, n int) action {
				if r.Method == http.MethodPut && n < 2 {
					return act
				}
				return pass
			})
			if err := b.Put(context.Background(), "k", strings.NewReader("data"), 4); err != nil {
				t.Fatal(err)
			}
			waits := clock.waits()
			if len(waits) != 2 {
				t.Fatalf("waits %v, want 2", waits)
			}
			checkBackoff(t, waits, 100*time.Millisecond, 400*time.Millisecond)
			if got := p.count("PUT object"); got != 3 {
				t.Fatalf("%d PUTs, want 3", got)
			}
			if s := b.Stats(); s.Retries != 2 || s.UploadedObjects != 1 || s.Failures[CauseRetryable] != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

func TestRetryGivesUp(t *testing.T) {
	b, p, clock := fakeBehind(t, func(c *Config) { c.Attempts = 6 })
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodPut {
			return fail503
		}
		return pass
	})
	err := b.Put(context.Background(), "dir/k", strings.NewReader("data"), 4)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put: %v, want ErrUnavailable", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Attempts != 6 || e.Cause != CauseRetryable || e.Op != "put" || e.Bucket != "runnel-test" || e.Key != "pre/dir/k" || e.Status != 503 || e.Code != "SlowDown" {
		t.Fatalf("error %+v", e)
	}
	for _, want := range []string{"put", "s3://runnel-test/pre/dir/k", "after 6 attempts", "SlowDown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	waits := clock.waits()
	if len(waits) != 5 {
		t.Fatalf("waits %v, want 5", waits)
	}
	checkBackoff(t, waits, 100*time.Millisecond, 400*time.Millisecond)
	if got := p.count("PUT object"); got != 6 {
		t.Fatalf("%d PUTs, want 6", got)
	}
	if s := b.Stats(); s.Failures[CauseRetryable] != 1 || s.Retries != 5 || s.UploadsInFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A 4xx is final: one request, no wait.
func TestNoRetryOnRefusal(t *testing.T) {
	b, p, clock := fakeBehind(t, nil)
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodPut {
			return deny403
		}
		return pass
	})
	err := b.Put(context.Background(), "k", strings.NewReader("data"), 4)
	var e *Error
	if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || e.Cause != CauseAccess || e.Attempts != 1 {
		t.Fatalf("put: %v", err)
	}
	if len(clock.waits()) != 0 || p.count("PUT object") != 1 {
		t.Fatalf("waits %v, PUTs %d", clock.waits(), p.count("PUT object"))
	}
	if b.Stats().Failures[CauseAccess] != 1 {
		t.Fatalf("stats %+v", b.Stats())
	}
}

// A ctx canceled during the back-off ends the call at once, as canceled.
func TestRetryCanceledInBackoff(t *testing.T) {
	b, p, clock := fakeBehind(t, nil)
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodPut {
			return fail503
		}
		return pass
	})
	ctx, cancel := context.WithCancel(context.Background())
	clock.onSleep = cancel
	err := b.Put(ctx, "k", strings.NewReader("data"), 4)
	var e *Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Cause != CauseCanceled {
		t.Fatalf("put: %v", err)
	}
	if got := p.count("PUT object"); got != 1 {
		t.Fatalf("%d PUTs after the cancel, want 1", got)
	}
	if b.Stats().Failures[CauseCanceled] != 1 {
		t.Fatalf("stats %+v", b.Stats())
	}
}

// The first PUT stored the object but its answer was lost: the retry's 412
// is our own object, recognised by its MD5.
func TestPutAnswerLost(t *testing.T) {
	b, p, _ := fakeBehind(t, nil)
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodPut && kind == "object" && n == 0 {
			return dropResponse
		}
		return pass
	})
	if err := b.Put(context.Background(), "k", strings.NewReader("data"), 4); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := p.count("PUT object"); got != 2 {
		t.Fatalf("%d PUTs, want 2", got)
	}
	// Another writer's object is still ErrExists, even after a retry.
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodPut && kind == "object" && n == 2 {
			return fail503
		}
		return pass
	})
	if err := b.Put(context.Background(), "k", strings.NewReader("other"), 5); !errors.Is(err, ErrExists) {
		t.Fatalf("put of other bytes: %v, want ErrExists", err)
	}
}

// A part that fails is retried alone; the upload completes.
func TestMultipartPartRetried(t *testing.T) {
	b, p, clock := fakeBehind(t, nil)
	p.setScript(func(kind string, r *http.Request, n int) action {
		if kind == "part" && r.URL.Query().Get("partNumber") == "2" && n < 3 {
			return []action{reset, fail503}[n%2]
		}
		return pass
	})
	data := randBytes(4, 11<<20)
	if err := b.Put(context.Background(), "big", onlyReader{bytes.NewReader(data)}, -1); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, b, "big"); !bytes.Equal(got, data) {
		t.Fatal("object differs")
	}
	if len(clock.waits()) == 0 {
		t.Fatal("no back-off")
	}
}

// A multipart Put that gives up aborts its upload.
func TestMultipartPutAbortsOnFailure(t *testing.T) {
	b, p, _ := fakeBehind(t, func(c *Config) { c.Attempts = 2 })
	p.setScript(func(kind string, r *http.Request, n int) action {
		if kind == "part" && r.URL.Query().Get("partNumber") == "2" {
			return fail503
		}
		return pass
	})
	err := b.Put(context.Background(), "big", onlyReader{bytes.NewReader(randBytes(5, 11<<20))}, -1)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "part 2") {
		t.Fatalf("put: %v", err)
	}
	if got := p.count("DELETE uploads"); got != 1 {
		t.Fatalf("%d aborts, want 1", got)
	}
}

// A server that takes a request and never answers: the idle timeout
// fails the request, and the retry gets through.
func TestIdleTimeout(t *testing.T) {
	b, p, clock := fakeBehind(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodPut && n < 2 {
			return stall
		}
		return pass
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.Put(ctx, "k", strings.NewReader("data"), 4); err != nil {
		t.Fatalf("put: %v", err)
	}
	if d := time.Since(start); d < 600*time.Millisecond || d > 5*time.Second {
		t.Fatalf("two stalls of a 300 ms idle timeout took %v", d)
	}
	if len(clock.waits()) != 2 || p.count("PUT object") != 3 {
		t.Fatalf("waits %v, PUTs %d", clock.waits(), p.count("PUT object"))
	}
}

// A body cut short is resumed with a ranged GET of the same ETag.
func TestGetResumes(t *testing.T) {
	b, p, _ := fakeBehind(t, nil)
	data := randBytes(6, 3<<20)
	if err := b.Put(context.Background(), "obj", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	var ranges []string
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodGet && kind == "object" {
			ranges = append(ranges, r.Header.Get("Range")+" "+r.Header.Get("If-Match"))
			if n < 2 {
				return cutBody
			}
		}
		return pass
	})
	got := mustGet(t, b, "obj")
	if !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, want %d (equal %v)", len(got), len(data), bytes.Equal(got, data))
	}
	if len(ranges) != 3 || ranges[0] != " " || !strings.HasPrefix(ranges[1], "bytes=") || !strings.Contains(ranges[1], `"`) {
		t.Fatalf("requests: %q", ranges)
	}
	if s := b.Stats(); s.DownloadedBytes != int64(len(data)) || s.Retries != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// An object replaced while a Get resumes is corrupt for that reader, never
// a mix of the two.
func TestGetObjectChangedWhileResuming(t *testing.T) {
	b, p, _ := fakeBehind(t, nil)
	ctx := context.Background()
	if err := b.Put(ctx, "obj", bytes.NewReader(randBytes(7, 1<<20)), 1<<20); err != nil {
		t.Fatal(err)
	}
	p.setScript(func(kind string, r *http.Request, n int) action {
		if r.Method == http.MethodGet && kind == "object" && n == 0 {
			return cutBody
		}
		return pass
	})
	r, err := b.Get(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 1<<10)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "obj"); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "obj", bytes.NewReader(randBytes(8, 1<<20)), 1<<20); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, r)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read after the object changed: %v, want ErrCorrupt", err)
	}
	if _, err2 := r.Read(buf); !errors.Is(err2, ErrCorrupt) {
		t.Fatalf("next read: %v", err2)
	}
}

func TestClassify(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	resp := func(status int, code string) error {
		return fmt.Errorf("wrapped: %w", minioErr(status, code))
	}
	for _, c := range []struct {
		ctx       context.Context
		err       error
		cause     Cause
		retryable bool
	}{
		{live, resp(503, "SlowDown"), CauseRetryable, true},
		{live, resp(500, "InternalError"), CauseRetryable, true},
		{live, resp(400, "RequestTimeout"), CauseRetryable, true},
		{live, resp(429, ""), CauseRetryable, true},
		{live, resp(412, "PreconditionFailed"), CauseExists, false},
		{live, resp(404, "NoSuchKey"), CauseNotFound, false},
		{live, resp(404, "NoSuchBucket"), CauseNoBucket, false},
		{live, resp(403, "AccessDenied"), CauseAccess, false},
		{live, resp(403, "InvalidAccessKeyId"), CauseAccess, false},
		{live, resp(403, "SignatureDoesNotMatch"), CauseAccess, false},
		{live, resp(400, "InvalidArgument"), CauseOther, false},
		{live, &url.Error{Op: "Put", URL: "http://x", Err: errors.New("connection reset by peer")}, CauseRetryable, true},
		{live, context.DeadlineExceeded, CauseRetryable, true}, // one request's timeout
		{ended, resp(503, "SlowDown"), CauseCanceled, false},
		{live, fmt.Errorf("x: %w", ErrCorrupt), CauseCorrupt, false},
	} {
		got := classify(c.ctx, c.err)
		if got.cause != c.cause || got.retryable != c.retryable {
			t.Errorf("classify(%v) = %+v, want %s retryable=%v", c.err, got, c.cause, c.retryable)
		}
	}
}

// Every cause maps to its sentinel.
func TestErrorSentinels(t *testing.T) {
	for cause, want := range map[Cause]error{
		CauseExists: ErrExists, CauseNotFound: ErrNotFound, CauseRetryable: ErrUnavailable,
		CauseAccess: ErrRefused, CauseNoBucket: ErrRefused, CauseTLS: ErrRefused, CauseCorrupt: ErrCorrupt,
	} {
		err := &Error{Op: "put", Bucket: "b", Key: "k", Cause: cause, Err: errors.New("x")}
		if !errors.Is(err, want) {
			t.Errorf("%s: not %v", cause, want)
		}
	}
	if errors.Is(&Error{Cause: CauseOther, Status: 0, Err: errors.New("disk")}, ErrRefused) {
		t.Error("a local failure is not ErrRefused")
	}
	if !errors.Is(&Error{Cause: CauseOther, Status: 400, Err: errors.New("x")}, ErrRefused) {
		t.Error("a 400 is ErrRefused")
	}
}

func minioErr(status int, code string) error {
	return minio.ErrorResponse{StatusCode: status, Code: code, Message: "m"}
}
