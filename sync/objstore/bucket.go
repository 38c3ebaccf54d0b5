package objstore

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/time/rate"
)

// ErrClosed is returned by a Bucket's or a Mem's methods after Close.
var ErrClosed = errors.New("objstore: closed")

// Object describes a stored object.
type Object struct {
	Key      string // relative to the Bucket's prefix
	Size     int64
	ETag     string // without quotes; the MD5 in hex for single-PUT objects on most servers
	Modified time.Time
}

// Bucket is a prefix of one S3 bucket, reached with minio-go. Its methods
// are safe for concurrent use.
type Bucket struct {
	cfg    Config
	bucket string
	prefix string // "" or "some/prefix/"
	core   minio.Core
	tr     *http.Transport
	bw     *rate.Limiter // nil: no cap
	log    *slog.Logger
	st     stats
	closed atomic.Bool

	// beforeComplete, when set (tests), runs before every
	// CompleteMultipartUpload: the window where another writer can
	// create the key.
	beforeComplete func()
}

// Open builds a Bucket and checks, with retries, that the endpoint answers,
// the credentials are accepted and the bucket exists (Check). Errors name
// the problem: ErrInvalidConfig for settings, ErrRefused for credentials or
// a missing bucket, ErrUnavailable for an endpoint that does not answer.
func Open(ctx context.Context, cfg Config) (*Bucket, error) {
	b, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := b.Check(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// New builds a Bucket without touching the network: it validates cfg and
// reads the credentials and CA files. A node that must start while its
// link is down uses New and calls Check later (or lets the first upload
// find out).
func New(cfg Config) (*Bucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	bucket, prefix, _ := ParseURL(cfg.URL) // Validate checked it
	if prefix != "" {
		prefix += "/"
	}
	hostPort, secure, _ := parseEndpoint(cfg.Endpoint)
	creds, err := credentialsFor(cfg)
	if err != nil {
		return nil, err
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("objstore: transport: %w", err)
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("objstore: ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("objstore: ca_file %s: no PEM certificate in it: %w", cfg.CAFile, ErrInvalidConfig)
		}
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	// A connection that moves no bytes for IdleTimeout fails, so a stalled
	// server or a dead link ends in a retry instead of a hang. Idle pooled
	// connections are dropped before their read deadline can fire.
	dialer := &net.Dialer{Timeout: min(cfg.IdleTimeout, 30*time.Second), KeepAlive: 30 * time.Second}
	idle := cfg.IdleTimeout
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c, idle: idle}, nil
	}
	tr.IdleConnTimeout = idle / 2
	tr.ResponseHeaderTimeout = 0 // the idle deadline covers it
	client, err := minio.New(hostPort, &minio.Options{
		Creds:      creds,
		Secure:     secure,
		Transport:  tr,
		Region:     cfg.Region,
		MaxRetries: 1, // retries are ours: bounded, jittered, on Config.Clock
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: endpoint %s: %w", cfg.Endpoint, err)
	}
	b := &Bucket{
		cfg:    cfg,
		bucket: bucket,
		prefix: prefix,
		core:   minio.Core{Client: client},
		tr:     tr,
		log:    cfg.Logger.With("bucket", bucket, "endpoint", cfg.Endpoint),
	}
	b.st.init()
	if cfg.BandwidthLimit > 0 {
		b.bw = rate.NewLimiter(rate.Limit(cfg.BandwidthLimit), burstFor(cfg.BandwidthLimit))
	}
	return b, nil
}

// String is "s3://bucket/prefix at endpoint".
func (b *Bucket) String() string {
	return fmt.Sprintf("s3://%s/%s at %s", b.bucket, strings.TrimSuffix(b.prefix, "/"), b.cfg.Endpoint)
}

// Check asks the server whether the bucket exists (HeadBucket), with
// retries: it fails with ErrRefused for bad credentials (CauseAccess) or a
// missing bucket (CauseNoBucket), ErrUnavailable when the endpoint does not
// answer. The credentials need s3:ListBucket on the bucket for it.
func (b *Bucket) Check(ctx context.Context) (err error) {
	const op = "open"
	defer b.count(&err)
	if b.closed.Load() {
		return b.errClosed(op, "")
	}
	var exists bool
	err = b.retry(ctx, op, "", func(ctx context.Context) (err error) {
		exists, err = b.core.BucketExists(ctx, b.bucket)
		return err
	})
	if err != nil {
		return err
	}
	if !exists {
		return &Error{Op: op, Bucket: b.bucket, Cause: CauseNoBucket, Code: "NoSuchBucket", Status: http.StatusNotFound, Attempts: 1}
	}
	return nil
}

// Close drops the Bucket's idle connections. Calls in flight finish or
// fail on their own; calls after Close return ErrClosed.
func (b *Bucket) Close() error {
	b.closed.Store(true)
	b.tr.CloseIdleConnections()
	return nil
}

// Put stores r's bytes under key, never overwriting: if the key exists it
// returns ErrExists (If-None-Match: *, checked by the server). size is the
// number of bytes r gives, or -1 when unknown. Objects up to PartSize go in
// one PUT; larger ones (and readers of unknown size beyond PartSize) in a
// multipart upload that is aborted if Put fails. r is read once; to retry a
// request, Put reads again through io.ReaderAt when r has it (and io.Seeker,
// for its position), and otherwise buffers one part (PartSize) in memory.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	const op = "put"
	defer b.count(&err)
	full, err := b.fullKey(op, key)
	if err != nil {
		return err
	}
	if size < -1 {
		return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: fmt.Errorf("size %d: want -1 (unknown) or the byte count", size)}
	}
	pend := b.st.begin(b.cfg.Clock.Now(), size)
	defer pend.done()
	local := func(err error) error {
		return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: err}
	}

	ps := b.cfg.PartSize
	if ra, ok := r.(io.ReaderAt); ok && size >= 0 {
		base := int64(0)
		if s, ok := r.(io.Seeker); ok {
			if base, err = s.Seek(0, io.SeekCurrent); err != nil {
				return local(err)
			}
		}
		sec := io.NewSectionReader(ra, base, size)
		if size <= ps {
			sum, err := md5Of(sec, 0, size)
			if err != nil {
				return local(fmt.Errorf("read: %w", err))
			}
			return b.putOnce(ctx, op, full, sec, size, sum, false)
		}
		if err := b.absent(ctx, op, full); err != nil {
			return err
		}
		return b.putMultipart(ctx, op, full, readerAtParts(sec, size, partSizeFor(size, ps)), nil, false, pend)
	}
	// A plain reader: its first part decides between one PUT and
	// multipart. One byte more than fits tells whether more follows.
	head := make([]byte, ps+1)
	if size >= 0 && size < ps {
		head = make([]byte, size+1)
	}
	n, rerr := io.ReadFull(r, head)
	switch {
	case rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF):
		return local(fmt.Errorf("read: %w", rerr))
	case size >= 0 && (int64(n) > size || rerr != nil && int64(n) != size):
		return local(fmt.Errorf("reader gave %d bytes (or more), size=%d", n, size))
	case rerr != nil: // all of it, in one part
		data := head[:n]
		return b.putOnce(ctx, op, full, bytesReaderAt(data), int64(n), md5.Sum(data), false)
	}
	if size >= 0 {
		ps = partSizeFor(size, ps)
	}
	if err := b.absent(ctx, op, full); err != nil {
		return err
	}
	return b.putMultipart(ctx, op, full, newStreamParts(head[:n], r, size, ps), nil, false, pend)
}

