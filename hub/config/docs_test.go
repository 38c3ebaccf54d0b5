package config

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/settings/settingstest"
)

var update = flag.Bool("update", false, "rewrite docs/hub-config.md and the golden files under testdata/")

const docsPath = "../../docs/hub-config.md"

// TestDocsUpToDate fails when docs/hub-config.md is not what the settings
// table generates; -update rewrites it.
func TestDocsUpToDate(t *testing.T) {
	checkGolden(t, docsPath, markdown(t))
}

// TestUsage pins the --help text.
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
// expects exactly the defaults.
func TestDocsExampleLoads(t *testing.T) {
	example := table.ExampleYAML()
	got, err := loadData("hub.yaml", example, nil, nil)
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

const docsIntro = `# Hub configuration

<!-- Generated from the settings table in hub/config/settings.go by
     go test ./hub/config -run TestDocsUpToDate -update
     Do not edit by hand: the test fails when this file and the table differ. -->

Every setting of ` + "`runnel-hub`" + ` can come from a YAML file, an environment
variable or a command-line flag. The REST and gRPC API it serves is in
[hub-api.md](hub-api.md).

## Where settings come from

    runnel-hub --config /etc/runnel/hub.yaml --log-level debug

- **Precedence:** a flag overrides an environment variable, which overrides the
  config file, which overrides the default. No file is needed: the hub then
  serves gRPC on 127.0.0.1:7443 and HTTP on 127.0.0.1:7080, keeps its data in
  ./runnel-hub-data and merges the built-in demo pipeline (the one
  ` + "`runnel-edge`" + ` runs when it has none).
- **The config file** is named by ` + "`--config PATH`" + ` or ` + "`RUNNEL_HUB_CONFIG`" + `
  (an empty value: no file). It is one YAML document; an empty file is valid.
- **Environment variables** are read only when they start with ` + "`RUNNEL_HUB_`" + `.
  One that looks like a misspelt setting is an error; others are ignored.
- **Flags** are ` + "`--name value`" + ` or ` + "`--name=value`" + `; booleans may be given
  bare (` + "`--insecure`" + `). A flag given twice keeps its last value, except
  ` + "`--pipeline`" + `, which collects them all.
- ` + "`--help`" + ` lists every setting, as below.

## TLS, plaintext and tokens

- With ` + "`tls.cert_file`" + ` and ` + "`tls.key_file`" + ` both listeners serve TLS.
- Without them the hub serves plaintext, which it accepts on its own only
  when both listeners are on loopback (the default): plaintext on a network
  address needs ` + "`insecure: true`" + `, and the hub logs a warning.
- Edges authenticate with a bearer token each, from ` + "`auth.edge_tokens_file`" + `:

      # edge-id  token (at least 16 characters: openssl rand -hex 32)
      gw-001     3f9c1d0e8b7a6f5e4d3c2b1a09f8e7d6
      gw-002     a1b2c3d4e5f60718293a4b5c6d7e8f90

  An edge may only send data under its own id. Without the file (and
  without client certificates) every edge is refused.
- Edges may authenticate with a TLS client certificate instead of, or
  beside, their token: ` + "`tls.client_auth: optional`" + ` (a certificate, a
  token, or both of the same edge) or ` + "`require`" + ` (edges need a
  certificate), verified against ` + "`tls.client_ca_file`" + `. The certificate's
  subject CN is the edge id (` + "`openssl req -subj /CN=gw-001`" + `), and any edge
  id a valid certificate of that CA names is accepted, whether the tokens file
  lists it or not: use a CA that signs edge certificates only. An edge
  certificate calls only its edge's uplink and control stream; a certificate
  and a token of two edges are refused. API clients need no certificate.
  Revocation is not checked: issue short-lived certificates (the edge
  reloads renewed files) or replace the CA. See [hub-api.md](hub-api.md).
- ` + "`auth.api_token`" + ` is the admin API token. When set, the read API (REST,
  SSE, gRPC Results, Health and Fleet) requires it or a token created with it
  through the Fleet API (roles viewer, operator, admin; see
  [hub-api.md](hub-api.md)); ` + "`/healthz`" + ` and ` + "`/metrics`" + ` stay open.
  Without it the read API is open and the Fleet API's changes are refused.

## Values

| type | syntax |
|---|---|
| duration | Go syntax plus ` + "`d`" + ` for days of 24h: ` + "`250ms`" + `, ` + "`1m30s`" + `, ` + "`7d`" + `. Whole milliseconds; never negative. |
| bool | ` + "`true`" + ` or ` + "`false`" + `. |
| list | in YAML a list (a single value is a list of one); in the variable comma-separated; the flag repeated. |
| path | Relative paths in the config file are relative to the file's directory. From flags, variables and defaults they are relative to the working directory. |

## When the config is wrong

The hub refuses to start and lists every problem at once, each named by
where it came from. The pipeline files the config names are checked with
it: their problems follow the config's, file by file in the order of
` + "`pipelines`" + `, each at its line and column. For example, with this
hub.yaml

` + "```yaml\n" + docsBadFile + "```" + `

and ` + "`" + docsBadEnv + "`" + ` in the environment, ` + "`runnel-hub --config hub.yaml " + docsBadArgs + "`" + `
says:

`

// The example of a refused config in the docs; its output is Load's own.
const (
	docsBadFile = `grpc:
  addr: 0.0.0.0:7443
merge:
  commit_interval: 0s
  retension: 30d
tls: {cert_file: hub.pem}
`
	docsBadEnv  = "RUNNEL_HUB_LOG_LEVEL=verbose"
	docsBadArgs = "--key-groups 0"
)

// markdown generates docs/hub-config.md from the table.
func markdown(t *testing.T) string {
	var b strings.Builder
	b.WriteString(docsIntro)
	_, err := loadData("hub.yaml", docsBadFile, strings.Fields(docsBadArgs), []string{docsBadEnv})
	if err == nil {
		t.Fatal("the docs' bad example loads")
	}
	b.WriteString("```\n" + err.Error() + "\n```\n\n")

	table.Markdown(&b)
	return b.String()
}

// loadData is load with the config file's contents given (when file is
// not "") and no other files.
func loadData(file, data string, args, environ []string) (*Config, error) {
	return load(file, args, environ, func(string) ([]byte, error) { return []byte(data), nil }, nil)
}
