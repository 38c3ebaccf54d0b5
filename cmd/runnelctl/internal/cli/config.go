package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/internal/typo"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// DefaultHub is the hub address when nothing names one: the hub's own
// default gRPC listener.
const DefaultHub = "127.0.0.1:7443"

// Environment variables runnelctl reads.
const (
	EnvHub       = "RUNNEL_HUB"
	EnvToken     = "RUNNEL_TOKEN"
	EnvTokenFile = "RUNNEL_TOKEN_FILE"
	EnvCAFile    = "RUNNEL_CA_FILE"
	EnvInsecure  = "RUNNEL_INSECURE"
	EnvConfig    = "RUNNEL_CONFIG"
)

// connConfig is where and how to reach the hub, merged from flags,
// environment, config file and defaults.
type connConfig struct {
	addr     string
	host     string
	token    string // never printed
	caFile   string
	insecure bool
	tls      bool
}

// fileConfig is the config file's contents, with where each came from.
type fileConfig struct {
	path                          string
	hub, token, tokenFile, caFile string
	insecure                      *bool
}

var configFields = []string{"hub", "token", "token_file", "ca_file", "insecure"}

// maxConfigSize bounds the config file and token files read.
const maxConfigSize = 1 << 20

func (a *app) getenv(name string) (string, bool) {
	if a.env.LookupEnv == nil {
		return "", false
	}
	return a.env.LookupEnv(name)
}

// configPath is the config file to read, and whether it was named (a
// named file must exist; the default one may not).
func (a *app) configPath() (string, bool) {
	if a.flags.changed("config") {
		return a.flags.configFile, true
	}
	if v, ok := a.getenv(EnvConfig); ok {
		return v, v != ""
	}
	dir, _ := a.getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, _ := a.getenv("HOME")
		if home == "" {
			return "", false
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "runnel", "runnelctl.yaml"), false
}

// resolve merges the sources into a connConfig: flag > environment >
// file > default. Every problem of every source is reported at once.
func (a *app) resolve() (*connConfig, error) {
	var probs spec.Problems
	fc := &fileConfig{}
	if path, named := a.configPath(); path != "" {
		data, err := a.env.ReadFile(path)
		switch {
		case err != nil && !named && errors.Is(err, fs.ErrNotExist):
		case err != nil:
			probs = append(probs, spec.Problem{File: path, Msg: "cannot read the config file: " + cause(err).Error()})
		default:
			fc, probs = parseConfig(path, data)
		}
	}
	c := &connConfig{}
	// hub
	switch v, ok := a.getenv(EnvHub); {
	case a.flags.changed("hub"):
		c.addr = a.flags.hub
	case ok && v != "":
		c.addr = v
	case fc.hub != "":
		c.addr = fc.hub
	default:
		c.addr = DefaultHub
	}
	host, port, err := net.SplitHostPort(c.addr)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		probs = append(probs, spec.Problem{File: a.origin("hub", EnvHub, fc), Msg: fmt.Sprintf("hub address %q is not host:port (e.g. %s)", c.addr, DefaultHub)})
	}
	c.host = host
	// token: the highest source that gives token or token_file.
	envTok, _ := a.getenv(EnvToken)
	envTokFile, _ := a.getenv(EnvTokenFile)
	type tokenSource struct {
		where, tok, file, base string
	}
	for _, s := range []tokenSource{
		{"flags --token and --token-file", flagValue(a, "token"), flagValue(a, "token-file"), ""},
		{"env " + EnvToken + " and " + EnvTokenFile, envTok, envTokFile, ""},
		{fc.path + ": token and token_file", fc.token, fc.tokenFile, filepath.Dir(fc.path)},
	} {
		if s.tok == "" && s.file == "" {
			continue
		}
		if s.tok != "" && s.file != "" {
			probs = append(probs, spec.Problem{Msg: s.where + " are both set; give one"})
			break
		}
		c.token = s.tok
		if s.file != "" {
			path := s.file
			if s.base != "" && !filepath.IsAbs(path) {
				path = filepath.Join(s.base, path)
			}
			data, err := a.env.ReadFile(path)
			if err != nil {
				probs = append(probs, spec.Problem{File: path, Msg: "cannot read the token file: " + cause(err).Error()})
				break
			}
			c.token = strings.TrimRight(string(data), "\r\n")
			if c.token == "" {
				probs = append(probs, spec.Problem{File: path, Msg: "the token file is empty"})
			}
		}
		if strings.ContainsAny(c.token, "\r\n\t ") || len(c.token) > 4096 {
			probs = append(probs, spec.Problem{Msg: "the token (" + s.where + ") holds spaces or line breaks, or is too long; is it the right file?"})
		}
		break
	}
	// ca_file
	switch v, ok := a.getenv(EnvCAFile); {
	case a.flags.changed("ca-file"):
		c.caFile = a.flags.caFile
	case ok && v != "":
		c.caFile = v
	case fc.caFile != "":
		c.caFile = fc.caFile
		if !filepath.IsAbs(c.caFile) {
			c.caFile = filepath.Join(filepath.Dir(fc.path), c.caFile)
		}
	}
	// insecure
	switch v, ok := a.getenv(EnvInsecure); {
	case a.flags.changed("insecure"):
		c.insecure = a.flags.insecure
	case ok && v != "":
		b, err := strconv.ParseBool(v)
		if err != nil {
			probs = append(probs, spec.Problem{File: "env " + EnvInsecure, Msg: fmt.Sprintf("%q is not true or false", v)})
		}
		c.insecure = b
	case fc.insecure != nil:
		c.insecure = *fc.insecure
	}
	if c.insecure && c.caFile != "" {
		probs = append(probs, spec.Problem{Msg: "insecure and ca_file are both set: insecure is plaintext, ca_file is TLS; give one"})
	}
	c.tls = c.caFile != "" || (!c.insecure && !isLoopback(c.host))
	if len(probs) > 0 { // in the order found: the file's, then each setting's
		return nil, usageError{fmt.Errorf("connection settings:\n%w", problemsText(probs))}
	}
	return c, nil
}

