package objstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/runnel-io/runnel/checkpoint"
)

// ErrExists means a Put or PutFile found the key already holding an
// object: objects are written once (If-None-Match: *) and never
// overwritten. It also matches checkpoint.ErrExists, so that a Bucket is
// a checkpoint.Store as it is.
var ErrExists error = &alias{"objstore: object exists", checkpoint.ErrExists}

// ErrNotFound means the key holds no object (Get, Stat). It also matches
// checkpoint.ErrNotFound.
var ErrNotFound error = &alias{"objstore: object not found", checkpoint.ErrNotFound}

// alias is a sentinel that errors.Is also takes for another package's.
type alias struct {
	msg  string
	also error
}

func (a *alias) Error() string        { return a.msg }
func (a *alias) Is(target error) bool { return target == a.also }

// ErrRefused means the server (or the TLS handshake) refused the request in
// a way that retrying cannot fix: bad credentials, a missing bucket, access
// denied, a read-only bucket, an invalid request, a certificate that does
// not verify. It is returned at once, without retries; the *Error's Cause
// and Code tell which.
var ErrRefused = errors.New("objstore: refused")

// ErrUnavailable means the server could not be reached or kept failing (5xx,
// timeouts, connection resets) for every attempt the retry policy allows.
// The operation may succeed later; PutFile keeps what it uploaded so far
// for the next call to resume.
var ErrUnavailable = errors.New("objstore: unavailable")

// ErrInvalidConfig marks every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("objstore: invalid config")

// ErrInvalidKey means a key is not one this package will store: empty, over
// 1024 bytes with the prefix, not UTF-8, starting or ending with "/", or
// with an empty, "." or ".." segment (servers that map keys to files, like
// versitygw's posix backend, cannot hold those faithfully).
var ErrInvalidKey = errors.New("objstore: invalid key")

// ErrCorrupt means data read back does not match what was promised: a body
// shorter or longer than its Content-Length, or an object that changed
// while a Get was resuming after a dropped connection.
var ErrCorrupt = errors.New("objstore: corrupt")

// Cause is the class of a failed operation, as counted in Stats.Failures
// and the failures metric.
type Cause string

// Causes of failure. Every *Error has exactly one.
const (
	CauseRetryable Cause = "retryable" // 5xx, timeouts, resets for every attempt (ErrUnavailable)
	CauseAccess    Cause = "access"    // 401/403: bad credentials, access denied, read-only (ErrRefused)
	CauseNoBucket  Cause = "no_bucket" // the bucket does not exist (ErrRefused)
	CauseTLS       Cause = "tls"       // the server's certificate does not verify (ErrRefused)
	CauseExists    Cause = "exists"    // ErrExists
	CauseNotFound  Cause = "not_found" // ErrNotFound
	CauseCanceled  Cause = "canceled"  // the context ended (wraps ctx.Err())
	CauseCorrupt   Cause = "corrupt"   // ErrCorrupt
	CauseOther     Cause = "other"     // anything else: other 4xx (ErrRefused), local file errors, bad keys
)

// causes lists every Cause, in the order metrics report them.
var causes = [...]Cause{CauseRetryable, CauseAccess, CauseNoBucket, CauseTLS, CauseExists, CauseNotFound, CauseCanceled, CauseCorrupt, CauseOther}

