package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/settings"
)

// TestBadConfigs is datadriven: every testdata/bad/NAME.yaml is a config
// file with mistakes, NAME.env (optional) the environment, one VAR=value
// a line, and NAME.args (optional) the command line, one argument a line.
// NAME.golden holds the exact problem list Load returns for the three
// together. Run with -update to rewrite the goldens after a deliberate
// message change, then read the diff.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad configs found: %v", err)
	}
	for _, f := range files {
		base := strings.TrimSuffix(f, ".yaml")
		t.Run(filepath.Base(base), func(t *testing.T) {
			args, environ := readLines(t, base+".args"), readLines(t, base+".env")
			c, err := load(f, args, environ, func() (string, error) { return "gw-test", nil }, settings.ReadFile)
			if err == nil {
				t.Fatalf("Load accepted a bad config: %+v", c)
			}
			if c != nil {
				t.Error("both a Config and an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid: %v", err)
			}
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("error is not an *Error: %T %v", err, err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("a password is in the message:\n%v", err)
			}
			checkGolden(t, base+".golden", err.Error()+"\n")
		})
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		out = append(out, line)
	}
	return out
}
