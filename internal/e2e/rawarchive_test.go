package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/internal/tests3"
)

const rawSpec = `name: raw
source: {mqtt: {topic: "raw/+/r", qos: 1, topic_fields: {dev: 1}}}
event_time: {field: ts, unit: ms}
event_id: [dev, seq]
key: [dev]
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v)}
`

// TestRawArchiveSurvivesEdgeKills: a runnel-edge process with the raw
// archive lane on a bucket of a real S3 server (versitygw) reads a known
// stream through Mosquitto in small ingest-log segments and is SIGKILLed
// at random moments 20 times, restarted each time, while segments upload;
// half way, the S3 server is stopped while readings go on coming in (the
// edge takes them in while uploads fail), then started again.
// Afterwards the archive's manifests cover every position from 0 with no
// gap and none twice, and `runnel-edge replay --input s3://…/<edge>` over
// the archive alone counts every reading of the stream exactly once
// (redeliveries after the kills are in the log twice; the pipeline's
// event ids drop them, as on the edge) with the stream's sums.
func TestRawArchiveSurvivesEdgeKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills an edge 20 times")
	}
	dir, spec, mosq, srv := coldTierSetup(t)
	const store = "s3://runnel-test/lake"
	httpAddr := freePort(t)
	data := filepath.Join(dir, "gw")
	edge := &testproc.Proc{Name: "edge", Args: []string{filepath.Join(dir, "runnel-edge"), "run", "--pipeline", spec,
		"--data-dir", data, "--broker-url", mosq.Addr(), "--edge-id", "e1", "--checkpoint-interval", "50ms",
		"--http-addr", httpAddr, "--ingest-log-segment-size", "8KiB", "--disk-cap-bytes", "0",
		"--raw-archive-store", store, "--raw-archive-interval", "50ms"}}
	edge.Start(t)
	defer func() { edge.Kill() }()
	edge.WaitLog(t, "edge: ready")

	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	rng := rand.New(rand.NewPCG(21, 22))
	base := int64(1_767_225_600_000)
	type sums struct{ n, sum int64 }
	want := map[string]*sums{}
	seq := 0
	publish := func(n int) {
		for range n {
			dev := fmt.Sprintf("d%d", rng.IntN(3))
			v := rng.Int64N(100)
			pub.MustPublish("raw/"+dev+"/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":%d,"pad":"%040d"}`, seq, base+int64(seq)*7, v, seq), 1)
			seq++
			if want[dev] == nil {
				want[dev] = &sums{}
			}
			want[dev].n++
			want[dev].sum += v
		}
	}
	const kills = 20
	for k := range kills {
		if k == kills/2 {
			// An S3 outage: ingestion goes on, uploads fail and retry;
			// when the server is back, they resume.
			srv.Stop()
			in := `runnel_edge_records_in_total{pipeline="raw"}`
			before := scrape(httpAddr)[in]
			publish(300)
			waitMetric(t, httpAddr, in, func(v float64) bool { return v >= before+300 }, edge)
			waitMetric(t, httpAddr, "runnel_edge_raw_archive_failures_total", func(v float64) bool { return v > 0 }, edge)
			srv.Start()
		}
		publish(40 + rng.IntN(80))
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		edge.Kill()
		edge.Start(t)
		edge.WaitLog(t, "edge: ready")
	}
	publish(200)
	// Padding of another device rolls the last readings into sealed
	// segments, which the lane then archives.
	for i := range 400 {
		pub.MustPublish("raw/pad/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":0,"pad":"%040d"}`, i, base, i), 1)
	}
	waitMetric(t, httpAddr, "runnel_edge_raw_pending_bytes", func(v float64) bool { return v == 0 }, edge)
	waitMetric(t, httpAddr, "runnel_edge_raw_archived_segments_total", func(v float64) bool { return v > 0 }, edge)
	if m := scrape(httpAddr); m["runnel_edge_raw_skipped_segments_total"] != 0 {
		t.Fatalf("%v segments given up with no disk pressure", m["runnel_edge_raw_skipped_segments_total"])
	}
	stop(t, edge)

	out, err := exec.Command(filepath.Join(dir, "runnel-edge"), "replay", "--pipeline", spec, "--input", store+"/e1").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("replay of the archive: %v\n%s", err, stderr)
	}
	got := map[string]map[int64]sums{} // dev -> window start -> latest
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Key     map[string]any     `json:"key"`
			Start   int64              `json:"window_start"`
			Version int64              `json:"version"`
			Values  map[string]float64 `json:"values"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("replay output %q: %v", line, err)
		}
		dev := fmt.Sprint(r.Key["dev"])
		if got[dev] == nil {
			got[dev] = map[int64]sums{}
		}
		got[dev][r.Start] = sums{int64(r.Values["n"]), int64(r.Values["sum"])} // versions come in order
	}
	for dev, w := range want {
		var total sums
		for _, s := range got[dev] {
			total.n += s.n
			total.sum += s.sum
		}
		if total != *w {
			t.Errorf("device %s: the archive replays to %d readings summing to %d; the stream had %d summing to %d", dev, total.n, total.sum, w.n, w.sum)
		}
	}
	if t.Failed() {
		t.Logf("replay output:\n%s", tail(string(out), 3000))
	}
	t.Logf("%d readings, %d kills: every one in the archive once", seq, kills)
}

// TestSnapshotsSurviveEdgeKills: a runnel-edge process with its snapshot
// store on a bucket of a real S3 server (versitygw) is asked for snapshots
// on demand and SIGKILLed at random moments 20 times while they copy and
// upload. Afterwards no manifest in the store names a missing or damaged
// object (a listing finds only complete snapshots, and perhaps data
// objects without a manifest), and `runnel-edge restore` rebuilds a data
// directory from the latest one.
func TestSnapshotsSurviveEdgeKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills an edge 20 times")
	}
	dir, spec, mosq, _ := coldTierSetup(t)
	const store = "s3://runnel-test/backups"
	httpAddr := freePort(t)
	edge := &testproc.Proc{Name: "edge", Args: []string{filepath.Join(dir, "runnel-edge"), "run", "--pipeline", spec,
		"--data-dir", filepath.Join(dir, "gw"), "--broker-url", mosq.Addr(), "--edge-id", "e1", "--checkpoint-interval", "50ms",
		"--http-addr", httpAddr, "--snapshot-store", store, "--snapshot-interval", "0", "--snapshot-keep", "3"}}
	edge.Start(t)
	defer func() { edge.Kill() }()
	edge.WaitLog(t, "edge: ready")
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	rng := rand.New(rand.NewPCG(31, 32))
	seq := 0
	for range 20 {
		for range 50 + rng.IntN(100) {
			dev := fmt.Sprintf("d%d", rng.IntN(50))
			pub.MustPublish("raw/"+dev+"/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":1}`, seq, 1_767_225_600_000+int64(seq)*7), 1)
			seq++
		}
		for range 1 + rng.IntN(3) {
			go http.Post("http://"+httpAddr+"/admin/snapshot", "", nil) // answered or cut by the kill
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
		edge.Kill()
		edge.Start(t)
		edge.WaitLog(t, "edge: ready")
	}
	snap := postSnapshot(t, httpAddr) // one that completes
	stop(t, edge)

	out, err := exec.Command(filepath.Join(dir, "runnel-edge"), "snapshots", "list", "--from", store+"/e1").CombinedOutput()
	if err != nil {
		t.Fatalf("snapshots list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "unusable") {
		t.Fatalf("a manifest names a missing or damaged object after the kills:\n%s", out)
	}
	if !strings.Contains(string(out), fmt.Sprint(snap.Checkpoint)) {
		t.Fatalf("the last snapshot (checkpoint %d) is not listed:\n%s", snap.Checkpoint, out)
	}
	t.Logf("after 20 kills:\n%s", out)
	target := filepath.Join(dir, "restored")
	if out, err := exec.Command(filepath.Join(dir, "runnel-edge"), "restore", "--from", store+"/e1", "--data-dir", target).CombinedOutput(); err != nil {
		t.Fatalf("restore of the latest snapshot: %v\n%s", err, out)
	}
}

// coldTierSetup builds runnel-edge into a temporary directory and starts
// Mosquitto and versitygw, whose object store settings it puts in the
// environment, where the edge and its subcommands read them.
func coldTierSetup(t *testing.T) (dir, spec string, mosq *testbroker.Mosquitto, srv *tests3.Server) {
	t.Helper()
	dir = t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-edge")
	mosq = testbroker.Start(t)
	srv = tests3.Start(t)
	s3Env(t, srv)
	spec = filepath.Join(dir, "raw.yaml")
	if err := os.WriteFile(spec, []byte(rawSpec), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, spec, mosq, srv
}

// s3Env puts srv's object store settings in the environment of the test
// and the processes it starts (the secret never on a command line).
func s3Env(t *testing.T, srv *tests3.Server) {
	t.Setenv("RUNNEL_OBJECT_STORE_ENDPOINT", srv.Endpoint())
	t.Setenv("RUNNEL_OBJECT_STORE_REGION", "us-east-1")
	t.Setenv("RUNNEL_OBJECT_STORE_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("RUNNEL_OBJECT_STORE_SECRET_ACCESS_KEY", srv.SecretKey())
}
