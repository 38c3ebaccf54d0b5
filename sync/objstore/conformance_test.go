package objstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/runnel-io/runnel/internal/tests3"
)

// store is the method set Bucket and Mem share: what consumers' small
// interfaces pick from.
type store interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	PutFile(ctx context.Context, key, path string) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (Object, error)
	List(ctx context.Context, prefix string) ([]string, error)
	Delete(ctx context.Context, key string) error
	Close() error
	Stats() Stats
}

var (
	_ store = (*Bucket)(nil)
	_ store = (*Mem)(nil)
)

// testConfig is a Config for a test server: small parts (so multipart
// tests stay small), quick retries.
func testConfig(endpoint, access, secret, url string) Config {
	return Config{
		URL: url, Endpoint: endpoint, Region: "us-east-1",
		AccessKeyID: access, SecretAccessKey: secret,
		PartSize: MinPartSize, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
}

// openVersity starts versitygw and opens a Bucket on it, with prefix
// "pre"; mutate may change the Config first.
func openVersity(t *testing.T, mutate func(*Config)) (*Bucket, *tests3.Server) {
	t.Helper()
	srv := tests3.Start(t)
	cfg := testConfig(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/pre")
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, srv
}

// openFake serves gofakes3 in-process and opens a Bucket on it.
func openFake(t *testing.T, mutate func(*Config)) (*Bucket, *httptest.Server) {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket("runnel-test"); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog()))
	hs := httptest.NewServer(dechunkParts(faker.Server()))
	t.Cleanup(hs.Close)
	cfg := testConfig(hs.URL, "fake", "fake-secret", "s3://runnel-test/pre")
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, hs
}

// dechunkParts decodes aws-chunked part uploads (minio-go's streaming
// signature over plain HTTP) before gofakes3 sees them: gofakes3 v1.2.0
// decodes them for PutObject only, and would store a part with its chunk
// framing.
func dechunkParts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Query().Has("partNumber") &&
			strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
			var out bytes.Buffer
			br := bufio.NewReader(r.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					http.Error(w, "bad chunk header", http.StatusBadRequest)
					return
				}
				sizeHex, _, _ := strings.Cut(strings.TrimSpace(line), ";")
				n, err := strconv.ParseInt(sizeHex, 16, 64)
				if err != nil {
					http.Error(w, "bad chunk size", http.StatusBadRequest)
					return
				}
				if n == 0 {
					break
				}
				if _, err := io.CopyN(&out, br, n); err != nil {
					http.Error(w, "short chunk", http.StatusBadRequest)
					return
				}
				br.Discard(2) // CRLF
			}
			r.Body = io.NopCloser(&out)
			r.ContentLength = int64(out.Len())
			r.Header.Set("Content-Length", strconv.Itoa(out.Len()))
			r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		}
		h.ServeHTTP(w, r)
	})
}

// TestConformance runs the same contract against Mem, gofakes3 and the
// real server.
func TestConformance(t *testing.T) {
	impls := []struct {
		name string
		open func(t *testing.T) store
	}{
		{"mem", func(t *testing.T) store { return NewMem() }},
		{"gofakes3", func(t *testing.T) store { b, _ := openFake(t, nil); return b }},
		{"versitygw", func(t *testing.T) store { b, _ := openVersity(t, nil); return b }},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			s := impl.open(t)
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, s) })
			}
		})
	}
}

