package edge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/operators"
)

// TestOversizedMessageIsAckedAndDeadLettered: a message longer than the
// ingest log's record limit, among good readings through a real
// Mosquitto, with a Receive Maximum of 4. The node must acknowledge it (or
// the broker sends at most 3 more and stops for good), keep its size,
// topic and first KiB as a dead letter, and take every reading behind it;
// after a restart the broker has nothing to redeliver, so the dead letter
// is there once.
func TestOversizedMessageIsAckedAndDeadLettered(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, sumSpec)
	cfg := edge.NodeConfig{EdgeID: "big", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: fastBroker(mosq), CheckpointInterval: 50 * time.Millisecond, NoSync: true,
		IngestLog: ingestlog.Options{MaxRecordSize: 4096}}
	cfg.Broker.ReceiveMaximum = 4
	nd := startNode(t, cfg)
	if nd.err != nil {
		t.Fatal(nd.err)
	}
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	want := map[string][2]int64{}
	good := func(i int) {
		dev, ts := fmt.Sprintf("d%d", i%2), int64(1000+i*10)
		pub.MustPublish("f/"+dev, fmt.Appendf(nil, `{"dev":%q,"seq":%d,"ts":%d,"v":1}`, dev, i, ts), 1)
		k := fmt.Sprintf("%s/%d", dev, ts/1000*1000)
		want[k] = [2]int64{want[k][0] + 1, want[k][1] + 1}
	}
	for i := range 20 {
		good(i)
	}
	big := []byte(`{"dev":"x","seq":1,"ts":1000,"pad":"` + strings.Repeat("p", 10_000) + `"}`)
	pub.MustPublish("f/x", big, 1)
	for i := 20; i < 60; i++ {
		good(i)
	}
	pub.MustPublish("f/z", []byte(`{"dev":"z","seq":0,"ts":99999999,"v":0}`), 1) // fires the windows
	nd.waitCheckpoint(62)
	if err := nd.stop(); err != nil {
		t.Fatal(err)
	}
	nd = startNode(t, cfg) // nothing may come back from the broker
	if nd.err != nil {
		t.Fatal(nd.err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := nd.stop(); err != nil {
		t.Fatal(err)
	}
	got := readResults(t, p, data)
	delete(got, "z/99999000")
	for k, w := range want {
		if got[k] != w {
			t.Errorf("window %s: %v, want %v", k, got[k], w)
		}
	}
	var dead []map[string]any
	if err := edge.ReadSideOutput(data, "dead", func(line []byte) error {
		var d map[string]any
		if err := json.Unmarshal(line, &d); err != nil {
			return err
		}
		dead = append(dead, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1: %v", len(dead), dead)
	}
	d := dead[0]
	wantReason := fmt.Sprintf("message of %d bytes is longer than the ingest log's record limit (4096 bytes); its first 1024 bytes are kept here", len(big))
	if d["reason"] != wantReason || d["topic"] != "f/x" || d["payload"] != string(big[:1024]) {
		t.Fatalf("dead letter %v, want reason %q, topic f/x and the first 1024 bytes", d, wantReason)
	}
}

// TestIdleAdvanceFiresAndReplays runs a real runnel-edge process with a
// pipeline whose idle_timeout is 1s: a sensor sends ten readings in one
// window and goes quiet. The window must be emitted without another
// reading (the idle advance). Nothing is checkpointed (checkpoint interval
// 1h), so after a SIGKILL the restarted node must produce that result
// again from its ingest log alone — its messages and clock records — and
// commit it exactly once.
func TestIdleAdvanceFiresAndReplays(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a runnel-edge process")
	}
	t.Run("killed after the advance", func(t *testing.T) { idleAdvance(t, false) })
	// Killed as soon as the readings are in, before the idle timeout: the
	// restarted node writes the clock records, and fires the window.
	t.Run("killed before the advance", func(t *testing.T) { idleAdvance(t, true) })
}

func idleAdvance(t *testing.T, early bool) {
	dir := t.TempDir()
	testproc.Build(t, dir, "../cmd/runnel-edge")
	mosq := testbroker.Start(t)
	const spec = `name: quiet
source: {mqtt: {topic: "q/#", qos: 1}}
event_time: {field: ts, unit: ms}
key: [dev]
watermark: {max_out_of_order: 200ms, idle_timeout: 1s}
window: {tumbling: 1s}
aggregates: {n: count(), sum: sum(v)}
`
	specPath := filepath.Join(dir, "quiet.yaml")
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	httpAddr := freeAddr(t)
	proc := &testproc.Proc{Name: "edge", Args: []string{filepath.Join(dir, "runnel-edge"), "run", "--pipeline", specPath,
		"--data-dir", data, "--broker-url", mosq.Addr(), "--edge-id", "quiet", "--checkpoint-interval", "1h",
		"--http-addr", httpAddr}}
	proc.Start(t)
	defer proc.Kill()
	proc.WaitLog(t, "edge: ready")

	pub := testbroker.NewPublisher(t, mosq.HostPort())
	// Ten readings in one 1 s window of event time, stamped by the wall
	// clock as a sensor would.
	start := time.Now().UnixMilli()/1000*1000 + 1000
	for i := range 10 {
		pub.MustPublish("q/a", fmt.Appendf(nil, `{"dev":"a","ts":%d,"v":%d}`, start+int64(i*50), i), 1)
	}
	deadline := time.Now().Add(15 * time.Second)
	want := "1"
	if early {
		want = "0"
		for metricValue(httpAddr, "runnel_edge_records_in_total") != "10" && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for metricValue(httpAddr, "runnel_edge_results_total") != want {
		if time.Now().After(deadline) {
			t.Fatalf("no result after 15 s of quiet (results %q)\n%s", metricValue(httpAddr, "runnel_edge_results_total"), proc.Logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	proc.Kill() // nothing was committed: the result lives only in the log

	proc.Args = append(proc.Args[:len(proc.Args)-2], "--http-addr", "") // and no new readings
	proc.Start(t)
	proc.WaitLog(t, "edge: ready")
	time.Sleep(500 * time.Millisecond)
	if early {
		time.Sleep(2500 * time.Millisecond) // the idle timeout and a window, by the restarted node's clock records
	}
	if err := proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := proc.Cmd.Wait(); err != nil {
		t.Fatalf("runnel-edge: %v\n%s", err, proc.Logs.String())
	}
	out, err := exec.Command(filepath.Join(dir, "runnel-edge"), "outbox", "--data-dir", data, "--pipeline", specPath).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	wantLine := fmt.Sprintf(`{"pipeline":"quiet","key":{"dev":"a"},"window_start":%d,"window_end":%d,"version":1,"values":{"n":10,"sum":45},"seq":1}`, start, start+1000)
	if len(lines) != 1 || lines[0] != wantLine {
		t.Fatalf("outbox after the replay:\n%s\nwant\n%s", out, wantLine)
	}
}

// TestSideOutputsAreBounded: 20,000 garbage payloads of 1 KiB (about 25
// MB of dead letters with their JSON) through a real Mosquitto, with the
// side outputs bounded at 1 MiB. The dead letters in the state file stay
// within the bound, the oldest dropped and counted; every one of them
// still reaches the pipeline's dead_letter file (written after each
// commit); the state file does not grow with the garbage; health says the
// side outputs are at their bound; and the good readings sent among the
// garbage are all counted.
func TestSideOutputsAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 messages through Mosquitto")
	}
	mosq := testbroker.Start(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	deadFile := filepath.Join(dir, "dead.jsonl")
	p := compileSpec(t, sumSpec+"dead_letter: {file: {path: "+deadFile+"}}\n")
	httpAddr := freeAddr(t)
	const quota = 1 << 20
	nd := startNode(t, edge.NodeConfig{EdgeID: "garbage", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: fastBroker(mosq), CheckpointInterval: 50 * time.Millisecond, NoSync: true, HTTPAddr: httpAddr,
		SideOutputs: edge.SideOutputs{MaxBytes: quota}})
	if nd.err != nil {
		t.Fatal(nd.err)
	}
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	garbage := []byte(strings.Repeat("#", 1024))
	const n, every = 20_000, 100
	good := 0
	for i := range n {
		if err := pub.PublishAsync(t.Context(), "f/junk", garbage, 1); err != nil {
			t.Fatal(err)
		}
		if i%every == 0 {
			pub.MustPublish("f/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"v":1}`, i, 1000+i), 1)
			good++
		}
	}
	pub.MustPublish("f/z", []byte(`{"dev":"z","seq":0,"ts":99999999,"v":0}`), 1)
	nd.waitCheckpoint(uint64(n + good + 1))

	var h struct {
		Status string
		Checks []struct{ Name, Status, Reason string }
	}
	getJSON(t, "http://"+httpAddr+"/healthz", &h)
	var sideCheck string
	for _, c := range h.Checks {
		if c.Name == "side_outputs" {
			sideCheck = c.Status + ": " + c.Reason
		}
	}
	if h.Status != "degraded" || !strings.HasPrefix(sideCheck, "degraded: the side outputs reached side_outputs.max_bytes (1048576 bytes)") {
		t.Errorf("health %s, side_outputs check %q", h.Status, sideCheck)
	}
	dropped := metricValue(httpAddr, `runnel_edge_side_output_dropped_total`)
	if err := nd.stop(); err != nil {
		t.Fatal(err)
	}

	var held, bytes int
	if err := edge.ReadSideOutput(data, "dead", func(line []byte) error {
		held++
		bytes += len(line)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if bytes > quota || held == 0 || held >= n {
		t.Errorf("the state file holds %d dead letters of %d bytes; want some, within %d bytes", held, bytes, quota)
	}
	if dropped == "" || dropped == "0" {
		t.Errorf("runnel_edge_side_output_dropped_total %q", dropped)
	}
	lines, err := os.ReadFile(deadFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(lines), "\n"); got != n {
		t.Errorf("dead_letter file has %d lines, want %d", got, n)
	}
	fi, err := os.Stat(filepath.Join(data, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 24<<20 { // bbolt grows its file 16 MiB at a time
		t.Errorf("state.db is %d bytes after %d dead letters bounded at %d", fi.Size(), n, quota)
	}
	got := readResults(t, p, data)
	var counted int64
	for k, v := range got {
		if strings.HasPrefix(k, "a/") {
			counted += v[0]
		}
	}
	if counted != int64(good) {
		t.Errorf("%d good readings counted, want %d", counted, good)
	}
}

// TestLateOutputIsWritten: a pipeline naming a late_output file gets its
// late records there, as replay writes them, once committed.
func TestLateOutputIsWritten(t *testing.T) {
	mosq := testbroker.Start(t)
	dir := t.TempDir()
	lateFile := filepath.Join(dir, "late.jsonl")
	p := compileSpec(t, strings.Replace(sumSpec, "allowed_lateness: 1h", "allowed_lateness: 0s", 1)+"late_output: {file: {path: "+lateFile+"}}\n")
	nd := startNode(t, edge.NodeConfig{EdgeID: "late", DataDir: filepath.Join(dir, "data"), Pipelines: []*operators.Pipeline{p},
		Broker: fastBroker(mosq), CheckpointInterval: 50 * time.Millisecond, NoSync: true})
	if nd.err != nil {
		t.Fatal(nd.err)
	}
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	pub.MustPublish("f/a", []byte(`{"dev":"a","seq":1,"ts":5000,"v":1}`), 1)
	pub.MustPublish("f/a", []byte(`{"dev":"a","seq":2,"ts":1000,"v":1}`), 1) // its window ended at 2000
	nd.waitCheckpoint(2)
	if err := nd.stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(lateFile)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"pipeline":"faults","key":{"dev":"a"},"event_time":1000,"watermark":5000,"offset":`
	if !strings.HasPrefix(string(b), want) || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("late output file:\n%s\nwant one line starting %s", b, want)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}
