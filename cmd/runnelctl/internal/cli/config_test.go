package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/fakehub"
)

// TestConnectionPrecedence: the hub address and the token come from the
// flag, else the environment, else the config file, else the default.
func TestConnectionPrecedence(t *testing.T) {
	h := fakehub.Start(t)
	h.Token = "tok-flag"
	dir := t.TempDir()
	cfg := writeFile(t, dir, "runnelctl.yaml", "hub: 127.0.0.1:1\ntoken_file: tok\n")
	writeFile(t, dir, "tok", "tok-file\n")

	r := newRunner(t, nil)
	r.env[EnvConfig] = cfg
	// The file's hub (port 1) is refused; the environment's wins over it.
	if res := r.run("version", "--timeout", "2s"); res.code != ExitError || !strings.Contains(res.stderr, "127.0.0.1:1") {
		t.Errorf("file's hub: exit %d, %s", res.code, res.stderr)
	}
	r.env[EnvHub] = h.Addr
	// The token of the file (relative to its directory) is sent, and refused.
	if res := r.run("version"); res.code != ExitPermission {
		t.Errorf("file's token: exit %d, %s", res.code, res.stderr)
	}
	r.env[EnvToken] = "tok-env"
	if res := r.run("version"); res.code != ExitPermission {
		t.Errorf("env token: exit %d, %s", res.code, res.stderr)
	}
	res := r.run("--token", "tok-flag", "version")
	if res.code != ExitOK || !strings.Contains(res.stdout, "at "+h.Addr) {
		t.Errorf("flag token: exit %d, %s%s", res.code, res.stdout, res.stderr)
	}
	// A flag's hub wins over the environment's.
	if res := r.run("--hub", "127.0.0.1:2", "--token", "tok-flag", "version", "--timeout", "2s"); res.code != ExitError || !strings.Contains(res.stderr, "127.0.0.1:2") {
		t.Errorf("flag hub: exit %d, %s", res.code, res.stderr)
	}
	var seen []string
	h.Do(func(h *fakehub.Hub) { seen = h.SeenTokens })
	if got := strings.Join(seen, ","); got != "tok-file,tok-env,tok-flag" {
		t.Errorf("tokens sent %s, want tok-file,tok-env,tok-flag", got)
	}
	// Nothing printed the token, refused or not.
	for _, tok := range []string{"tok-file", "tok-env", "tok-flag"} {
		for _, args := range [][]string{{"version"}, {"--token", tok, "get", "pipeline", "x"}, {"--token", tok, "--hub", "bad", "version"}} {
			res := r.run(args...)
			if strings.Contains(res.stdout+res.stderr, tok) {
				t.Errorf("%q printed the token: %s%s", args, res.stdout, res.stderr)
			}
		}
	}
}

// TestDefaultConfigFile: $XDG_CONFIG_HOME/runnel/runnelctl.yaml is read
// when no file is named, and its absence is no problem.
func TestDefaultConfigFile(t *testing.T) {
	h := fakehub.Start(t)
	dir := t.TempDir()
	r := newRunner(t, nil)
	r.env["XDG_CONFIG_HOME"] = dir
	if res := r.run("version", "--timeout", "2s"); res.code != ExitError || !strings.Contains(res.stderr, DefaultHub) {
		t.Errorf("no file: exit %d, %s", res.code, res.stderr)
	}
	if err := os.Mkdir(filepath.Join(dir, "runnel"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "runnel"), "runnelctl.yaml", "hub: "+h.Addr+"\n")
	if res := r.run("version"); res.code != ExitOK {
		t.Errorf("default file: exit %d, %s", res.code, res.stderr)
	}
}

// TestConfigProblems: every problem of every source at once, with the
// file's line and column; exit 2, and the hub is not called.
func TestConfigProblems(t *testing.T) {
	h := fakehub.Start(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "c.yaml", "hub: 127.0.0.1:7443\ntokn: x\ninsecure: maybe\nca_file: ca.pem\n")
	r := newRunner(t, nil)
	r.env[EnvInsecure] = "perhaps" // read as false: ca_file then is no conflict
	r.env[EnvToken] = "a"
	r.env[EnvTokenFile] = "/x"
	res := r.run("--config", cfg, "--hub", "nohost", "get", "pipelines")
	want := "runnelctl: connection settings:\n" +
		cfg + ":2:1: unknown field \"tokn\" (did you mean \"token\"? known fields: hub, token, token_file, ca_file, insecure)\n" +
		cfg + ":3:11: insecure: expected true or false\n" +
		"flag --hub: hub address \"nohost\" is not host:port (e.g. 127.0.0.1:7443)\n" +
		"env RUNNEL_TOKEN and RUNNEL_TOKEN_FILE are both set; give one\n" +
		"env RUNNEL_INSECURE: \"perhaps\" is not true or false\n"
	if res.code != ExitUsage || res.stderr != want {
		t.Errorf("exit %d, stderr\n%s\nwant\n%s", res.code, res.stderr, want)
	}
	if res := r.run("--config", filepath.Join(dir, "missing.yaml"), "version"); res.code != ExitUsage || !strings.Contains(res.stderr, "cannot read the config file") {
		t.Errorf("a named file that is missing: exit %d, %s", res.code, res.stderr)
	}
	ca := writeFile(t, dir, "ca.pem", "not a certificate")
	if res := r.run("--insecure", "--ca-file", ca, "version"); res.code != ExitUsage || !strings.Contains(res.stderr, "insecure and ca_file are both set") {
		t.Errorf("--insecure with --ca-file: exit %d, %s", res.code, res.stderr)
	}
	if len(h.Reqs) != 0 {
		t.Errorf("the hub was called")
	}
}

// TestTLSChoice: TLS for a CA file or a hub beyond loopback, plaintext
// for loopback or --insecure.
func TestTLSChoice(t *testing.T) {
	for _, tc := range []struct {
		args []string
		tls  bool
	}{
		{[]string{"--hub", "127.0.0.1:7443"}, false},
		{[]string{"--hub", "localhost:7443"}, false},
		{[]string{"--hub", "[::1]:7443"}, false},
		{[]string{"--hub", "hub.example:7443"}, true},
		{[]string{"--hub", "hub.example:7443", "--insecure"}, false},
		{[]string{"--hub", "127.0.0.1:7443", "--ca-file", "ca.pem"}, true},
	} {
		a := &app{env: Env{LookupEnv: func(string) (string, bool) { return "", false }, ReadFile: ReadFile}}
		a.root = a.rootCmd()
		if err := a.root.PersistentFlags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		c, err := a.resolve()
		if err != nil || c.tls != tc.tls {
			t.Errorf("%q: tls %v, want %v (%v)", tc.args, c != nil && c.tls, tc.tls, err)
		}
	}
}

// TestCompletion: the completion scripts, and names completed from the hub.
func TestCompletion(t *testing.T) {
	h := fakehub.Start(t)
	seed(h)
	r := newRunner(t, h)
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if res := r.run("completion", shell); res.code != ExitOK || !strings.Contains(res.stdout, "runnelctl") {
			t.Errorf("completion %s: exit %d", shell, res.code)
		}
	}
	res := r.run("__complete", "describe", "deployment", "pl")
	if res.code != ExitOK || !strings.HasPrefix(res.stdout, "plant-7\n:4\n") {
		t.Errorf("__complete: exit %d %q", res.code, res.stdout)
	}
	res = r.run("__complete", "rollout", "status", "")
	if !strings.HasPrefix(res.stdout, "co2-all\nplant-7\n:4\n") {
		t.Errorf("__complete rollout status: %q", res.stdout)
	}
}
