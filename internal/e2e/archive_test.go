package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/internal/testduckdb"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/internal/tests3"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/objstore"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
	"github.com/runnel-io/runnel/window/aggregate"
)

const archiveSpec = `name: arch
source: {mqtt: {topic: "a/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1m}
aggregates:
  n: count()
  s: sum(v)
  hi: max(v)
  p50: quantile(v, 0.5)
`

// TestArchiveSurvivesHubKills runs a real runnel-hub archiving to a
// bucket of a real S3 server (versitygw; and, with fewer kills, to a
// directory) while an edge (the real uplink, an in-memory outbox) sends it
// windows and late corrections of them, and SIGKILLs the hub at random
// moments 24 times, restarting it each time. Afterwards every result
// version the hub's query API holds is in the archive exactly once,
// through the manifests, with the hub's values; no manifest names a
// missing or partial file; and DuckDB, reading the archive with the docs'
// SQL, has the query API's latest version of every window.
func TestArchiveSurvivesHubKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a hub 24 times")
	}
	t.Run("s3", func(t *testing.T) { testArchiveSurvivesHubKills(t, 24, true) })
	t.Run("dir", func(t *testing.T) { testArchiveSurvivesHubKills(t, 6, false) })
}

func testArchiveSurvivesHubKills(t *testing.T, kills int, s3 bool) {
	dir := t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-hub")
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const token = "archive-edge-token-0123456789"
	spec := write("arch.yaml", archiveSpec)
	tokens := write("tokens", "gw-1 "+token+"\n")
	// arch is where the archive's objects are as files: the directory, or
	// the bucket's prefix in versitygw's posix backend (DuckDB reads them
	// there: it has no S3 access here).
	arch := filepath.Join(dir, "archive")
	archURL := []string{"--archive-url", "file://" + arch}
	var store archive.Store
	if s3 {
		srv := tests3.Start(t)
		arch = filepath.Join(srv.Dir(), "runnel-test", "results")
		archURL = []string{"--archive-url", "s3://runnel-test/results", "--object-store-endpoint", srv.Endpoint(),
			"--object-store-region", "us-east-1", "--object-store-access-key-id", srv.AccessKey()}
		t.Setenv("RUNNEL_HUB_OBJECT_STORE_SECRET_ACCESS_KEY", srv.SecretKey())
		b, err := objstore.New(objstore.Config{URL: "s3://runnel-test/results", Endpoint: srv.Endpoint(), Region: "us-east-1",
			AccessKeyID: srv.AccessKey(), SecretAccessKey: srv.SecretKey()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		store = b
	}
	grpcAddr, httpAddr := freePort(t), freePort(t)
	hub := &testproc.Proc{Name: "hub", Args: append([]string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--pipeline", spec, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--edge-tokens-file", tokens,
		"--fleet-enabled=false", "--commit-interval", "5ms", "--edge-timeout", "1h",
		"--archive-flush-interval", "1s", "--archive-max-rows-per-file", "1000",
		"--archive-compaction-delay", "1m"}, archURL...)}
	hub.Start(t)
	defer func() { hub.Kill() }()
	hub.WaitLog(t, "runnel-hub: ready")

	p, err := operators.CompileYAML("arch.yaml", []byte(archiveSpec))
	if err != nil {
		t.Fatal(err)
	}
	ob := uplinktest.New()
	u, err := uplink.New(uplink.Config{EdgeID: "gw-1", Hub: grpcAddr, Token: token, Insecure: true,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, ob)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); u.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Windows over the last three hours (the oldest hours closed, so they
	// are compacted while the test runs), each sent whole again with more
	// values (a late correction: the next version) at random.
	rng := rand.New(rand.NewPCG(11, 12))
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixMilli()
	set := p.Aggregates
	type win struct {
		st      *aggregate.State
		version uint32
	}
	wins := map[string]*win{}
	in := aggregate.Input{Nums: make([]float64, set.NumInputs()), Hashes: make([]uint64, max(1, set.HashInputs()))}
	wm := base
	feed := func(n int) {
		var es []uplink.Entry
		for range n {
			dev := fmt.Sprintf("dev-%d", rng.IntN(8))
			start := base + int64(rng.IntN(180))*60_000
			if rng.IntN(4) > 0 { // mostly near the watermark
				start = wm - wm%60_000 + int64(rng.IntN(3)-1)*60_000
			}
			start = max(start, base)
			id := dev + "/" + strconv.FormatInt(start, 10)
			w := wins[id]
			if w == nil {
				w = &win{st: set.New()}
				wins[id] = w
			}
			for range 1 + rng.IntN(3) {
				for i := range in.Nums {
					in.Nums[i] = float64(rng.IntN(1000)) / 10
				}
				set.Add(w.st, &in)
			}
			w.version++
			key := append([]byte{'s', byte(len(dev))}, dev...)
			es = append(es, uplink.Entry{Pipeline: p.Name, Key: key, Start: start, End: start + 60_000, Version: w.version,
				State: set.AppendEncode(nil, w.st)})
		}
		wm = min(wm+int64(rng.IntN(4))*60_000, base+3*3600_000)
		es = append(es, uplink.Entry{Pipeline: p.Name, Marker: true, Watermark: wm})
		ob.Add(es...)
	}

	for k := range kills {
		until := time.Now().Add(time.Duration(50+rng.IntN(500)) * time.Millisecond)
		for time.Now().Before(until) {
			feed(20)
			time.Sleep(10 * time.Millisecond)
		}
		hub.Kill()
		hub.Start(t)
		if k%4 == 0 {
			hub.WaitLog(t, "runnel-hub: ready")
		}
	}
	hub.WaitLog(t, "runnel-hub: ready")
	// The end of the stream: every window emitted.
	ob.Add(uplink.Entry{Pipeline: p.Name, Marker: true, Watermark: base + 4*3600_000})
	select {
	case <-ob.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("the hub acked %d of the outbox's entries", ob.Acked())
	}
	// Every result the hub committed published: nothing pending, and no
	// work half done.
	var st archive.Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		st = archiveStatus(t, httpAddr)
		if st.Pending == 0 && st.Working == "" && st.Last > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("archive status after the stream ended: %+v\n%s", st, hub.Logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("archive after %d kills: %d results logged, %d rows in %d files, %d compactions", kills, st.Last, st.Totals.Rows, st.Totals.Files, st.Totals.Compactions)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := runnelv1.NewResultsClient(conn)
	all := queryAll(t, rc, p.Name, true)
	if store == nil {
		if store, err = archive.OpenDir(arch); err != nil {
			t.Fatal(err)
		}
	}
	got := readArchive(t, store)
	for id, r := range all {
		a, ok := got[id]
		if !ok {
			t.Fatalf("result %s (of %d) is not in the archive", id, len(all))
		}
		if !sameValues(r, a) {
			t.Fatalf("result %s: the hub has %v (edges %d, emitted %d), the archive %+v", id, r.Values.AsMap(), r.Edges, r.EmittedMs, a)
		}
		delete(got, id)
	}
	for id := range got {
		t.Fatalf("%s is in the archive, not in the hub", id)
	}
	if len(all) < 500 {
		t.Fatalf("only %d result versions: the test exercised too little", len(all))
	}
	t.Logf("%d result versions in the hub, each in the archive once", len(all))

	// DuckDB reads the latest version per window through the manifests.
	latest := queryAll(t, rc, p.Name, false)
	sql := strings.ReplaceAll(archiveLatestSQL, "SELECT *", `SELECT key, epoch_ms(window_start) AS start_ms, epoch_ms(window_end) AS end_ms, version, n, s, hi, p50`)
	rows := testduckdb.Query(t, strings.ReplaceAll(archiveFilesSQL, "ROOT", arch), sql)
	if len(rows) != len(latest) {
		t.Fatalf("DuckDB reads %d windows, the hub's query API has %d", len(rows), len(latest))
	}
	for _, row := range rows {
		id := fmt.Sprintf("%v/%v/%v/v%v", row["key"], row["start_ms"], row["end_ms"], row["version"])
		r, ok := latest[id]
		if !ok {
			t.Fatalf("DuckDB's latest %s is not the hub's", id)
		}
		v := r.Values.AsMap()
		for _, name := range []string{"n", "s", "hi", "p50"} {
			if fmt.Sprint(row[name]) != fmt.Sprint(v[name]) {
				t.Fatalf("%s: %s is %v in DuckDB, %v in the hub", id, name, row[name], v[name])
			}
		}
	}
}

// The docs' SQL (docs/object-storage.md, Results archive).
const (
	archiveFilesSQL = `SET VARIABLE files = (
  WITH latest AS (
    SELECT * FROM read_json('ROOT/pipeline=*/date=*/hour=*/_manifest/*.json', hive_partitioning = false)
    QUALIFY generation = max(generation) OVER (PARTITION BY pipeline, date, hour))
  SELECT list('ROOT/' || f.path) FROM (SELECT unnest(files) AS f FROM latest))`
	archiveLatestSQL = `SELECT * FROM read_parquet(getvariable('files'), union_by_name = true, hive_partitioning = false)
QUALIFY row_number() OVER (PARTITION BY pipeline, class, key, window_start, window_end ORDER BY version DESC) = 1`
)

func archiveStatus(t *testing.T, addr string) archive.Status {
	t.Helper()
	var st archive.Status
	resp, err := http.Get("http://" + addr + "/v1/archive/status")
	if err != nil {
		return st // restarting
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("archive status: %s: %s", resp.Status, b)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// queryAll returns the hub's results of pipeline by
// key/start/end/v<version>: every version, or the latest of each window.
func queryAll(t *testing.T, rc runnelv1.ResultsClient, pipeline string, allVersions bool) map[string]*runnelv1.Result {
	t.Helper()
	out := map[string]*runnelv1.Result{}
	req := &runnelv1.QueryResultsRequest{Pipeline: pipeline, Limit: 10000, AllVersions: allVersions}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := rc.QueryResults(ctx, req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Results {
			key, _ := json.Marshal(r.Key.AsMap())
			out[fmt.Sprintf("%s/%d/%d/v%d", key, r.WindowStart, r.WindowEnd, r.Version)] = r
		}
		if resp.NextPageToken == "" {
			return out
		}
		req.PageToken = resp.NextPageToken
	}
}

// readArchive reads every record through the manifests, failing on a
// missing or partial file and on a record twice.
func readArchive(t *testing.T, st archive.Store) map[string]archive.Record {
	t.Helper()
	ctx := context.Background()
	ms, err := archive.Live(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]archive.Record{}
	for _, m := range ms {
		for _, f := range m.Files {
			rc, err := st.Get(ctx, f.Path)
			if err != nil {
				t.Fatalf("the manifest of %s names %s: %v", m.Partition(), f.Path, err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if int64(len(b)) != f.Bytes {
				t.Fatalf("%s: %d bytes, its manifest says %d", f.Path, len(b), f.Bytes)
			}
			_, recs, err := archive.ReadFile(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			for _, r := range recs {
				id := fmt.Sprintf("%s/%d/%d/v%d", r.Key, r.Start, r.End, r.Version)
				if _, dup := out[id]; dup {
					t.Fatalf("%s is in the archive twice (again in %s)", id, f.Path)
				}
				out[id] = r
			}
		}
	}
	return out
}

// sameValues compares the hub's result (the API's JSON numbers) with the
// archive's record.
func sameValues(r *runnelv1.Result, a archive.Record) bool {
	if r.Edges != a.Edges || r.EmittedMs != a.Emitted {
		return false
	}
	v := r.Values.AsMap()
	for i, name := range []string{"n", "s", "hi", "p50"} {
		x := a.Values[i]
		var f float64
		switch x.Kind {
		case archive.Int:
			f = float64(x.Int)
		case archive.Float:
			f = x.Float
		default:
			if v[name] != nil {
				return false
			}
			continue
		}
		g, ok := v[name].(float64)
		if !ok || !(g == f || math.IsNaN(g) && math.IsNaN(f)) {
			return false
		}
	}
	return true
}
