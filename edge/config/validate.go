package config

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"slices"
	"strings"

	"github.com/runnel-io/runnel/internal/edgecert"
	"github.com/runnel-io/runnel/internal/settings"
)

// other returns whichever of a, b is not p.
func other(p, a, b string) string {
	if p == a {
		return b
	}
	return a
}

const (
	maxPEMSize      = 1 << 20
	maxPasswordSize = 64 << 10
)

// crossChecks checks the rules between settings of c, and the files
// settings name, reporting to v: from Load, which knows where each value
// came from, or from Validate. It returns the pipeline files and globs
// fit to be read (see LoadWithPipelines).
func crossChecks(v *settings.Checker[Config], c *Config) (pipelines []string) {
	b := &c.Broker

	// TLS only means something for an mqtts:// broker: TLS settings with a
	// plain or embedded broker are a config that does not do what it says.
	if b.TLS.IsSet() && v.OK("broker.url") && !isTLSURL(b.URL) {
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
		p := v.Blame(given...)
		if b.URL == "" {
			v.Add(p, "TLS settings need an mqtts:// broker.url; the embedded broker (broker.url is empty) speaks plain MQTT")
		} else {
			v.Add(p, "TLS settings apply to mqtts:// brokers only, and %s is not one", v.Show("broker.url"))
		}
	}
	t := b.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "" && v.OK("broker.tls.key_file"):
		v.Add("broker.tls.cert_file", "a client certificate needs its private key: set broker.tls.key_file too")
	case t.KeyFile != "" && t.CertFile == "" && v.OK("broker.tls.cert_file"):
		v.Add("broker.tls.key_file", "a private key without broker.tls.cert_file; set both or neither")
	}
	ca := v.ReadFile("broker.tls.ca_file", t.CAFile, maxPEMSize)
	if ca != nil && !x509.NewCertPool().AppendCertsFromPEM(ca) {
		v.Add("broker.tls.ca_file", "%s holds no PEM certificate", t.CAFile)
	}
	cert := v.ReadFile("broker.tls.cert_file", t.CertFile, maxPEMSize)
	key := v.ReadFile("broker.tls.key_file", t.KeyFile, maxPEMSize)
	if cert != nil && key != nil {
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			v.Add(v.Blame("broker.tls.cert_file", "broker.tls.key_file"), "%s and %s are not a certificate and its key: %v",
				t.CertFile, t.KeyFile, strings.TrimPrefix(err.Error(), "tls: "))
		}
	}

	// MQTT v3.1.1 has no Receive Maximum and no session expiry: a value
	// the user gave for either would silently do nothing. Defaults are
	// fine (the v5 path's, unused).
	if b.Protocol == ProtocolV311 && v.OK("broker.protocol") {
		d := table.Defaults().Broker
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
			if explicit := v.IsSet(o.path) || (!v.Loaded() && !o.isDefault); explicit && v.OK(o.path) {
				v.Add(o.path, "an MQTT v5 setting, and %s asks for v3.1.1, which has none: %s. Remove it", v.Show("broker.protocol"), o.instead)
			}
		}
	}

	const rmin, rmax = "broker.reconnect.min", "broker.reconnect.max"
	if v.OK(rmin, rmax) && b.Reconnect.Min > b.Reconnect.Max {
		p := v.Blame(rmin, rmax)
		rel := "more"
		if p == rmax {
			rel = "less"
		}
		v.Add(p, "%s is %s than %s", v.Value(p), rel, v.Show(other(p, rmin, rmax)))
	}

	if pw, ok := v.SecretFile("broker.password", "broker.password_file", b.PasswordFile, "password", maxPasswordSize); ok {
		b.Password = pw
	}
	const tok, tokFile = "uplink.token", "uplink.token_file"
	if t, ok := v.SecretFile(tok, tokFile, c.Uplink.TokenFile, "token", maxPasswordSize); ok {
		c.Uplink.Token = t
	}
	u := c.Uplink
	uplinkOnly := []struct {
		path string
		set  bool
	}{{tok, u.Token != "" && u.TokenFile == ""}, {tokFile, u.TokenFile != ""}, {"uplink.tls.ca_file", u.CAFile != ""},
		{"uplink.tls.server_name", u.ServerName != ""}, {"uplink.tls.cert_file", u.CertFile != ""}, {"uplink.tls.key_file", u.KeyFile != ""},
		{"uplink.insecure", u.Insecure}}
	for _, o := range uplinkOnly {
		switch {
		case !o.set:
		case u.Hub == "":
			v.Add(o.path, "has no effect without uplink.hub")
		case u.Insecure && o.path != "uplink.insecure" && o.path != tok && o.path != tokFile:
			v.Add(o.path, "TLS settings contradict uplink.insecure: true")
		}
	}
	if c.Uplink.CAFile != "" && v.OK("uplink.tls.ca_file") {
		if data := v.ReadFile("uplink.tls.ca_file", c.Uplink.CAFile, 1<<20); data != nil && !x509.NewCertPool().AppendCertsFromPEM(data) {
			v.Add("uplink.tls.ca_file", "%s holds no PEM certificate", c.Uplink.CAFile)
		}
	}

	const ucert, ukey = "uplink.tls.cert_file", "uplink.tls.key_file"
	switch {
	case u.CertFile != "" && u.KeyFile == "" && v.OK(ukey):
		v.Add(ucert, "a client certificate needs its private key: set uplink.tls.key_file too")
	case u.KeyFile != "" && u.CertFile == "" && v.OK(ucert):
		v.Add(ukey, "a private key without uplink.tls.cert_file; set both or neither")
	}
	if u.Hub != "" && !u.Insecure {
		cert := v.ReadFile(ucert, u.CertFile, maxPEMSize)
		key := v.ReadFile(ukey, u.KeyFile, maxPEMSize)
		if cert != nil && key != nil {
			pair, err := edgecert.Pair(cert, key)
			switch {
			case err != nil:
				v.Add(v.Blame(ucert, ukey), "%s and %s are not a certificate and its key: %v", u.CertFile, u.KeyFile, err)
			case v.OK("edge_id"):
				if err := edgecert.Check(pair.Leaf, c.EdgeID); err != nil {
					v.Add(v.Blame(ucert, "edge_id"), "%s: %s", u.CertFile, strings.TrimPrefix(err.Error(), "edgecert: "))
				}
			}
		}
	}

	v.DataDir("data_dir", c.DataDir)
	pipelines = v.SpecFiles("pipelines", c.Pipelines)

	const capBytes, seg = "disk_cap.bytes", "ingest_log.segment_size"
	if v.OK(capBytes, seg) && c.DiskCap.Bytes > 0 && c.DiskCap.Bytes < 2*c.IngestLog.SegmentSize {
		p := v.Blame(capBytes, seg)
		v.Add(p, "disk_cap.bytes %s is less than two ingest log segments of %s: the log needs one segment to write while a checkpoint frees the last",
			settings.ShowBytes(c.DiskCap.Bytes), settings.ShowBytes(c.IngestLog.SegmentSize))
	}

	// Side outputs count toward the disk cap with a quota of their own,
	// which must leave most of the cap to the ingest log and the outbox.
	const sideMax = "side_outputs.max_bytes"
	if v.OK(capBytes, sideMax) && c.DiskCap.Bytes > 0 && c.SideOutputs.MaxBytes > c.DiskCap.Bytes/2 {
		const why = "side outputs count toward the disk cap, and at least half of it is left to the ingest log and the outbox"
		if p := v.Blame(sideMax, capBytes); p == sideMax {
			v.Add(p, "%s is more than half of %s: %s", v.Value(sideMax), v.Show(capBytes), why)
		} else {
			v.Add(p, "%s is less than twice %s: %s", v.Value(capBytes), v.Show(sideMax), why)
		}
	}

	const emb, httpAddr = "broker.embedded_addr", "http.addr"
	if b.URL == "" && v.OK(emb, httpAddr, "broker.url") && settings.SameListenAddr(b.EmbeddedAddr, c.HTTP.Addr) {
		p := v.Blame(httpAddr, emb)
		v.Add(p, "same address as %s; the embedded broker and the HTTP server cannot both listen there", v.Show(other(p, emb, httpAddr)))
	}
	// Neither listener has authentication: beyond loopback, each must be
	// asked for in so many words.
	if b.URL == "" && !b.EmbeddedAllowRemote && v.OK(emb, "broker.url") && !settings.IsLoopbackAddr(b.EmbeddedAddr) {
		v.Add(emb, "%s is not a loopback address, and the embedded broker has no authentication: anyone on the network could publish readings or read them. "+
			"Listen on 127.0.0.1, or set broker.embedded_allow_remote: true (--broker-embedded-allow-remote) to allow it", b.EmbeddedAddr)
	}
	if c.HTTP.Addr != "" && !c.HTTP.AllowRemote && v.OK(httpAddr) && !settings.IsLoopbackAddr(c.HTTP.Addr) {
		v.Add(httpAddr, "%s is not a loopback address, and /metrics, /healthz and /debug/pprof have no authentication: anyone on the network could read the edge's metrics and profile it. "+
			"Listen on 127.0.0.1, or set http.allow_remote: true (--http-allow-remote) to allow it", c.HTTP.Addr)
	}
	return pipelines
}

func isTLSURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && brokerSchemes[u.Scheme]
}
