package config

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"regexp"
	"strings"

	"github.com/runnel-io/runnel/operators/spec"
)

// validator runs the checks that span settings, on a merged Config.
// Load fills in where each value came from, so that a problem names the
// file line, variable or flag to fix; Validate has no such knowledge and
// names settings by path.
type validator struct {
	c      *Config
	probs  *problems
	loaded bool              // run by Load: tokens are filled from their files
	where  map[string]origin // by path (and "pipelines[i]"); absent: default
	bad    map[string]bool   // settings that already had a problem: skipped here
}

func (v *validator) add(path, format string, args ...any) {
	v.probs.add(v.where[path], path, format, args...)
}

// ok reports whether none of paths had a problem of its own.
func (v *validator) ok(paths ...string) bool {
	for _, p := range paths {
		if v.bad[p] {
			return false
		}
	}
	return true
}

func (v *validator) set(path string) bool { return v.where[path].src != fromDefault }

// blame picks which of the settings in a conflict the problem is placed
// at: the first one set by a source, or the first.
func (v *validator) blame(paths ...string) string {
	for _, p := range paths {
		if v.set(p) {
			return p
		}
	}
	return paths[0]
}

// show names another setting in a message, with its value and where that
// came from: `grpc.addr ("0.0.0.0:7443", from flag --grpc-addr)`.
func (v *validator) show(path string) string {
	st := byPath[path]
	val := st.val.show(v.c)
	if st.secret {
		val = "set"
	}
	switch o := v.where[path]; {
	case !v.loaded:
		return fmt.Sprintf("%s (%s)", path, val)
	case o.src == fromDefault:
		return fmt.Sprintf("%s (%s, the default)", path, val)
	default:
		return fmt.Sprintf("%s (%s, from %s)", path, val, o)
	}
}

const (
	maxPEMSize    = 1 << 20
	maxTokenSize  = 64 << 10
	maxTokensSize = 16 << 20
)

