package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in             string
		bucket, prefix string
		err            string // substring; "" = ok
	}{
		{"s3://bucket", "bucket", "", ""},
		{"s3://bucket/", "bucket", "", ""},
		{"s3://bucket/edge/snapshots", "bucket", "edge/snapshots", ""},
		{"s3://bucket/edge/snapshots/", "bucket", "edge/snapshots", ""},
		{"s3://my.bucket-1/p", "my.bucket-1", "p", ""},
		{"", "", "", "want s3://"},
		{"https://bucket/p", "", "", "want s3://"},
		{"s3://", "", "", "3 to 63"},
		{"s3://ab", "", "", "3 to 63"},
		{"s3://Bucket", "", "", "lowercase"},
		{"s3://-bucket", "", "", "begin and end"},
		{"s3://bu..cket", "", "", "two dots"},
		{"s3://192.168.1.1", "", "", "IP address"},
		{"s3://bucket:9000/p", "", "", "lowercase"},
		{"s3://bucket/p?x=1", "", "", "query"},
		{"s3://bucket/a//b", "", "", "empty path segment"},
		{"s3://bucket/a/../b", "", "", `".." path segment`},
		{"s3://AKIA:s3cr3t@bucket/p", "", "", "credentials do not belong"},
	} {
		b, p, err := ParseURL(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ParseURL(%q): %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseURL(%q): error %v, want one with %q", c.in, err, c.err)
		case c.err == "" && (b != c.bucket || p != c.prefix):
			t.Errorf("ParseURL(%q) = %q, %q; want %q, %q", c.in, b, p, c.bucket, c.prefix)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("ParseURL(%q): the error shows the secret: %v", c.in, err)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct {
		in       string
		hostPort string
		secure   bool
		err      string
	}{
		{"s3.example.com", "s3.example.com", true, ""},
		{"127.0.0.1:7070", "127.0.0.1:7070", true, ""},
		{"http://127.0.0.1:7070", "127.0.0.1:7070", false, ""},
		{"https://s3.example.com:8443/", "s3.example.com:8443", true, ""},
		{"[::1]:9000", "[::1]:9000", true, ""},
		{"ftp://host", "", false, "scheme"},
		{"http://host/path", "", false, "without a path"},
		{"http://user:pw@host", "", false, "credentials"},
		{"host:99999", "", false, "port"},
		{"http://", "", false, "want host"},
	} {
		hp, sec, err := parseEndpoint(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("parseEndpoint(%q): %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseEndpoint(%q): error %v, want one with %q", c.in, err, c.err)
		case c.err == "" && (hp != c.hostPort || sec != c.secure):
			t.Errorf("parseEndpoint(%q) = %q, %v; want %q, %v", c.in, hp, sec, c.hostPort, c.secure)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("parseEndpoint(%q): the error shows the password: %v", c.in, err)
		}
	}
}

// Validate lists every problem at once, each naming its field.
func TestValidateEveryProblem(t *testing.T) {
	c := Config{
		URL:            "s3://B",
		Endpoint:       "ftp://x",
		AccessKeyID:    "id-only",
		BandwidthLimit: -1,
		PartSize:       1 << 20,
		Concurrency:    -1,
		Attempts:       1000,
		BackoffMin:     time.Minute,
		BackoffMax:     time.Second,
		IdleTimeout:    -time.Second,
		Region:         "us east",
	}
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v", err)
	}
	for _, field := range []string{"url:", "endpoint:", "access_key_id and secret_access_key", "bandwidth_limit", "part_size", "concurrency", "attempts", "backoff_min 1m0s is more than backoff_max 1s", "idle_timeout", "region"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate: no %q in\n%v", field, err)
		}
	}
	if err := (Config{URL: "s3://bucket"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "url: empty") {
		t.Errorf("empty config: %v", err)
	}
	for _, bad := range []Config{
		{URL: "s3://bucket", AccessKeyID: "a", SecretAccessKey: "b", CredentialsFile: "f"},
		{URL: "s3://bucket", Endpoint: "http://h:1", CAFile: "ca.pem"},
		{URL: "s3://bucket", SessionToken: "t"},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%v: Validate: %v", bad, err)
		}
	}
}

// A Config printed or logged never shows its secret.
func TestConfigRedacted(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	c := Config{URL: "s3://bucket", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: secret}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "cfg", c)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", c)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), c.String(), logged.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("the secret shows: %s", s)
		}
		if !strings.Contains(s, "AKIDEXAMPLE") {
			t.Errorf("the access key id does not show: %s", s)
		}
	}
}

func TestPartSizeFor(t *testing.T) {
	for _, c := range []struct{ size, ps, want int64 }{
		{0, 16 << 20, 16 << 20},
		{100 << 30, 16 << 20, 16 << 20},       // 6,400 parts
		{200 << 30, 16 << 20, 21 << 20},       // 12,800 parts of 16 MiB: more per part, whole MiB
		{5 << 40, 5 << 20, 525 << 20},         // S3's maximum object
		{10000 * (5 << 20), 5 << 20, 5 << 20}, // exactly 10,000 parts
		{10000*(5<<20) + 1, 5 << 20, 6 << 20}, // one byte more
	} {
		got := partSizeFor(c.size, c.ps)
		if got != c.want {
			t.Errorf("partSizeFor(%d, %d) = %d, want %d", c.size, c.ps, got, c.want)
		}
		if (c.size+got-1)/got > maxParts {
			t.Errorf("partSizeFor(%d, %d) = %d: over %d parts", c.size, c.ps, got, maxParts)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"s3://bucket", "s3://bucket/a/b/", "s3://b/../x", "s3://a:b@c/d", "s3://bucket/p?q", "s3://xn--bucket/\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bucket, prefix, err := ParseURL(s)
		if err != nil {
			host, _, _ := strings.Cut(strings.TrimPrefix(s, "s3://"), "/")
			if user, _, ok := strings.Cut(host, "@"); ok && user != "" && strings.Contains(err.Error(), user+"@") {
				t.Fatalf("ParseURL(%q): the error quotes what may be credentials: %v", s, err)
			}
			return
		}
		if checkBucketName(bucket) != nil {
			t.Fatalf("ParseURL(%q): bucket %q accepted", s, bucket)
		}
		if prefix != "" && checkKey(prefix) != "" {
			t.Fatalf("ParseURL(%q): prefix %q accepted: %s", s, prefix, checkKey(prefix))
		}
		// What it accepts it gives back the same way.
		again := "s3://" + bucket
		if prefix != "" {
			again += "/" + prefix
		}
		b2, p2, err := ParseURL(again)
		if err != nil || b2 != bucket || p2 != prefix {
			t.Fatalf("ParseURL(%q) = %q, %q, %v; from %q", again, b2, p2, err, s)
		}
	})
}

func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"host", "host:1", "http://host:1", "https://[::1]:9000/", "http://u:p@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hp, _, err := parseEndpoint(s)
		if err != nil {
			if strings.Contains(s, "@") && strings.Contains(err.Error(), s) {
				t.Fatalf("parseEndpoint(%q): the error quotes what may be credentials: %v", s, err)
			}
			return
		}
		if hp == "" || strings.ContainsAny(hp, "/@ ") {
			t.Fatalf("parseEndpoint(%q) = %q", s, hp)
		}
	})
}
