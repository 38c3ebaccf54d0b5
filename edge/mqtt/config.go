package mqtt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults for the zero values of Config.
const (
	DefaultSessionExpiry   = 24 * time.Hour
	DefaultKeepAlive       = 30 * time.Second
	DefaultReceiveMaximum  = 1024
	DefaultConnectRetryMin = 250 * time.Millisecond
	DefaultConnectRetryMax = 30 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	DefaultMaxMessage      = 1 << 20
	DefaultBatchWait       = 5 * time.Millisecond
)

// Protocol is the MQTT protocol version the source speaks.
type Protocol string

const (
	// ProtocolV5 is MQTT 5.0, the default: Receive Maximum bounds what the
	// broker sends unacknowledged, and the session has an expiry.
	ProtocolV5 Protocol = "5"
	// ProtocolV311 is MQTT 3.1.1, for brokers or policies that allow
	// nothing newer. It has no Receive Maximum, no session expiry and no
	// user properties; see the package Caveats.
	ProtocolV311 Protocol = "3.1.1"
)

// Config says which brokers to connect to and what to subscribe to. Zero
// values take the defaults above; Validate lists every problem at once.
type Config struct {
	// Protocol is the MQTT version: ProtocolV5 (the default, also for "")
	// or ProtocolV311.
	Protocol Protocol
	// Brokers are tried in order until one accepts the connection:
	// mqtt://host:port or tcp://host:port (plain, port default 1883),
	// mqtts://, ssl:// or tls:// (TLS, port default 8883). At least one.
	Brokers []string
	// ClientID names the session on the broker. Required unless
	// CleanStart is set: a persistent session is found by its client ID.
	// With CleanStart and no ClientID the broker assigns one, which the
	// source then reuses on reconnects (MQTT v5 only: a v3.1.1 broker
	// does not say which ID it assigned, so v3.1.1 requires a ClientID).
	ClientID string
	// Username and Password are sent in CONNECT when non-empty.
	Username, Password string
	// TLS configures mqtts:// connections; nil uses the system roots.
	TLS *TLSConfig
	// Topics to subscribe to. None: the source connects and takes nothing
	// until SetTopics gives it some.
	Topics []Subscription
	// CleanStart discards the broker's session for ClientID on the first
	// connection of this Source (never on reconnects). Default false: the
	// broker keeps subscriptions and queues QoS 1/2 messages while the
	// edge is away, up to SessionExpiry. With v3.1.1, whose clean session
	// would last only as long as its connection, the source connects once
	// with CleanSession set, disconnects, and continues with a persistent
	// session.
	CleanStart bool
	// SessionExpiry is how long the broker keeps the session after the
	// connection drops. Default 24h; whole seconds, at most 2^32-1 s.
	// MQTT v5 only: v3.1.1 has no session expiry, and the broker's own
	// policy (Mosquitto: persistent_client_expiration) decides; the
	// field is ignored then.
	SessionExpiry time.Duration
	// KeepAlive is the MQTT keep-alive: the longest silence before a ping.
	// Default 30s; whole seconds, 1s to 65535s.
	KeepAlive time.Duration
	// ReceiveMaximum is the most QoS 1/2 messages the broker may have sent
	// and not had acknowledged. It is the back-pressure bound: a handler
	// that stops acknowledging stops the broker sending after this many.
	// Default 64. MQTT v5 only, ignored with v3.1.1: there the broker's
	// own limit (Mosquitto: max_inflight_messages) is the bound.
	ReceiveMaximum uint16
	// ConnectRetryMin and ConnectRetryMax bound the jittered exponential
	// back-off between connection attempts. Defaults 250ms and 30s.
	ConnectRetryMin, ConnectRetryMax time.Duration
	// ConnectTimeout bounds one connection attempt (dial, TLS, CONNACK)
	// and each SUBSCRIBE. Default 10s.
	ConnectTimeout time.Duration
	// BatchWait is how long the source waits after a read from the
	// connection before the next one, when the read did not fill its
	// buffer, so that the next read (and handler call) takes the messages
	// that arrived meanwhile: the fewer wake-ups per message, the less CPU
	// per message. It adds at most BatchWait to a message's latency.
	// Default 5ms; negative: no wait (every read is delivered at once).
	BatchWait time.Duration
	// Idle, when set, is called on the reader when the connection is
	// silent after messages were handed to the handler: a read finds
	// nothing within idleProbe (1 ms), so the broker has sent what it
	// will for now (a burst ended, or its window of unacknowledged
	// messages is full). A handler that leaves its acknowledgements to a
	// group commit commits there, so that the broker is not kept waiting
	// for the rest of the group's delay.
	Idle func()
	// MaxMessage is the longest payload the source reads whole. A longer
	// message is delivered with only the start of its payload
	// (Message.Size says how long it was) and the rest skipped. Default
	// 1 MiB.
	MaxMessage int
	// Hold, when set, is asked before each connection attempt: while it
	// says true the source does not connect, and asks again every
	// holdPoll. A handler that holds messages (the edge at its disk cap)
	// sets it: on a resumed session the broker sends the queued messages
	// right after CONNACK, the handler holds the first batch, the reader
	// with it, and the SUBACK behind that batch is never read, so the
	// connection would fail and be made again, each time with the broker
	// resending its in-flight window. Held, the broker keeps queueing.
	Hold func() bool
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger
}