func flagValue(a *app, name string) string {
	if !a.flags.changed(name) {
		return ""
	}
	return a.flags.set.Lookup(name).Value.String()
}

// origin names where setting's winning value came from, for a problem.
func (a *app) origin(flag, env string, fc *fileConfig) string {
	if a.flags.changed(flag) {
		return "flag --" + flag
	}
	if v, ok := a.getenv(env); ok && v != "" {
		return "env " + env
	}
	if fc.path != "" {
		return fc.path
	}
	return ""
}

func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// isLoopback reports whether host is this machine: localhost or a
// loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseConfig decodes the config file, walking the YAML nodes so that
// every problem names its line and column.
func parseConfig(path string, data []byte) (*fileConfig, spec.Problems) {
	fc := &fileConfig{path: path}
	var probs spec.Problems
	add := func(n *yaml.Node, field, format string, args ...any) {
		probs = append(probs, spec.Problem{File: path, Pos: spec.Pos{Line: n.Line, Column: n.Column}, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if len(data) > maxConfigSize {
		return fc, spec.Problems{{File: path, Msg: "larger than 1 MiB; is this the config file?"}}
	}
	dec, err := yaml.NewLoader(bytes.NewReader(data))
	if err != nil {
		return fc, spec.Problems{spec.YAMLProblem(path, data, err)}
	}
	var doc yaml.Node
	if err := loadNode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return fc, nil
		}
		return fc, spec.Problems{spec.YAMLProblem(path, data, err)}
	}
	if len(doc.Content) == 0 {
		return fc, nil
	}
	root := doc.Content[0]
	if root.ShortTag() == "!!null" {
		return fc, nil
	}
	if root.Kind != yaml.MappingNode {
		add(root, "", "expected a mapping of %s", strings.Join(configFields, ", "))
		return fc, probs
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			add(k, k.Value, "set twice; remove one")
			continue
		}
		seen[k.Value] = true
		if v.ShortTag() == "!!null" {
			continue
		}
		str := func() string {
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
				add(v, k.Value, "expected a string")
				return ""
			}
			return v.Value
		}
		switch k.Value {
		case "hub":
			fc.hub = str()
		case "token":
			fc.token = str()
		case "token_file":
			fc.tokenFile = str()
		case "ca_file":
			fc.caFile = str()
		case "insecure":
			var b bool
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
				add(v, k.Value, "expected true or false")
				continue
			}
			fc.insecure = &b
		default:
			hint := ""
			if s := typo.Suggest(k.Value, configFields); s != "" {
				hint = fmt.Sprintf("did you mean %q? ", s)
			}
			add(k, "", "unknown field %q (%sknown fields: %s)", k.Value, hint, strings.Join(configFields, ", "))
		}
	}
	return fc, probs
}

func loadNode(dec *yaml.Loader, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return dec.Load(n)
}

// bearer sends the token on every call.
type bearer struct{ token string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false: resolve decided on TLS already, and
// a loopback hub is plaintext.
func (bearer) RequireTransportSecurity() bool { return false }

// dial connects to the hub (lazily: the first call connects).
func (a *app) dial() (*grpc.ClientConn, error) {
	if a.conn != nil {
		return a.conn, nil
	}
	c, err := a.resolve()
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if c.tls {
		tc := &tls.Config{ServerName: c.host, MinVersion: tls.VersionTLS12}
		if c.caFile != "" {
			pem, err := a.env.ReadFile(c.caFile)
			if err != nil {
				return nil, usagef("ca_file %s: %v", c.caFile, cause(err))
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, usagef("ca_file %s: no PEM certificate in it", c.caFile)
			}
			tc.RootCAs = pool
		}
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{c.token}))
	}
	conn, err := grpc.NewClient("passthrough:///"+c.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to the hub at %s: %w", c.addr, err)
	}
	a.conn, a.target = conn, c
	return conn, nil
}

func (a *app) fleet() (runnelv1.FleetClient, error) {
	conn, err := a.dial()
	if err != nil {
		return nil, err
	}
	return runnelv1.NewFleetClient(conn), nil
}

func (a *app) results() (runnelv1.ResultsClient, error) {
	conn, err := a.dial()
	if err != nil {
		return nil, err
	}
	return runnelv1.NewResultsClient(conn), nil
}
