package settings

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The machinery is tested on a table of its own, with a setting of every
// kind; edge/config and hub/config test their tables, rules and messages.

var errTest = errors.New("test: invalid configuration")

type level string

type testConfig struct {
	Name    string
	Dir     string
	Files   []string
	Secret  string
	On      bool
	N       int
	Every   time.Duration
	Size    int64
	Level   level
	Section struct {
		Addr  string
		Inner struct{ Wait time.Duration }
	}
}

var testTable = New(Table[testConfig]{
	Program:   "runnel-test",
	File:      "test.yaml",
	EnvPrefix: "T_",
	ConfigEnv: "T_CONFIG",
	Invalid:   errTest,
	Settings: []*Setting[testConfig]{
		{Path: "name", Flag: "name", Env: "T_NAME", Example: "x", Doc: "A name.",
			Value: String(func(c *testConfig) *string { return &c.Name }, OrEmpty(NonEmpty))},
		{Path: "dir", Flag: "dir", Env: "T_DIR", Default: "./data", Doc: "A directory.",
			Value: Path(func(c *testConfig) *string { return &c.Dir }, NonEmpty)},
		{Path: "files", Flag: "file", Env: "T_FILES", Example: "[a.yaml]", Doc: "Files.",
			Value: Paths(func(c *testConfig) *[]string { return &c.Files }, PathOrGlob)},
		{Path: "secret", Flag: "secret", Env: "T_SECRET", Secret: true, Example: `"..."`, Doc: "A secret.",
			Value: String(func(c *testConfig) *string { return &c.Secret }, nil)},
		{Path: "on", Flag: "on", Env: "T_ON", Default: "false", Doc: "A switch.",
			Value: Bool(func(c *testConfig) *bool { return &c.On })},
		{Path: "n", Flag: "n", Env: "T_N", Default: "3", Doc: "A number.",
			Value: Int(func(c *testConfig) *int { return &c.N }, 1, 10)},
		{Path: "every", Flag: "every", Env: "T_EVERY", Default: "1s", Doc: "A duration.",
			Value: Duration(func(c *testConfig) *time.Duration { return &c.Every }, Positive)},
		{Path: "size", Flag: "size", Env: "T_SIZE", Default: "1MiB", Doc: "A size.",
			Value: Size(func(c *testConfig) *int64 { return &c.Size }, nil)},
		{Path: "level", Flag: "level", Env: "T_LEVEL", Default: "info", Doc: "A level.",
			Value: Enum(func(c *testConfig) *level { return &c.Level }, "info", "debug", "warn")},
		{Path: "section.addr", Flag: "section-addr", Env: "T_SECTION_ADDR", Default: "127.0.0.1:1", Doc: "An address.",
			Value: String(func(c *testConfig) *string { return &c.Section.Addr }, ListenAddr("127.0.0.1:1"))},
		{Path: "section.inner.wait", Flag: "section-inner-wait", Env: "T_SECTION_INNER_WAIT", Default: "250ms", Doc: "A wait.",
			Value: Duration(func(c *testConfig) *time.Duration { return &c.Section.Inner.Wait }, Between(time.Millisecond, time.Minute))},
	},
})

