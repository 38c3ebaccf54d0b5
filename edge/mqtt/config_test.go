package mqtt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	return Config{
		Brokers:  []string{"mqtt://127.0.0.1:1883"},
		ClientID: "edge-1",
		Topics:   []Subscription{{Filter: "sensors/#", QoS: 1}},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   []string // one fragment per expected problem; nil for valid
	}{
		{"valid", func(*Config) {}, nil},
		{"valid, every field", func(c *Config) {
			c.Brokers = []string{"mqtt://a", "tcp://b:1", "mqtts://c", "ssl://d:8884", "tls://e"}
			c.Username, c.Password = "u", "p"
			c.TLS = &TLSConfig{CertFile: "c.pem", KeyFile: "k.pem"}
			c.Topics = append(c.Topics, Subscription{Filter: "$share/g/x/+", QoS: 2}, Subscription{Filter: "y"})
			c.SessionExpiry, c.KeepAlive = time.Hour, time.Minute
			c.ReceiveMaximum = 1
			c.ConnectRetryMin, c.ConnectRetryMax, c.ConnectTimeout = time.Second, time.Minute, time.Second
		}, nil},
		{"clean start needs no client id", func(c *Config) { c.ClientID, c.CleanStart = "", true }, nil},
		{"v3.1.1 ignores the v5-only fields", func(c *Config) {
			c.Protocol = ProtocolV311
			c.ReceiveMaximum, c.SessionExpiry = 5, time.Hour // ignored, not refused
		}, nil},
		{"v3.1.1 clean start still needs a client id", func(c *Config) {
			c.Protocol = ProtocolV311
			c.ReceiveMaximum, c.SessionExpiry = 5, time.Hour
			c.ClientID, c.CleanStart = "", true
		}, []string{"client_id: required with protocol 3.1.1"}},
		{"unknown protocol", func(c *Config) { c.Protocol = "4" }, []string{`protocol "4"`}},
		{"empty", func(c *Config) { *c = Config{} }, []string{
			"brokers: none given", "client_id: required"}},
		{"bad brokers", func(c *Config) {
			c.Brokers = []string{"127.0.0.1:1883", "http://x", "mqtt://", "mqtt://h/path", "mqtt://h:1883/", "::"}
		}, []string{
			`brokers[0]: "127.0.0.1:1883"`, // parsed as scheme "127.0.0.1"
			`brokers[1]: "http://x": scheme "http" not supported`,
			`brokers[2]: "mqtt://": no host`,
			`brokers[3]: "mqtt://h/path": unexpected path`,
			`brokers[5]: "::"`,
		}},
		{"bad topics", func(c *Config) {
			c.Topics = []Subscription{{Filter: "a/#/b", QoS: 1}, {Filter: "ok", QoS: 3}, {Filter: "ok", QoS: 1}, {Filter: ""}}
		}, []string{
			`topics[0]: filter "a/#/b": '#' must be the whole last level`,
			`topics[1] "ok": qos 3`,
			`topics[2] "ok": same filter as topics[1]`,
			`topics[3]: filter "": empty`,
		}},
		{"tls half a pair", func(c *Config) { c.TLS = &TLSConfig{CertFile: "c.pem"} }, []string{`tls: cert_file "c.pem" and key_file ""`}},
		{"bad durations", func(c *Config) {
			c.SessionExpiry = -time.Second
			c.KeepAlive = 70000 * time.Second
			c.ConnectRetryMin = 2 * time.Minute
			c.ConnectRetryMax = time.Minute
			c.ConnectTimeout = time.Microsecond
		}, []string{
			"session_expiry -1s", "keep_alive 19h26m40s",
			"connect_retry_min 2m0s is more than connect_retry_max 1m0s",
			"connect_timeout 1µs",
		}},
		{"retry min above default max", func(c *Config) { c.ConnectRetryMin = time.Minute }, []string{
			"connect_retry_min 1m0s is more than connect_retry_max 30s"}},
		{"client id not utf-8", func(c *Config) { c.ClientID = "\xff" }, []string{`client_id "\xff"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %d problems", len(tt.want))
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("no problem mentions %q in:\n%v", w, err)
				}
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	c := validConfig().withDefaults()
	if c.SessionExpiry != 24*time.Hour || c.KeepAlive != 30*time.Second || c.ReceiveMaximum != DefaultReceiveMaximum ||
		c.ConnectRetryMin != DefaultConnectRetryMin || c.ConnectRetryMax != DefaultConnectRetryMax ||
		c.ConnectTimeout != DefaultConnectTimeout || c.Logger == nil {
		t.Fatalf("withDefaults() = %+v", c)
	}
	// Explicit values are kept.
	in := validConfig()
	in.ReceiveMaximum, in.KeepAlive = 5, time.Minute
	if c := in.withDefaults(); c.ReceiveMaximum != 5 || c.KeepAlive != time.Minute {
		t.Fatalf("withDefaults() overwrote explicit values: %+v", c)
	}
}

func TestParseBrokerDefaultPorts(t *testing.T) {
	for in, want := range map[string]string{
		"mqtt://h": "h:1883", "tcp://h": "h:1883", "mqtts://h": "h:8883", "tls://h": "h:8883",
		"mqtt://h:99": "h:99", "mqtt://[::1]": "[::1]:1883",
	} {
		u, err := parseBroker(in)
		if err != nil || u.Host != want {
			t.Errorf("parseBroker(%q) = %v, %v; want host %q", in, u, err, want)
		}
	}
}

func TestTLSBuildErrorsNameFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tls  TLSConfig
		want string
	}{
		{TLSConfig{CAFile: filepath.Join(dir, "missing.pem")}, "missing.pem"},
		{TLSConfig{CAFile: notPEM}, "no PEM certificates"},
		{TLSConfig{CertFile: notPEM, KeyFile: notPEM}, "cert_file " + notPEM},
	}
	for _, tt := range tests {
		if _, err := tt.tls.build(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("build(%+v) = %v, want an error with %q", tt.tls, err, tt.want)
		}
	}
	var none *TLSConfig
	if c, err := none.build(); err != nil || c == nil {
		t.Errorf("nil TLSConfig: %v, %v", c, err)
	}
}
