package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/state"
)

func compileSpec(t *testing.T, yaml string) *operators.Pipeline {
	t.Helper()
	p, err := operators.CompileYAML("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runNode runs an edge node in-process until the returned stop is called.
func runNode(t *testing.T, cfg edge.NodeConfig) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	cfg.Started = func(string) { close(started) }
	done := make(chan error, 1)
	go func() { done <- edge.Run(ctx, cfg) }()
	select {
	case <-started:
	case err := <-done:
		cancel()
		t.Fatalf("node stopped at start: %v", err)
	}
	return func() error { cancel(); return <-done }
}

func metric(t *testing.T, addr, name string) string {
	t.Helper()
	return metricValue(addr, name)
}

// metricValue reads one metric from a node's /metrics ("" when absent):
// the first series of name, or, when name carries its labels
// (name{a="x",b="y"}, in Prometheus's order), that series.
func metricValue(addr, name string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := name + "{"
	if strings.HasSuffix(name, "}") {
		prefix = name + " "
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// countSpec counts readings per device in 1 s windows, with redelivery
// dedup by seq and lateness enough for redeliveries that come after newer
// messages.
const countSpec = `name: count
source: {mqtt: {topic: "s/#", qos: 1}}
event_time: {field: ts}
event_id: [seq]
key: [dev]
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count()}
`

// latestCount returns the count of the latest version of key's window in a
// stopped node's outbox (the streams of these tests fit in one window).
func latestCount(t *testing.T, p *operators.Pipeline, data, key string) int64 {
	t.Helper()
	var n int64
	err := edge.ReadOutbox(context.Background(), data, func(e edge.OutboxEntry) error {
		if k, _ := p.AppendKeyJSON(nil, e.Result.Key); string(k) == key {
			st := p.Aggregates.New()
			if err := p.Aggregates.Decode(st, e.Result.State); err != nil {
				return err
			}
			n = max(n, p.Aggregates.Result(st, 0).Int) // versions are complete values
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cappedNode is a node filled to its disk cap by fillToCap.
type cappedNode struct {
	cfg     edge.NodeConfig
	p       *operators.Pipeline
	addr    string
	diskCap int64
	stop    func() error
}

// capReadings is how many readings fillToCap publishes (40 KB of log).
const capReadings = 400

// fillToCap runs a node whose disk cap is 16 KiB beyond what it uses idle
// (the cap counts the state file's pages), publishes capReadings readings
// of device a without waiting for their PUBACKs (so they arrive in
// batches) and a last one that closes their window, and returns once the
// cap holds messages at the broker, the node still running.
func fillToCap(t *testing.T, mosq *testbroker.Mosquitto, edgeID string) *cappedNode {
	t.Helper()
	c := &cappedNode{p: compileSpec(t, countSpec), addr: freeAddr(t)}
	c.cfg = edge.NodeConfig{EdgeID: edgeID, DataDir: t.TempDir(), Pipelines: []*operators.Pipeline{c.p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond,
		HTTPAddr: c.addr, NoSync: true}
	stop := runNode(t, c.cfg)
	base, _ := strconv.ParseInt(metric(t, c.addr, "runnel_edge_disk_used_bytes"), 10, 64)
	if err := stop(); err != nil || base == 0 {
		t.Fatalf("an idle node: %v, disk used %d", err, base)
	}
	c.diskCap = base + 16<<10
	c.cfg.DiskCap = c.diskCap
	c.stop = runNode(t, c.cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	payload := strings.Repeat("x", 64)
	for i := range capReadings {
		msg := fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"pad":%q}`, i, 1000+i, payload)
		if err := pub.PublishAsync(t.Context(), "s/a", msg, 1); err != nil {
			t.Fatal(err)
		}
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1)
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, c.addr, "runnel_edge_disk_cap_blocked") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the disk cap never blocked intake")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// countUncapped runs the stopped node again without its cap, long enough
// to take what the broker kept, and returns device a's count.
func (c *cappedNode) countUncapped(t *testing.T) int64 {
	t.Helper()
	cfg := c.cfg
	cfg.DiskCap, cfg.HTTPAddr = 0, ""
	stop := runNode(t, cfg)
	time.Sleep(2 * time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return latestCount(t, c.p, cfg.DataDir, `{"dev":"a"}`)
}

// TestDiskCapHoldsMessagesAtBroker: at the disk cap the node stops taking
// (and acknowledging) messages and the broker keeps them. The publisher
// does not wait for its PUBACKs, so messages arrive in batches: the cap
// holds within one message of a batch, not one batch. Restarted past its
// cap, the node does not connect to the broker (on the resumed session the
// broker's first batch would wait in the handler, and the SUBACK behind it
// with it); restarted without the cap it counts every message once.
func TestDiskCapHoldsMessagesAtBroker(t *testing.T) {
	mosq := testbroker.Start(t)
	c := fillToCap(t, mosq, "cap")
	used, _ := strconv.ParseInt(metric(t, c.addr, "runnel_edge_disk_used_bytes"), 10, 64)
	// One message past the cap at most, and the state file's new pages
	// for the results of what the log holds (counted at the commit that
	// makes them: docs/design.md, "The edge passes its own cap"), whole
	// 4 KiB pages: 4.1 KB over on a quiet machine, 8.2 KB once under CI's
	// load. A check per batch instead of per message would pass it by up
	// to the 40 KB the publisher sends without waiting.
	if used > c.diskCap+16<<10 {
		t.Errorf("the edge uses %d bytes of disk at the cap %d", used, c.diskCap)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}

	// Restarted past its cap: not ready (not connected), held. The cap is
	// one byte here, not the one it was filled to: held, the node frees
	// the log its checkpoints cover (TestDiskCapFreesCoveredLog), so by the
	// time it stopped that cap may have had room again.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	pastCap := c.cfg
	pastCap.DiskCap = 1
	go func() { done <- edge.Run(ctx, pastCap) }()
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, c.addr, "runnel_edge_mqtt_held") != "1" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if n, h := metric(t, c.addr, "runnel_edge_mqtt_connects_total"), metric(t, c.addr, "runnel_edge_mqtt_held"); n != "0" || h != "1" {
		t.Errorf("restarted at the cap: %s connections to the broker, held %s; want none, held", n, h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if total := c.countUncapped(t); total != capReadings {
		t.Fatalf("counted %d readings, want %d: the broker did not keep what the cap held back", total, capReadings)
	}
}

// TestDiskCapFreesCoveredLog: held at the disk cap, the node checkpoints
// until its checkpoints cover the whole log, seals the active segment and
// deletes it: the log's room goes to what comes next, and in the end the
// state file (aggregates and event ids) holds the cap, not records already
// counted in it. Without the seal the active segment stays, 16 KiB here.
func TestDiskCapFreesCoveredLog(t *testing.T) {
	mosq := testbroker.Start(t)
	c := fillToCap(t, mosq, "seal")
	deadline := time.Now().Add(5 * time.Second)
	for {
		lb, _ := strconv.Atoi(metric(t, c.addr, "runnel_edge_ingest_log_bytes"))
		if lb <= 1024 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held at the cap with %d bytes of log, all of it behind the checkpoints (%s records in)", lb, metric(t, c.addr, "runnel_edge_records_in_total"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	if total := c.countUncapped(t); total != capReadings {
		t.Fatalf("counted %d readings, want %d", total, capReadings)
	}
}

// TestIngestLagHoldsMessagesAtBroker: while the pipelines are behind the
// ingest log by ingest_log.max_lag records, the node takes no more
// messages and the broker keeps them; once the pipelines catch up it takes
// the rest, and every reading counts once.
func TestIngestLagHoldsMessagesAtBroker(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	const maxLag = 50
	cfg := edge.NodeConfig{EdgeID: "lag", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond, MaxLag: maxLag,
		HTTPAddr: addr, NoSync: true}
	gate := make(chan struct{})
	edge.SetPumpGate(&cfg, gate)
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 400
	for i := range n {
		msg := fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i)
		if err := pub.PublishAsync(t.Context(), "s/a", msg, 1); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, addr, "runnel_edge_ingest_lag_blocked") != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("the lag bound never held intake (lag %s)", metric(t, addr, "runnel_edge_ingest_lag_records"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // time for more to arrive, were it taken
	if lag, _ := strconv.Atoi(metric(t, addr, "runnel_edge_ingest_lag_records")); lag > maxLag+1 {
		t.Errorf("the pipelines are %d records behind, bound %d", lag, maxLag)
	}
	close(gate)
	deadline = time.Now().Add(10 * time.Second)
	for metric(t, addr, "runnel_edge_records_in_total") != strconv.Itoa(n) {
		if time.Now().After(deadline) {
			t.Fatalf("records in %s, want %d", metric(t, addr, "runnel_edge_records_in_total"), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // closes the windows
	time.Sleep(300 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if total := latestCount(t, p, data, `{"dev":"a"}`); total != n {
		t.Fatalf("counted %d readings, want %d", total, n)
	}
}

// TestPumpFeedsFromMemory: a pump that keeps up takes each group commit's
// records from memory, as the committer wrote them, and reads the ingest
// log's files back only when it is behind (here, while a gate holds it).
func TestPumpFeedsFromMemory(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	cfg := edge.NodeConfig{EdgeID: "mem", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, HTTPAddr: addr, NoSync: true}
	gate := make(chan struct{})
	var held atomic.Bool
	relay := make(chan struct{})
	go func() { // the pump's gate: open, or closed while held
		for {
			if held.Load() {
				<-gate
				held.Store(false)
			}
			select {
			case relay <- struct{}{}:
			case <-t.Context().Done():
				return
			}
		}
	}()
	edge.SetPumpGate(&cfg, relay)
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	frames := func() (mem, file int) {
		mem, _ = strconv.Atoi(metricValue(addr, `runnel_edge_ingest_log_frames_read_total{edge="mem",from="memory"}`))
		file, _ = strconv.Atoi(metricValue(addr, `runnel_edge_ingest_log_frames_read_total{edge="mem",from="file"}`))
		return mem, file
	}
	waitIn := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for metric(t, addr, "runnel_edge_records_in_total") != strconv.Itoa(want) {
			if time.Now().After(deadline) {
				t.Fatalf("records in %s, want %d", metric(t, addr, "runnel_edge_records_in_total"), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	const n = 40
	for i := range n { // one at a time: a group commit each
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i), 1)
		waitIn(i + 1)
	}
	mem, file := frames()
	if mem < n*3/4 || file > n/4 {
		t.Fatalf("keeping up: %d frames read from memory, %d from the files; want most of %d from memory", mem, file, n)
	}
	held.Store(true)
	for i := n; i < 2*n; i++ { // apart: group commits of their own while the pump waits
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i), 1)
		time.Sleep(20 * time.Millisecond)
	}
	close(gate)
	waitIn(2 * n)
	if _, file2 := frames(); file2 == file {
		t.Fatalf("behind: no frame read from the files (%d from memory before, %d from the files)", mem, file)
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // closes the window
	waitIn(2*n + 1)
	time.Sleep(300 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if total := latestCount(t, p, data, `{"dev":"a"}`); total != 2*n {
		t.Fatalf("counted %d readings, want %d", total, 2*n)
	}
}

// TestSideOutputsYieldAtDiskCap: dead letters fill the side outputs, then
// aggregates (an outbox no uplink drains) fill the disk: at the cap the
// side outputs give up their entries, oldest first and counted, and every
// aggregate stays.
func TestSideOutputsYieldAtDiskCap(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	const diskCap, sideMax = 64 << 10, 24 << 10
	cfg := edge.NodeConfig{EdgeID: "yield", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond, DiskCap: diskCap,
		SideOutputs: edge.SideOutputs{MaxBytes: sideMax}, IngestLog: ingestlog.Options{SegmentSize: 4 << 10},
		HTTPAddr: addr, NoSync: true}
	stop := runNode(t, cfg)
	running := true
	t.Cleanup(func() { // after a failure, for the port
		if running {
			stop()
		}
	})
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	num := func(name string) float64 {
		v, _ := strconv.ParseFloat(metric(t, addr, name), 64)
		return v
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: side %v B, outbox %v B, log %v B, yielded %v, blocked %v", what,
					num("runnel_edge_side_output_bytes"), num("runnel_edge_outbox_bytes"), num("runnel_edge_ingest_log_bytes"),
					num("runnel_edge_side_output_yielded_total"), num("runnel_edge_disk_cap_blocked"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const garbage = 150
	for i := range garbage {
		pub.MustPublish("s/a", fmt.Appendf(nil, "not json %d %s", i, strings.Repeat("g", 64)), 1)
	}
	waitFor("dead letters in the side outputs", func() bool { return num("runnel_edge_side_output_bytes") > 8<<10 })
	before := num("runnel_edge_side_output_bytes")

	// Each reading its own window: an aggregate each, kept in the outbox.
	const good = 1500
	for i := range good {
		msg := fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000*int64(i+1))
		if err := pub.PublishAsync(t.Context(), "s/a", msg, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("the side outputs yielding", func() bool { return num("runnel_edge_side_output_yielded_total") > 0 })
	waitFor("the side outputs giving up their room", func() bool { return num("runnel_edge_side_output_bytes") < before })
	running = false
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Without the cap the broker's backlog comes in: every aggregate is
	// there, once.
	cfg.DiskCap = 0
	stop, running = runNode(t, cfg), true
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999999}`), 1) // behind the backlog
	last, since := -1.0, time.Now()
	waitFor("the backlog", func() bool { // taken once records_in stays put
		if v := num("runnel_edge_records_in_total"); v != last {
			last, since = v, time.Now()
		}
		return last > 0 && num("runnel_edge_ingest_lag_records") == 0 && time.Since(since) > time.Second
	})
	running = false
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	{
		windows := map[int64]int64{}
		err := edge.ReadOutbox(context.Background(), data, func(e edge.OutboxEntry) error {
			if k, _ := p.AppendKeyJSON(nil, e.Result.Key); string(k) == `{"dev":"a"}` {
				st := p.Aggregates.New()
				if err := p.Aggregates.Decode(st, e.Result.State); err != nil {
					return err
				}
				windows[e.Result.Start] = max(windows[e.Result.Start], p.Aggregates.Result(st, 0).Int)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, n := range windows {
			total += n
		}
		for start, n := range windows {
			if n != 1 {
				t.Errorf("window %d counted %d readings, want 1", start, n)
			}
		}
		if len(windows) != good || total != good {
			t.Fatalf("%d windows with %d readings in the outbox, want %d", len(windows), total, good)
		}
	}
}

// TestDiskCapDropRaw: with disk_cap.policy drop_raw the node keeps
// acknowledging at the cap and drops what it cannot store, counting it:
// every message is either counted in a committed result or in the dropped
// counter, never silently lost, and the broker keeps nothing back.
func TestDiskCapDropRaw(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	cfg := edge.NodeConfig{EdgeID: "drop", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: time.Hour, DiskCap: 4 << 10,
		DropAtCap: true, HTTPAddr: addr, NoSync: true}
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 400
	payload := strings.Repeat("x", 64)
	for i := range n {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"pad":%q}`, i, 1000+i, payload), 1)
	}
	var dropped int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, _ := strconv.ParseInt(metric(t, addr, "runnel_edge_disk_cap_dropped_total"), 10, 64)
		in, _ := strconv.ParseInt(metric(t, addr, "runnel_edge_records_in_total"), 10, 64)
		if d > 0 && d+in == n {
			dropped = d
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dropped %d + ingested %d, want %d in all", d, in, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // dropped too: the cap holds
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Without the cap nothing more arrives: the broker kept nothing back.
	cfg.DiskCap, cfg.HTTPAddr, cfg.CheckpointInterval = 0, "", 50*time.Millisecond
	stop = runNode(t, cfg)
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-2,"ts":9999999}`), 1)
	time.Sleep(time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if total := latestCount(t, p, data, `{"dev":"a"}`); total+dropped != n {
		t.Fatalf("counted %d + dropped %d readings, want %d", total, dropped, n)
	}
}

// allocated is the disk the file at path takes: its blocks, not its
// length (bbolt grows its file ahead of what it writes).
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// TestStateFileCompactedAtStart: a state file mostly free pages (here a
// bucket of 8 MB written and deleted, as an outage's outbox is filled and
// emptied) is compacted when the node starts, and the node goes on with
// every count it had.
func TestStateFileCompactedAtStart(t *testing.T) {
	mosq := testbroker.Start(t)
	p := compileSpec(t, countSpec)
	cfg := edge.NodeConfig{EdgeID: "compact", DataDir: t.TempDir(), Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond, NoSync: true}
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 50
	for i := range n {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i), 1)
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // closes the window
	time.Sleep(500 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, "state.db")
	st, err := state.Open(path, state.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if err := st.Update(func(tx *state.Tx) error {
			b, err := tx.Bucket("pad")
			if err != nil {
				return err
			}
			for i := range 1000 {
				if err := b.Put(fmt.Appendf(nil, "%08d-%d", b.Len(), i), make([]byte, 1000)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Update(func(tx *state.Tx) error { return tx.DeleteBucket("pad") }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	before := allocated(t, path)
	if before < 8<<20 {
		t.Fatalf("the padded state file takes %d bytes of disk", before)
	}

	stop = runNode(t, cfg)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if after := allocated(t, path); after > before/4 {
		t.Fatalf("the state file takes %d bytes of disk after a start (was %d, nearly all free pages)", after, before)
	}
	if got := latestCount(t, p, cfg.DataDir, `{"dev":"a"}`); got != n {
		t.Fatalf("counted %d readings after the compaction, want %d", got, n)
	}
}