// putOnce is one PUT with If-None-Match: *, retried. body is read from its
// start at every attempt. When an attempt after a failed one finds the key
// taken, the object is compared with ours (the failed attempt may have
// stored it before its answer was lost): the same MD5 is success.
// sameIsOK makes an existing object with the same bytes success at once
// (PutFile's resume after a crash).
func (b *Bucket) putOnce(ctx context.Context, op, full string, body io.ReaderAt, size int64, sum [md5.Size]byte, sameIsOK bool) error {
	md5b64 := base64.StdEncoding.EncodeToString(sum[:])
	opts := minio.PutObjectOptions{DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	attempts := 0
	err := b.retry(ctx, op, full, func(ctx context.Context) error {
		attempts++
		_, err := b.core.PutObject(ctx, b.bucket, full, b.limited(ctx, io.NewSectionReader(body, 0, size)), size, md5b64, "", opts)
		return err
	})
	if err == nil {
		b.st.uploaded(size, true)
		return nil
	}
	if errors.Is(err, ErrExists) && (attempts > 1 || sameIsOK) {
		if same, serr := b.holds(ctx, full, hex.EncodeToString(sum[:])); serr == nil && same {
			b.st.uploaded(size, true)
			return nil
		}
	}
	return err
}

// absent returns ErrExists when full exists, so that a multipart upload
// is not sent in vain. It is an early answer only: the completion's
// If-None-Match is what guarantees that nothing is overwritten.
func (b *Bucket) absent(ctx context.Context, op, full string) error {
	err := b.retry(ctx, op, full, func(ctx context.Context) error {
		_, err := b.core.StatObject(ctx, b.bucket, full, minio.StatObjectOptions{})
		return err
	})
	switch {
	case err == nil:
		return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseExists, Code: "PreconditionFailed", Attempts: 1}
	case errors.Is(err, ErrNotFound):
		return nil
	}
	return err
}

