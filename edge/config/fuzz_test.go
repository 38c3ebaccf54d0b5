package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/settings"
)

// FuzzLoad: Load never panics on any config file, and returns either a
// Config that passes Validate or an *Error matching ErrInvalid.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(table.ExampleYAML()))
	f.Add([]byte(docsBadFile))
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("a: &a [*a]\nbroker: &b {tls: *b}\n"))
	f.Add([]byte("pipelines: [&p x, *p]\n"))
	f.Add([]byte("broker: {reconnect: {min: 1d, max: 1ms}}\ndisk_cap: {bytes: 1KiB}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := load("fuzz.yaml", nil, nil, func() (string, error) { return "gw-fuzz", nil },
			func(string) ([]byte, error) { return data, nil })
		checkResult(t, c, err)
	})
}

// FuzzLoadSources fuzzes one flag and one variable next to a valid file,
// so that the fuzzer spends its time in the value parsers and the checks
// across settings rather than in YAML syntax.
func FuzzLoadSources(f *testing.F) {
	f.Add("checkpoint.interval", "1m", "RUNNEL_DISK_CAP_BYTES", "1GiB", "--broker-url", "mqtt://b:1883")
	f.Add("broker.reconnect.min", "1d", "RUNNEL_BROKER_RECONNECT_MAX", "1ms", "--http-addr", ":1883")
	f.Add("pipelines", "[a, a]", "RUNNEL_PIPELINES", ",", "--pipeline", "[")
	f.Add("broker.tls.cert_file", "x", "RUNNEL_BROKER_URL", "mqtts://u:p@h", "--broker-tls-insecure-skip-verify", "")
	f.Add("log", "x", "RUNNEL_CONFIG", "", "---x", "--")
	f.Fuzz(func(t *testing.T, path, fileVal, env, envVal, flagName, flagVal string) {
		data := settings.Nested(path, "'"+strings.ReplaceAll(fileVal, "'", "''")+"'") + "\n"
		args := []string{flagName + "=" + flagVal, flagName, flagVal}
		c, err := load("fuzz.yaml", args, []string{env + "=" + envVal}, func() (string, error) { return "gw-fuzz", nil },
			func(string) ([]byte, error) { return []byte(data), nil })
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		checkResult(t, c, err)
	})
}

// FuzzArgs: any command line (one argument a line) is parsed without
// panicking or looping, and gives a valid Config, flag.ErrHelp or an *Error.
func FuzzArgs(f *testing.F) {
	f.Add("--edge-id\ngw\n--pipeline\na/*.yaml")
	f.Add("---x\n--\n--nope\nvalue\n-config=\nstray")
	f.Add("--broker-tls-insecure-skip-verify\n--broker-url=mqtts://b\n-log-level=warn")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := loadData("", "", strings.Split(text, "\n"), nil)
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		checkResult(t, c, err)
	})
}

func checkResult(t *testing.T, c *Config, err error) {
	t.Helper()
	if err != nil {
		if c != nil {
			t.Fatal("both a Config and an error")
		}
		var e *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) || len(e.Problems) == 0 {
			t.Fatalf("error is not a non-empty *Error matching ErrInvalid: %T %v", err, err)
		}
		_ = err.Error()
		return
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Load returned a Config that Validate refuses: %v\n%+v", err, c)
	}
	if c.EdgeID == "" || c.Broker.ClientID == "" {
		t.Fatalf("derived defaults missing: %+v", c)
	}
}
