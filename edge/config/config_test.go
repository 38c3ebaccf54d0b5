package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/operators/spec"

	"github.com/runnel-io/runnel/internal/settings"
	"github.com/runnel-io/runnel/internal/testcert"
)

// wantDefaults is the whole Config an empty config gives, written out by
// hand rather than derived from the table, so that a changed default is a
// deliberate edit here too.
func wantDefaults(host string) *Config {
	return &Config{
		EdgeID:  host,
		DataDir: "./runnel-data",
		Broker: Broker{
			Protocol:       ProtocolV5,
			EmbeddedAddr:   "127.0.0.1:1883",
			ClientID:       "runnel-" + host,
			ReceiveMaximum: 1024,
			SessionExpiry:  24 * time.Hour,
			KeepAlive:      30 * time.Second,
			Reconnect:      Reconnect{Min: 250 * time.Millisecond, Max: 30 * time.Second},
			BatchWait:      5 * time.Millisecond,
		},
		Checkpoint:      Checkpoint{Interval: time.Second},
		IngestLog:       IngestLog{SegmentSize: 64 << 20, SpareSegments: 1, Sync: SyncGroup, SyncDelay: 20 * time.Millisecond, Compression: CompressionNone, MaxLag: 100000},
		DiskCap:         DiskCap{Bytes: 1 << 30, Policy: PolicyBlock},
		SideOutputs:     SideOutputs{MaxBytes: 64 << 20, MaxAge: 7 * 24 * time.Hour},
		Dedup:           Dedup{IDs: 16384},
		Snapshot:        Snapshot{Interval: time.Hour, Keep: 3},
		RawArchive:      RawArchive{Interval: 10 * time.Second, YieldOutboxBytes: 256 << 10, MaxBytes: 1 << 30},
		Uplink:          Uplink{BatchEntries: 500},
		Fleet:           Fleet{Enabled: true, StatusInterval: 10 * time.Second},
		HTTP:            HTTP{Addr: "127.0.0.1:9464"},
		Log:             settings.Log{Level: settings.LevelInfo, Format: settings.FormatText},
		ShutdownTimeout: 10 * time.Second,
	}
}

func TestEmptyConfig(t *testing.T) {
	want := wantDefaults("gw-test")
	for _, tc := range []struct {
		name, file, data string
		environ          []string
	}{
		{name: "no file"},
		{name: "empty file", file: "edge.yaml"},
		{name: "comments only", file: "edge.yaml", data: "# nothing set\n\n# yet\n"},
		{name: "null document", file: "edge.yaml", data: "~\n"},
		{name: "empty sections", file: "edge.yaml", data: "broker:\ncheckpoint: {}\nlog:\n"},
		{name: "null values", file: "edge.yaml", data: "edge_id:\nbroker: {url: ~, tls: {ca_file: }}\n"},
		{name: "other variables", environ: []string{"HOME=/root", "RUNNELX=1", "RUNNEL_HUB_TOKEN=x", "=weird", "NOEQUALS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadData(tc.file, tc.data, nil, tc.environ)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate of the defaults: %v", err)
			}
		})
	}
}

// TestLoadRealHostname runs the exported Load on nothing: what
// `runnel-edge` with no config does on this machine.
func TestLoadRealHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || checkEdgeID(host) != nil {
		t.Skipf("hostname %q (%v) is not a valid edge id here", host, err)
	}
	got, err := Load("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantDefaults(host); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if d := Default(); !reflect.DeepEqual(d, got) {
		t.Errorf("Default() = %+v\nLoad = %+v", d, got)
	}
}

// TestPrecedence sets settings of every type in any combination of the
// three sources and checks that the highest one wins: flag > env > file >
// default.
func TestPrecedence(t *testing.T) {
	type vals struct{ file, env, flag string }
	for _, tc := range []struct {
		path string
		in   vals
		get  func(*Config) any
		want vals // the Go value each source gives, formatted with %v
	}{
		{"edge_id", vals{"gw-file", "gw-env", "gw-flag"}, func(c *Config) any { return c.EdgeID }, vals{"gw-file", "gw-env", "gw-flag"}},
		{"broker.client_id", vals{"c-file", "c-env", "c-flag"}, func(c *Config) any { return c.Broker.ClientID }, vals{"c-file", "c-env", "c-flag"}},
		{"data_dir", vals{"/f", "/e", "/g"}, func(c *Config) any { return c.DataDir }, vals{"/f", "/e", "/g"}},
		{"pipelines", vals{"[/f/*.yaml, /f2/*.yaml]", "/e/*.yaml,/e2/*.yaml", "/g/*.yaml"}, func(c *Config) any { return c.Pipelines },
			vals{"[/f/*.yaml /f2/*.yaml]", "[/e/*.yaml /e2/*.yaml]", "[/g/*.yaml]"}},
		{"checkpoint.interval", vals{"5s", "1m30s", "1d"}, func(c *Config) any { return c.Checkpoint.Interval }, vals{"5s", "1m30s", "24h0m0s"}},
		{"ingest_log.segment_size", vals{"1MiB", "2MB", "4096"}, func(c *Config) any { return c.IngestLog.SegmentSize }, vals{"1048576", "2000000", "4096"}},
		{"broker.receive_maximum", vals{"1", "100", "65535"}, func(c *Config) any { return c.Broker.ReceiveMaximum }, vals{"1", "100", "65535"}},
		{"broker.tls.insecure_skip_verify", vals{"true", "false", "true"}, func(c *Config) any { return c.Broker.TLS.InsecureSkipVerify }, vals{"true", "false", "true"}},
		{"log.level", vals{"debug", "warn", "error"}, func(c *Config) any { return c.Log.Level }, vals{"debug", "warn", "error"}},
		{"disk_cap.policy", vals{"drop_raw", "block", "drop_raw"}, func(c *Config) any { return c.DiskCap.Policy }, vals{"drop_raw", "block", "drop_raw"}},
		// An empty variable is set: it turns the HTTP server off over the file.
		{"http.addr", vals{"0.0.0.0:9000", "", ":9100"}, func(c *Config) any { return c.HTTP.Addr }, vals{"0.0.0.0:9000", "", ":9100"}},
		{"broker.url", vals{"mqtt://f:1883", "tcp://e:1883", ""}, func(c *Config) any { return c.Broker.URL }, vals{"mqtt://f:1883", "tcp://e:1883", ""}},
	} {
		st := table.Lookup(tc.path)
		// TLS settings need an mqtts:// broker; give it in every run.
		base := []string{}
		if strings.HasPrefix(tc.path, "broker.tls.") {
			base = []string{"--broker-url=mqtts://broker:8883"}
		}
		// Beyond loopback, the HTTP server must be allowed to listen.
		if tc.path == "http.addr" {
			base = []string{"--http-allow-remote"}
		}
		def, err := loadData("", "", base, nil)
		if err != nil {
			t.Fatal(err)
		}
		for mask := range 8 {
			file, env, flg := mask&1 != 0, mask&2 != 0, mask&4 != 0
			name := fmt.Sprintf("%s/file=%v,env=%v,flag=%v", tc.path, file, env, flg)
			t.Run(name, func(t *testing.T) {
				var data, path string
				var environ []string
				args := slices.Clone(base)
				want := fmt.Sprint(tc.get(def))
				if file {
					path, data = "edge.yaml", settings.Nested(tc.path, tc.in.file)+"\n"
					want = tc.want.file
				}
				if env {
					environ = append(environ, st.Env+"="+tc.in.env)
					want = tc.want.env
				}
				if flg {
					for _, v := range strings.Split(tc.in.flag, ",") {
						args = append(args, "--"+st.Flag+"="+v) // = for bool flags
					}
					want = tc.want.flag
				}
				c, err := loadData(path, data, args, environ)
				if err != nil {
					t.Fatalf("file %q env %q args %q: %v", data, environ, args, err)
				}
				if got := fmt.Sprint(tc.get(c)); got != want {
					t.Errorf("got %s, want %s", got, want)
				}
			})
		}
	}
}

