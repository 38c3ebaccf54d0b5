package objstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults for the zero values of Config.
const (
	DefaultEndpoint          = "s3.amazonaws.com"
	DefaultPartSize          = 16 << 20
	MinPartSize              = 5 << 20 // S3's minimum for every part but the last
	MaxPartSize        int64 = 5 << 30 // S3's maximum part size (typed: it overflows a 32-bit int)
	DefaultAttempts          = 6
	DefaultBackoffMin        = 200 * time.Millisecond
	DefaultBackoffMax        = 15 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	DefaultConcurrency       = 2

	maxParts  = 10000 // S3's limit on parts per upload
	maxKeyLen = 1024  // S3's limit on a key's UTF-8 length
)

// Config says where the bucket is and how to talk to it. Zero values mean
// the defaults above; it is the one source of truth behind the YAML
// fields, flags and environment variables of the nodes that use it.
type Config struct {
	// URL is "s3://bucket" or "s3://bucket/prefix". Keys given to the
	// Bucket's methods are relative to the prefix.
	URL string
	// Endpoint is the server: "host:port" (HTTPS), "https://host:port" or
	// "http://host:port". Default s3.amazonaws.com.
	Endpoint string
	// Region is the bucket's region. Empty: minio-go asks the server
	// (one GetBucketLocation per bucket, cached), which also works with
	// servers that ignore regions.
	Region string

	// AccessKeyID and SecretAccessKey are static credentials (both or
	// neither). CredentialsFile names a file holding them instead (see the
	// package comment for its format). With neither, the environment:
	// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or
	// MINIO_ACCESS_KEY/MINIO_SECRET_KEY.
	AccessKeyID, SecretAccessKey string
	SessionToken                 string // optional, with static credentials
	CredentialsFile              string

	// CAFile is a PEM bundle of CAs to trust besides the system's, for a
	// server with a private CA (HTTPS endpoints only).
	CAFile string

	// BandwidthLimit caps upload bytes per second across every upload of
	// the Bucket (a gateway's uplink budget). 0: no cap.
	BandwidthLimit int64
	// PartSize is the multipart part size: objects larger than this are
	// uploaded in parts of this size (more when a file would need over
	// 10,000 parts). Default 16 MiB, at least 5 MiB. Put buffers one part
	// of a reader that is not an io.ReaderAt.
	PartSize int64
	// Concurrency is how many parts of one PutFile upload at once.
	// Default 2.
	Concurrency int

	// Attempts bounds the requests made for one step (a PUT, a part, a
	// listing page) when the server fails with 5xx, times out or resets
	// the connection. Default 6; 1 means no retries.
	Attempts int
	// BackoffMin and BackoffMax bound the jittered exponential wait
	// between attempts: the n-th wait is uniform in [d/2, d] with
	// d = min(BackoffMin·2^(n-1), BackoffMax). Defaults 200ms and 15s.
	BackoffMin, BackoffMax time.Duration
	// IdleTimeout fails a request whose connection moves no bytes for this
	// long (a stalled server or a dead link), so that it is retried.
	// Default 30s.
	IdleTimeout time.Duration

	// Clock is the time source of back-off waits and of Stats' upload
	// ages; nil means the system clock. Tests pass a fake.
	Clock Clock
	// Logger receives retries (debug) and give-ups (warn); nil:
	// slog.Default(). Credentials are never logged.
	Logger *slog.Logger
}

// Clock is the time source a Bucket waits on.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// String describes c without its secrets, so that a Config can be logged
// or printed with %v.
func (c Config) String() string {
	secret := ""
	if c.SecretAccessKey != "" {
		secret = "REDACTED"
	}
	return fmt.Sprintf("objstore.Config{URL:%q Endpoint:%q Region:%q AccessKeyID:%q SecretAccessKey:%q CredentialsFile:%q CAFile:%q BandwidthLimit:%d PartSize:%d}",
		c.URL, c.Endpoint, c.Region, c.AccessKeyID, secret, c.CredentialsFile, c.CAFile, c.BandwidthLimit, c.PartSize)
}

// GoString is String, so that %#v does not print the secret either.
func (c Config) GoString() string { return c.String() }

// LogValue is what slog logs for a Config: no secrets.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", c.URL), slog.String("endpoint", c.Endpoint), slog.String("region", c.Region),
		slog.String("access_key_id", c.AccessKeyID), slog.Bool("secret_access_key_set", c.SecretAccessKey != ""),
		slog.String("credentials_file", c.CredentialsFile), slog.String("ca_file", c.CAFile),
		slog.Int64("bandwidth_limit", c.BandwidthLimit), slog.Int64("part_size", c.PartSize),
	)
}

