package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
)

// validator runs the checks that span settings, on a merged Config.
// Load fills in where each value came from, so that a problem names the
// file line, variable or flag to fix; Validate has no such knowledge and
// names settings by path.
type validator struct {
	c      *Config
	probs  *problems
	loaded bool              // run by Load: Password is filled from PasswordFile
	where  map[string]origin // by path (and "pipelines[i]"); absent: default
	bad    map[string]bool   // settings that already had a problem: skipped here
}

func (v *validator) add(path, format string, args ...any) {
	v.probs.add(v.where[path], path, format, args...)
}

// ok reports whether none of paths had a problem of its own: a check that
// spans settings is skipped when one of them is already reported, rather
// than reported again against a value that is not the user's.
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
// at: the first one set by a source (a default is not what the user must
// fix), or the first.
func (v *validator) blame(paths ...string) string {
	for _, p := range paths {
		if v.set(p) {
			return p
		}
	}
	return paths[0]
}

// other returns whichever of a, b is not p.
func other(p, a, b string) string {
	if p == a {
		return b
	}
	return a
}

// show names another setting in a message, with its value and where that
// came from: `broker.reconnect.max (30s, from flag --broker-reconnect-max)`.
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
	maxPEMSize      = 1 << 20
	maxPasswordSize = 64 << 10
)