// TestClientIDFollowsEdgeID: the derived default uses the merged edge id,
// whichever source gave it.
func TestClientIDFollowsEdgeID(t *testing.T) {
	c, err := loadData("edge.yaml", "edge_id: from-file\n", []string{"--edge-id", "from-flag"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.EdgeID != "from-flag" || c.Broker.ClientID != "runnel-from-flag" {
		t.Errorf("edge id %q, client id %q", c.EdgeID, c.Broker.ClientID)
	}
}

func TestConfigFileSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "edge_id: from-a\n")
	b := write("b.yaml", "edge_id: from-b\n")
	c := write("c.yaml", "edge_id: from-c\n")
	missing := filepath.Join(dir, "missing.yaml")
	for _, tc := range []struct {
		name    string
		path    string
		args    []string
		environ []string
		want    string // edge id, or the error
	}{
		{"path", a, nil, nil, "from-a"},
		{"env over path", a, nil, []string{"RUNNEL_CONFIG=" + b}, "from-b"},
		{"flag over env", a, []string{"--config", c}, []string{"RUNNEL_CONFIG=" + b}, "from-c"},
		{"flag alone", "", []string{"-config=" + c}, nil, "from-c"},
		{"empty flag: no file", a, []string{"--config="}, []string{"RUNNEL_CONFIG=" + b}, "gw-test"},
		{"missing path", missing, nil, nil, missing + ": cannot read the config file: no such file or directory"},
		{"missing from env", "", nil, []string{"RUNNEL_CONFIG=" + missing}, "env RUNNEL_CONFIG: cannot read the config file " + missing + ": no such file or directory"},
		{"missing from flag", "", []string{"--config", missing}, nil, "flag --config: cannot read the config file " + missing + ": no such file or directory"},
		{"directory", dir, nil, nil, dir + ": cannot read the config file: is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(tc.path, tc.args, tc.environ, func() (string, error) { return "gw-test", nil }, settings.ReadFile)
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("error does not match ErrInvalid: %v", err)
				}
			} else {
				got = cfg.EdgeID
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	big := write("big.yaml", "# "+strings.Repeat("x", MaxFileSize)+"\n")
	if _, err := Load(big, nil, nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over MaxFileSize: %v", err)
	}
}

// TestRelativePaths: paths from the file are relative to its directory,
// the others to the working directory.
func TestRelativePaths(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "pipelines"), 0o755)
	os.WriteFile(filepath.Join(dir, "one.yaml"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "password"), []byte("s3cret\n"), 0o600)
	file := filepath.Join(dir, "edge.yaml")
	os.WriteFile(file, []byte(`data_dir: ./data
pipelines: [one.yaml, "pipelines/*.yaml", /abs/*.yaml]
broker: {password_file: password}
`), 0o644)
	c, err := Load(file, []string{"--broker-tls-ca-file=rel.pem", "--broker-url=mqtts://b:8883"}, []string{"RUNNEL_BROKER_TLS_CA_FILE=ignored.pem"})
	if err == nil {
		t.Fatalf("rel.pem does not exist in the working directory, yet Load succeeded: %+v", c)
	}
	if want := "flag --broker-tls-ca-file: cannot read rel.pem: no such file or directory"; err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	c, err = Load(file, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "data"); c.DataDir != want {
		t.Errorf("data_dir %q, want %q", c.DataDir, want)
	}
	if want := []string{filepath.Join(dir, "one.yaml"), filepath.Join(dir, "pipelines/*.yaml"), "/abs/*.yaml"}; !slices.Equal(c.Pipelines, want) {
		t.Errorf("pipelines %q, want %q", c.Pipelines, want)
	}
	if c.Broker.PasswordFile != filepath.Join(dir, "password") || c.Broker.Password != "s3cret" {
		t.Errorf("password file %q, password %q", c.Broker.PasswordFile, c.Broker.Password)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate of a loaded config: %v", err)
	}
}