// Validate reports every problem with c at once (errors.Join), each naming
// the field and wrapping ErrInvalidConfig. It checks values only: files
// (credentials, CA) are read by Open.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("objstore: "+format+": %w", append(args, ErrInvalidConfig)...))
	}
	if c.URL == "" {
		bad("url: empty, want s3://bucket or s3://bucket/prefix")
	} else if _, _, err := ParseURL(c.URL); err != nil {
		bad("url: %v", err)
	}
	if c.Endpoint != "" {
		if _, secure, err := parseEndpoint(c.Endpoint); err != nil {
			bad("endpoint: %v", err)
		} else if !secure && c.CAFile != "" {
			bad("ca_file %q: the endpoint %q is plain HTTP; a CA is for https:// endpoints", c.CAFile, c.Endpoint)
		}
	}
	if strings.ContainsAny(c.Region, " /\t\n") {
		bad("region %q: want a region name like us-east-1", c.Region)
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		bad("access_key_id and secret_access_key: give both or neither")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		bad("session_token: only with access_key_id and secret_access_key")
	}
	if c.AccessKeyID != "" && c.CredentialsFile != "" {
		bad("credentials_file %q: give static keys or a credentials file, not both", c.CredentialsFile)
	}
	if c.BandwidthLimit < 0 {
		bad("bandwidth_limit %d: want 0 (no cap) or bytes per second", c.BandwidthLimit)
	}
	if c.PartSize != 0 && (c.PartSize < MinPartSize || c.PartSize > MaxPartSize) {
		bad("part_size %d: want 0 (default %d) or %d to %d bytes", c.PartSize, DefaultPartSize, MinPartSize, MaxPartSize)
	}
	if c.Concurrency < 0 || c.Concurrency > 64 {
		bad("concurrency %d: want 0 (default %d) to 64", c.Concurrency, DefaultConcurrency)
	}
	if c.Attempts < 0 || c.Attempts > 100 {
		bad("attempts %d: want 0 (default %d) to 100", c.Attempts, DefaultAttempts)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"backoff_min", c.BackoffMin}, {"backoff_max", c.BackoffMax}, {"idle_timeout", c.IdleTimeout}} {
		if d.d < 0 || d.d > 24*time.Hour {
			bad("%s %v: want 0 (default) to 24h", d.name, d.d)
		}
	}
	if lo, hi := orDefault(c.BackoffMin, DefaultBackoffMin), orDefault(c.BackoffMax, DefaultBackoffMax); lo > hi {
		bad("backoff_min %v is more than backoff_max %v", lo, hi)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Attempts == 0 {
		c.Attempts = DefaultAttempts
	}
	c.BackoffMin = orDefault(c.BackoffMin, DefaultBackoffMin)
	c.BackoffMax = orDefault(c.BackoffMax, DefaultBackoffMax)
	c.IdleTimeout = orDefault(c.IdleTimeout, DefaultIdleTimeout)
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// ParseURL splits "s3://bucket/prefix" into the bucket and the prefix
// (without leading or trailing slashes; "" when absent). The bucket must be
// a valid S3 bucket name; the prefix a valid key (see ErrInvalidKey).
// Credentials, ports, queries and fragments are refused: credentials
// belong in their own settings, where they are never logged.
func ParseURL(s string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q: want s3://bucket[/prefix]", redactUserinfo(s))
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if strings.Contains(bucket, "@") {
		return "", "", errors.New("s3://…@…: credentials do not belong in the URL; use access_key_id/secret_access_key or credentials_file")
	}
	if strings.ContainsAny(rest, "?#") {
		return "", "", fmt.Errorf("%q: no query or fragment allowed", s)
	}
	if err := checkBucketName(bucket); err != nil {
		return "", "", fmt.Errorf("%q: %w", s, err)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		if problem := checkKey(prefix); problem != "" {
			return "", "", fmt.Errorf("%q: prefix %q: %s", s, prefix, problem)
		}
	}
	return bucket, prefix, nil
}

// checkBucketName applies S3's rules for bucket names.
func checkBucketName(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q: want 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("bucket %q: want lowercase letters, digits, '-' and '.'", b)
		}
	}
	first, last := b[0], b[len(b)-1]
	if first == '-' || first == '.' || last == '-' || last == '.' {
		return fmt.Errorf("bucket %q: must begin and end with a letter or digit", b)
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket %q: no two dots in a row", b)
	}
	if net.ParseIP(b) != nil {
		return fmt.Errorf("bucket %q: must not look like an IP address", b)
	}
	return nil
}

// checkKey says what is wrong with a key (relative or full), or "".
func checkKey(k string) string {
	switch {
	case k == "":
		return "empty"
	case len(k) > maxKeyLen:
		return fmt.Sprintf("%d bytes, over S3's %d", len(k), maxKeyLen)
	case !utf8.ValidString(k):
		return "not valid UTF-8"
	case strings.HasPrefix(k, "/") || strings.HasSuffix(k, "/"):
		return "must not begin or end with '/'"
	}
	for seg := range strings.SplitSeq(k, "/") {
		switch seg {
		case "":
			return "empty path segment ('//')"
		case ".", "..":
			return fmt.Sprintf("%q path segment", seg)
		}
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f {
			return "control character"
		}
	}
	return ""
}

// redactUserinfo hides what may be a user:password before an '@' in a
// URL-like string, so that an error can quote the rest.
func redactUserinfo(s string) string {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		scheme, _, ok := strings.Cut(s[:i], "://")
		if !ok {
			return "…@" + s[i+1:]
		}
		return scheme + "://…@" + s[i+1:]
	}
	return s
}

// parseEndpoint turns Config.Endpoint into minio-go's host:port and
// whether to use TLS.
func parseEndpoint(s string) (hostPort string, secure bool, err error) {
	if strings.Contains(s, "@") {
		return "", false, errors.New("credentials do not belong in the endpoint; use access_key_id/secret_access_key or credentials_file")
	}
	secure = true
	rest := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", false, fmt.Errorf("%q: %v", s, err)
		}
		switch u.Scheme {
		case "https":
		case "http":
			secure = false
		default:
			return "", false, fmt.Errorf("%q: scheme %q, want http or https", s, u.Scheme)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return "", false, fmt.Errorf("%q: want scheme://host[:port] without a path", s)
		}
		rest = u.Host
	}
	host, port := rest, ""
	if h, p, err := net.SplitHostPort(rest); err == nil {
		host, port = h, p
	}
	if host == "" || strings.ContainsAny(host, "/ ?#") {
		return "", false, fmt.Errorf("%q: want host[:port], http://host[:port] or https://host[:port]", s)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", false, fmt.Errorf("%q: port %q: want 1 to 65535", s, port)
		}
	}
	return rest, secure, nil
}