// TLSConfig configures TLS for mqtts:// brokers. Files are PEM.
type TLSConfig struct {
	CAFile             string // roots to verify the broker with; empty: the system roots
	CertFile, KeyFile  string // client certificate, for brokers that require one; both or neither
	InsecureSkipVerify bool   // do not verify the broker's certificate (tests only)
	ServerName         string // name to verify, when it differs from the broker's host
}

// Subscription is one topic filter and the maximum QoS to receive it with.
type Subscription struct {
	Filter string
	QoS    byte // 0, 1 or 2; QoS 1 is what the edge is designed for
}

// checkTopics reports every problem of a topic list, as Validate does.
func checkTopics(topics []Subscription) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("mqtt: "+format+": %w", append(args, ErrInvalidConfig)...))
	}
	seen := make(map[string]int, len(topics))
	for i, t := range topics {
		if problem := checkFilter(t.Filter); problem != "" {
			bad("topics[%d]: %s", i, problem)
		}
		if t.QoS > 2 {
			bad("topics[%d] %q: qos %d, want 0, 1 or 2", i, t.Filter, t.QoS)
		}
		if j, dup := seen[t.Filter]; dup {
			bad("topics[%d] %q: same filter as topics[%d]", i, t.Filter, j)
		}
		seen[t.Filter] = i
	}
	return errs
}

