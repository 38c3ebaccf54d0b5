package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/settings"
	"github.com/runnel-io/runnel/internal/testcert"
)

// TestSettingsTable: every Config leaf field has exactly one row, every
// default parses, and flags and variables are unique.
func TestSettingsTable(t *testing.T) {
	c := table.Defaults()
	rows := map[uintptr]string{}
	for _, st := range table.Settings {
		if !strings.HasPrefix(st.Env, table.EnvPrefix) {
			t.Errorf("%s: variable %s lacks the %s prefix", st.Path, st.Env, table.EnvPrefix)
		}
		ptr := fieldPtr(t, st, c)
		if other, dup := rows[ptr]; dup {
			t.Errorf("%s and %s fill one field", st.Path, other)
		}
		rows[ptr] = st.Path
	}
	var walk func(v reflect.Value, name string)
	walk = func(v reflect.Value, name string) {
		if v.Kind() == reflect.Struct && v.Type().PkgPath() != "time" {
			for i := 0; i < v.NumField(); i++ {
				walk(v.Field(i), name+"."+v.Type().Field(i).Name)
			}
			return
		}
		if name == ".Auth.EdgeTokens" { // filled from auth.edge_tokens_file
			return
		}
		if _, ok := rows[v.Addr().Pointer()]; !ok {
			t.Errorf("Config%s has no setting", name)
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	flags, vars := map[string]bool{}, map[string]bool{}
	for _, st := range table.Settings {
		flags[st.Flag], vars[st.Env] = true, true
	}
	if len(flags) != len(table.Settings) || len(vars) != len(table.Settings) {
		t.Error("flags or variables are not unique")
	}
}

// fieldPtr finds the field a setting fills.
func fieldPtr(t *testing.T, st *settings.Setting[Config], c *Config) uintptr {
	t.Helper()
	return reflect.ValueOf(st.Value.Field(c)).Pointer()
}

func TestEmptyConfig(t *testing.T) {
	c, err := loadData("", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.Addr != "127.0.0.1:7443" || c.HTTP.Addr != "127.0.0.1:7080" || c.Merge.EdgeTimeout != time.Minute || c.Merge.MaxFuture != time.Hour ||
		c.Merge.Retention != 7*24*time.Hour || c.Merge.CommitInterval != 20*time.Millisecond || c.Merge.KeyGroups != 128 ||
		c.Log.Level != settings.LevelInfo || !c.Plaintext() || c.DataDir != "./runnel-hub-data" || !c.Fleet.Enabled || c.Fleet.Tick != time.Second {
		t.Errorf("defaults: %+v", c)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default() does not validate: %v", err)
	}
}

func TestPrecedence(t *testing.T) {
	file := "grpc: {addr: 127.0.0.1:1}\nhttp: {addr: 127.0.0.1:2}\nmerge: {edge_timeout: 2m, key_groups: 8}\n"
	env := []string{"RUNNEL_HUB_HTTP_ADDR=127.0.0.1:3", "RUNNEL_HUB_EDGE_TIMEOUT=3m", "OTHER=1", "RUNNEL_EDGE_ID=x"}
	args := []string{"--edge-timeout", "4m", "--log-level=debug", "--insecure"}
	c, err := loadData("hub.yaml", file, args, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.Addr != "127.0.0.1:1" || c.HTTP.Addr != "127.0.0.1:3" || c.Merge.EdgeTimeout != 4*time.Minute ||
		c.Merge.KeyGroups != 8 || c.Log.Level != settings.LevelDebug || !c.Insecure {
		t.Errorf("merged: %+v", c)
	}
	// --config and RUNNEL_HUB_CONFIG name the file.
	dir := t.TempDir()
	path := filepath.Join(dir, "hub.yaml")
	os.WriteFile(path, []byte("merge: {retention: 30d}\npipelines: [p.yaml]\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "p.yaml"), nil, 0o600)
	for _, tc := range [][2][]string{{{"--config", path}, nil}, {nil, {"RUNNEL_HUB_CONFIG=" + path}}} {
		c, err := Load("", tc[0], tc[1])
		if err != nil {
			t.Fatal(err)
		}
		if c.Merge.Retention != 30*24*time.Hour || len(c.Pipelines) != 1 || c.Pipelines[0] != filepath.Join(dir, "p.yaml") {
			t.Errorf("%v: %+v", tc, c)
		}
	}
}

// TestBadConfig: every problem of every source is listed, with its line.
func TestBadConfig(t *testing.T) {
	file := `data_dir: ""
grpc:
  addr: 0.0.0.0:7443
  adr: x
http:
  addr: nohost
merge:
  commit_interval: 1h
  key_groups: many
  edge_timeout: -1s
log: {level: verbose, format: xml}
auth: {api_token: abc, api_token_file: /nonexistent/tok}
pipelines: [/nonexistent/p.yaml, /nonexistent/p.yaml]
bogus: 1
`
	_, err := loadData("hub.yaml", file, []string{"--retention", "0s", "--nope", "x", "stray.yaml"},
		[]string{"RUNNEL_HUB_KEY_GROUP=4", "RUNNEL_HUB_COMMIT_INTERVAL=fast", "RUNNEL_HUB_MAX_FUTURE=0s"})
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want *Error", err)
	}
	want := []string{
		"hub.yaml:1:11: data_dir: empty",
		"hub.yaml:3:9: grpc.addr: 0.0.0.0:7443 is not a loopback address, and no TLS certificate is set",
		`hub.yaml:4:3: grpc: unknown field "adr" (did you mean "addr"?)`,
		`hub.yaml:6:9: http.addr: "nohost" is not host:port`,
		"hub.yaml:8:20: merge.commit_interval: 1h is out of range; must be 1ms to 10s",
		`hub.yaml:9:15: merge.key_groups: expected a whole number, got "many"`,
		"hub.yaml:10:17: merge.edge_timeout: -1s is negative",
		`hub.yaml:11:14: log.level: unknown value "verbose"`,
		`hub.yaml:11:31: log.format: unknown value "xml"`,
		"hub.yaml:12:40: auth.api_token_file: auth.api_token is also set (from hub.yaml:12:19)",
		"hub.yaml:13:13: pipelines[0]: cannot read pipeline /nonexistent/p.yaml",
		"hub.yaml:13:34: pipelines[1]: /nonexistent/p.yaml is listed twice (also item 1)",
		`hub.yaml:14:1: unknown field "bogus"`,
		"env RUNNEL_HUB_COMMIT_INTERVAL:",
		"env RUNNEL_HUB_KEY_GROUP: unknown setting (did you mean RUNNEL_HUB_KEY_GROUPS?)",
		"env RUNNEL_HUB_MAX_FUTURE: must be greater than 0, got 0s",
		"flag --retention: must be greater than 0, got 0s",
		"flag --nope: unknown flag",
		`unexpected argument "stray.yaml" (did you mean --config stray.yaml?)`,
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, w)
		}
		if !found {
			t.Errorf("missing %q in:\n%s", w, err)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(lines), len(want), err)
	}
	if strings.Contains(err.Error(), "abc") {
		t.Error("the API token is echoed")
	}
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEdgeTokensFile(t *testing.T) {
	good := writeFile(t, "tokens", "# comment\n\ngw-1 0123456789abcdef0\n  gw-2\t0123456789abcdef1  \n")
	c, err := loadData("", "", []string{"--edge-tokens-file", good}, []string{"RUNNEL_HUB_API_TOKEN=reader-token-0123"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Auth.EdgeTokens, map[string]string{"gw-1": "0123456789abcdef0", "gw-2": "0123456789abcdef1"}) || c.Auth.APIToken != "reader-token-0123" {
		t.Errorf("tokens: %+v", c.Auth)
	}
	bad := writeFile(t, "tokens", "gw-1 0123456789abcdef0\ngw-1 0123456789abcdef1\ngw-2 0123456789abcdef0\ngw/3 0123456789abcdef3\ngw-4\ngw-5 short\n")
	_, err = loadData("", "", []string{"--edge-tokens-file", bad}, nil)
	for _, w := range []string{
		bad + ":2:1: edge gw-1 has a token already (line 1)",
		bad + ":3:1: edge gw-2 has the token of line 1",
		bad + `:4:1: edge id "gw/3"`,
		bad + ":5:1: expected 'edge-id token', got 1 fields",
		bad + ":6:1: edge gw-5: the token is 5 characters",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
		t.Error("a token is echoed")
	}
	_, err = loadData("", "", []string{"--edge-tokens-file", good, "--api-token", "0123456789abcdef1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "also edge gw-2's token") {
		t.Errorf("API token = edge token: %v", err)
	}
}

func TestPlaintextRules(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for valid
	}{
		{nil, ""},
		{[]string{"--grpc-addr", "[::1]:7443", "--http-addr", "localhost:7080"}, ""},
		{[]string{"--grpc-addr", ":7443"}, `flag --grpc-addr: :7443 is not a loopback address`},
		{[]string{"--http-addr", "10.0.0.1:80"}, `flag --http-addr: 10.0.0.1:80 is not a loopback address`},
		{[]string{"--grpc-addr", ":7443", "--insecure"}, ""},
		{[]string{"--grpc-addr", "127.0.0.1:7080"}, "same address as http.addr"},
		{[]string{"--tls-key-file", "/nonexistent/k.pem"}, "a private key without tls.cert_file"},
	} {
		_, err := loadData("", "", tc.args, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestFleetSettings: fleet.enabled, fleet.tick and fleet.edge_metrics
// load from every source (edge_metrics auto by default), and a tick out
// of its range or an unknown edge_metrics is refused.
func TestFleetSettings(t *testing.T) {
	c, err := loadData("hub.yaml", "", nil, nil)
	if err != nil || c.Fleet.EdgeMetrics != EdgeMetricsAuto {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = loadData("hub.yaml", "fleet: {enabled: false, tick: 250ms, edge_metrics: never}\n", nil, nil)
	if err != nil || c.Fleet.Enabled || c.Fleet.Tick != 250*time.Millisecond || c.Fleet.EdgeMetrics != EdgeMetricsNever {
		t.Fatalf("from the file: %+v %v", c, err)
	}
	c, err = loadData("", "", []string{"--fleet-tick", "2s", "--fleet-edge-metrics", "always"}, []string{"RUNNEL_HUB_FLEET_ENABLED=false"})
	if err != nil || c.Fleet.Enabled || c.Fleet.Tick != 2*time.Second || c.Fleet.EdgeMetrics != EdgeMetricsAlways {
		t.Fatalf("from flags and a variable: %+v %v", c, err)
	}
	c, err = loadData("", "", nil, []string{"RUNNEL_HUB_FLEET_EDGE_METRICS=never"})
	if err != nil || c.Fleet.EdgeMetrics != EdgeMetricsNever {
		t.Fatalf("from the variable: %+v %v", c, err)
	}
	for _, tc := range []struct{ file, flag, want string }{
		{"fleet: {tick: 2m}\n", "", "hub.yaml:1:15: fleet.tick: 2m is out of range; must be 10ms to 1m"},
		{"", "5ms", "flag --fleet-tick: 5ms is out of range; must be 10ms to 1m"},
		{"fleet: {enabled: maybe}\n", "", "hub.yaml:1:18: fleet.enabled:"},
		{"fleet: {edge_metrics: yes}\n", "", "hub.yaml:1:23: fleet.edge_metrics:"},
	} {
		var args []string
		if tc.flag != "" {
			args = []string{"--fleet-tick", tc.flag}
		}
		_, err := loadData("hub.yaml", tc.file, args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: %v, want %q", tc.file, tc.flag, err, tc.want)
		}
	}
}

// TestClientAuthSettings: tls.client_auth and tls.client_ca_file load,
// and every contradiction between them, the server certificate and the
// CA file is listed at once.
func TestClientAuthSettings(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadData("hub.yaml", "", nil, nil)
	if err != nil || c.TLS.ClientAuth != ClientAuthNone || c.TLS.ClientCAFile != "" {
		t.Fatalf("defaults: %+v %v", c.TLS, err)
	}
	c, err = loadData("", "", []string{"--tls-cert-file", ca.Cert, "--tls-key-file", ca.Key, "--tls-client-ca-file", ca.CA},
		[]string{"RUNNEL_HUB_TLS_CLIENT_AUTH=require"})
	if err != nil || c.TLS.ClientAuth != ClientAuthRequire || c.TLS.ClientCAFile != ca.CA {
		t.Fatalf("require: %+v %v", c.TLS, err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--tls-client-auth", "optional"}, []string{
			"flag --tls-client-auth: optional needs tls.client_ca_file",
		}},
		{[]string{"--tls-client-auth", "optional", "--tls-client-ca-file", ca.CA}, []string{
			"flag --tls-client-auth: optional needs TLS: set tls.cert_file and tls.key_file",
		}},
		{[]string{"--tls-cert-file", ca.Cert, "--tls-key-file", ca.Key, "--tls-client-ca-file", ca.CA}, []string{
			"flag --tls-client-ca-file: has no effect with tls.client_auth none",
		}},
		{[]string{"--tls-cert-file", ca.Cert, "--tls-key-file", ca.Key, "--tls-client-auth", "require", "--tls-client-ca-file", ca.Key}, []string{
			"flag --tls-client-ca-file: " + ca.Key + " holds no PEM certificate",
		}},
		{[]string{"--tls-cert-file", ca.Cert, "--tls-key-file", ca.Key, "--tls-client-auth", "always", "--tls-client-ca-file", dir + "/missing.pem"}, []string{
			`flag --tls-client-auth: unknown value "always"`,
			"flag --tls-client-ca-file: cannot read " + dir + "/missing.pem",
		}},
	} {
		_, err := loadData("", "", tc.args, nil)
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
}
