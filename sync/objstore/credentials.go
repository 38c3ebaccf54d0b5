package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// maxCredentialsFile bounds what is read of a credentials file.
const maxCredentialsFile = 64 << 10

// keys is a set of static credentials. Its String never shows the secret.
type keys struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

func (k keys) String() string {
	return fmt.Sprintf("{AccessKeyID:%q SecretAccessKey:REDACTED}", k.AccessKeyID)
}

// readCredentialsFile reads and parses a credentials file (see
// parseCredentials).
func readCredentialsFile(path string) (keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return keys{}, fmt.Errorf("objstore: credentials file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCredentialsFile+1))
	if err != nil {
		return keys{}, fmt.Errorf("objstore: credentials file %s: %w", path, err)
	}
	if len(data) > maxCredentialsFile {
		return keys{}, fmt.Errorf("objstore: credentials file %s: over %d bytes: %w", path, maxCredentialsFile, ErrInvalidConfig)
	}
	return parseCredentials(data, path)
}

// parseCredentials parses the credentials file format: the default profile
// of an AWS shared credentials file. Lines are "name = value"; blank lines
// and lines starting with '#' or ';' are skipped; "[section]" lines start a
// section, and only the lines before any section and those of [default]
// count. The names are aws_access_key_id, aws_secret_access_key and
// aws_session_token (optional), each also without the "aws_"; other names
// (region, …) are ignored. Errors name the file, the line and the name,
// never a value.
func parseCredentials(data []byte, name string) (keys, error) {
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("objstore: credentials file %s:%d: "+format+": %w", append([]any{name, line}, append(args, ErrInvalidConfig)...)...)
	}
	if !utf8.Valid(data) {
		return keys{}, fmt.Errorf("objstore: credentials file %s: not UTF-8 text: %w", name, ErrInvalidConfig)
	}
	var k keys
	seen := map[string]int{}
	inDefault := true // lines before any [section] count
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		s := strings.TrimSpace(strings.TrimSuffix(string(line), "\r"))
		if s == "" || s[0] == '#' || s[0] == ';' {
			continue
		}
		if s[0] == '[' {
			if !strings.HasSuffix(s, "]") {
				return keys{}, bad(lineNo, "section header without ']'")
			}
			sec := strings.TrimSpace(s[1 : len(s)-1])
			inDefault = sec == "default"
			continue
		}
		field, value, ok := strings.Cut(s, "=")
		if !ok {
			// Do not quote the line: it may be a pasted secret.
			return keys{}, bad(lineNo, "want name = value")
		}
		if !inDefault {
			continue
		}
		field = strings.ToLower(strings.TrimSpace(field))
		value = strings.TrimSpace(value)
		var dst *string
		switch strings.TrimPrefix(field, "aws_") {
		case "access_key_id":
			dst = &k.AccessKeyID
		case "secret_access_key":
			dst = &k.SecretAccessKey
		case "session_token":
			dst = &k.SessionToken
		default:
			continue
		}
		canon := "aws_" + strings.TrimPrefix(field, "aws_")
		if prev, dup := seen[canon]; dup {
			return keys{}, bad(lineNo, "%s given again (first on line %d)", canon, prev)
		}
		seen[canon] = lineNo
		if value == "" {
			return keys{}, bad(lineNo, "%s is empty", canon)
		}
		if strings.ContainsAny(value, " \t\x00") {
			return keys{}, bad(lineNo, "%s: value contains a space or NUL", canon)
		}
		*dst = value
	}
	switch {
	case k.AccessKeyID == "" && k.SecretAccessKey == "":
		return keys{}, fmt.Errorf("objstore: credentials file %s: no aws_access_key_id and aws_secret_access_key (in [default] or before any section): %w", name, ErrInvalidConfig)
	case k.AccessKeyID == "":
		return keys{}, fmt.Errorf("objstore: credentials file %s: aws_secret_access_key without aws_access_key_id: %w", name, ErrInvalidConfig)
	case k.SecretAccessKey == "":
		return keys{}, fmt.Errorf("objstore: credentials file %s: aws_access_key_id without aws_secret_access_key: %w", name, ErrInvalidConfig)
	}
	return k, nil
}

// errNoCredentials is Open's answer when no source gives credentials.
var errNoCredentials = errors.New("no credentials: set access_key_id and secret_access_key, credentials_file, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")

// credentialsFor picks the credential source Config describes: static keys,
// the file, or the environment (AWS_*, then MINIO_*). Instance metadata
// and other network sources are deliberately not tried: an edge gateway
// offline at start must not hang probing them.
func credentialsFor(c Config) (*credentials.Credentials, error) {
	switch {
	case c.AccessKeyID != "":
		return credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken), nil
	case c.CredentialsFile != "":
		k, err := readCredentialsFile(c.CredentialsFile)
		if err != nil {
			return nil, err
		}
		return credentials.NewStaticV4(k.AccessKeyID, k.SecretAccessKey, k.SessionToken), nil
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.EnvMinio{}})
	v, err := creds.Get()
	if err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		return nil, fmt.Errorf("objstore: %w: %w", errNoCredentials, ErrInvalidConfig)
	}
	return creds, nil
}