// loadTest loads with data as the file's contents, and returns the
// config or the problems.
func loadTest(file, data string, args, environ []string) (*testConfig, error) {
	c, ch, err := testTable.Load(file, args, environ, func(string) ([]byte, error) { return []byte(data), nil })
	if err != nil {
		return nil, err
	}
	if err := ch.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

func TestDefaults(t *testing.T) {
	c, err := loadTest("", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := testConfig{Dir: "./data", N: 3, Every: time.Second, Size: 1 << 20, Level: "info"}
	want.Section.Addr, want.Section.Inner.Wait = "127.0.0.1:1", 250*time.Millisecond
	if fmt.Sprint(*c) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", *c, want)
	}
	if err := testTable.Validate(c).Err(); err != nil {
		t.Errorf("Validate of the defaults: %v", err)
	}
	// The example file loads as the defaults.
	ex, err := loadTest("test.yaml", testTable.ExampleYAML(), nil, nil)
	if err != nil || fmt.Sprint(*ex) != fmt.Sprint(want) {
		t.Errorf("example %v:\n%s\n%+v", err, testTable.ExampleYAML(), ex)
	}
}

// TestPrecedence sets a setting of every kind in every combination of
// the three sources: flag > env > file > default.
func TestPrecedence(t *testing.T) {
	type vals struct{ file, env, flag string }
	for _, tc := range []struct {
		path string
		in   vals
		get  func(*testConfig) any
		want vals
	}{
		{"name", vals{"f", "e", "g"}, func(c *testConfig) any { return c.Name }, vals{"f", "e", "g"}},
		{"dir", vals{"/f", "/e", "/g"}, func(c *testConfig) any { return c.Dir }, vals{"/f", "/e", "/g"}},
		{"files", vals{"[/f, /f2]", "/e,/e2", "/g,/g2"}, func(c *testConfig) any { return c.Files }, vals{"[/f /f2]", "[/e /e2]", "[/g /g2]"}},
		{"on", vals{"true", "false", "true"}, func(c *testConfig) any { return c.On }, vals{"true", "false", "true"}},
		{"n", vals{"4", "5", "6"}, func(c *testConfig) any { return c.N }, vals{"4", "5", "6"}},
		{"every", vals{"5s", "1m30s", "1d"}, func(c *testConfig) any { return c.Every }, vals{"5s", "1m30s", "24h0m0s"}},
		{"size", vals{"1KiB", "2MB", "4096"}, func(c *testConfig) any { return c.Size }, vals{"1024", "2000000", "4096"}},
		{"level", vals{"debug", "warn", "info"}, func(c *testConfig) any { return c.Level }, vals{"debug", "warn", "info"}},
		{"section.inner.wait", vals{"1ms", "2ms", "3ms"}, func(c *testConfig) any { return c.Section.Inner.Wait }, vals{"1ms", "2ms", "3ms"}},
	} {
		st := testTable.Lookup(tc.path)
		for mask := range 8 {
			file, env, flg := mask&1 != 0, mask&2 != 0, mask&4 != 0
			t.Run(fmt.Sprintf("%s/file=%v,env=%v,flag=%v", tc.path, file, env, flg), func(t *testing.T) {
				def, _ := loadTest("", "", nil, nil)
				want := fmt.Sprint(tc.get(def))
				var path, data string
				var environ, args []string
				if file {
					path, data, want = "test.yaml", Nested(tc.path, tc.in.file)+"\n", tc.want.file
				}
				if env {
					environ, want = []string{st.Env + "=" + tc.in.env}, tc.want.env
				}
				if flg {
					for _, v := range strings.Split(tc.in.flag, ",") {
						args = append(args, "--"+st.Flag+"="+v)
					}
					want = tc.want.flag
				}
				c, err := loadTest(path, data, args, environ)
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

// TestProblems pins the machinery's messages and their order: the file's
// problems by position, then variables by name, then flags in command-line
// order, then the rest.
func TestProblems(t *testing.T) {
	file := `n: 11
section:
  adr: x
  inner: {wait: 2m}
levl: debug
every: [1s]
files: [a.yaml, {x: 1}]
`
	_, err := loadTest("test.yaml", file,
		[]string{"--size=64mb", "--nope", "x", "--on", "--section-inner-wait=1", "stray", "--", "after"},
		[]string{"T_SIZE=-1", "T_LEVL=debug", "T_FILES=a,,b", "T_OTHER=1", "OTHER=1"})
	want := strings.Join([]string{
		"test.yaml:1:4: n: 11 is out of range; must be 1 to 10",
		`test.yaml:3:3: section: unknown field "adr" (did you mean "addr"?)`,
		"test.yaml:4:17: section.inner.wait: 2m is out of range; must be 1ms to 1m",
		`test.yaml:5:1: unknown field "levl" (did you mean "level"?)`,
		"test.yaml:6:8: every: expected a duration such as 1s, got a list",
		"test.yaml:7:17: files[1]: expected a path, got a mapping",
		"env T_FILES: item 2 of the comma-separated list is empty",
		"env T_LEVL: unknown setting (did you mean T_LEVEL?)",
		`env T_SIZE: invalid size "-1": must not be negative`,
		`flag --size: invalid size "64mb": unknown unit "mb" (did you mean MB? units are case-sensitive)`,
		"flag --nope: unknown flag",
		`flag --section-inner-wait: invalid duration "1": missing unit (write e.g. 1s or 1ms)`,
		`unexpected argument "stray" (settings are given as flags, such as --config test.yaml)`,
		`unexpected argument "after" after --`,
	}, "\n")
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, errTest) {
		t.Fatalf("not an *Error matching the table's Invalid: %T %v", err, err)
	}
	if err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}

func TestChecker(t *testing.T) {
	c, ch, err := testTable.Load("test.yaml", []string{"--n=5", "--secret=hunter2"}, nil,
		func(string) ([]byte, error) { return []byte("every: 2s\nn: 4\n"), nil })
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Loaded() || !ch.IsSet("every") || !ch.IsSet("n") || ch.IsSet("size") {
		t.Error("sources")
	}
	for path, want := range map[string]string{
		"every": "every (2s, from test.yaml:1:8)", "n": "n (5, from flag --n)", "size": "size (1MiB, the default)", "secret": "secret (set, from flag --secret)",
	} {
		if got := ch.Show(path); got != want {
			t.Errorf("Show(%s) = %q, want %q", path, got, want)
		}
	}
	if got := ch.Blame("size", "every", "n"); got != "every" {
		t.Errorf("Blame = %s", got)
	}
	ch.Add("every", "too slow for %s", ch.Show("n"))
	ch.Add("size", "at no source")
	if want := "test.yaml:1:8: every: too slow for n (5, from flag --n)\nsize: at no source"; ch.Err() == nil || ch.Err().Error() != want {
		t.Errorf("got  %v\nwant %s", ch.Err(), want)
	}
	_ = c

	// From Validate, problems name the path, and values have no origin.
	v := testTable.Validate(&testConfig{})
	if got := v.Show("every"); got != "every (0s)" {
		t.Errorf("Show from Validate: %q", got)
	}
	want := "dir: empty\nn: 0 is out of range; must be 1 to 10\nevery: must be greater than 0, got 0s\n" +
		`level: unknown value ""; use info, debug or warn` + "\n" +
		"section.addr: empty; expected host:port such as 127.0.0.1:1\nsection.inner.wait: 0s is out of range; must be 1ms to 1m"
	if err := v.Err(); err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
	if v.OK("n") || !v.OK("size") {
		t.Error("OK does not follow the problems")
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		if _, _, err := testTable.Load("", []string{"--n=1", arg, "--bogus"}, nil, ReadFile); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: got %v, want flag.ErrHelp", arg, err)
		}
	}
}

func TestUsageAndMarkdown(t *testing.T) {
	var b strings.Builder
	testTable.Usage(&b, "Intro.\n\n")
	for _, want := range []string{
		"Usage: runnel-test [flags]\n\nIntro.\n\n  --config PATH\n        env T_CONFIG; default none\n",
		"  --file PATH (repeatable)\n        env T_FILES, yaml files\n        Files.\n",
		"  --on[=true|false]\n", "  --size SIZE\n", "  --level info|debug|warn\n", "  --every DURATION\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	testTable.Markdown(&b)
	for _, want := range []string{
		"## Settings\n\n### Top level\n\n| YAML | flag | environment | type | default | |\n",
		"| `size` | `--size` | `T_SIZE` | size | `1MiB` | A size. |\n",
		"| `level` | `--level` | `T_LEVEL` | `info` \\| `debug` \\| `warn` | `info` | A level. |\n",
		"\n### section\n\n", "section:\n  addr: 127.0.0.1:1\n  inner:\n    wait: 250ms\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

func TestNewRefusesDuplicates(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	row := func() *Setting[testConfig] {
		return &Setting[testConfig]{Path: "n", Flag: "n", Env: "T_N", Value: Int(func(c *testConfig) *int { return &c.N }, 1, 2)}
	}
	New(Table[testConfig]{Settings: []*Setting[testConfig]{row(), row()}})
}

func TestSameListenAddr(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:80", "127.0.0.1:80", true},
		{":80", "127.0.0.1:80", true},
		{"[::]:80", "10.0.0.1:80", true},
		{"127.0.0.1:80", "127.0.0.2:80", false},
		{":0", ":0", false},
		{"x", "x", false},
	} {
		if got := SameListenAddr(tc.a, tc.b); got != tc.want {
			t.Errorf("SameListenAddr(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:9464", true},
		{"127.1.2.3:80", true},
		{"[::1]:80", true},
		{"localhost:1883", true},
		{"LocalHost:1883", true},
		{":1883", false}, // every interface
		{"0.0.0.0:1883", false},
		{"[::]:1883", false},
		{"192.168.1.20:1883", false},
		{"[fe80::1]:80", false},
		{"gateway.local:1883", false},
		{"localhost.example.com:80", false},
		{"127.0.0.1", false}, // not host:port
		{"", false},
	} {
		if got := IsLoopbackAddr(tc.addr); got != tc.want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}