// crossChecks checks the rules between settings, and the files settings
// name.
func (v *validator) crossChecks() {
	c, b := v.c, &v.c.Broker

	// TLS only means something for an mqtts:// broker: TLS settings with a
	// plain or embedded broker are a config that does not do what it says.
	if b.TLS.IsSet() && v.ok("broker.url") && !isTLSURL(b.URL) {
		var given []string
		for p, isSet := range map[string]bool{
			"broker.tls.ca_file": b.TLS.CAFile != "", "broker.tls.cert_file": b.TLS.CertFile != "", "broker.tls.key_file": b.TLS.KeyFile != "",
			"broker.tls.insecure_skip_verify": b.TLS.InsecureSkipVerify, "broker.tls.server_name": b.TLS.ServerName != "",
		} {
			if isSet {
				given = append(given, p)
			}
		}
		slices.Sort(given) // map order is random; table order is ca, cert, key, ...
		p := v.blame(given...)
		if b.URL == "" {
			v.add(p, "TLS settings need an mqtts:// broker.url; the embedded broker (broker.url is empty) speaks plain MQTT")
		} else {
			v.add(p, "TLS settings apply to mqtts:// brokers only, and %s is not one", v.show("broker.url"))
		}
	}
	t := b.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "" && v.ok("broker.tls.key_file"):
		v.add("broker.tls.cert_file", "a client certificate needs its private key: set broker.tls.key_file too")
	case t.KeyFile != "" && t.CertFile == "" && v.ok("broker.tls.cert_file"):
		v.add("broker.tls.key_file", "a private key without broker.tls.cert_file; set both or neither")
	}
	ca := v.readFile("broker.tls.ca_file", t.CAFile, maxPEMSize)
	if ca != nil && !x509.NewCertPool().AppendCertsFromPEM(ca) {
		v.add("broker.tls.ca_file", "%s holds no PEM certificate", t.CAFile)
	}
	cert := v.readFile("broker.tls.cert_file", t.CertFile, maxPEMSize)
	key := v.readFile("broker.tls.key_file", t.KeyFile, maxPEMSize)
	if cert != nil && key != nil {
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			v.add(v.blame("broker.tls.cert_file", "broker.tls.key_file"), "%s and %s are not a certificate and its key: %v",
				t.CertFile, t.KeyFile, strings.TrimPrefix(err.Error(), "tls: "))
		}
	}

	// MQTT v3.1.1 has no Receive Maximum and no session expiry: a value
	// the user gave for either would silently do nothing. Defaults are
	// fine (the v5 path's, unused).
	if b.Protocol == ProtocolV311 && v.ok("broker.protocol") {
		d := defaults().Broker
		v5only := []struct {
			path      string
			isDefault bool
			instead   string
		}{
			{"broker.receive_maximum", b.ReceiveMaximum == d.ReceiveMaximum,
				"back-pressure is bounded by the broker's in-flight limit (Mosquitto: max_inflight_messages)"},
			{"broker.session_expiry", b.SessionExpiry == d.SessionExpiry,
				"the broker's own setting (Mosquitto: persistent_client_expiration) decides how long it keeps the session"},
		}
		for _, o := range v5only {
			if explicit := v.set(o.path) || (!v.loaded && !o.isDefault); explicit && v.ok(o.path) {
				v.add(o.path, "an MQTT v5 setting, and %s asks for v3.1.1, which has none: %s. Remove it", v.show("broker.protocol"), o.instead)
			}
		}
	}

	const rmin, rmax = "broker.reconnect.min", "broker.reconnect.max"
	if v.ok(rmin, rmax) && b.Reconnect.Min > b.Reconnect.Max {
		p := v.blame(rmin, rmax)
		rel := "more"
		if p == rmax {
			rel = "less"
		}
		v.add(p, "%s is %s than %s", byPath[p].val.show(c), rel, v.show(other(p, rmin, rmax)))
	}

	const pw, pwFile = "broker.password", "broker.password_file"
	switch {
	case v.loaded && v.set(pw) && v.set(pwFile):
		v.add(pwFile, "broker.password is also set (from %s); give the password one way only", v.where[pw])
	case b.PasswordFile != "":
		if data := v.readFile(pwFile, b.PasswordFile, maxPasswordSize); data != nil {
			s := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
			switch {
			case s == "":
				v.add(pwFile, "%s is empty", b.PasswordFile)
			case v.loaded:
				b.Password = s
			}
		}
	}

	const tok, tokFile = "uplink.token", "uplink.token_file"
	switch {
	case v.loaded && v.set(tok) && v.set(tokFile):
		v.add(tokFile, "uplink.token is also set (from %s); give the token one way only", v.where[tok])
	case c.Uplink.TokenFile != "":
		if data := v.readFile(tokFile, c.Uplink.TokenFile, maxPasswordSize); data != nil {
			s := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
			switch {
			case s == "":
				v.add(tokFile, "%s is empty", c.Uplink.TokenFile)
			case v.loaded:
				c.Uplink.Token = s
			}
		}
	}
	u := c.Uplink
	uplinkOnly := []struct {
		path string
		set  bool
	}{{tok, u.Token != "" && u.TokenFile == ""}, {tokFile, u.TokenFile != ""}, {"uplink.tls.ca_file", u.CAFile != ""},
		{"uplink.tls.server_name", u.ServerName != ""}, {"uplink.insecure", u.Insecure}}
	for _, o := range uplinkOnly {
		switch {
		case !o.set:
		case u.Hub == "":
			v.add(o.path, "has no effect without uplink.hub")
		case u.Insecure && o.path != "uplink.insecure" && o.path != tok && o.path != tokFile:
			v.add(o.path, "TLS settings contradict uplink.insecure: true")
		}
	}
	if c.Uplink.CAFile != "" && v.ok("uplink.tls.ca_file") {
		if data := v.readFile("uplink.tls.ca_file", c.Uplink.CAFile, 1<<20); data != nil && !x509.NewCertPool().AppendCertsFromPEM(data) {
			v.add("uplink.tls.ca_file", "%s holds no PEM certificate", c.Uplink.CAFile)
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
				continue // a glob may match nothing yet: pipelines can be pushed later
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

	const capBytes, seg = "disk_cap.bytes", "ingest_log.segment_size"
	if v.ok(capBytes, seg) && c.DiskCap.Bytes > 0 && c.DiskCap.Bytes < 2*c.IngestLog.SegmentSize {
		p := v.blame(capBytes, seg)
		v.add(p, "disk_cap.bytes %s is less than two ingest log segments of %s: the log needs one segment to write while a checkpoint frees the last",
			showBytes(c.DiskCap.Bytes), showBytes(c.IngestLog.SegmentSize))
	}

	const emb, httpAddr = "broker.embedded_addr", "http.addr"
	if b.URL == "" && v.ok(emb, httpAddr, "broker.url") && sameListenAddr(b.EmbeddedAddr, c.HTTP.Addr) {
		p := v.blame(httpAddr, emb)
		v.add(p, "same address as %s; the embedded broker and the HTTP server cannot both listen there", v.show(other(p, emb, httpAddr)))
	}
}

// readFile reads a small file that setting path names, reporting a
// problem and returning nil when it cannot. Only regular files are read:
// a device or a FIFO would block or never end.
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

func isTLSURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && brokerSchemes[u.Scheme]
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