// holds reports whether the object at full has the ETag etag.
func (b *Bucket) holds(ctx context.Context, full, etag string) (bool, error) {
	var info minio.ObjectInfo
	err := b.retry(ctx, "stat", full, func(ctx context.Context) (err error) {
		info, err = b.core.StatObject(ctx, b.bucket, full, minio.StatObjectOptions{})
		return err
	})
	if err != nil {
		return false, err
	}
	return strings.Trim(info.ETag, `"`) == etag, nil
}

// Get opens the object at key for reading; ErrNotFound if there is none.
// A connection that drops mid-body is resumed from where it stopped (a
// ranged GET, If-Match the object's ETag) within the retry policy; if the
// object changed meanwhile, Read fails with ErrCorrupt. The caller must
// Close the reader; ctx bounds the whole read.
func (b *Bucket) Get(ctx context.Context, key string) (_ io.ReadCloser, err error) {
	const op = "get"
	defer b.count(&err)
	full, err := b.fullKey(op, key)
	if err != nil {
		return nil, err
	}
	var (
		body io.ReadCloser
		info minio.ObjectInfo
	)
	err = b.retry(ctx, op, full, func(ctx context.Context) (err error) {
		body, info, _, err = b.core.GetObject(ctx, b.bucket, full, minio.GetObjectOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &objectReader{b: b, ctx: ctx, full: full, etag: strings.Trim(info.ETag, `"`), size: info.Size, body: body}, nil
}

// Stat describes the object at key; ErrNotFound if there is none.
func (b *Bucket) Stat(ctx context.Context, key string) (_ Object, err error) {
	const op = "stat"
	defer b.count(&err)
	full, err := b.fullKey(op, key)
	if err != nil {
		return Object{}, err
	}
	var info minio.ObjectInfo
	err = b.retry(ctx, op, full, func(ctx context.Context) (err error) {
		info, err = b.core.StatObject(ctx, b.bucket, full, minio.StatObjectOptions{})
		return err
	})
	if err != nil {
		return Object{}, err
	}
	return Object{Key: key, Size: info.Size, ETag: strings.Trim(info.ETag, `"`), Modified: info.LastModified}, nil
}

// List returns the keys under prefix (relative to the Bucket's prefix, as
// are the keys returned), sorted, at every depth. A prefix is a plain
// string prefix: "snap" matches "snapshots/1". A listing that fails midway
// is resumed after the last key received.
func (b *Bucket) List(ctx context.Context, prefix string) (_ []string, err error) {
	const op = "list"
	defer b.count(&err)
	if b.closed.Load() {
		return nil, b.errClosed(op, b.prefix+prefix)
	}
	if !validPrefix(prefix) {
		return nil, &Error{Op: op, Bucket: b.bucket, Key: b.prefix + prefix, Cause: CauseOther, Err: fmt.Errorf("prefix %q: %w: not UTF-8 or begins with '/'", prefix, ErrInvalidKey)}
	}
	full := b.prefix + prefix
	var keys []string
	last := ""
	err = b.retry(ctx, op, full, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for obj := range b.core.ListObjectsIter(ctx, b.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true, StartAfter: last}) {
			if obj.Err != nil {
				return obj.Err
			}
			if strings.HasSuffix(obj.Key, "/") || !strings.HasPrefix(obj.Key, b.prefix) {
				continue // a directory marker (posix servers); not an object of ours
			}
			keys = append(keys, strings.TrimPrefix(obj.Key, b.prefix))
			last = obj.Key
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// Delete removes the object at key. Deleting a missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) (err error) {
	const op = "delete"
	defer b.count(&err)
	full, err := b.fullKey(op, key)
	if err != nil {
		return err
	}
	err = b.retry(ctx, op, full, func(ctx context.Context) error {
		return b.core.RemoveObject(ctx, b.bucket, full, minio.RemoveObjectOptions{})
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// fullKey checks key and prefixes it.
func (b *Bucket) fullKey(op, key string) (string, error) {
	if b.closed.Load() {
		return "", b.errClosed(op, b.prefix+key)
	}
	full := b.prefix + key
	if problem := checkKey(key); problem != "" {
		return "", &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: fmt.Errorf("key %q: %w: %s", key, ErrInvalidKey, problem)}
	}
	if len(full) > maxKeyLen {
		return "", &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: fmt.Errorf("key %q: %w: %d bytes with the prefix, over %d", key, ErrInvalidKey, len(full), maxKeyLen)}
	}
	return full, nil
}

func (b *Bucket) errClosed(op, full string) error {
	return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: ErrClosed}
}

// validPrefix accepts what List takes: "" or UTF-8 not starting with '/'.
func validPrefix(p string) bool {
	return p == "" || (!strings.HasPrefix(p, "/") && checkKey(strings.TrimSuffix(p, "/")+"x") == "")
}

// count records a failed operation's cause in the stats.
func (b *Bucket) count(err *error) {
	if *err == nil {
		return
	}
	var e *Error
	if errors.As(*err, &e) {
		b.st.failed(e.Cause)
	} else {
		b.st.failed(CauseOther)
	}
}

// retry runs step until it succeeds, fails in a way retrying cannot fix,
// or has been tried Config.Attempts times, waiting a jittered exponential
// back-off on Config.Clock between attempts. The error is an *Error naming
// op and key.
func (b *Bucket) retry(ctx context.Context, op, full string, step func(ctx context.Context) error) error {
	delay := b.cfg.BackoffMin
	for attempt := 1; ; attempt++ {
		err := step(ctx)
		if err == nil {
			return nil
		}
		c := classify(ctx, err)
		if c.cause == CauseCanceled {
			err = ctx.Err()
		}
		if !c.retryable || attempt >= b.cfg.Attempts {
			if c.retryable {
				b.log.Warn("objstore: giving up", "op", op, "key", full, "attempts", attempt, "err", err)
			}
			return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: c.cause, Code: c.code, Status: c.status, Attempts: attempt, Err: err}
		}
		b.st.retries.Add(1)
		wait := jitter(delay)
		b.log.Debug("objstore: retrying", "op", op, "key", full, "attempt", attempt, "wait", wait, "err", err)
		if err := b.cfg.Clock.Sleep(ctx, wait); err != nil {
			return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseCanceled, Attempts: attempt, Err: err}
		}
		delay = min(delay*2, b.cfg.BackoffMax)
	}
}

// jitter picks a wait uniform in [d/2, d]: never much less than the
// back-off, and gateways that lost their link together do not retry in
// step.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// md5Of hashes n bytes of r from off.
func md5Of(r io.ReaderAt, off, n int64) ([md5.Size]byte, error) {
	h := md5.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, off, n)); err != nil {
		return [md5.Size]byte{}, err
	}
	var sum [md5.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// idleConn fails reads and writes that make no progress for idle. A write
// also moves the read deadline: a request just sent deserves the whole
// idle time for its answer, however long the connection sat in the pool.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// objectReader is Get's body: it counts bytes and resumes a dropped body
// with a ranged GET of the same ETag.
type objectReader struct {
	b          *Bucket
	ctx        context.Context
	full, etag string
	size, off  int64
	body       io.ReadCloser
	broken     error // the body failed after handing over bytes; resume at the next Read
	failed     error // final: every later Read returns it
	resumes    int
	closed     bool
	mu         sync.Mutex
}

func (r *objectReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrClosed
	}
	if r.failed != nil {
		return 0, r.failed
	}
	for {
		if r.broken != nil {
			cause := r.broken
			r.broken = nil
			if err := r.resume(cause); err != nil {
				r.failed = err
				return 0, err
			}
		}
		n, err := r.body.Read(p)
		r.off += int64(n)
		r.b.st.downloaded(int64(n))
		switch {
		case r.off > r.size:
			err = &Error{Op: "get", Bucket: r.b.bucket, Key: r.full, Cause: CauseCorrupt,
				Err: fmt.Errorf("%w: body longer than its %d bytes", ErrCorrupt, r.size)}
			r.b.st.failed(CauseCorrupt)
			r.failed = err
			return n, err
		case err == nil:
			return n, nil
		case errors.Is(err, io.EOF) && r.off == r.size:
			return n, io.EOF
		case errors.Is(err, io.EOF):
			err = io.ErrUnexpectedEOF // cut short: resume
		}
		r.broken = err
		if n > 0 {
			return n, nil
		}
	}
}

// resume reopens the body at r.off after the error cause.
func (r *objectReader) resume(cause error) error {
	b := r.b
	c := classify(r.ctx, cause)
	if !c.retryable || r.resumes+1 >= b.cfg.Attempts {
		b.st.failed(c.cause)
		return &Error{Op: "get", Bucket: b.bucket, Key: r.full, Cause: c.cause, Code: c.code, Status: c.status, Attempts: r.resumes + 1,
			Err: fmt.Errorf("reading at byte %d of %d: %w", r.off, r.size, cause)}
	}
	r.body.Close()
	r.body = errBody{cause}
	r.resumes++
	b.st.retries.Add(1)
	b.log.Debug("objstore: resuming a download", "key", r.full, "at", r.off, "err", cause)
	if err := b.cfg.Clock.Sleep(r.ctx, jitter(b.cfg.BackoffMin)); err != nil {
		b.st.failed(CauseCanceled)
		return &Error{Op: "get", Bucket: b.bucket, Key: r.full, Cause: CauseCanceled, Err: err}
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(r.off, 0); err != nil {
		return &Error{Op: "get", Bucket: b.bucket, Key: r.full, Cause: CauseOther, Err: err}
	}
	if err := opts.SetMatchETag(r.etag); err != nil {
		return &Error{Op: "get", Bucket: b.bucket, Key: r.full, Cause: CauseOther, Err: err}
	}
	var body io.ReadCloser
	var info minio.ObjectInfo
	err := b.retry(r.ctx, "get", r.full, func(ctx context.Context) (err error) {
		body, info, _, err = b.core.GetObject(ctx, b.bucket, r.full, opts)
		return err
	})
	if err == nil && strings.Trim(info.ETag, `"`) != r.etag {
		// A server that ignores If-Match: the ETag tells all the same.
		body.Close()
		err = &Error{Op: "get", Bucket: b.bucket, Key: r.full, Cause: CauseExists}
	}
	if err != nil {
		e := err.(*Error)
		if e.Cause == CauseExists { // 412: the ETag no longer matches
			e.Cause = CauseCorrupt
			e.Err = fmt.Errorf("%w: the object changed while it was read (at byte %d of %d)", ErrCorrupt, r.off, r.size)
		}
		b.st.failed(e.Cause)
		return e
	}
	r.body = body
	return nil
}

func (r *objectReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.body.Close()
}

// errBody stands for a body that failed and was closed.
type errBody struct{ err error }

func (e errBody) Read([]byte) (int, error) { return 0, e.err }
func (e errBody) Close() error             { return nil }