func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	empty := filepath.Join(dir, "empty")
	os.WriteFile(pw, []byte("hunter2\r\n"), 0o600)
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct {
		name    string
		args    []string
		environ []string
		want    string // password, or the error
	}{
		{"file", []string{"--broker-password-file", pw}, nil, "hunter2"},
		{"env", nil, []string{"RUNNEL_BROKER_PASSWORD=x y"}, "x y"},
		{"both", []string{"--broker-password-file", pw}, []string{"RUNNEL_BROKER_PASSWORD=secret"},
			"flag --broker-password-file: broker.password is also set (from env RUNNEL_BROKER_PASSWORD); give the password one way only"},
		{"empty", []string{"--broker-password-file", empty}, nil, "flag --broker-password-file: " + empty + " is empty"},
		{"directory", []string{"--broker-password-file", dir}, nil, "flag --broker-password-file: cannot read " + dir + ": is a directory"},
		{"device", []string{"--broker-password-file", "/dev/zero"}, nil, "flag --broker-password-file: cannot read /dev/zero: not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadData("", "", tc.args, tc.environ)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = c.Broker.Password
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if strings.Contains(got, "secret") && err != nil {
				t.Errorf("the password is in the message: %v", err)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		if _, err := Load("", []string{"--edge-id=x", arg, "--bogus"}, nil); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: got %v, want flag.ErrHelp", arg, err)
		}
	}
}

func TestHostname(t *testing.T) {
	for _, tc := range []struct {
		host string
		err  error
		want string
	}{
		{host: "raspberrypi", want: ""},
		{host: "gw_1.plant-a", want: ""},
		{host: "my host", want: `edge_id: not set, and the hostname cannot be used: "my host" contains ' '; use letters, digits, '.', '_' and '-'; set edge_id`},
		{host: strings.Repeat("h", 65), want: "edge_id: not set, and the hostname cannot be used: 65 characters long; at most 64 are allowed; set edge_id"},
		{err: errors.New("uname failed"), want: "edge_id: not set, and the hostname is unknown (uname failed); set edge_id"},
	} {
		c, err := load("", nil, nil, func() (string, error) { return tc.host, tc.err }, settings.ReadFile)
		got := ""
		if err != nil {
			got = err.Error()
		} else if c.EdgeID != tc.host || c.Broker.ClientID != "runnel-"+tc.host {
			t.Errorf("host %q: edge id %q, client id %q", tc.host, c.EdgeID, c.Broker.ClientID)
		}
		if got != tc.want {
			t.Errorf("host %q: got  %s\nwant %s", tc.host, got, tc.want)
		}
		// An edge id from any source makes the hostname irrelevant.
		if _, err := load("", []string{"--edge-id=gw-1"}, nil, func() (string, error) { return tc.host, tc.err }, settings.ReadFile); err != nil {
			t.Errorf("host %q with --edge-id: %v", tc.host, err)
		}
	}
}

