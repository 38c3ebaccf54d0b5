// Package testduckdb runs SQL in DuckDB, the independent reader that the
// results archive's tests read Parquet files back with: the npm package
// @duckdb/node-api (a prebuilt DuckDB inside), run by Node.
//
// deploy/test/install-duckdb.sh (which deploy/test/install-deps.sh and so
// `make test` call) installs it into ~/.cache/runnel/duckdb, or
// RUNNEL_DUCKDB_DIR. A test that needs it is skipped when it is absent,
// unless RUNNEL_REQUIRE_SERVERS is set (make test sets it), in which case
// it fails: CI cannot go green by reading nothing back.
package testduckdb

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Dir returns where the package is installed.
func Dir() string {
	if d := os.Getenv("RUNNEL_DUCKDB_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "runnel", "duckdb")
}

// Require skips (or, with RUNNEL_REQUIRE_SERVERS set, fails) t when DuckDB
// or Node is missing.
func Require(t testing.TB) {
	t.Helper()
	_, nerr := exec.LookPath("node")
	_, perr := os.Stat(filepath.Join(Dir(), "node_modules", "@duckdb", "node-api", "package.json"))
	if nerr == nil && perr == nil {
		return
	}
	msg := "DuckDB for Node is not installed (run deploy/test/install-duckdb.sh)"
	if nerr != nil {
		msg = "node is not installed"
	}
	if os.Getenv("RUNNEL_REQUIRE_SERVERS") != "" {
		t.Fatalf("%s, and RUNNEL_REQUIRE_SERVERS is set", msg)
	}
	t.Skip(msg)
}

// script runs each statement of argv[2..] (argv[1] is the install dir) in one in-memory database and
// prints the rows of the last as JSON.
const script = `
const { DuckDBInstance } = require(process.argv[1] + '/node_modules/@duckdb/node-api');
(async () => {
  const db = await DuckDBInstance.create(':memory:');
  const conn = await db.connect();
  const stmts = process.argv.slice(2);
  let rows = [];
  for (const s of stmts) {
    const r = await conn.runAndReadAll(s);
    rows = r.getRowObjectsJson();
  }
  process.stdout.write(JSON.stringify(rows));
})().catch(e => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
`

// Query runs the statements in order in one in-memory DuckDB and returns
// the rows of the last, as JSON objects (DuckDB's JSON forms: BIGINT and
// timestamps as strings, DOUBLE as numbers or "NaN"/"Infinity").
func Query(t testing.TB, stmts ...string) []map[string]any {
	t.Helper()
	Require(t)
	cmd := exec.Command("node", append([]string{"-e", script, "--", Dir()}, stmts...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("duckdb: %v\n%s\nstatements: %q", err, errb.String(), stmts)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("duckdb: output: %v\n%s", err, out.String())
	}
	return rows
}
