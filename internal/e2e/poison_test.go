package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// The poison suite: what a hostile or careless user does to a fleet, through
// real processes: a real Mosquitto, a runnel-edge and a runnel-hub, and
// forged gRPC clients holding valid edge tokens.
//
// One edge runs three pipelines. "good" is what the hub merges; "extra" is
// one the hub does not know at first; "mism" is one the hub knows with other
// aggregates (a spec mismatch: every partial's state fails to decode at the
// hub). Among good readings the test sends: event times in 2100 and at the
// largest int64, one in 1970, a key one byte over the limit and one exactly
// at it, a message one byte over the ingest log's record limit and one
// exactly at it, 100,000 garbage payloads under a small disk cap and small
// side output bound, then a Hello with an absurd epoch and a forged
// watermark (and a partial of a window in 2100) from a second token. The
// pipelines' idle timeout closes their last windows.
//
// Then: the hub's results of good and extra equal an oracle over the good
// readings exactly (extra's once the hub is restarted knowing it: its
// partials were parked); every bad input is where the docs say (the edge's
// dead letters with their reasons, the quarantine, the hub's refusals,
// clamps and refused epochs in its metrics); the disk cap held throughout;
// no result the hub emitted before the forged watermark is ever deleted;
// and both /healthz report what happened.
func TestPoisonInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("poison suite: real processes")
	}
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
	spec := func(name, topic, aggs string) string {
		return fmt.Sprintf(`name: %s
source: {mqtt: {topic: "%s", qos: 1}}
event_time: {field: ts, unit: ms, max_past: 30d}
key: [k]
watermark: {max_out_of_order: 500ms, idle_timeout: 1s}
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: %s
dead_letter: {file: {path: %s}}
`, name, topic, aggs, filepath.Join(dir, name+".dead.jsonl"))
	}
	goodSpec := write("good.yaml", spec("good", "p/good/+", "{n: count(), sum: sum(v)}"))
	extraSpec := write("extra.yaml", spec("extra", "p/extra/+", "{n: count(), sum: sum(v)}"))
	mismEdge := write("mism-edge.yaml", spec("mism", "p/mism/+", "{n: count()}"))
	mismHub := write("mism-hub.yaml", spec("mism", "p/mism/+", "{n: count(), sum: sum(v)}"))
	tokens := write("tokens", "e1 poison-token-e1-0123456789\nevil poison-token-evil-0123456\n")

	hubGRPC, hubHTTP := freePort(t), freePort(t)
	hubArgs := []string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--pipeline", goodSpec, "--pipeline", mismHub, "--grpc-addr", hubGRPC, "--http-addr", hubHTTP,
		"--edge-tokens-file", tokens, "--edge-timeout", "2s", "--commit-interval", "20ms"}
	hub := &testproc.Proc{Name: "hub", Args: hubArgs}
	hub.Start(t)
	defer func() { hub.Kill() }()
	hub.WaitLog(t, "runnel-hub: ready")

	const diskCap, sideMax, segment = 2 << 20, 1 << 20, 128 << 10
	edgeHTTP := freePort(t)
	data := filepath.Join(dir, "e1")
	edge := &testproc.Proc{Name: "e1", Args: []string{filepath.Join(dir, "runnel-edge"), "run",
		"--pipeline", goodSpec, "--pipeline", extraSpec, "--pipeline", mismEdge,
		"--data-dir", data, "--broker-url", mosq.Addr(), "--edge-id", "e1", "--checkpoint-interval", "100ms",
		"--http-addr", edgeHTTP, "--uplink-hub", hubGRPC, "--uplink-token", "poison-token-e1-0123456789", "--uplink-insecure",
		"--disk-cap-bytes", strconv.Itoa(diskCap), "--ingest-log-segment-size", strconv.Itoa(segment),
		"--side-outputs-max-bytes", strconv.Itoa(sideMax)}}
	edge.Start(t)
	defer func() { edge.Kill() }()
	edge.WaitLog(t, "edge: ready")

	// The disk cap must hold the whole time: sample what the edge counts
	// toward it.
	capDone := make(chan struct{})
	capMax := make(chan float64, 1)
	go func() {
		var worst float64
		defer func() { capMax <- worst }()
		for {
			select {
			case <-capDone:
				return
			case <-time.After(50 * time.Millisecond):
			}
			m := scrape(edgeHTTP)
			worst = max(worst, m["runnel_edge_disk_used_bytes"])
		}
	}()

	pub := testbroker.NewPublisher(t, mosq.HostPort())
	type agg struct{ n, sum int64 }
	want := map[string]map[string]agg{"good": {}, "extra": {}} // pipeline -> key/window start -> agg
	base := time.Now().UnixMilli()/1000*1000 - 60_000
	seq := 0
	reading := func(pipeline, key string, ts, v int64, pad string) []byte {
		seq++
		return fmt.Appendf(nil, `{"k":%q,"ts":%d,"v":%d,"seq":%d%s}`, key, ts, v, seq, pad)
	}
	good := func(pipeline, key string, ts, v int64) {
		pub.MustPublish("p/"+pipeline+"/x", reading(pipeline, key, ts, v, ""), 1)
		if w, ok := want[pipeline]; ok {
			k := fmt.Sprintf("%s/%d", key, ts/1000*1000)
			w[k] = agg{w[k].n + 1, w[k].sum + v}
		}
	}
	bad := func(payload []byte) { pub.MustPublish("p/good/x", payload, 1) }
	atLimitKey := strings.Repeat("K", operators.MaxKeyBytes-3) // 's', a 2-byte length, the key
	// The ingest log's record limit (1 MiB) counts the topic and its
	// length byte.
	const recordLimit = 1 << 20
	topicBytes := 1 + len("p/good/x")
	padFor := func(total int, prefix []byte) string {
		// `,"pad":"` + pad + `"` makes the payload total bytes long
		return `,"pad":"` + strings.Repeat("p", total-len(prefix)-len(`,"pad":""`)) + `"`
	}
	for i := range 200 {
		ts := base + int64(i)*40
		good("good", fmt.Sprintf("d%d", i%5), ts, int64(i%7))
		good("extra", fmt.Sprintf("x%d", i%3), ts, int64(i%11))
		good("mism", "m", ts, 1)
		switch i {
		case 20:
			bad(reading("good", "far", 4102444800000, 1, "")) // 2100
		case 40:
			bad(reading("good", "max", math.MaxInt64, 1, ""))
		case 60:
			bad(reading("good", "old", 1000, 1, "")) // 1970: beyond max_past
		case 80:
			bad(reading("good", atLimitKey+"K", ts, 1, "")) // one byte over
		case 100:
			good("good", atLimitKey, ts, 5) // exactly at the limit: counted
		case 120:
			prefix := reading("good", "big", ts, 1, "")
			bad(append(prefix[:len(prefix)-1], padFor(recordLimit-topicBytes, prefix[:len(prefix)-1])+"}"...)) // one byte over
		case 140:
			seq++
			prefix := fmt.Appendf(nil, `{"k":"fits","ts":%d,"v":3,"seq":%d`, ts, seq)
			payload := append(prefix, padFor(recordLimit-topicBytes-1, prefix)+"}"...) // with the brace: exactly the limit
			pub.MustPublish("p/good/x", payload, 1)
			k := fmt.Sprintf("fits/%d", ts/1000*1000)
			want["good"][k] = agg{want["good"][k].n + 1, want["good"][k].sum + 3}
		}
	}
	garbage := []byte(strings.Repeat("#", 200))
	const nGarbage = 100_000
	for range nGarbage {
		if err := pub.PublishAsync(t.Context(), "p/good/junk", garbage, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Good readings after the garbage: they must not wait behind it.
	for i := range 50 {
		good("good", "after", base+8000+int64(i)*10, 1)
	}

	// Forged clients with valid tokens, on a connection of their own as
	// an edge's (the API's connection below is another).
	forged, err := grpc.NewClient(hubGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer forged.Close()
	conn, err := grpc.NewClient(hubGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A Hello with an absurd epoch under e1's own token.
	if err := forgedHello(forged, "e1", "poison-token-e1-0123456789", math.MaxUint64); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Hello with epoch 2^64-1: %v, want InvalidArgument", err)
	}

	// Every good reading reaches the hub: results equal the oracle.
	results := runnelv1.NewResultsClient(conn)
	waitResults(t, results, "good", want["good"], hub)
	// The hub kept e1's epoch, and e1 never had to start another.
	edges, err := results.ListEdges(t.Context(), &runnelv1.ListEdgesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges.Edges {
		if e.EdgeId == "e1" && e.Epoch != 1 {
			t.Errorf("the hub holds epoch %d for e1 after a forged Hello, want 1", e.Epoch)
		}
	}
	if v := scrape(edgeHTTP)["runnel_edge_uplink_new_epochs_total"]; v != 0 {
		t.Errorf("e1 started %v new epochs", v)
	}
	before := allResults(t, results, "good")

	// The forged watermark (and a partial of a window in 2100) from the
	// second token.
	p, err := operators.CompileYAML("good", []byte(spec("good", "p/good/+", "{n: count(), sum: sum(v)}")))
	if err != nil {
		t.Fatal(err)
	}
	state := p.Aggregates.AppendEncode(nil, p.Aggregates.New())
	key, _ := p.KeyFromStrings(map[string]string{"k": "evil"})
	refusal, err := forgedBatches(forged, "evil", "poison-token-evil-0123456", []*runnelv1.Batch{
		{EdgeId: "evil", Epoch: 1, FirstSeq: 1, LastSeq: 2,
			Partials:   []*runnelv1.Partial{{Seq: 1, Pipeline: "good", Key: key, WindowStart: 4102444800000, WindowEnd: 4102444801000, Version: 1, State: state}},
			Watermarks: []*runnelv1.Watermark{{Pipeline: "good", WatermarkMs: math.MaxInt64}}},
	})
	if len(refusal) != 1 || refusal[0].Seq != 1 || !strings.Contains(refusal[0].Reason, "after the hub's clock") {
		t.Errorf("forged partial of a window in 2100: refusal %v (%v), want seq 1 refused for starting after the hub's clock", refusal, err)
	}
	if _, err := forgedBatches(forged, "evil", "poison-token-evil-0123456", []*runnelv1.Batch{
		{EdgeId: "evil", Epoch: 1, FirstSeq: 1, LastSeq: 2, Watermarks: []*runnelv1.Watermark{{Pipeline: "good", WatermarkMs: math.MaxInt64}}},
	}); err != nil {
		t.Errorf("forged watermark batch: %v", err)
	}
	hm := waitMetric(t, hubHTTP, "runnel_hub_watermarks_clamped_total", func(v float64) bool { return v >= 1 }, hub)
	if hm["runnel_hub_partials_refused_total"] < 1 || hm["runnel_hub_epochs_refused_total"] < 1 {
		t.Errorf("hub metrics: refused partials %v, refused epochs %v", hm["runnel_hub_partials_refused_total"], hm["runnel_hub_epochs_refused_total"])
	}
	hubHealth := healthz(t, hubHTTP)
	for _, check := range []string{"clock", "refusals", "epochs", "parked"} {
		if hubHealth[check] == "" || strings.HasPrefix(hubHealth[check], "ok") {
			t.Errorf("hub /healthz check %s: %q, want degraded", check, hubHealth[check])
		}
	}

	// The edge: quarantine of mism, side outputs at their bound.
	em := waitMetric(t, edgeHTTP, `runnel_edge_side_output_entries{side="quarantine"}`, func(v float64) bool { return v >= 1 }, edge)
	if em[`runnel_edge_side_output_dropped_total{side="dead"}`] < 1 {
		t.Errorf("no dead letter dropped for room after %d garbage payloads under a %d-byte bound", nGarbage, sideMax)
	}
	if em["runnel_edge_side_output_bytes"] > sideMax {
		t.Errorf("side outputs hold %v bytes, bound %d", em["runnel_edge_side_output_bytes"], sideMax)
	}
	if em["runnel_edge_oversized_messages_total"] != 1 {
		t.Errorf("oversized messages %v, want 1", em["runnel_edge_oversized_messages_total"])
	}
	edgeHealth := healthz(t, edgeHTTP)
	for _, check := range []string{"quarantine", "side_outputs"} {
		if !strings.HasPrefix(edgeHealth[check], "degraded") {
			t.Errorf("edge /healthz check %s: %q, want degraded", check, edgeHealth[check])
		}
	}
	for _, check := range []string{"ingest", "broker", "uplink", "checkpoint"} {
		if edgeHealth[check] != "ok" {
			t.Errorf("edge /healthz check %s: %q, want ok", check, edgeHealth[check])
		}
	}

	// The hub restarted knowing extra applies what it parked.
	stop(t, hub)
	hub.Args = append(hubArgs, "--pipeline", extraSpec)
	hub.Start(t)
	hub.WaitLog(t, "runnel-hub: ready")
	waitResults(t, results, "extra", want["extra"], hub)

	// Nothing the hub emitted is gone, though a watermark of MaxInt64 was
	// sent and the hub restarted.
	after := allResults(t, results, "good")
	for k := range before {
		if !after[k] {
			t.Errorf("result %s was emitted, then deleted", k)
		}
	}

	close(capDone)
	worst := <-capMax
	if worst > diskCap+64<<10 { // one message at most past the cap
		t.Errorf("the edge used %v bytes of disk, cap %d", worst, diskCap)
	}
	final := scrape(edgeHTTP)
	t.Logf("disk: at most %.0f bytes of the %d-byte cap (held messages at the broker %v times); dead letters dropped for room %v; quarantined %v",
		worst, diskCap, final["runnel_edge_disk_cap_waits_total"], final[`runnel_edge_side_output_dropped_total{side="dead"}`],
		final[`runnel_edge_side_output_added_total{side="quarantine"}`])
	stop(t, edge)

	// The dead letters, each with its reason, in the pipeline's file.
	dead, err := os.ReadFile(filepath.Join(dir, "good.dead.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{
		"is more than max_future (10m0s) ahead of the edge's clock",
		"event time 9223372036854775807 ms is more than max_future",
		"is more than max_past (720h0m0s) behind the edge's clock",
		"key of 4097 bytes (encoded), at most 4096",
		fmt.Sprintf("message of %d bytes is longer than the ingest log's record limit (1048576 bytes); its first 1024 bytes are kept here", recordLimit-topicBytes+1),
		"invalid JSON",
	} {
		if !strings.Contains(string(dead), reason) {
			t.Errorf("no dead letter with reason %q", reason)
		}
	}
	if n := strings.Count(string(dead), "\n"); n != nGarbage+5 {
		t.Errorf("%d dead letters in good's dead_letter file, want %d", n, nGarbage+5)
	}
	out, err := exec.Command(filepath.Join(dir, "runnel-edge"), "outbox", "--data-dir", data, "--side", "quarantine").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"pipeline":"mism","reason":"hub: `) {
		t.Errorf("quarantine:\n%s", out)
	}
	fi, err := os.Stat(filepath.Join(data, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 40<<20 {
		t.Errorf("state.db is %d bytes", fi.Size())
	}
}

// forgedHello opens a Sync stream with token and sends a Hello.
func forgedHello(conn *grpc.ClientConn, edge, token string, epoch uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := runnelv1.NewUplinkClient(conn).Sync(ctx, grpc.PerRPCCredentials(bearer(token)))
	if err != nil {
		return err
	}
	if err := s.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: edge, Epoch: epoch, NextSeq: 1}}}); err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// forgedBatches says Hello as edge (epoch 1) and sends the batches; it
// returns the entries of a Refusal the hub answered with, or the stream's
// error, once the hub acked the last batch or ended the stream.
func forgedBatches(conn *grpc.ClientConn, edge, token string, bs []*runnelv1.Batch) ([]*runnelv1.RefusedEntry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := runnelv1.NewUplinkClient(conn).Sync(ctx, grpc.PerRPCCredentials(bearer(token)))
	if err != nil {
		return nil, err
	}
	if err := s.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: edge, Epoch: 1, NextSeq: 3}}}); err != nil {
		return nil, err
	}
	if _, err := s.Recv(); err != nil {
		return nil, err
	}
	for _, b := range bs {
		if err := s.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Batch{Batch: b}}); err != nil {
			break // the status comes with Recv
		}
	}
	last := bs[len(bs)-1].LastSeq
	for {
		m, err := s.Recv()
		if err != nil {
			st, _ := status.FromError(err)
			for _, d := range st.Details() {
				if r, ok := d.(*runnelv1.Refusal); ok {
					return r.Entries, err
				}
			}
			return nil, err
		}
		if a := m.GetAck(); a != nil && a.AckedSeq >= last {
			return nil, nil
		}
	}
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// waitResults waits up to 60 s for the hub's latest results of pipeline to
// equal want (key/window start -> count, sum).
func waitResults[A comparable](t *testing.T, rc runnelv1.ResultsClient, pipeline string, want map[string]A, hub *testproc.Proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var diff []string
	for time.Now().Before(deadline) {
		got, err := latestResults(rc, pipeline)
		diff = diff[:0]
		if err != nil {
			diff = append(diff, err.Error())
		} else {
			for k, w := range want {
				g, ok := got[k]
				if !ok || fmt.Sprint(g) != fmt.Sprint(w) {
					diff = append(diff, fmt.Sprintf("window %s: got %v (present %v), want %v", k, g, ok, w))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					diff = append(diff, "unexpected window "+k)
				}
			}
		}
		if len(diff) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(diff) > 10 {
		diff = append(diff[:10], fmt.Sprintf("... %d more", len(diff)-10))
	}
	t.Fatalf("pipeline %s at the hub:\n%s\nhub log tail:\n%s", pipeline, strings.Join(diff, "\n"), tail(hub.Logs.String(), 3000))
}

// latestResults returns key/window start -> {n sum} of the latest version
// of every window of pipeline at the hub.
func latestResults(rc runnelv1.ResultsClient, pipeline string) (map[string]struct{ n, sum int64 }, error) {
	got := map[string]struct{ n, sum int64 }{}
	req := &runnelv1.QueryResultsRequest{Pipeline: pipeline, Limit: 10000}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rc.QueryResults(ctx, req)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, r := range resp.Results {
			v := r.Values.Fields
			got[fmt.Sprintf("%s/%d", r.Key.Fields["k"].GetStringValue(), r.WindowStart)] =
				struct{ n, sum int64 }{int64(v["n"].GetNumberValue()), int64(v["sum"].GetNumberValue())}
		}
		if resp.NextPageToken == "" {
			return got, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// allResults returns every (key, window, version) the hub holds for
// pipeline.
func allResults(t *testing.T, rc runnelv1.ResultsClient, pipeline string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	req := &runnelv1.QueryResultsRequest{Pipeline: pipeline, Limit: 10000, AllVersions: true}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rc.QueryResults(ctx, req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Results {
			got[fmt.Sprintf("%s/%d/v%d", r.Key.Fields["k"].GetStringValue(), r.WindowStart, r.Version)] = true
		}
		if resp.NextPageToken == "" {
			return got
		}
		req.PageToken = resp.NextPageToken
	}
}

// scrape reads every sample of a /metrics page as "name{labels}" -> value,
// with the edge label left out.
func scrape(addr string) map[string]float64 {
	m := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		for _, l := range []string{`edge="e1",`, `,edge="e1"`, `edge="e1"`} {
			name = strings.Replace(name, l, "", 1)
		}
		name = strings.Replace(name, "{}", "", 1)
		m[name] = v
	}
	return m
}

// waitMetric waits up to 30 s for ok(metric) and returns the page.
func waitMetric(t testing.TB, addr, name string, ok func(float64) bool, p *testproc.Proc) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := scrape(addr)
		if v, found := m[name]; found && ok(v) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v\n%s log tail:\n%s", addr, name, m[name], p.Name, tail(p.Logs.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthz returns check name -> "status" or "status: reason".
func healthz(t *testing.T, addr string) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Checks []struct{ Name, Status, Reason string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s/healthz: %v", addr, err)
	}
	out := map[string]string{}
	for _, c := range r.Checks {
		out[c.Name] = c.Status
		if c.Reason != "" {
			out[c.Name] += ": " + c.Reason
		}
	}
	return out
}

// stop stops a process with SIGTERM and waits for a clean exit.
func stop(t testing.TB, p *testproc.Proc) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", p.Name, err, tail(p.Logs.String(), 3000))
	}
}
