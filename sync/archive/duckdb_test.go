package archive_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/testduckdb"
	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/archive/archivetest"
)

// LiveFilesSQL and LatestSQL are the docs' queries (docs/object-storage.md,
// Results archive), with ROOT for the archive's root.
const (
	LiveFilesSQL = `SET VARIABLE files = (
  WITH latest AS (
    SELECT * FROM read_json('ROOT/pipeline=*/date=*/hour=*/_manifest/*.json', hive_partitioning = false)
    QUALIFY generation = max(generation) OVER (PARTITION BY pipeline, date, hour))
  SELECT list('ROOT/' || f.path) FROM (SELECT unnest(files) AS f FROM latest))`
	LatestSQL = `SELECT * FROM read_parquet(getvariable('files'), union_by_name = true, hive_partitioning = false)
QUALIFY row_number() OVER (PARTITION BY pipeline, class, key, window_start, window_end ORDER BY version DESC) = 1`
)

// TestDuckDBReadsTheArchive builds an archive (appends, late versions,
// compactions) in a directory and has DuckDB read it with the docs' SQL:
// its latest version of each window must be the log's.
func TestDuckDBReadsTheArchive(t *testing.T) {
	testduckdb.Require(t)
	dir := t.TempDir()
	st, err := archive.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lg, clk := archivetest.NewMemLog(), &clock{}
	staging := t.TempDir()
	rows := scenario(t, 3, lg, clk, func() *archive.Archiver {
		a, err := archive.New(options(st, lg, staging, clk))
		if err != nil {
			t.Fatal(err)
		}
		return a
	})
	check(t, st, rows)

	// The latest version per window, as the log has it.
	schemas := map[uint64]*archive.Schema{temps.ID(): temps, flow.ID(): flow}
	want := map[string]archive.Record{}
	for _, r := range rows {
		rec, _ := archive.RecordOf(schemas[r.Schema], &r)
		id := fmt.Sprintf("%s/%d/%s/%d/%d", rec.Pipeline, rec.Class, rec.Key, rec.Start, rec.End)
		if w, ok := want[id]; !ok || rec.Version > w.Version {
			want[id] = rec
		}
	}
	sql := strings.ReplaceAll(LatestSQL, "SELECT *", `SELECT pipeline, class, key, epoch_ms(window_start) AS start_ms, epoch_ms(window_end) AS end_ms,
  version, edges, epoch_ms(emitted_at) AS emitted_ms, revisions, readings, avg_temp, agg_version, total, sites, device, line, site`)
	got := testduckdb.Query(t, strings.ReplaceAll(LiveFilesSQL, "ROOT", dir), sql)
	if len(got) != len(want) {
		t.Fatalf("DuckDB reads %d windows, the log has %d", len(got), len(want))
	}
	for _, g := range got {
		id := fmt.Sprintf("%v/%v/%v/%v/%v", g["pipeline"], g["class"], g["key"], g["start_ms"], g["end_ms"])
		w, ok := want[id]
		if !ok {
			t.Fatalf("DuckDB reads window %s, which the log does not have", id)
		}
		if fmt.Sprint(g["version"]) != fmt.Sprint(w.Version) || fmt.Sprint(g["edges"]) != fmt.Sprint(w.Edges) || fmt.Sprint(g["emitted_ms"]) != fmt.Sprint(w.Emitted) {
			t.Errorf("%s: DuckDB has version/edges/emitted %v/%v/%v, the log %d/%d/%d", id, g["version"], g["edges"], g["emitted_ms"], w.Version, w.Edges, w.Emitted)
		}
		var names []string
		var fields []string
		if w.Pipeline == "temps" {
			names, fields = []string{"readings", "avg_temp", "agg_version"}, []string{"device", "line"}
		} else {
			names, fields = []string{"total", "sites"}, []string{"site"}
			if fmt.Sprint(g["revisions"]) != fmt.Sprint(revisionsJSON(w.Revisions)) {
				t.Errorf("%s: revisions %v, want %v", id, g["revisions"], w.Revisions)
			}
		}
		for i, f := range fields {
			if fmt.Sprint(g[f]) != w.Fields[i] {
				t.Errorf("%s: key field %s is %v in DuckDB, %q in the log", id, f, g[f], w.Fields[i])
			}
		}
		for i, n := range names {
			if !sameJSONValue(g[n], w.Values[i]) {
				t.Errorf("%s: %s is %v in DuckDB, %v in the log", id, n, g[n], w.Values[i])
			}
		}
	}
}

func revisionsJSON(rs []uint32) []any {
	out := []any{}
	for _, r := range rs {
		out = append(out, strconv.Itoa(int(r)))
	}
	return out
}

// sameJSONValue compares DuckDB's JSON rendering of a value with v.
func sameJSONValue(g any, v archive.Value) bool {
	switch v.Kind {
	case archive.Null:
		return g == nil
	case archive.Int:
		return fmt.Sprint(g) == strconv.FormatInt(v.Int, 10)
	}
	switch x := g.(type) {
	case float64:
		return x == v.Float
	case string:
		switch x {
		case "NaN":
			return math.IsNaN(v.Float)
		case "Infinity":
			return math.IsInf(v.Float, 1)
		case "-Infinity":
			return math.IsInf(v.Float, -1)
		}
	}
	return false
}
