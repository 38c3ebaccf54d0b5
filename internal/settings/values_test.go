package settings

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"64MiB", 64 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"1.5GiB", 3 << 29, ""},
		{"2TB", 2e12, ""},
		{"10 MB", 10e6, ""},
		{"512B", 512, ""},
		{" 1KiB ", 1024, ""},
		{"1.5B", 0, `invalid size "1.5B": not a whole number of bytes`},
		{"64mb", 0, `invalid size "64mb": unknown unit "mb" (did you mean MB? units are case-sensitive)`},
		{"64M", 0, `invalid size "64M": unknown unit "M"; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB`},
		{"-1", 0, `invalid size "-1": must not be negative`},
		{"", 0, "empty; expected a size such as 64MiB"},
		{"MiB", 0, `invalid size "MiB": expected a number such as 64MiB`},
		{"1.2.3MiB", 0, `invalid size "1.2.3MiB": expected a number such as 64MiB`},
		{"9999999TiB", 0, `invalid size "9999999TiB": too large`},
	} {
		got, err := ParseBytes(tc.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tc.want || gotErr != tc.err {
			t.Errorf("ParseBytes(%q) = %d, %q; want %d, %q", tc.in, got, gotErr, tc.want, tc.err)
		}
	}
	for n, want := range map[int64]string{0: "0B", 1: "1B", 1024: "1KiB", 1536: "1536B", 64 << 20: "64MiB", 3 << 30: "3GiB", 1 << 40: "1TiB", 1e9: "1000000000B"} {
		if got := ShowBytes(n); got != want {
			t.Errorf("ShowBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestTooManyProblems(t *testing.T) {
	var b strings.Builder
	for i := range 150 {
		fmt.Fprintf(&b, "unknown_%d: x\n", i)
	}
	_, err := loadTest("test.yaml", b.String(), nil, nil)
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != MaxProblems+1 {
		t.Fatalf("%d problems: %v", len(e.Problems), err)
	}
	if last := e.Problems[MaxProblems].Error(); last != "50 more problems not shown" {
		t.Errorf("last problem %q", last)
	}
}

// FuzzParseBytes: what parses is non-negative and reads back the same
// after showBytes.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"0", "64MiB", "1.5GB", "1KiB", "9223372036854775807", "1e3", "-1", "1.0000000001KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		back, err := ParseBytes(ShowBytes(n))
		if err != nil || back != n {
			t.Fatalf("ParseBytes(%q) = %d; showBytes %q reads back as %d, %v", s, n, ShowBytes(n), back, err)
		}
	})
}

// FuzzLoad: Load never panics on any config file, flag or variable, and
// gives either a config that passes Validate or an *Error matching the
// table's Invalid (or flag.ErrHelp).
func FuzzLoad(f *testing.F) {
	f.Add([]byte(testTable.ExampleYAML()), "n", "4", "--size", "1KiB")
	f.Add([]byte("a: &a [*a]\nsection: &b {inner: *b}\n"), "T_FILES", ",", "--file", "[")
	f.Add([]byte("files: [&p x, *p]\n---\nx: 1\n"), "T_CONFIG", "", "---x", "--")
	f.Add([]byte("section:\n\tinner: 1\n<<: {n: 1}\nn: 1\nn: 2\n"), "T_LEVEL", "warning", "-on", "maybe")
	f.Fuzz(func(t *testing.T, data []byte, env, envVal, flagName, flagVal string) {
		args := []string{flagName + "=" + flagVal, flagName, flagVal}
		c, ch, err := testTable.Load("fuzz.yaml", args, []string{env + "=" + envVal, "T_" + env + "=" + envVal},
			func(string) ([]byte, error) { return data, nil })
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if err := ch.Err(); err != nil {
			var e *Error
			if !errors.Is(err, errTest) || !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("not a non-empty *Error matching Invalid: %T %v", err, err)
			}
			return
		}
		if err := testTable.Validate(c).Err(); err != nil {
			t.Fatalf("Load gave a config that Validate refuses: %v\n%+v", err, c)
		}
	})
}