// Validate reports every problem with c at once (errors.Join), each naming
// the field and wrapping ErrInvalidConfig. It checks values only; files
// named by TLS are read by Start.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("mqtt: "+format+": %w", append(args, ErrInvalidConfig)...))
	}
	if len(c.Brokers) == 0 {
		bad("brokers: none given, want at least one mqtt://host:port")
	}
	for i, b := range c.Brokers {
		if _, err := parseBroker(b); err != nil {
			bad("brokers[%d]: %v", i, err)
		}
	}
	switch c.Protocol {
	case "", ProtocolV5, ProtocolV311:
	default:
		bad("protocol %q: want %q or %q", c.Protocol, ProtocolV5, ProtocolV311)
	}
	switch {
	case c.ClientID == "" && c.Protocol == ProtocolV311:
		bad("client_id: required with protocol 3.1.1 (a v3.1.1 broker does not tell the client the ID it assigns, so its session could not be resumed)")
	case c.ClientID == "" && !c.CleanStart:
		bad("client_id: required for a persistent session (or set clean_start)")
	}
	if !utf8.ValidString(c.ClientID) || len(c.ClientID) > maxTopicLen {
		bad("client_id %q: want valid UTF-8 of at most %d bytes", c.ClientID, maxTopicLen)
	}
	if !utf8.ValidString(c.Username) {
		bad("username: not valid UTF-8")
	}
	errs = append(errs, checkTopics(c.Topics)...)
	if t := c.TLS; t != nil {
		if (t.CertFile == "") != (t.KeyFile == "") {
			bad("tls: cert_file %q and key_file %q: give both or neither", t.CertFile, t.KeyFile)
		}
	}
	durations := []struct {
		name     string
		d        time.Duration
		min, max time.Duration
	}{
		{"session_expiry", c.SessionExpiry, time.Second, math.MaxUint32 * time.Second},
		{"keep_alive", c.KeepAlive, time.Second, math.MaxUint16 * time.Second},
		{"connect_retry_min", c.ConnectRetryMin, time.Millisecond, 24 * time.Hour},
		{"connect_retry_max", c.ConnectRetryMax, time.Millisecond, 24 * time.Hour},
		{"connect_timeout", c.ConnectTimeout, time.Millisecond, time.Hour},
		{"batch_wait", max(c.BatchWait, 0), 0, time.Second},
	}
	for _, d := range durations {
		// Zero means default; anything else must be in range.
		if d.d != 0 && (d.d < d.min || d.d > d.max) {
			bad("%s %v: want 0 (default) or %v to %v", d.name, d.d, d.min, d.max)
		}
	}
	lo, hi := orDefault(c.ConnectRetryMin, DefaultConnectRetryMin), orDefault(c.ConnectRetryMax, DefaultConnectRetryMax)
	if lo > hi {
		bad("connect_retry_min %v is more than connect_retry_max %v", lo, hi)
	}
	return errors.Join(errs...)
}

// withDefaults returns a copy of c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = ProtocolV5
	}
	c.SessionExpiry = orDefault(c.SessionExpiry, DefaultSessionExpiry)
	c.KeepAlive = orDefault(c.KeepAlive, DefaultKeepAlive)
	if c.ReceiveMaximum == 0 {
		c.ReceiveMaximum = DefaultReceiveMaximum
	}
	c.ConnectRetryMin = orDefault(c.ConnectRetryMin, DefaultConnectRetryMin)
	c.ConnectRetryMax = orDefault(c.ConnectRetryMax, DefaultConnectRetryMax)
	c.ConnectTimeout = orDefault(c.ConnectTimeout, DefaultConnectTimeout)
	c.BatchWait = orDefault(c.BatchWait, DefaultBatchWait)
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Brokers = append([]string(nil), c.Brokers...)
	c.Topics = append([]Subscription(nil), c.Topics...)
	return c
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// seconds rounds d up to whole seconds, as MQTT intervals are sent.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// parseBroker checks a broker URL and fills in the default port.
func parseBroker(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", s, err)
	}
	var port string
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
		port = "1883"
	case "mqtts", "ssl", "tls":
		port = "8883"
	case "":
		return nil, fmt.Errorf("%q: no scheme, want mqtt://host:port or mqtts://host:port", s)
	default:
		return nil, fmt.Errorf("%q: scheme %q not supported, want mqtt, tcp, mqtts, ssl or tls", s, u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%q: no host", s)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%q: unexpected path %q", s, u.Path)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return u, nil
}

func isTLS(u *url.URL) bool {
	switch strings.ToLower(u.Scheme) {
	case "mqtts", "ssl", "tls":
		return true
	}
	return false
}

// build loads the files t names into a *tls.Config.
func (t *TLSConfig) build() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return cfg, nil
	}
	cfg.InsecureSkipVerify = t.InsecureSkipVerify
	cfg.ServerName = t.ServerName
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt: tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mqtt: tls ca_file %s: no PEM certificates in it", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt: tls cert_file %s, key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
