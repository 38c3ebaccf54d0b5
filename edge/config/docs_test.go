package config

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/settings/settingstest"
)

var update = flag.Bool("update", false, "rewrite docs/edge-config.md and the golden files under testdata/")

const docsPath = "../../docs/edge-config.md"

// TestDocsUpToDate fails when docs/edge-config.md is not what the settings
// table generates; -update rewrites it. The docs cannot drift from the
// code, because they are the code's output.
func TestDocsUpToDate(t *testing.T) {
	checkGolden(t, docsPath, markdown(t))
}

// TestUsage pins the --help text, so that a change to it shows in review.
func TestUsage(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	checkGolden(t, "testdata/usage.golden", b.String())
	for _, st := range table.Settings {
		if !strings.Contains(b.String(), "--"+st.Flag) || !strings.Contains(b.String(), st.Env) {
			t.Errorf("usage misses %s", st.Path)
		}
	}
}

// TestDocsExampleLoads loads the complete config file the docs show and
// expects exactly the defaults: the example and the table agree.
func TestDocsExampleLoads(t *testing.T) {
	example := table.ExampleYAML()
	got, err := loadData("edge.yaml", example, nil, nil)
	if err != nil {
		t.Fatalf("the docs' example does not load:\n%v\n%s", err, example)
	}
	want, err := loadData("", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the docs' example is not the defaults:\ngot  %+v\nwant %+v", got, want)
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	settingstest.Golden(t, path, got, *update)
}

const docsIntro = `# Edge configuration

<!-- Generated from the settings table in edge/config/settings.go by
     go test ./edge/config -run TestDocsUpToDate -update
     Do not edit by hand: the test fails when this file and the table differ. -->

` + "`runnel-edge`" + ` runs unattended on gateways, so its configuration is
checked in full before anything starts, and every setting can come from
wherever a deployment finds it easiest to set: a YAML file, an environment
variable or a command-line flag.

## Where settings come from

    runnel-edge --config /etc/runnel/edge.yaml --log-level debug

- **Precedence:** a flag overrides an environment variable, which overrides the
  config file, which overrides the default. Every setting has a default, so no
  file is needed at all: the edge then starts the embedded MQTT broker on
  127.0.0.1:1883, keeps its data in ./runnel-data, names itself by the
  hostname and runs the built-in demo pipeline.
- **The config file** is named by ` + "`--config PATH`" + ` or ` + "`RUNNEL_CONFIG`" + `
  (an empty value: no file). It is one YAML document; an empty file is valid.
- **Environment variables** are read only when they start with ` + "`RUNNEL_`" + `.
  One that looks like a misspelt setting (` + "`RUNNEL_CHECKPOINT_INTERVL`" + `) is
  an error; other ` + "`RUNNEL_`" + ` variables are left to other tools. A variable
  that is set but empty counts as set: ` + "`RUNNEL_HTTP_ADDR=`" + ` turns the HTTP
  server off.
- **Flags** are ` + "`--name value`" + ` or ` + "`--name=value`" + `; booleans may be given
  bare (` + "`--broker-tls-insecure-skip-verify`" + `). A flag given twice keeps
  its last value, except ` + "`--pipeline`" + `, which collects them all.
- ` + "`--help`" + ` lists every setting, as below.

## Values

| type | syntax |
|---|---|
| duration | Go syntax plus ` + "`d`" + ` for days of 24h: ` + "`250ms`" + `, ` + "`1m30s`" + `, ` + "`1.5h`" + `, ` + "`2d`" + `. Whole milliseconds; never negative. |
| size | bytes, or a number and a unit: ` + "`64MiB`" + `, ` + "`1.5GB`" + `. Binary units ` + "`KiB MiB GiB TiB`" + ` and decimal ` + "`KB MB GB TB`" + `; units are case-sensitive. |
| bool | ` + "`true`" + ` or ` + "`false`" + `. |
| list | in YAML a list (a single value is a list of one); in the variable comma-separated; the flag repeated. |
| path | Relative paths in the config file are relative to the file's directory, so ` + "`/etc/runnel/edge.yaml`" + ` can say ` + "`pipelines/*.yaml`" + `. From flags, variables and defaults they are relative to the working directory. |

## When the config is wrong

The edge refuses to start and lists every problem at once, in the file, the
environment and the flags, each named by where it came from: the file by
line and column and the setting's path, a variable or flag by its name.
Unknown settings get a did-you-mean hint. The pipeline files the config
names are checked with it: their problems follow the config's, file by file
in the order of ` + "`pipelines`" + `, each at its line and column. For
example, with this edge.yaml

` + "```yaml\n" + docsBadFile + "```" + `

and ` + "`" + docsBadEnv + "`" + ` in the environment, ` + "`runnel-edge --config edge.yaml " + docsBadArgs + "`" + `
says:

`

// The example of a refused config in the docs; its output is Load's own.
const (
	docsBadFile = `broker:
  url: mqtt://broker.local:1883
  reconect: {max: 10s}
checkpoint:
  interval: 0s
ingest_log: {sync: fsync}
`
	docsBadEnv  = "RUNNEL_LOG_LEVEL=verbose"
	docsBadArgs = "--broker-receive-maximum 100000"
)

// markdown generates docs/edge-config.md from the table.
func markdown(t *testing.T) string {
	var b strings.Builder
	b.WriteString(docsIntro)
	_, err := loadData("edge.yaml", docsBadFile, strings.Fields(docsBadArgs), []string{docsBadEnv})
	if err == nil {
		t.Fatal("the docs' bad example loads")
	}
	b.WriteString("```\n" + err.Error() + "\n```\n\n")

	table.Markdown(&b)
	return b.String()
}

// loadData is load with the config file's contents given (when file is
// not ""), a fixed hostname, and no other files.
func loadData(file, data string, args, environ []string) (*Config, error) {
	return load(file, args, environ, func() (string, error) { return "gw-test", nil }, func(string) ([]byte, error) { return []byte(data), nil })
}
