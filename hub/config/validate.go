package config

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/runnel-io/runnel/internal/settings"
	"github.com/runnel-io/runnel/operators/spec"
)

const (
	maxPEMSize    = 1 << 20
	maxTokenSize  = 64 << 10
	maxTokensSize = 16 << 20
)

// crossChecks checks the rules between settings of c, and the files
// settings name, reporting to v: from Load, which knows where each value
// came from, or from Validate. It returns the pipeline files and globs
// fit to be read (see LoadWithPipelines).
func crossChecks(v *settings.Checker[Config], c *Config) (pipelines []string) {
	const certP, keyP = "tls.cert_file", "tls.key_file"
	switch {
	case c.TLS.CertFile != "" && c.TLS.KeyFile == "" && v.OK(keyP):
		v.Add(certP, "a certificate needs its private key: set tls.key_file too")
	case c.TLS.KeyFile != "" && c.TLS.CertFile == "" && v.OK(certP):
		v.Add(keyP, "a private key without tls.cert_file; set both or neither")
	}
	cert := v.ReadFile(certP, c.TLS.CertFile, maxPEMSize)
	key := v.ReadFile(keyP, c.TLS.KeyFile, maxPEMSize)
	if cert != nil && key != nil {
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			v.Add(v.Blame(certP, keyP), "%s and %s are not a certificate and its key: %v",
				c.TLS.CertFile, c.TLS.KeyFile, strings.TrimPrefix(err.Error(), "tls: "))
		}
	}
	const authP, caP = "tls.client_auth", "tls.client_ca_file"
	switch on := c.TLS.ClientAuth != ClientAuthNone; {
	case on && c.TLS.ClientCAFile == "" && v.OK(authP):
		v.Add(authP, "%s needs tls.client_ca_file, the CA the edges' certificates are verified against", v.Value(authP))
	case !on && c.TLS.ClientCAFile != "" && v.OK(authP):
		v.Add(caP, "has no effect with tls.client_auth none; set tls.client_auth: optional or require")
	case on && c.TLS.CertFile == "" && v.OK(authP, certP):
		v.Add(authP, "%s needs TLS: set tls.cert_file and tls.key_file", v.Value(authP))
	}
	if ca := v.ReadFile(caP, c.TLS.ClientCAFile, maxPEMSize); ca != nil && !x509.NewCertPool().AppendCertsFromPEM(ca) {
		v.Add(caP, "%s holds no PEM certificate", c.TLS.ClientCAFile)
	}
	if c.TLS.CertFile == "" && c.TLS.KeyFile == "" && !c.Insecure {
		for p, addr := range map[string]string{"grpc.addr": c.GRPC.Addr, "http.addr": c.HTTP.Addr} {
			if v.OK(p) && !settings.IsLoopbackAddr(addr) {
				v.Add(p, "%s is not a loopback address, and no TLS certificate is set: set tls.cert_file and tls.key_file, or insecure: true to serve plaintext", addr)
			}
		}
	}
	if c.Insecure && c.TLS.CertFile != "" && v.IsSet("insecure") {
		v.Add("insecure", "insecure: true contradicts tls.cert_file; the hub serves TLS when a certificate is set, so remove one")
	}
	if v.OK("grpc.addr", "http.addr") && settings.SameListenAddr(c.GRPC.Addr, c.HTTP.Addr) {
		p := v.Blame("http.addr", "grpc.addr")
		o := "grpc.addr"
		if p == o {
			o = "http.addr"
		}
		v.Add(p, "same address as %s; the gRPC and HTTP listeners need a port each", v.Show(o))
	}

	const tok, tokFile = "auth.api_token", "auth.api_token_file"
	if t, ok := v.SecretFile(tok, tokFile, c.Auth.APITokenFile, "token", maxTokenSize); ok {
		c.Auth.APIToken = t
	}
	if c.Auth.EdgeTokensFile != "" {
		if data := v.ReadFile("auth.edge_tokens_file", c.Auth.EdgeTokensFile, maxTokensSize); data != nil {
			toks := edgeTokens(v, c.Auth.EdgeTokensFile, data)
			if v.Loaded() {
				c.Auth.EdgeTokens = toks
			}
		}
	}
	if c.Auth.APIToken != "" {
		for id, t := range c.Auth.EdgeTokens {
			if t == c.Auth.APIToken {
				v.Add(v.Blame(tok, tokFile), "the API token is also edge %s's token; give readers a token of their own", id)
			}
		}
	}

	v.DataDir("data_dir", c.DataDir)
	if c.Archive.StagingDir == "" && c.DataDir != "" {
		c.Archive.StagingDir = filepath.Join(c.DataDir, "archive-staging")
	}
	pipelines = v.SpecFiles("pipelines", c.Pipelines)
	return pipelines
}

// ReadEdgeTokens reads auth.edge_tokens_file again (the hub does on
// SIGHUP) and returns its pairs, edge id -> token, or every problem with
// it as Load would report them (file:line), the API token among the
// edges' included. No file configured: none.
func (c *Config) ReadEdgeTokens() (map[string]string, error) {
	if c.Auth.EdgeTokensFile == "" {
		return map[string]string{}, nil
	}
	cc := *c
	v := table.Validate(&cc)
	toks := map[string]string{}
	if data := v.ReadFile("auth.edge_tokens_file", c.Auth.EdgeTokensFile, maxTokensSize); data != nil {
		toks = edgeTokens(v, c.Auth.EdgeTokensFile, data)
	}
	for id, t := range toks {
		if c.Auth.APIToken != "" && t == c.Auth.APIToken {
			v.Add("auth.edge_tokens_file", "the API token is also edge %s's token; give readers a token of their own", id)
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return toks, nil
}

var edgeIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// edgeTokens parses an edge tokens file: "edge-id token" a line, blank
// lines and '#' comments ignored. Each problem names the file's line.
func edgeTokens(v *settings.Checker[Config], file string, data []byte) map[string]string {
	toks := map[string]string{}
	lineOf := map[string]int{}  // edge id -> line
	tokLine := map[string]int{} // token -> line
	at := func(n int, format string, args ...any) {
		v.AddAt(settings.InFile(file, spec.Pos{Line: n, Column: 1}), "", format, args...)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxTokenSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 2:
			at(n, "expected 'edge-id token', got %d fields", len(f))
		case !edgeIDRE.MatchString(f[0]):
			at(n, "edge id %q: use 1 to 64 letters, digits, '.', '_' or '-'", f[0])
		case lineOf[f[0]] != 0:
			at(n, "edge %s has a token already (line %d)", f[0], lineOf[f[0]])
		case tokLine[f[1]] != 0:
			at(n, "edge %s has the token of line %d; each edge needs its own", f[0], tokLine[f[1]])
		case len(f[1]) < 16:
			at(n, "edge %s: the token is %d characters; use at least 16 (openssl rand -hex 32)", f[0], len(f[1]))
		default:
			toks[f[0]], lineOf[f[0]], tokLine[f[1]] = f[1], n, n
		}
	}
	if err := sc.Err(); err != nil {
		v.Add("auth.edge_tokens_file", "cannot read %s: %v", file, err)
	} else if len(toks) == 0 && len(lineOf) == 0 {
		v.Add("auth.edge_tokens_file", "%s holds no tokens", file)
	}
	return toks
}