// onlyReader hides every method but Read (no ReaderAt, no Seeker).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustGet(t *testing.T, s store, key string) []byte {
	t.Helper()
	r, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return data
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var conformanceCases = []struct {
	name string
	run  func(t *testing.T, s store)
}{
	{"put-get", func(t *testing.T, s store) {
		ctx := context.Background()
		big := randBytes(1, 11<<20+17) // three parts of 5 MiB
		for _, c := range []struct {
			key  string
			data []byte
			r    func([]byte) io.Reader
			size func([]byte) int64
		}{
			{"pg/empty", nil, func(d []byte) io.Reader { return bytes.NewReader(d) }, func(d []byte) int64 { return 0 }},
			{"pg/small-known", []byte("hello"), func(d []byte) io.Reader { return onlyReader{bytes.NewReader(d)} }, func(d []byte) int64 { return int64(len(d)) }},
			{"pg/small-unknown", []byte("hello, unknown"), func(d []byte) io.Reader { return onlyReader{bytes.NewReader(d)} }, func([]byte) int64 { return -1 }},
			{"pg/big-readerat", big, func(d []byte) io.Reader { return bytes.NewReader(d) }, func(d []byte) int64 { return int64(len(d)) }},
			{"pg/big-known", big, func(d []byte) io.Reader { return onlyReader{bytes.NewReader(d)} }, func(d []byte) int64 { return int64(len(d)) }},
			{"pg/big-unknown", big, func(d []byte) io.Reader { return onlyReader{bytes.NewReader(d)} }, func([]byte) int64 { return -1 }},
			{"pg/exactly-one-part", big[:MinPartSize], func(d []byte) io.Reader { return onlyReader{bytes.NewReader(d)} }, func([]byte) int64 { return -1 }},
			{"pg/two-whole-parts", big[:2*MinPartSize], func(d []byte) io.Reader { return onlyReader{bytes.NewReader(d)} }, func([]byte) int64 { return -1 }},
		} {
			if len(c.data) == 0 && strings.Contains(t.Name(), "/gofakes3/") {
				continue // gofakes3 wants a Content-Length header that Go does not send for an empty PUT body
			}
			if err := s.Put(ctx, c.key, c.r(c.data), c.size(c.data)); err != nil {
				t.Fatalf("put %s: %v", c.key, err)
			}
			if got := mustGet(t, s, c.key); !bytes.Equal(got, c.data) {
				t.Fatalf("get %s: %d bytes, want %d (equal %v)", c.key, len(got), len(c.data), bytes.Equal(got, c.data))
			}
			o, err := s.Stat(ctx, c.key)
			if err != nil {
				t.Fatal(err)
			}
			if o.Key != c.key || o.Size != int64(len(c.data)) || o.ETag == "" || time.Since(o.Modified) > time.Hour {
				t.Fatalf("stat %s: %+v", c.key, o)
			}
		}
	}},
	{"put-from-offset", func(t *testing.T, s store) {
		// A ReadSeeker positioned past its start: Put takes from there.
		r := bytes.NewReader([]byte("skip:payload"))
		r.Seek(5, io.SeekStart)
		if err := s.Put(context.Background(), "off/k", r, 7); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, "off/k"); string(got) != "payload" {
			t.Fatalf("got %q", got)
		}
	}},
	{"never-overwrite", func(t *testing.T, s store) {
		ctx := context.Background()
		if err := s.Put(ctx, "no/k", strings.NewReader("first"), 5); err != nil {
			t.Fatal(err)
		}
		before := s.Stats().Failures[CauseExists]
		err := s.Put(ctx, "no/k", strings.NewReader("second"), 6)
		if !errors.Is(err, ErrExists) {
			t.Fatalf("second put: %v, want ErrExists", err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Op != "put" || !strings.HasSuffix(e.Key, "no/k") || e.Cause != CauseExists {
			t.Fatalf("error %#v", err)
		}
		if got := s.Stats().Failures[CauseExists]; got != before+1 {
			t.Fatalf("exists failures %d, want %d", got, before+1)
		}
		if got := mustGet(t, s, "no/k"); string(got) != "first" {
			t.Fatalf("overwritten: %q", got)
		}
		// Large, too (multipart): refused, the object untouched.
		big := randBytes(2, 6<<20)
		if err := s.Put(ctx, "no/k", onlyReader{bytes.NewReader(big)}, -1); !errors.Is(err, ErrExists) {
			t.Fatalf("multipart put: %v, want ErrExists", err)
		}
		if got := mustGet(t, s, "no/k"); string(got) != "first" {
			t.Fatalf("overwritten: %q", got)
		}
	}},
	{"size-mismatch", func(t *testing.T, s store) {
		ctx := context.Background()
		for _, c := range []struct {
			key  string
			data string
			size int64
		}{{"sz/short", "abc", 5}, {"sz/long", "abcdef", 3}} {
			if err := s.Put(ctx, c.key, onlyReader{strings.NewReader(c.data)}, c.size); err == nil {
				t.Fatalf("put %s: %q with size %d: no error", c.key, c.data, c.size)
			}
			if _, err := s.Stat(ctx, c.key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("stat %s after a failed put: %v, want ErrNotFound", c.key, err)
			}
		}
	}},
	{"not-found", func(t *testing.T, s store) {
		ctx := context.Background()
		if _, err := s.Get(ctx, "nf/missing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get: %v", err)
		}
		if _, err := s.Stat(ctx, "nf/missing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("stat: %v", err)
		}
	}},
	{"list", func(t *testing.T, s store) {
		ctx := context.Background()
		keys := []string{"ls/b/2", "ls/a", "ls/b/1", "ls/c/d/e", "lsx"}
		for _, k := range keys {
			if err := s.Put(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			prefix string
			want   []string
		}{
			{"ls/", []string{"ls/a", "ls/b/1", "ls/b/2", "ls/c/d/e"}},
			{"ls/b", []string{"ls/b/1", "ls/b/2"}},
			{"ls", []string{"ls/a", "ls/b/1", "ls/b/2", "ls/c/d/e", "lsx"}},
			{"nothing-here/", nil},
		} {
			got, err := s.List(ctx, c.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("list %q: %q, want %q", c.prefix, got, c.want)
			}
		}
		all, err := s.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSorted(all) || !slices.Contains(all, "lsx") {
			t.Fatalf("list all: %q", all)
		}
	}},
	{"delete", func(t *testing.T, s store) {
		ctx := context.Background()
		if err := s.Put(ctx, "del/k", strings.NewReader("x"), 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "del/k"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, "del/k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("stat after delete: %v", err)
		}
		if err := s.Delete(ctx, "del/k"); err != nil {
			t.Fatalf("delete of a missing key: %v", err)
		}
		if got, _ := s.List(ctx, "del/"); len(got) != 0 {
			t.Fatalf("list after delete: %q", got)
		}
		// Written once, deleted, written again: a new object.
		if err := s.Put(ctx, "del/k", strings.NewReader("y"), 1); err != nil {
			t.Fatal(err)
		}
	}},
	{"put-file", func(t *testing.T, s store) {
		ctx := context.Background()
		for _, c := range []struct {
			key  string
			data []byte
		}{{"pf/small", []byte("a small file")}, {"pf/big", randBytes(3, 12<<20+5)}, {"pf/empty", nil}} {
			if len(c.data) == 0 && strings.Contains(t.Name(), "/gofakes3/") {
				continue // as in put-get
			}
			p := writeFile(t, c.data)
			if err := s.PutFile(ctx, c.key, p); err != nil {
				t.Fatalf("put-file %s: %v", c.key, err)
			}
			if got := mustGet(t, s, c.key); !bytes.Equal(got, c.data) {
				t.Fatalf("get %s: %d bytes, want %d", c.key, len(got), len(c.data))
			}
			// The same file again (a crash after the upload, before the
			// caller knew): done, nothing overwritten.
			if len(c.data) > MinPartSize && strings.Contains(t.Name(), "/gofakes3/") {
				// gofakes3 gives a multipart object the MD5 of its bytes,
				// not S3's MD5 of the parts' MD5s.
			} else if err := s.PutFile(ctx, c.key, p); err != nil {
				t.Fatalf("put-file %s again: %v", c.key, err)
			}
			// Another file under the same key: refused.
			other := writeFile(t, append(bytes.Clone(c.data), 'x'))
			if err := s.PutFile(ctx, c.key, other); !errors.Is(err, ErrExists) {
				t.Fatalf("put-file %s, other bytes: %v, want ErrExists", c.key, err)
			}
			if got := mustGet(t, s, c.key); !bytes.Equal(got, c.data) {
				t.Fatalf("get %s: changed", c.key)
			}
		}
		if err := s.PutFile(ctx, "pf/missing", filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("put-file of a missing file: %v", err)
		}
	}},
	{"bad-keys", func(t *testing.T, s store) {
		ctx := context.Background()
		for _, k := range []string{"", "/a", "a/", "a//b", "a/./b", "a/../b", "..", "a\x00b", string([]byte{0xff}), strings.Repeat("k", 1025)} {
			err := s.Put(ctx, k, strings.NewReader("x"), 1)
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("put %q: %v, want ErrInvalidKey", k, err)
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("get %q: %v, want ErrInvalidKey", k, err)
			}
		}
		if _, err := s.List(ctx, "/abs"); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("list /abs: %v, want ErrInvalidKey", err)
		}
	}},
	{"canceled", func(t *testing.T, s store) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := s.Put(ctx, "cx/k", strings.NewReader("x"), 1)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("put with a canceled ctx: %v", err)
		}
	}},
	// Last: it closes the store.
	{"closed", func(t *testing.T, s store) {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(context.Background(), "cl/k", strings.NewReader("x"), 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("put after close: %v", err)
		}
		if _, err := s.List(context.Background(), ""); !errors.Is(err, ErrClosed) {
			t.Fatalf("list after close: %v", err)
		}
	}},
}