// Error is the error every Bucket and Mem method returns. It names the
// operation, the bucket and the key, never a credential.
type Error struct {
	Op       string // "put", "put-file", "get", "stat", "list", "delete", "open"
	Bucket   string // the bucket name
	Key      string // the full object key (with the prefix); for list, the prefix
	Cause    Cause
	Code     string // the S3 error code ("AccessDenied"), when the server sent one
	Status   int    // the HTTP status, 0 when there was no response
	Attempts int    // requests made for the failing step (1 when not retried)
	Err      error  // what went wrong underneath (minio-go's error, a net error, ctx.Err())
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "objstore: %s s3://%s/%s: ", e.Op, e.Bucket, e.Key)
	switch e.Cause {
	case CauseExists:
		b.WriteString("object exists")
	case CauseNotFound:
		b.WriteString("object not found")
	case CauseNoBucket:
		fmt.Fprintf(&b, "bucket %q does not exist", e.Bucket)
	case CauseAccess:
		b.WriteString("access refused (credentials wrong, or not allowed to do this to this bucket)")
	case CauseRetryable:
		b.WriteString("unavailable")
	case CauseCanceled:
		b.WriteString("canceled")
	case CauseTLS:
		b.WriteString("TLS: server certificate not trusted (set ca_file?)")
	case CauseCorrupt:
		b.WriteString("corrupt")
	default:
		b.WriteString("failed")
	}
	if e.Code != "" {
		fmt.Fprintf(&b, ": %s", e.Code)
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap gives the sentinel of e's class and the underlying error, so both
// errors.Is(err, ErrRefused) and errors.Is(err, context.Canceled) work.
func (e *Error) Unwrap() []error {
	var s error
	switch e.Cause {
	case CauseExists:
		s = ErrExists
	case CauseNotFound:
		s = ErrNotFound
	case CauseRetryable:
		s = ErrUnavailable
	case CauseAccess, CauseNoBucket, CauseTLS:
		s = ErrRefused
	case CauseCorrupt:
		s = ErrCorrupt
	case CauseOther:
		if e.Status >= 400 && e.Status < 500 {
			s = ErrRefused
		}
	}
	if s == nil {
		return []error{e.Err}
	}
	return []error{s, e.Err}
}

// class is what classify makes of one attempt's error.
type class struct {
	cause     Cause
	retryable bool
	code      string
	status    int
}

// classify sorts an error from minio-go or the network into a class. ctx is
// the operation's context: a context error while ctx is still live is a
// timeout of one request (retryable), not the caller's cancellation.
func classify(ctx context.Context, err error) class {
	if ctx.Err() != nil {
		return class{cause: CauseCanceled}
	}
	var ours *Error
	if errors.As(err, &ours) {
		return class{cause: ours.Cause, retryable: ours.Cause == CauseRetryable, code: ours.Code, status: ours.Status}
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) && (er.StatusCode != 0 || er.Code != "") {
		c := class{code: er.Code, status: er.StatusCode}
		switch {
		case er.StatusCode == http.StatusPreconditionFailed || er.Code == "PreconditionFailed":
			c.cause = CauseExists
		case er.Code == "NoSuchBucket":
			c.cause = CauseNoBucket
		case er.Code == "NoSuchKey" || (er.StatusCode == http.StatusNotFound && er.Code == ""):
			c.cause = CauseNotFound
		case er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden,
			er.Code == "AccessDenied", er.Code == "InvalidAccessKeyId", er.Code == "SignatureDoesNotMatch":
			c.cause = CauseAccess
		case er.StatusCode >= 500, er.StatusCode == http.StatusRequestTimeout, er.StatusCode == http.StatusTooManyRequests,
			retryableCodes[er.Code]:
			c.cause, c.retryable = CauseRetryable, true
		default:
			c.cause = CauseOther
		}
		// minio-go makes up a Code from the status line for bodiless
		// errors ("503 Service Unavailable"); keep real codes only.
		if strings.ContainsRune(c.code, ' ') {
			c.code = ""
		}
		return c
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return class{cause: CauseTLS}
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return class{cause: CauseTLS}
	}
	if errors.Is(err, ErrCorrupt) {
		return class{cause: CauseCorrupt}
	}
	// Everything else from the network: refused, reset, EOF, timeouts,
	// DNS. A gateway's link comes and goes; retrying is what helps.
	return class{cause: CauseRetryable, retryable: true}
}

// retryableCodes are S3 error codes that say "try again" whatever the
// status (minio-go's list).
var retryableCodes = map[string]bool{
	"RequestError": true, "RequestTimeout": true, "Throttling": true, "ThrottlingException": true,
	"RequestLimitExceeded": true, "RequestThrottled": true, "InternalError": true,
	"SlowDown": true, "SlowDownWrite": true, "SlowDownRead": true,
}
