package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/internal/tests3"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/state"
)

const snapSpec = `name: snap
source: {mqtt: {topic: "snap/+/r", qos: 1, topic_fields: {dev: 1}}}
event_time: {field: ts, unit: ms}
event_id: [dev, seq]
key: [dev]
watermark: {max_out_of_order: 2s}
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v)}
`

// snapReading is one reading of TestSnapshotRestore's stream.
type snapReading struct {
	dev    string
	seq    int
	ts, v  int64
	replay bool // a redelivery of an earlier reading (same event id)
}

// TestSnapshotRestore: a runnel-edge process reads a known stream through
// Mosquitto and uplinks to a runnel-hub process. After the first part it
// takes a snapshot on demand (POST /admin/snapshot) into a directory store,
// the hub acknowledges everything, and the edge is killed with SIGKILL and
// its data directory destroyed. `runnel-edge restore` rebuilds it on an
// empty directory: the restored state file equals the dead edge's at the
// snapshot's checkpoint, entry for entry in every bucket, but for the new
// epoch it holds and the record of the restore. Snapshots that are damaged
// (a flipped byte) or truncated, and a data directory in use, are refused
// with the reason, and leave the target untouched. The restored edge then
// reads the rest of the stream (with redeliveries of the first part): the
// hub's results equal the oracle over the whole stream, nothing lost and
// nothing counted twice, and the edge uses the new epoch.
func TestSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-edge", "../../cmd/runnel-hub")
	mosq := testbroker.Start(t)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	spec := write("snap.yaml", snapSpec)
	const token = "snap-token-0123456789abcdef"
	tokens := write("tokens", "e1 "+token+"\n")
	hubAddr := freePort(t)
	hub := &testproc.Proc{Name: "hub", Args: []string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--pipeline", spec, "--grpc-addr", hubAddr, "--http-addr", "127.0.0.1:0", "--edge-tokens-file", tokens,
		"--edge-timeout", "5s", "--commit-interval", "20ms"}}
	hub.Start(t)
	defer hub.Kill()
	hub.WaitLog(t, "hub: listening")

	// The snapshots go to a bucket of a real S3 server (versitygw); its
	// posix backend keeps each object as a file under store, which the
	// damage cases below copy and spoil as directory stores. The object
	// store settings reach the edge and runnel-edge restore through the
	// environment (the secret never on a command line).
	srv := tests3.Start(t)
	const s3store = "s3://runnel-test/snapshots"
	store := filepath.Join(srv.Dir(), "runnel-test", "snapshots")
	s3Env(t, srv)
	httpAddr := freePort(t)
	edgeProc := func(data, interval string) *testproc.Proc {
		return &testproc.Proc{Name: "edge", Args: []string{filepath.Join(dir, "runnel-edge"), "run", "--pipeline", spec,
			"--data-dir", data, "--broker-url", mosq.Addr(), "--edge-id", "e1", "--checkpoint-interval", interval,
			"--http-addr", httpAddr, "--snapshot-store", s3store, "--snapshot-interval", "0",
			"--uplink-hub", hubAddr, "--uplink-token", token, "--uplink-insecure"}}
	}
	data := filepath.Join(dir, "gw")
	// Checkpoints only on demand: after the snapshot's, the dead edge's
	// state file stays as the snapshot has it, to compare with.
	ed := edgeProc(data, "1h")
	ed.Start(t)
	defer func() { ed.Kill() }()
	ed.WaitLog(t, "edge: ready")

	// The stream: 4 devices, a reading every 40 ms of event time each,
	// up to 1.5 s out of order, and now and then a redelivery.
	rng := rand.New(rand.NewPCG(13, 14))
	base := int64(1_767_225_600_000)
	var stream []snapReading
	for i := range 1600 {
		r := snapReading{dev: fmt.Sprintf("d%d", i%4), seq: i, ts: base + int64(i)*10 - rng.Int64N(1500), v: rng.Int64N(100) - 20}
		stream = append(stream, r)
		if rng.IntN(25) == 0 {
			d := stream[rng.IntN(len(stream))]
			d.replay = true
			stream = append(stream, d)
		}
	}
	half := len(stream) / 2
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	publish := func(rs []snapReading) {
		for _, r := range rs {
			pub.MustPublish("snap/"+r.dev+"/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":%d}`, r.seq, r.ts, r.v), 1)
		}
	}
	publish(stream[:half])
	in := `runnel_edge_records_in_total{pipeline="snap"}`
	waitMetric(t, httpAddr, in, func(v float64) bool { return v == float64(half) }, ed)

	snap := postSnapshot(t, httpAddr)
	if snap.Checkpoint == 0 || snap.Epoch != 1 || !strings.HasPrefix(snap.Key, "e1/snapshots/") {
		t.Fatalf("snapshot on demand: %+v", snap)
	}
	// The hub has what the edge committed at that checkpoint: the
	// restored edge resends it all, which must not count twice.
	page := waitMetric(t, httpAddr, "runnel_edge_uplink_acked_seq", func(v float64) bool { return v > 0 }, ed)
	waitMetric(t, httpAddr, "runnel_edge_uplink_acked_seq", func(v float64) bool { return v == page["runnel_edge_outbox_next_seq"]-1 }, ed)
	// Readings after the snapshot's checkpoint: the dead edge takes them
	// in (durable in its ingest log, acknowledged), and they die with it.
	var gone []snapReading
	for i := range 50 {
		gone = append(gone, snapReading{dev: "gone", seq: i, ts: base + int64(i)*10, v: 1})
	}
	publish(gone)
	waitMetric(t, httpAddr, in, func(v float64) bool { return v == float64(half+len(gone)) }, ed)
	ed.Kill()
	// The broker would redeliver what the dead edge had not acknowledged
	// yet (a race with the kill); a new gateway's first session starts
	// clean here, so that what is lost is exactly what came after the
	// checkpoint.
	clearSession(t, mosq.HostPort(), "runnel-e1")
	original := filepath.Join(dir, "original.db")
	if out, err := exec.Command("cp", filepath.Join(data, "state.db"), original).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}

	edgeBin := filepath.Join(dir, "runnel-edge")
	restore := func(from, into string, extra ...string) (string, error) {
		out, err := exec.Command(edgeBin, append([]string{"restore", "--from", from, "--data-dir", into}, extra...)...).CombinedOutput()
		return string(out), err
	}
	// Damaged copies of the store are refused, the target untouched.
	for _, c := range []struct {
		name, want string
		damage     func(b []byte) []byte
	}{
		{"flipped", "damaged", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"truncated", "truncated", func(b []byte) []byte { return b[:len(b)-100] }},
	} {
		bad := filepath.Join(dir, "store-"+c.name)
		if out, err := exec.Command("cp", "-a", store, bad).CombinedOutput(); err != nil {
			t.Fatalf("copy: %v: %s", err, out)
		}
		obj := filepath.Join(bad, filepath.FromSlash(strings.TrimSuffix(snap.Key, "manifest")+"data"))
		b, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(obj, c.damage(b), 0o644); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "target-"+c.name)
		out, err := restore(bad+"/e1", target)
		if err == nil || !strings.Contains(out, "restore refused") || !strings.Contains(out, c.want) {
			t.Fatalf("restore of a %s snapshot: %v, output:\n%s\nwant a refusal saying %q", c.name, err, out, c.want)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("a refused restore created %s: %v", target, err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, ".target-"+c.name+".restore-*")); len(m) > 0 {
			t.Fatalf("a refused restore left %v", m)
		}
		t.Logf("%s snapshot refused: %s", c.name, lastLine(out))
	}
	// A data directory that is not empty is refused without --force.
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o644)
	if out, err := restore(s3store+"/e1", full); err == nil || !strings.Contains(out, "not empty") {
		t.Fatalf("restore into a directory that is not empty: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "x" {
		t.Fatalf("the refused directory was touched: %q, %v", b, err)
	}

	out, err := restore(s3store+"/e1", data)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	t.Logf("restore: %s", lastLine(out))
	// Entry for entry the dead edge's state at the checkpoint, but for the
	// epoch (one more) and the restore record.
	was, now := dumpState(t, original), dumpState(t, filepath.Join(data, "state.db"))
	if got := now["restore"]; len(got) != 2 {
		t.Errorf("restore record: %v", got)
	}
	// An edge that never changed epoch stores none: it is 1.
	if e, ok := was["uplink"]["epoch"]; ok && e != "\x01" || now["uplink"]["epoch"] != "\x02" {
		t.Errorf("epoch: %q before, %q after the restore; want 1 (or none) and 2", was["uplink"]["epoch"], now["uplink"]["epoch"])
	}
	delete(now, "restore")
	delete(was["uplink"], "epoch")
	delete(now["uplink"], "epoch")
	if len(now["uplink"]) == 0 && was["uplink"] == nil {
		delete(now, "uplink")
	}
	if len(was) < 4 {
		t.Fatalf("the original state has only buckets %v", sortedKeys(was))
	}
	for _, name := range sortedKeys(was) {
		if !mapsEqual(was[name], now[name]) {
			t.Errorf("bucket %s: %d entries restored, %d in the original; they differ", name, len(now[name]), len(was[name]))
		}
	}
	for name := range now {
		if _, ok := was[name]; !ok {
			t.Errorf("bucket %s is in the restored state only", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	ed = edgeProc(data, "100ms")
	ed.Start(t)
	ed.WaitLog(t, "edge: ready")
	// The rest of the stream, a few redeliveries of the first part (a
	// broker resending what the dead edge had not acknowledged would look
	// so), and a reading far ahead that fires every window.
	rest := slices.Clone(stream[half:])
	for range 10 {
		d := stream[rng.IntN(half)]
		d.replay = true
		rest = append(rest, d)
	}
	publish(rest)
	pub.MustPublish("snap/flush/r", fmt.Appendf(nil, `{"seq":0,"ts":%d,"v":0}`, base+3_600_000), 1)

	// The oracle: every reading once (event ids drop redeliveries), in
	// arrival order.
	seen := map[string]bool{}
	var evs []oracle.Event
	var rs []snapReading
	for _, r := range append(slices.Clone(stream[:half]), rest...) {
		id := fmt.Sprintf("%s/%d", r.dev, r.seq)
		if seen[id] {
			continue
		}
		seen[id] = true
		evs = append(evs, oracle.Event{Key: r.dev, Time: r.ts})
		rs = append(rs, r)
	}
	ems, late := oracle.Run(evs, oracle.Config{Kind: oracle.Tumbling, Size: 1000, Slide: 1000, MaxOutOfOrder: 2000, Lateness: 3_600_000})
	if len(late) > 0 {
		t.Fatalf("the oracle finds %d late readings; the stream should have none", len(late))
	}
	want := map[string][2]int64{}
	for _, e := range ems {
		var sum int64
		for _, i := range e.Members {
			sum += rs[i].v
		}
		want[fmt.Sprintf("%s/%d", e.Key, e.Start)] = [2]int64{int64(len(e.Members)), sum}
	}

	conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	results := runnelv1.NewResultsClient(conn)
	query := func() (map[string][2]int64, error) {
		got := map[string][2]int64{}
		req := &runnelv1.QueryResultsRequest{Pipeline: "snap", Limit: 10000}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := results.QueryResults(ctx, req)
			cancel()
			if err != nil {
				return nil, err
			}
			for _, r := range resp.Results {
				dev := r.Key.Fields["dev"].GetStringValue()
				if dev == "flush" {
					continue
				}
				if dev == "gone" {
					return nil, fmt.Errorf("the hub has a window of the readings the dead edge took in after its snapshot: %d/%d", r.WindowStart, r.Version)
				}
				v := r.Values.Fields
				got[fmt.Sprintf("%s/%d", dev, r.WindowStart)] = [2]int64{int64(v["n"].GetNumberValue()), int64(v["sum"].GetNumberValue())}
			}
			if resp.NextPageToken == "" {
				return got, nil
			}
			req.PageToken = resp.NextPageToken
		}
	}
	var why string
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := query()
		ok := false
		if err == nil {
			ok, why = ctlDiff(got, want)
		} else {
			why = err.Error()
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub's results after the restore differ from the oracle: %s\nedge log tail:\n%s\nhub log tail:\n%s",
				why, tail(ed.Logs.String(), 3000), tail(hub.Logs.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	page = scrape(httpAddr)
	if e := page["runnel_edge_uplink_epoch"]; e != 2 {
		t.Errorf("the restored edge runs epoch %v, want 2", e)
	}
	// Its next snapshot continues past the one it was restored from.
	if next := postSnapshot(t, httpAddr); next.Checkpoint <= snap.Checkpoint || next.Epoch != 2 {
		t.Errorf("the restored edge's snapshot: checkpoint %d epoch %d; want past %d, epoch 2", next.Checkpoint, next.Epoch, snap.Checkpoint)
	}
	t.Logf("%d readings (%d redeliveries), %d windows, %d readings lost with the dead edge; snapshot of checkpoint %d (%d state bytes, %d in the store) restored under epoch 2",
		len(rs), half+len(rest)-len(rs), len(want), len(gone), snap.Checkpoint, snap.StateBytes, snap.DataBytes)
	stop(t, ed)
}

// snapshotInfo is POST /admin/snapshot's answer.
type snapshotInfo struct {
	Checkpoint uint64 `json:"checkpoint"`
	Epoch      uint64 `json:"epoch"`
	StateBytes int64  `json:"state_bytes"`
	DataBytes  int64  `json:"data_bytes"`
	Key        string `json:"manifest_key"`
}

func postSnapshot(t *testing.T, addr string) snapshotInfo {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/admin/snapshot", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /admin/snapshot: %s: %s", resp.Status, buf.String())
	}
	var s snapshotInfo
	if err := json.Unmarshal(buf.Bytes(), &s); err != nil {
		t.Fatalf("POST /admin/snapshot: %v: %s", err, buf.String())
	}
	return s
}

// clearSession ends the broker's persistent session of clientID.
func clearSession(t *testing.T, hostPort, clientID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := testbroker.Dial(ctx, hostPort, paho.ClientConfig{ClientID: clientID}, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	_ = cli.Disconnect(&paho.Disconnect{ReasonCode: 0})
	<-cli.Done()
}

// dumpState returns every system bucket of a state file, bucket -> key ->
// value, decoded (each value's record checked by the state package).
func dumpState(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	st, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[string]map[string]string{}
	err = st.View(func(tx *state.Tx) error {
		names, err := tx.Buckets()
		if err != nil {
			return err
		}
		for _, name := range names {
			b, err := tx.Bucket(name)
			if err != nil {
				return err
			}
			m := map[string]string{}
			if err := b.ForEach(nil, func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			}); err != nil {
				return err
			}
			out[name] = m
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