// crossChecks checks the rules between settings, and the files settings
// name.
func (v *validator) crossChecks() {
	c := v.c
	const certP, keyP = "tls.cert_file", "tls.key_file"
	switch {
	case c.TLS.CertFile != "" && c.TLS.KeyFile == "" && v.ok(keyP):
		v.add(certP, "a certificate needs its private key: set tls.key_file too")
	case c.TLS.KeyFile != "" && c.TLS.CertFile == "" && v.ok(certP):
		v.add(keyP, "a private key without tls.cert_file; set both or neither")
	}
	cert := v.readFile(certP, c.TLS.CertFile, maxPEMSize)
	key := v.readFile(keyP, c.TLS.KeyFile, maxPEMSize)
	if cert != nil && key != nil {
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			v.add(v.blame(certP, keyP), "%s and %s are not a certificate and its key: %v",
				c.TLS.CertFile, c.TLS.KeyFile, strings.TrimPrefix(err.Error(), "tls: "))
		}
	}
	if c.TLS.CertFile == "" && c.TLS.KeyFile == "" && !c.Insecure {
		for p, addr := range map[string]string{"grpc.addr": c.GRPC.Addr, "http.addr": c.HTTP.Addr} {
			if v.ok(p) && !isLoopback(addr) {
				v.add(p, "%s is not a loopback address, and no TLS certificate is set: set tls.cert_file and tls.key_file, or insecure: true to serve plaintext", addr)
			}
		}
	}
	if c.Insecure && c.TLS.CertFile != "" && v.set("insecure") {
		v.add("insecure", "insecure: true contradicts tls.cert_file; the hub serves TLS when a certificate is set, so remove one")
	}
	if v.ok("grpc.addr", "http.addr") && sameListenAddr(c.GRPC.Addr, c.HTTP.Addr) {
		p := v.blame("http.addr", "grpc.addr")
		o := "grpc.addr"
		if p == o {
			o = "http.addr"
		}
		v.add(p, "same address as %s; the gRPC and HTTP listeners need a port each", v.show(o))
	}

	const tok, tokFile = "auth.api_token", "auth.api_token_file"
	switch {
	case v.loaded && v.set(tok) && v.set(tokFile):
		v.add(tokFile, "auth.api_token is also set (from %s); give the token one way only", v.where[tok])
	case c.Auth.APITokenFile != "":
		if data := v.readFile(tokFile, c.Auth.APITokenFile, maxTokenSize); data != nil {
			s := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
			switch {
			case s == "":
				v.add(tokFile, "%s is empty", c.Auth.APITokenFile)
			case v.loaded:
				c.Auth.APIToken = s
			}
		}
	}
	if c.Auth.EdgeTokensFile != "" {
		if data := v.readFile("auth.edge_tokens_file", c.Auth.EdgeTokensFile, maxTokensSize); data != nil {
			toks := v.edgeTokens(c.Auth.EdgeTokensFile, data)
			if v.loaded {
				c.Auth.EdgeTokens = toks
			}
		}
	}
	if c.Auth.APIToken != "" {
		for id, t := range c.Auth.EdgeTokens {
			if t == c.Auth.APIToken {
				v.add(v.blame(tok, tokFile), "the API token is also edge %s's token; give readers a token of their own", id)
			}
		}
	}

	if c.DataDir != "" && v.ok("data_dir") {
		fi, err := os.Stat(c.DataDir)
		switch {
		case err == nil && !fi.IsDir():
			v.add("data_dir", "%s exists and is not a directory", c.DataDir)
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			v.add("data_dir", "cannot use %s: %v", c.DataDir, describeIOError(err))
		}
	}

	if v.ok("pipelines") {
		first := map[string]int{}
		for i, p := range c.Pipelines {
			at := fmt.Sprintf("pipelines[%d]", i)
			if _, ok := v.where[at]; !ok {
				at = "pipelines"
			}
			if j, dup := first[p]; dup {
				v.add(at, "%s is listed twice (also item %d)", p, j+1)
				continue
			}
			first[p] = i
			if strings.ContainsAny(p, `*?[\`) {
				continue // a glob: checked when the hub loads it
			}
			fi, err := os.Stat(p)
			switch {
			case err != nil:
				v.add(at, "cannot read pipeline %s: %v", p, describeIOError(err))
			case fi.IsDir():
				v.add(at, "%s is a directory; to load every spec in it, write %s", p, strings.TrimSuffix(p, "/")+"/*.yaml")
			}
		}
	}
}

var edgeIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// edgeTokens parses an edge tokens file: "edge-id token" a line, blank
// lines and '#' comments ignored. Each problem names the file's line.
func (v *validator) edgeTokens(file string, data []byte) map[string]string {
	toks := map[string]string{}
	lineOf := map[string]int{}  // edge id -> line
	tokLine := map[string]int{} // token -> line
	at := func(n int, format string, args ...any) {
		v.probs.add(origin{src: fromFile, file: file, pos: spec.Pos{Line: n, Column: 1}}, "", format, args...)
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
		v.add("auth.edge_tokens_file", "cannot read %s: %v", file, err)
	} else if len(toks) == 0 && len(lineOf) == 0 {
		v.add("auth.edge_tokens_file", "%s holds no tokens", file)
	}
	return toks
}

// readFile reads a small file that setting path names, reporting a
// problem and returning nil when it cannot. Only regular files are read.
func (v *validator) readFile(path, name string, limit int64) []byte {
	if name == "" || !v.ok(path) {
		return nil
	}
	data, err := readSmall(name, limit)
	if err != nil {
		v.add(path, "cannot read %s: %v", name, err)
		return nil
	}
	return data
}

func readSmall(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, describeIOError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, describeIOError(err)
	case fi.IsDir():
		return nil, errors.New("is a directory")
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > limit:
		return nil, fmt.Errorf("larger than %d bytes; is it the right file?", limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, describeIOError(err)
	}
	return data, nil
}

// sameListenAddr reports whether two listen addresses would collide: the
// same port (not 0) on the same host, or on a wildcard host.
func sameListenAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}