// TestValidate checks a Config built in code: problems name settings by
// their YAML path, and every rule Load applies to a value, Validate
// applies to the field.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, []byte("x"), 0o644)
	for _, tc := range []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{"defaults", func(c *Config) {}, ""},
		{"zero", func(c *Config) { *c = Config{} }, strings.Join([]string{
			"edge_id: empty; leave it out to use the hostname",
			"data_dir: empty",
			"shutdown_timeout: must be greater than 0, got 0s",
			`broker.protocol: unknown value "" (did you mean "5"?); use 5 or 3.1.1`,
			"broker.embedded_addr: empty; expected host:port such as 127.0.0.1:1883",
			`broker.client_id: empty; leave it out to use "runnel-" + edge_id`,
			"broker.receive_maximum: 0 is out of range; must be 1 to 65535",
			"broker.session_expiry: 0s is out of range; must be 1s to 4294967295s",
			"broker.keep_alive: 0s is out of range; must be 1s to 65535s",
			"broker.reconnect.min: 0s is out of range; must be 1ms to 1d",
			"broker.reconnect.max: 0s is out of range; must be 1ms to 1d",
			"checkpoint.interval: must be greater than 0, got 0s",
			"ingest_log.segment_size: 0B is too small; must be at least 1KiB",
			`ingest_log.sync: unknown value ""; use group, always or never`,
			"ingest_log.sync_delay: 0s is out of range; must be 1ms to 1s",
			`ingest_log.compression: unknown value ""; use none or zstd`,
			`disk_cap.policy: unknown value ""; use block or drop_raw`,
			"side_outputs.max_bytes: must be greater than 0, got 0B",
			"dedup.ids: 0 is out of range; must be 1 to 16777216",
			"snapshot.keep: 0 is out of range; must be 1 to 1000",
			"raw_archive.interval: must be greater than 0, got 0s",
			"raw_archive.yield_outbox_bytes: must be greater than 0, got 0B",
			"raw_archive.max_bytes: must be greater than 0, got 0B",
			"uplink.batch_entries: 0 is out of range; must be 1 to 100000",
			"fleet.status_interval: must be greater than 0, got 0s",
			`log.level: unknown value ""; use info, debug, warn or error`,
			`log.format: unknown value ""; use text or json`,
		}, "\n")},
		{"half a second", func(c *Config) { c.Broker.KeepAlive = 1500 * time.Millisecond },
			"broker.keep_alive: 1s500ms is not a whole number of seconds (MQTT sends it in seconds)"},
		{"pipelines", func(c *Config) { c.Pipelines = []string{"a/*.yaml", "", "b/[.yaml"} },
			`pipelines: item 2: empty path`},
		{"reconnect", func(c *Config) { c.Broker.Reconnect = Reconnect{Min: time.Minute, Max: time.Second} },
			"broker.reconnect.min: 1m is more than broker.reconnect.max (1s)"},
		{"uplink token without hub", func(c *Config) { c.Uplink.Token = "t" }, "uplink.token: has no effect without uplink.hub"},
		{"uplink insecure with tls", func(c *Config) {
			c.Uplink.Hub, c.Uplink.Insecure, c.Uplink.ServerName = "hub:7443", true, "hub"
		}, "uplink.tls.server_name: TLS settings contradict uplink.insecure: true"},
		{"tls without mqtts", func(c *Config) { c.Broker.URL = "mqtt://b:1883"; c.Broker.TLS.ServerName = "b" },
			`broker.tls.server_name: TLS settings apply to mqtts:// brokers only, and broker.url ("mqtt://b:1883") is not one`},
		{"tls with the embedded broker", func(c *Config) { c.Broker.TLS.InsecureSkipVerify = true },
			"broker.tls.insecure_skip_verify: TLS settings need an mqtts:// broker.url; the embedded broker (broker.url is empty) speaks plain MQTT"},
		{"key without cert", func(c *Config) { c.Broker.URL = "mqtts://b"; c.Broker.TLS.KeyFile = notDir },
			"broker.tls.key_file: a private key without broker.tls.cert_file; set both or neither"},
		{"v3.1.1 with the v5 defaults", func(c *Config) { c.Broker.Protocol = ProtocolV311 }, ""},
		{"v3.1.1 with v5 settings", func(c *Config) {
			c.Broker.Protocol, c.Broker.ReceiveMaximum, c.Broker.SessionExpiry = ProtocolV311, 10, time.Hour
		}, strings.Join([]string{
			"broker.receive_maximum: an MQTT v5 setting, and broker.protocol (3.1.1) asks for v3.1.1, which has none: back-pressure is bounded by the broker's in-flight limit (Mosquitto: max_inflight_messages). Remove it",
			"broker.session_expiry: an MQTT v5 setting, and broker.protocol (3.1.1) asks for v3.1.1, which has none: the broker's own setting (Mosquitto: persistent_client_expiration) decides how long it keeps the session. Remove it",
		}, "\n")},
		{"v5 settings with v5", func(c *Config) { c.Broker.ReceiveMaximum, c.Broker.SessionExpiry = 10, time.Hour }, ""},
		{"disk cap", func(c *Config) { c.DiskCap.Bytes = 100 << 20 }, strings.Join([]string{
			"disk_cap.bytes: disk_cap.bytes 100MiB is less than two ingest log segments of 64MiB: the log needs one segment to write while a checkpoint frees the last",
			"side_outputs.max_bytes: 64MiB is more than half of disk_cap.bytes (100MiB): side outputs count toward the disk cap, and at least half of it is left to the ingest log and the outbox",
		}, "\n")},
		{"no disk cap", func(c *Config) { c.DiskCap.Bytes = 0 }, ""},
		{"side outputs: half the disk cap", func(c *Config) { c.SideOutputs.MaxBytes = c.DiskCap.Bytes / 2 }, ""},
		{"side outputs: over half the disk cap", func(c *Config) { c.SideOutputs.MaxBytes = c.DiskCap.Bytes/2 + 1 },
			"side_outputs.max_bytes: 536870913B is more than half of disk_cap.bytes (1GiB): side outputs count toward the disk cap, and at least half of it is left to the ingest log and the outbox"},
		{"side outputs: no disk cap", func(c *Config) { c.DiskCap.Bytes, c.SideOutputs.MaxBytes = 0, 1<<40 }, ""},
		{"side outputs: zero", func(c *Config) { c.SideOutputs = SideOutputs{} }, "side_outputs.max_bytes: must be greater than 0, got 0B"},
		{"embedded broker beyond loopback", func(c *Config) { c.Broker.EmbeddedAddr = "0.0.0.0:1883" },
			"broker.embedded_addr: 0.0.0.0:1883 is not a loopback address, and the embedded broker has no authentication: anyone on the network could publish readings or read them. " +
				"Listen on 127.0.0.1, or set broker.embedded_allow_remote: true (--broker-embedded-allow-remote) to allow it"},
		{"embedded broker beyond loopback, allowed", func(c *Config) { c.Broker.EmbeddedAddr, c.Broker.EmbeddedAllowRemote = "0.0.0.0:1883", true }, ""},
		{"embedded broker on localhost", func(c *Config) { c.Broker.EmbeddedAddr = "localhost:1883" }, ""},
		{"embedded broker unused", func(c *Config) { c.Broker.EmbeddedAddr, c.Broker.URL = ":1883", "mqtt://b:1883" }, ""},
		{"http beyond loopback", func(c *Config) { c.HTTP.Addr = "192.168.1.20:9464" },
			"http.addr: 192.168.1.20:9464 is not a loopback address, and /metrics, /healthz and /debug/pprof have no authentication: anyone on the network could read the edge's metrics and profile it. " +
				"Listen on 127.0.0.1, or set http.allow_remote: true (--http-allow-remote) to allow it"},
		{"http on every interface, allowed", func(c *Config) { c.HTTP.Addr, c.HTTP.AllowRemote = ":9464", true }, ""},
		{"http off", func(c *Config) { c.HTTP.Addr = "" }, ""},
		{"addresses collide", func(c *Config) { c.HTTP.Addr, c.HTTP.AllowRemote = ":1883", true },
			"http.addr: same address as broker.embedded_addr (\"127.0.0.1:1883\"); the embedded broker and the HTTP server cannot both listen there"},
		{"addresses with an external broker", func(c *Config) { c.HTTP.Addr, c.HTTP.AllowRemote, c.Broker.URL = ":1883", true, "mqtt://b" }, ""},
		{"data dir is a file", func(c *Config) { c.DataDir = notDir }, "data_dir: " + notDir + " exists and is not a directory"},
		{"pipeline missing", func(c *Config) { c.Pipelines = []string{dir, notDir + ".nope", notDir, notDir} }, strings.Join([]string{
			"pipelines: " + dir + " is a directory; to load every spec in it, write " + dir + "/*.yaml",
			"pipelines: cannot read pipeline " + notDir + ".nope: no such file or directory",
			"pipelines: " + notDir + " is listed twice (also item 3)",
		}, "\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := wantDefaults("gw-test")
			tc.modify(c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("does not match ErrInvalid")
				}
				var e *Error
				if !errors.As(err, &e) || len(e.Problems) == 0 {
					t.Errorf("not an *Error: %T", err)
				}
			}
			if got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestSettingsTable checks the table itself: names unique and regular,
// defaults valid, and every Config field filled by exactly one setting.
func TestSettingsTable(t *testing.T) {
	seen := map[string]string{}
	for _, st := range table.Settings {
		for _, name := range []string{"yaml " + st.Path, "flag " + st.Flag, "env " + st.Env} {
			if prev, dup := seen[name]; dup {
				t.Errorf("%s used by %s and %s", name, prev, st.Path)
			}
			seen[name] = st.Path
		}
		// Flags are the path in kebab case, variables the flag in upper
		// snake case, but for the two names the brief gave otherwise.
		wantFlag := strings.NewReplacer(".", "-", "_", "-").Replace(st.Path)
		wantEnv := "RUNNEL_" + strings.ToUpper(strings.ReplaceAll(st.Flag, "-", "_"))
		switch st.Path {
		case "broker.embedded_addr":
			wantFlag = "embedded-broker-addr"
		case "pipelines":
			wantFlag, wantEnv = "pipeline", "RUNNEL_PIPELINES"
		}
		if st.Flag != wantFlag || st.Env != wantEnv {
			t.Errorf("%s: flag %q env %q, want %q %q", st.Path, st.Flag, st.Env, wantFlag, wantEnv)
		}
		if st.Doc == "" || !strings.HasSuffix(st.Doc, ".") {
			t.Errorf("%s: doc %q should be a sentence", st.Path, st.Doc)
		}
		if st.Default == "" && st.Example == "" {
			t.Errorf("%s: no default and no example for the docs", st.Path)
		}
		if st.Default != "" {
			v, err := st.Value.Parse(st.Default)
			if err != nil {
				t.Errorf("%s: default %q: %v", st.Path, st.Default, err)
				continue
			}
			var c Config
			st.Value.Set(&c, v)
			if err := st.Value.Check(&c); err != nil {
				t.Errorf("%s: default %q fails its own check: %v", st.Path, st.Default, err)
			}
		}
	}

	// Set each setting alone on a zero Config and see which field changes.
	leaves := leafFields(reflect.TypeFor[Config](), "")
	owner := map[string]string{}
	for _, st := range table.Settings {
		var c Config
		st.Value.Set(&c, sample(st))
		var changed []string
		for _, leaf := range leaves {
			if !fieldByPath(reflect.ValueOf(&c).Elem(), leaf).IsZero() {
				changed = append(changed, leaf)
			}
		}
		if len(changed) != 1 {
			t.Errorf("%s sets fields %q, want exactly one", st.Path, changed)
			continue
		}
		if prev, dup := owner[changed[0]]; dup {
			t.Errorf("field %s is set by %s and %s", changed[0], prev, st.Path)
		}
		owner[changed[0]] = st.Path
	}
	for _, leaf := range leaves {
		if owner[leaf] == "" {
			t.Errorf("Config field %s has no setting", leaf)
		}
	}
	// A section's settings must be together, or the example config (and a
	// user who copies the table's order) would repeat a key.
	lastRow := map[string]int{}
	for i, st := range table.Settings {
		parts := strings.Split(st.Path, ".")
		for j := 1; j < len(parts); j++ {
			sec := strings.Join(parts[:j], ".")
			if last, ok := lastRow[sec]; ok && last != i-1 {
				t.Errorf("section %s is split in the table at %s", sec, st.Path)
			}
			lastRow[sec] = i
		}
	}
}

// sample parses a non-zero value of st's type.
func sample(st *settings.Setting[Config]) any {
	text := map[string]string{"duration": "7s", "bytes": "7KiB", "int": "7", "bool": "true", "string": "x", "path": "x"}[string(st.Value.Kind())]
	switch string(st.Value.Kind()) {
	case "enum":
		text = st.Value.Choices()[0]
	case "paths":
		return []any{"x"}
	case "strings":
		return []any{"a=b"}
	}
	// Some settings refuse the generic sample; their example or default
	// is non-empty and valid.
	for _, text := range []string{text, st.Example, st.Default} {
		if text == "" {
			continue
		}
		if v, err := st.Value.Parse(text); err == nil {
			return v
		}
	}
	panic(st.Path + ": no sample value")
}

func leafFields(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		name := prefix + f.Name
		if f.Type.Kind() == reflect.Struct {
			out = append(out, leafFields(f.Type, name+".")...)
			continue
		}
		out = append(out, name)
	}
	return out
}

