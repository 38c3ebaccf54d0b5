package objstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCredentials(t *testing.T) {
	for _, c := range []struct {
		name, in  string
		id, token string
		err       string // substring; "" = ok
	}{
		{"plain", "aws_access_key_id = AKID\naws_secret_access_key = SECRET1\n", "AKID", "", ""},
		{"no aws_ prefix, CRLF, comments", "# mine\r\naccess_key_id=AKID\r\n; x\r\nsecret_access_key=SECRET1\r\n", "AKID", "", ""},
		{"default profile among others", "[other]\naws_access_key_id = NOPE\naws_secret_access_key = NOPE2\n[default]\naws_access_key_id = AKID\naws_secret_access_key = SECRET1\naws_session_token = TOK\nregion = eu-west-1\n", "AKID", "TOK", ""},
		{"only another profile", "[prod]\naws_access_key_id = AKID\naws_secret_access_key = SECRET1\n", "", "", "no aws_access_key_id"},
		{"empty", "", "", "", "no aws_access_key_id"},
		{"id only", "aws_access_key_id = AKID\n", "", "", "without aws_secret_access_key"},
		{"secret only", "aws_secret_access_key = SECRET1\n", "", "", ": aws_secret_access_key without"},
		{"not name=value", "aws_access_key_id = AKID\nSECRET1\n", "", "", ":2: want name = value"},
		{"duplicate", "aws_access_key_id = AKID\naws_secret_access_key = SECRET1\nsecret_access_key = SECRET2\n", "", "", ":3: aws_secret_access_key given again (first on line 2)"},
		{"empty value", "aws_access_key_id = AKID\naws_secret_access_key =\n", "", "", ":2: aws_secret_access_key is empty"},
		{"space in value", "aws_access_key_id = AKID\naws_secret_access_key = SEC RET1\n", "", "", ":2: aws_secret_access_key: value contains a space"},
		{"bad section", "[default\n", "", "", ":1: section header"},
		{"not utf-8", "aws_access_key_id = \xff\n", "", "", "not UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := parseCredentials([]byte(c.in), "creds")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("error %v, want one with %q wrapping ErrInvalidConfig", err, c.err)
				}
				for _, secret := range []string{"SECRET1", "SECRET2", "SEC RET1"} {
					if strings.Contains(err.Error(), secret) {
						t.Fatalf("the error shows a secret: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.AccessKeyID != c.id || k.SecretAccessKey != "SECRET1" || k.SessionToken != c.token {
				t.Fatalf("got %+v (token %q)", k, k.SessionToken)
			}
			if strings.Contains(k.String(), "SECRET1") {
				t.Fatalf("String shows the secret: %s", k)
			}
		})
	}
}

func TestReadCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "creds")
	os.WriteFile(p, []byte("aws_access_key_id=A\naws_secret_access_key=B\n"), 0o600)
	if k, err := readCredentialsFile(p); err != nil || k.AccessKeyID != "A" {
		t.Fatalf("%+v, %v", k, err)
	}
	if _, err := readCredentialsFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, maxCredentialsFile+1), 0o600)
	if _, err := readCredentialsFile(big); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("big file: %v", err)
	}
}

// Without keys or a file, credentials come from the environment, and
// their absence is a clear error at New.
func TestCredentialsFromEnvironment(t *testing.T) {
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"} {
		t.Setenv(v, "")
	}
	_, err := New(Config{URL: "s3://bucket"})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("New without credentials: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "ENVID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
	b, err := New(Config{URL: "s3://bucket"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// FuzzParseCredentials: any input either parses to usable keys or fails
// with ErrInvalidConfig, and an error never quotes a value.
func FuzzParseCredentials(f *testing.F) {
	f.Add([]byte("aws_access_key_id = AKID\naws_secret_access_key = SECRET\n"))
	f.Add([]byte("[default]\r\naccess_key_id=a\r\nsecret_access_key=b\r\n[x]\nq\n"))
	f.Add([]byte("[p]\naws_access_key_id=1\n[default]\n"))
	f.Add([]byte("=\n[\n#"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseCredentials(data, "f")
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error not ErrInvalidConfig: %v", err)
			}
			// No value of any name = value line appears in the error.
			for _, line := range strings.Split(string(data), "\n") {
				_, v, ok := strings.Cut(line, "=")
				v = strings.TrimSpace(strings.TrimSuffix(v, "\r"))
				if ok && len(v) >= 6 && strings.Contains(err.Error(), v) && !strings.Contains(errorVocabulary, v) {
					t.Fatalf("error quotes the value %q: %v", v, err)
				}
			}
			return
		}
		if k.AccessKeyID == "" || k.SecretAccessKey == "" || strings.ContainsAny(k.AccessKeyID+k.SecretAccessKey+k.SessionToken, " \t\n\r\x00") {
			t.Fatalf("accepted unusable keys %+v from %q", k, data)
		}
	})
}

// errorVocabulary is every fixed text parseCredentials' errors hold: a
// value that is part of it may show up in an error without being quoted.
const errorVocabulary = "objstore: credentials file f:0123456789: aws_access_key_id aws_secret_access_key aws_session_token " +
	"given again (first on line ) is empty : value contains a space or NUL section header without ']' want name = value " +
	"no aws_access_key_id and aws_secret_access_key (in [default] or before any section) without invalid config not UTF-8 text"