func fieldByPath(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
	}
	return v
}

func TestBrokerURL(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"", ""},
		{"mqtt://broker:1883", ""},
		{"mqtts://broker.example.com", ""},
		{"tcp://10.0.0.1:1883/", ""},
		{"mqtt://[::1]:1883", ""},
		{"broker:1883", `"broker:1883" has no scheme; write mqtt://broker:1883, or mqtts://broker:1883 for TLS`},
		{"localhost", `"localhost" has no scheme; write mqtt://localhost, or mqtts://localhost for TLS`},
		{"ssl://b:8883", `"ssl://b:8883": scheme "ssl" is not supported (use mqtts:// for TLS); use mqtt://, mqtts:// or tcp://`},
		{"MQTT://b", ""}, // url.Parse lower-cases the scheme
		{"ws://b:8080", `"ws://b:8080": scheme "ws" is not supported (MQTT over WebSocket is not supported); use mqtt://, mqtts:// or tcp://`},
		{"mqtt://user:hunter2@b:1883", `"mqtt://user:xxxxx@b:1883" has credentials in it; set broker.username and broker.password (or password_file) instead`},
		{"mqtt://user:hunter2@b:1883/%zz", `"mqtt://user:xxxxx@b:1883/%zz" is not a URL: invalid URL escape "%zz"`},
		{"mqtt://:1883", `"mqtt://:1883" has no host`},
		{"mqtt://b:1883/topic", `"mqtt://b:1883/topic": a broker URL is scheme://host:port, without a path or query`},
		{"mqtt://b:99999", `"mqtt://b:99999": port "99999" is not a number from 0 to 65535`},
	} {
		err := checkBrokerURL(tc.in)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("checkBrokerURL(%q):\n got %s\nwant %s", tc.in, got, tc.err)
		}
		if strings.Contains(got, "hunter2") {
			t.Errorf("password in message: %s", got)
		}
	}
}

// TestProblemOrder: the file's problems by position, then variables by
// name, then flags in command-line order.
func TestProblemOrder(t *testing.T) {
	_, err := loadData("edge.yaml", "log: {format: x}\ncheckpoint: {interval: x}\n",
		[]string{"--log-level=x", "--nope", "--dedup-ids=x", "stray"},
		[]string{"RUNNEL_SHUTDOWN_TIMEOUT=x", "RUNNEL_DATA_DIR="})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%T %v", err, err)
	}
	var where []string
	for _, p := range e.Problems {
		where = append(where, p.File+":"+p.Pos.String())
	}
	want := []string{"edge.yaml:1:15", "edge.yaml:2:24", "env RUNNEL_DATA_DIR:", "env RUNNEL_SHUTDOWN_TIMEOUT:", "flag --log-level:", "flag --nope:", "flag --dedup-ids:", ":"}
	if !slices.Equal(where, want) {
		t.Errorf("order %q\nwant  %q\n%v", where, want, err)
	}
	var ps spec.Problems = e.Problems
	if ps.Err() == nil {
		t.Error("the problems are spec.Problems")
	}
}

func TestArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--edge-id", "a", "--", "--data-dir", "x"}, `unexpected argument "--data-dir" after --` + "\n" + `unexpected argument "x" after --`},
		{[]string{"run"}, `unexpected argument "run" (settings are given as flags, such as --config edge.yaml)`},
		{[]string{"---x"}, "bad flag syntax: ---x"},
		{[]string{"--nope=1", "--edge-id=gw"}, "flag --nope: unknown flag"},
		{[]string{"--nope", "value", "--edge-id=gw"}, "flag --nope: unknown flag"},
		{[]string{"--edge_id=gw"}, "flag --edge_id: unknown flag (did you mean --edge-id?)"},
		{[]string{"--checkpoint.interval=1s"}, "flag --checkpoint.interval: unknown flag (did you mean --checkpoint-interval?)"},
		{[]string{"--pipeline", "a/*.yaml", "--pipeline", "b/[.yaml"}, `flag --pipeline: "b/[.yaml" is not a valid glob: syntax error in pattern`},
		{[]string{"--edge-id=a", "--edge-id=b b", "--edge-id=c"}, ""}, // the last wins; only it is parsed
	} {
		_, err := loadData("", "", tc.args, nil)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.args, got, tc.want)
		}
	}
}

// TestTLSFiles checks the TLS files with real PEM: a good CA and key pair
// load; a key that is not the certificate's is refused.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCert(t, dir, "a")
	_, _, otherKey := writeCert(t, dir, "b")
	base := []string{"--broker-url=mqtts://broker:8883", "--broker-tls-ca-file=" + ca}
	c, err := loadData("", "", append(base, "--broker-tls-cert-file="+cert, "--broker-tls-key-file="+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Broker.TLS != (TLS{CAFile: ca, CertFile: cert, KeyFile: key}) {
		t.Errorf("TLS %+v", c.Broker.TLS)
	}
	_, err = loadData("", "", append(base, "--broker-tls-cert-file="+cert, "--broker-tls-key-file="+otherKey), nil)
	want := "flag --broker-tls-cert-file: " + cert + " and " + otherKey + " are not a certificate and its key: private key does not match public key"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	_, err = loadData("", "", []string{"--broker-url=mqtts://broker:8883", "--broker-tls-ca-file=" + key}, nil)
	if want := "flag --broker-tls-ca-file: " + key + " holds no PEM certificate"; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// writeCert writes a self-signed certificate (which is also its own CA)
// and its key, and returns the paths of the CA, the certificate and the key.
func writeCert(t *testing.T, dir, name string) (ca, cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert = filepath.Join(dir, name+".pem")
	key = filepath.Join(dir, name+"-key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	return cert, cert, key
}

// TestBadEdgeIDHidesHostname: an edge id that is given but wrong is one
// problem; the hostname is not consulted in its place.
func TestBadEdgeIDHidesHostname(t *testing.T) {
	_, err := load("", []string{"--edge-id=a b"}, nil, func() (string, error) { return "bad host", nil }, settings.ReadFile)
	if want := `flag --edge-id: "a b" contains ' '; use letters, digits, '.', '_' and '-'`; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// broker.protocol from each source: "3.1.1" and "5" are text, and a YAML
// number 5 is read as its text.
func TestProtocolSources(t *testing.T) {
	for _, tc := range []struct {
		name, data    string
		args, environ []string
		want          Protocol
	}{
		{name: "yaml", data: "broker: {protocol: 3.1.1}\n", want: ProtocolV311},
		{name: "yaml number", data: "broker: {protocol: 5}\n", want: ProtocolV5},
		{name: "env", environ: []string{"RUNNEL_BROKER_PROTOCOL=3.1.1"}, want: ProtocolV311},
		{name: "flag", args: []string{"--broker-protocol", "3.1.1"}, want: ProtocolV311},
		{name: "default", want: ProtocolV5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := ""
			if tc.data != "" {
				file = "edge.yaml"
			}
			c, err := loadData(file, tc.data, tc.args, tc.environ)
			if err != nil {
				t.Fatal(err)
			}
			if c.Broker.Protocol != tc.want {
				t.Fatalf("Protocol = %q, want %q", c.Broker.Protocol, tc.want)
			}
		})
	}
}

// TestYAMLSyntaxPositions: a YAML syntax error in the config file is
// reported at its line and column, worded as in a pipeline spec.
func TestYAMLSyntaxPositions(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unclosed quote", "edge_id: gw-1\ndata_dir: \"/var/lib/runnel\nlog: {level: debug}\n",
			`edge.yaml:2:11: invalid YAML: found unexpected end of stream (a quote is not closed)`},
		{"bad indentation", "broker:\n  url: mqtt://b:1883\n  reconnect:\n    min: 1s\n   max: 30s\n",
			`edge.yaml:5:4: invalid YAML: did not find expected key (check the indentation of this line)`},
		{"tab", "broker:\n  url: mqtt://b:1883\n\tkeep_alive: 30s\n",
			`edge.yaml:3:1: invalid YAML: found a tab character that violates indentation (indent with spaces, not tabs)`},
		{"unclosed [", "edge_id: gw-1\npipelines: [a.yaml, b.yaml\nlog: {level: debug}\n",
			`edge.yaml:2:12: invalid YAML: did not find expected ',' or ']' (a [ list is not closed)`},
		{"unclosed {", "edge_id: gw-1\ncheckpoint: {interval: 1s\nlog: {level: debug}\n",
			`edge.yaml:2:13: invalid YAML: did not find expected ',' or '}' (a { mapping is not closed)`},
		{"value with \": \"", "edge_id: gw-1\nbroker: {url: mqtt://b:1883}\nuplink:\n  hub: hub: 7443\n",
			`edge.yaml:4:11: invalid YAML: mapping values are not allowed in this context (a value contains ": "; quote it, or check the indentation)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadData("edge.yaml", tc.file, nil, nil)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want *Error", err)
			}
			if len(e.Problems) != 1 || e.Problems[0].Error() != tc.want {
				t.Errorf("got\n  %v\nwant\n  %s", err, tc.want)
			}
		})
	}
}

// TestLoadWithPipelines: the pipeline files are checked even when other
// settings have problems, with only the items the config's own checks
// passed, and their problems come after the config's.
func TestLoadWithPipelines(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing.yaml")
	errPipelines := errors.New(a + ":1:1: bad spec")
	for _, tc := range []struct {
		name      string
		file      string
		args      []string
		checkErr  error
		wantGlobs []string // nil: check is not called
		want      []string // the error's lines; nil: no error
	}{
		{"good", "pipelines: [a.yaml, b.yaml]\n", nil, nil, []string{a, b}, nil},
		{"other problems", "pipelines: [a.yaml, '*.yml']\ncheckpoint: {interval: 0s}\n", []string{"--log-level", "loud"}, errPipelines,
			[]string{a, filepath.Join(dir, "*.yml")}, []string{
				"edge.yaml:2:24: checkpoint.interval: must be greater than 0, got 0s",
				`flag --log-level: unknown value "loud"; use info, debug, warn or error`,
				errPipelines.Error(),
			}},
		{"items the config refuses", "pipelines: [a.yaml, missing.yaml, a.yaml, b.yaml]\n", nil, errPipelines,
			[]string{a, b}, []string{
				"edge.yaml:1:21: pipelines[1]: cannot read pipeline " + missing + ": no such file or directory",
				"edge.yaml:1:35: pipelines[2]: " + a + " is listed twice (also item 1)",
				errPipelines.Error(),
			}},
		{"only pipelines are bad", "pipelines: a.yaml\n", nil, errPipelines, []string{a}, []string{errPipelines.Error()}},
		{"no pipelines", "edge_id: x\n", nil, nil, nil, nil},
		{"the setting is bad", "pipelines: {a: 1}\n", nil, nil, nil, []string{
			"edge.yaml:1:12: pipelines: expected a list of paths, such as [pipelines/*.yaml], got a mapping",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "edge.yaml")
			if err := os.WriteFile(file, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			var globs []string
			called := false
			_, err := loadWith(file, tc.args, nil, func() (string, error) { return "gw-test", nil }, settings.ReadFile, func(g []string) error {
				called, globs = true, g
				return tc.checkErr
			})
			if !called && tc.wantGlobs != nil || called && tc.wantGlobs == nil || !slices.Equal(globs, tc.wantGlobs) {
				t.Errorf("check called %v with %q, want %q", called, globs, tc.wantGlobs)
			}
			var got []string
			if err != nil {
				got = strings.Split(strings.ReplaceAll(err.Error(), file, "edge.yaml"), "\n")
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if tc.checkErr != nil && !errors.Is(err, tc.checkErr) {
				t.Errorf("error does not match check's: %v", err)
			}
			var e *Error
			if len(tc.want) > 1 && (!errors.Is(err, ErrInvalid) || !errors.As(err, &e)) {
				t.Errorf("error does not match ErrInvalid or is no *Error: %v", err)
			}
		})
	}
}

// TestListenersAndSideOutputs: the rules of the side outputs' quota and of
// the listeners beyond loopback, from every source, placed at the value
// the user gave.
func TestListenersAndSideOutputs(t *testing.T) {
	const why = ": side outputs count toward the disk cap, and at least half of it is left to the ingest log and the outbox"
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		environ []string
		want    string // "" for valid
	}{
		{"cap set, quota default", "disk_cap: {bytes: 100MiB}\ningest_log: {segment_size: 1MiB}\n", nil, nil,
			"edge.yaml:1:19: disk_cap.bytes: 100MiB is less than twice side_outputs.max_bytes (64MiB, the default)" + why},
		{"quota set, cap default", "", []string{"--side-outputs-max-bytes", "600MiB"}, nil,
			"flag --side-outputs-max-bytes: 600MiB is more than half of disk_cap.bytes (1GiB, the default)" + why},
		{"both set", "side_outputs: {max_bytes: 60MiB}\n", nil, []string{"RUNNEL_DISK_CAP_BYTES=100MiB", "RUNNEL_INGEST_LOG_SEGMENT_SIZE=1MiB"},
			"edge.yaml:1:27: side_outputs.max_bytes: 60MiB is more than half of disk_cap.bytes (100MiB, from env RUNNEL_DISK_CAP_BYTES)" + why},
		{"quota with no cap", "disk_cap: {bytes: 0}\nside_outputs: {max_bytes: 1TiB}\n", nil, nil, ""},
		{"quota zero", "", []string{"--side-outputs-max-bytes=0"}, nil, "flag --side-outputs-max-bytes: must be greater than 0, got 0B"},
		{"no age limit", "side_outputs: {max_age: 0s}\n", nil, nil, ""},
		{"embedded broker beyond loopback", "", nil, []string{"RUNNEL_EMBEDDED_BROKER_ADDR=0.0.0.0:1883"},
			"env RUNNEL_EMBEDDED_BROKER_ADDR: 0.0.0.0:1883 is not a loopback address, and the embedded broker has no authentication"},
		{"embedded broker beyond loopback, allowed", "", []string{"--broker-embedded-allow-remote"}, []string{"RUNNEL_EMBEDDED_BROKER_ADDR=0.0.0.0:1883"}, ""},
		{"embedded broker by host name", "broker: {embedded_addr: 'gw-1.local:1883'}\n", nil, nil,
			"edge.yaml:1:25: broker.embedded_addr: gw-1.local:1883 is not a loopback address"},
		{"external broker", "broker: {url: 'mqtt://b:1883', embedded_addr: ':1883'}\n", nil, nil, ""},
		{"http beyond loopback", "http: {addr: ':9464'}\n", nil, nil,
			"edge.yaml:1:14: http.addr: :9464 is not a loopback address, and /metrics, /healthz and /debug/pprof have no authentication"},
		{"http beyond loopback, allowed", "http: {addr: ':9464', allow_remote: true}\n", nil, nil, ""},
		{"http on ::1", "", []string{"--http-addr", "[::1]:9464"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = "edge.yaml"
			}
			c, err := loadData(path, tc.file, tc.args, tc.environ)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")):
				t.Errorf("got\n  %v\nwant one problem\n  %s...", err, tc.want)
			case tc.name == "no age limit" && c.SideOutputs.MaxAge != 0:
				t.Errorf("max_age %v, want 0", c.SideOutputs.MaxAge)
			}
		})
	}
}

func TestSnapshotSettings(t *testing.T) {
	for _, tc := range []struct {
		store    string
		interval time.Duration
		want     string
	}{
		{"", time.Hour, ""},
		{"/var/backups/runnel", 0, ""},
		{"file:///var/backups/runnel", 10 * time.Second, ""},
		{"s3://backups/runnel/edges", time.Hour, ""},
		{"backups", time.Hour, `snapshot.store: "backups" is a relative path; write an absolute path or file:///path`},
		{"file://backups/x", time.Hour, `snapshot.store: "file://backups/x": a file URL names a local path: file:///path (three slashes)`},
		{"gs://b/p", time.Hour, `snapshot.store: "gs://b/p": scheme "gs" is not supported; use file:///path, a path, or s3://bucket/prefix`},
		{"s3:///p", time.Hour, `snapshot.store: "s3:///p" has no bucket: s3://bucket/prefix`},
		{"s3://b/p?x=1", time.Hour, `snapshot.store: "s3://b/p?x=1": a snapshot store URL has no query or fragment`},
		{"/x", 5 * time.Second, "snapshot.interval: 5s is too short; at least 10s, or 0 for on demand only"},
	} {
		c := wantDefaults("gw-test")
		c.Snapshot.Store, c.Snapshot.Interval = tc.store, tc.interval
		got := ""
		if err := c.Validate(); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("store %q, interval %v: got %q, want %q", tc.store, tc.interval, got, tc.want)
		}
	}
}

// TestUplinkClientCert: uplink.tls.cert_file and key_file load, and a bad
// pair is refused at start with every problem listed: a missing file, a
// key of another certificate, a certificate of another edge, one not for
// client authentication, half a pair, and a pair with insecure.
func TestUplinkClientCert(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name, cn string, eku ...x509.ExtKeyUsage) (string, string) {
		c, k, err := testcert.WriteClient(ca, dir, name, testcert.Client{CommonName: cn, ExtKeyUsage: eku})
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	good, goodKey := issue("gw-1", "gw-1")
	other, otherKey := issue("gw-2", "gw-2")
	serverOnly, serverOnlyKey := issue("srv", "gw-1", x509.ExtKeyUsageServerAuth)
	expired, expiredKey, err := testcert.WriteClient(ca, dir, "old", testcert.Client{CommonName: "gw-1", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--edge-id", "gw-1", "--uplink-hub", "hub:7443", "--uplink-tls-ca-file", ca.CA}
	for _, pair := range [][2]string{{good, goodKey}, {expired, expiredKey}} {
		c, err := loadData("", "", append(base, "--uplink-tls-cert-file", pair[0], "--uplink-tls-key-file", pair[1]), nil)
		if err != nil || c.Uplink.CertFile != pair[0] || c.Uplink.KeyFile != pair[1] {
			t.Fatalf("%s: %+v %v", pair[0], c.Uplink, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--uplink-tls-cert-file", dir + "/missing.pem", "--uplink-tls-key-file", goodKey}, []string{
			"flag --uplink-tls-cert-file: cannot read " + dir + "/missing.pem"}},
		{[]string{"--uplink-tls-cert-file", good, "--uplink-tls-key-file", otherKey}, []string{
			"flag --uplink-tls-cert-file: " + good + " and " + otherKey + " are not a certificate and its key: private key does not match public key"}},
		{[]string{"--uplink-tls-cert-file", other, "--uplink-tls-key-file", otherKey}, []string{
			`flag --uplink-tls-cert-file: ` + other + `: the certificate is another edge's: its subject CN is "gw-2", and this edge is "gw-1"`}},
		{[]string{"--uplink-tls-cert-file", serverOnly, "--uplink-tls-key-file", serverOnlyKey}, []string{
			"flag --uplink-tls-cert-file: " + serverOnly + ": the certificate is not for client authentication"}},
		{[]string{"--uplink-tls-cert-file", good}, []string{
			"flag --uplink-tls-cert-file: a client certificate needs its private key: set uplink.tls.key_file too"}},
		{[]string{"--uplink-tls-key-file", goodKey, "--uplink-insecure"}, []string{
			"flag --uplink-tls-ca-file: TLS settings contradict uplink.insecure: true",
			"flag --uplink-tls-key-file: TLS settings contradict uplink.insecure: true",
			"flag --uplink-tls-key-file: a private key without uplink.tls.cert_file; set both or neither"}},
	} {
		_, err := loadData("", "", append(slices.Clone(base), tc.args...), nil)
		if err == nil {
			t.Errorf("%v: loaded", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: missing %q in:\n%v", tc.args, w, err)
			}
		}
		if n := len(strings.Split(err.Error(), "\n")); n != len(tc.want) {
			t.Errorf("%v: %d problems, want %d:\n%v", tc.args, n, len(tc.want), err)
		}
	}
	// Every problem at once: another edge's certificate and a missing key
	// file of the broker beside it.
	_, err = loadData("", "", append(slices.Clone(base), "--uplink-tls-cert-file", other, "--uplink-tls-key-file", otherKey,
		"--broker-url", "mqtts://b:8883", "--broker-tls-cert-file", good, "--broker-tls-key-file", dir+"/nokey"), nil)
	if err == nil || len(strings.Split(err.Error(), "\n")) != 2 {
		t.Errorf("two problems: %v", err)
	}
}

// TestResidentKeys: state.max_resident_keys when set; else a third of
// memory_limit at 256 bytes a key, shared among the pipelines; else none.
func TestResidentKeys(t *testing.T) {
	for _, c := range []struct {
		limit     int64
		keys      int
		pipelines int
		want      int
	}{
		{0, 0, 1, 0},
		{0, 5000, 2, 5000},
		{48 << 20, 5000, 2, 5000},
		{48 << 20, 0, 1, 65536},
		{48 << 20, 0, 0, 65536},
		{48 << 20, 0, 4, 16384},
		{1 << 20, 0, 8, 1000},
	} {
		cfg := &Config{MemoryLimit: c.limit, State: State{MaxResidentKeys: c.keys}}
		if got := cfg.ResidentKeys(c.pipelines); got != c.want {
			t.Errorf("memory_limit %d, max_resident_keys %d, %d pipelines: %d keys, want %d", c.limit, c.keys, c.pipelines, got, c.want)
		}
	}
}
