package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/internal/tests3"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// "A week offline" (issue 14, item 9): a gateway whose hub and object
// store are both unreachable for 7 days of event time, driven through real
// processes at compressed speed. The shape of the week is weekShape; the
// test runs a scaled one (CI) and RUNNEL_WEEK_FULL=1 the 1 GiB one.

const weekSpec = `name: week
source: {mqtt: {topic: "week/+/r", qos: 1, topic_fields: {dev: 1}}}
event_time: {field: ts, unit: ms}
event_id: [dev, seq]
key: [dev]
watermark: {max_out_of_order: 1s}
window: {tumbling: 1m}
allowed_lateness: 10m
aggregates: {n: count(), avg: avg(v), max: max(v)}
`

// weekShape is one week of readings and the edge's bounds for it.
type weekShape struct {
	devices   int   // each a key
	perMinute int   // readings per device and minute of event time
	garbage   int   // every garbage-th message is not JSON (a dead letter); 0: none
	diskCap   int64 // disk_cap.bytes
	sideMax   int64 // side_outputs.max_bytes
	segment   int64 // ingest_log.segment_size
	raw       bool  // the raw archive lane on, its S3 server down
}

// ciWeek fits CI: 20 devices, 2 readings a device-minute (403,200
// readings, 201,600 one-minute windows), a dead letter every 50th message,
// under a 9 MiB cap, which the outbox reaches on day 5 or 6 of the week:
// the raw lane gives up its segments first, then the broker holds the rest.
var ciWeek = weekShape{devices: 20, perMinute: 2, garbage: 50, diskCap: 9 << 20, sideMax: 512 << 10, segment: 1 << 20, raw: true}

// fullWeek is the scale: 250 devices reading every 10 s (15 M
// readings, ~1.1 GB of ingest log, 2.5 M windows) under a 1 GiB cap.
// Run it with RUNNEL_WEEK_FULL=1 (and -timeout 60m): it publishes for
// about 15 minutes.
var fullWeek = weekShape{devices: 250, perMinute: 6, garbage: 1000, diskCap: 1 << 30, sideMax: 16 << 20, segment: 16 << 20, raw: true}

const weekMs = 7 * 24 * 60 * 60 * 1000

type weekAgg struct {
	n, sum, max int64
}

// week is one run: the processes, the stream and its oracle.
type week struct {
	shape          weekShape
	dir, spec      string
	mosq           *testbroker.Mosquitto
	s3             *tests3.Server
	edge, hub      *testproc.Proc
	edgeHTTP       string
	hubGRPC        string
	hubHTTP        string
	start, end     int64                         // event time of the week, [start, end)
	want           map[string]map[int64]*weekAgg // dev -> window start -> oracle
	published      int                           // messages, garbage and flush included
	garbageSent    int
	sampler        *diskSampler
	startedPublish time.Time
}

func newWeek(t testing.TB, shape weekShape) *week {
	w := &week{shape: shape, dir: t.TempDir()}
	testproc.Build(t, w.dir, "../../cmd/runnel-edge", "../../cmd/runnel-hub")
	w.mosq = testbroker.Start(t)
	w.spec = filepath.Join(w.dir, "week.yaml")
	tokens := filepath.Join(w.dir, "tokens")
	for p, s := range map[string]string{w.spec: weekSpec, tokens: "e1 week-token-e1-0123456789\n"} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.hubGRPC, w.hubHTTP, w.edgeHTTP = freePort(t), freePort(t), freePort(t)
	// Retention above the outage: the hub's default (7d) would drop the
	// week's first windows as they arrive (see the README).
	w.hub = &testproc.Proc{Name: "hub", Args: []string{filepath.Join(w.dir, "runnel-hub"), "--data-dir", filepath.Join(w.dir, "hub"),
		"--pipeline", w.spec, "--grpc-addr", w.hubGRPC, "--http-addr", w.hubHTTP, "--edge-tokens-file", tokens,
		"--commit-interval", "20ms", "--retention", "30d"}}
	args := []string{filepath.Join(w.dir, "runnel-edge"), "run", "--pipeline", w.spec,
		"--data-dir", filepath.Join(w.dir, "e1"), "--broker-url", w.mosq.Addr(), "--edge-id", "e1", "--checkpoint-interval", "200ms",
		"--http-addr", w.edgeHTTP, "--uplink-hub", w.hubGRPC, "--uplink-token", "week-token-e1-0123456789", "--uplink-insecure",
		"--disk-cap-bytes", strconv.FormatInt(shape.diskCap, 10), "--ingest-log-segment-size", strconv.FormatInt(shape.segment, 10),
		"--side-outputs-max-bytes", strconv.FormatInt(shape.sideMax, 10)}
	if shape.raw {
		w.s3 = tests3.Start(t)
		t.Setenv("RUNNEL_OBJECT_STORE_ENDPOINT", w.s3.Endpoint())
		t.Setenv("RUNNEL_OBJECT_STORE_REGION", "us-east-1")
		t.Setenv("RUNNEL_OBJECT_STORE_ACCESS_KEY_ID", w.s3.AccessKey())
		t.Setenv("RUNNEL_OBJECT_STORE_SECRET_ACCESS_KEY", w.s3.SecretKey())
		args = append(args, "--raw-archive-store", "s3://runnel-test/lake", "--raw-archive-interval", "200ms")
	}
	w.edge = &testproc.Proc{Name: "e1", Args: args}
	// The week ends 5 minutes before now: every event time is in the
	// past of both clocks.
	w.end = time.Now().UnixMilli()/60_000*60_000 - 5*60_000
	w.start = w.end - weekMs
	w.want = map[string]map[int64]*weekAgg{}
	return w
}

// publish sends the week through Mosquitto at QoS 1 in event-time order:
// minute by minute, each device's readings spread over the minute, a
// garbage payload every shape.garbage messages; then one reading per
// device a minute after the week, whose watermark fires the last windows.
// It returns once the broker acknowledged every message.
func (w *week) publish(t testing.TB) {
	pub := dialRaw(t, w.mosq.HostPort())
	defer pub.Close()
	send := func(topic string, payload []byte) {
		w.published++
		if err := pub.Publish(topic, payload); err != nil {
			t.Fatal(err)
		}
	}
	w.startedPublish = time.Now()
	gap := int64(60_000 / w.shape.perMinute)
	topics := make([]string, w.shape.devices)
	for d := range topics {
		topics[d] = fmt.Sprintf("week/d%03d/r", d)
		w.want[fmt.Sprintf("d%03d", d)] = map[int64]*weekAgg{}
	}
	var buf []byte
	seq := 0
	for m := w.start; m < w.end; m += 60_000 {
		if (m-w.start)%(24*60*60_000) == 0 && m > w.start {
			e := scrape(w.edgeHTTP)
			t.Logf("day %d published after %v: edge took in %v, outbox %v B, log %v B, raw skipped %v, cap waits %v",
				(m-w.start)/(24*60*60_000), time.Since(w.startedPublish).Round(time.Millisecond), e[`runnel_edge_records_in_total{pipeline="week"}`],
				e["runnel_edge_outbox_bytes"], e["runnel_edge_ingest_log_bytes"], e["runnel_edge_raw_skipped_segments_total"], e["runnel_edge_disk_cap_waits_total"])
		}
		for j := range int64(w.shape.perMinute) {
			for d := range w.shape.devices {
				ts := m + j*gap + int64(d)
				v := int64((seq*7919 + d*104729) % 1000)
				seq++
				buf = fmt.Appendf(buf[:0], `{"seq":%d,"ts":%d,"v":%d}`, seq, ts, v)
				send(topics[d], buf)
				win := w.want[topics[d][5:9]]
				a := win[m]
				if a == nil {
					a = &weekAgg{max: math.MinInt64}
					win[m] = a
				}
				a.n++
				a.sum += v
				a.max = max(a.max, v)
				if w.shape.garbage > 0 && seq%w.shape.garbage == 0 {
					w.garbageSent++
					send(topics[d], []byte(`#not json: a broken sensor's frame, kept as a dead letter within side_outputs.max_bytes#`))
				}
			}
		}
	}
	for d := range w.shape.devices {
		seq++
		buf = fmt.Appendf(buf[:0], `{"seq":%d,"ts":%d,"v":0}`, seq, w.end+60_000+int64(d))
		send(topics[d], buf)
	}
	send("week/flush/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":0}`, seq+1, w.end+60_000))
	if err := pub.Flush(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// windows is the oracle's number of one-minute windows.
func (w *week) windows() int {
	n := 0
	for _, m := range w.want {
		n += len(m)
	}
	return n
}

// diskSampler samples what the edge counts toward its disk cap, every 50
// ms, as TestPoisonInputs does, and the bytes of its data directory.
type diskSampler struct {
	addr, dir string
	done      chan struct{}
	wg        sync.WaitGroup

	mu sync.Mutex
	// worst is the most the edge counted toward its cap (disk_used);
	// worstDir the largest data directory (the blocks of every file) and
	// worstState its state file's.
	worst, worstDir, worstState float64
	// Event-ordered firsts: when the raw lane first gave up a segment,
	// when a side output first dropped for its bound, when the cap first
	// held messages at the broker.
	firstRawSkip, firstSideDrop, firstCapWait time.Time
	// at the first sample with the cap holding messages, at the worst
	atCap, atWorst map[string]float64
	worstAt        time.Time
}

func startSampler(addr, dir string) *diskSampler {
	s := &diskSampler{addr: addr, dir: dir, done: make(chan struct{})}
	s.wg.Go(func() {
		for {
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			m := scrape(addr)
			if len(m) == 0 {
				continue // the edge is restarting
			}
			du := dirBytes(dir)
			var st float64
			if fi, err := os.Stat(filepath.Join(dir, "state.db")); err == nil {
				st = float64(allocated(fi))
			}
			now := time.Now()
			s.mu.Lock()
			if u := m["runnel_edge_disk_used_bytes"]; u > s.worst {
				s.worst, s.atWorst, s.worstAt = u, m, now
			}
			s.worstDir = max(s.worstDir, du)
			s.worstState = max(s.worstState, st)
			if s.firstRawSkip.IsZero() && m["runnel_edge_raw_skipped_segments_total"] > 0 {
				s.firstRawSkip = now
			}
			if s.firstSideDrop.IsZero() && m[`runnel_edge_side_output_dropped_total{side="dead"}`] > 0 {
				s.firstSideDrop = now
			}
			if s.firstCapWait.IsZero() && m["runnel_edge_disk_cap_waits_total"] > 0 {
				s.firstCapWait = now
				s.atCap = m
			}
			s.mu.Unlock()
		}
	})
	return s
}

func (s *diskSampler) stop() {
	close(s.done)
	s.wg.Wait()
}

// allocated is the disk a file takes: its blocks, not its length (bbolt
// grows its file ahead of what it writes, and the kernel allocates none of
// that until it does).
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

func dirBytes(dir string) float64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += allocated(fi)
			}
		}
		return nil
	})
	return float64(n)
}

// outage runs the week with the hub down (and the S3 server stopped):
// it publishes everything and returns once the edge has taken in all of
// it or holds the rest at the broker (the cap reached, intake stopped or
// down to a trickle).
// It returns whether the cap was reached.
func (w *week) outage(t testing.TB) (capped bool) {
	w.edge.Start(t)
	w.edge.WaitLog(t, "edge: ready")
	if w.s3 != nil {
		w.s3.Stop() // up for the edge's start, down for the week
	}
	w.sampler = startSampler(w.edgeHTTP, filepath.Join(w.dir, "e1"))
	w.publish(t)
	t.Logf("published %d messages (%d readings, %d garbage) of 7 days in %v", w.published, w.published-w.garbageSent, w.garbageSent, time.Since(w.startedPublish).Round(time.Millisecond))
	in := `runnel_edge_records_in_total{pipeline="week"}`
	var last, depth float64
	still := time.Now()
	type intake struct {
		at time.Time
		in float64
	}
	var hist []intake
	deadline := time.Now().Add(5 * time.Minute)
	for {
		m := scrape(w.edgeHTTP)
		// Everything taken in, and the checkpoints after it committed.
		if m[in] != last || m["runnel_edge_outbox_depth"] != depth {
			last, depth, still = m[in], m["runnel_edge_outbox_depth"], time.Now()
		}
		if last >= float64(w.published) && depth > 0 && time.Since(still) > time.Second {
			return false
		}
		// At the cap: intake held, or trickling in as checkpoints free a
		// little room (side outputs yielding to the aggregates), less
		// than 0.5 % of the stream in 3 s.
		now := time.Now()
		hist = append(hist, intake{now, m[in]})
		for len(hist) > 1 && now.Sub(hist[1].at) >= 3*time.Second {
			hist = hist[1:]
		}
		if m["runnel_edge_disk_cap_waits_total"] > 0 && m[in] < float64(w.published) &&
			now.Sub(hist[0].at) >= 3*time.Second && m[in]-hist[0].in < 0.005*float64(w.published) {
			return true
		}
		if time.Now().After(deadline) || time.Since(still) > 20*time.Second {
			t.Fatalf("the edge took in %v of %d messages and does not hold the rest at the cap (dropped at the cap: %v)\n%s",
				m[in], w.published, m["runnel_edge_disk_cap_dropped_total"], tail(w.edge.Logs.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// weekResult is one window's values as the hub or the outbox has them.
type weekResult struct {
	n       int64
	avg     float64
	max     int64
	version int64
}

func (w *week) matches(a *weekAgg, r weekResult) bool {
	avg := float64(a.sum) / float64(a.n)
	return r.n == a.n && r.max == a.max && math.Abs(r.avg-avg) <= 1e-9*math.Abs(avg)
}

// readOutbox stops the edge, reads its committed outbox with `runnel-edge
// outbox` and starts it again: dev -> window start -> result.
func (w *week) readOutbox(t testing.TB) map[string]map[int64]weekResult {
	stop(t, w.edge)
	out, err := exec.Command(filepath.Join(w.dir, "runnel-edge"), "outbox", "--data-dir", filepath.Join(w.dir, "e1"), "--pipeline", w.spec).Output()
	if err != nil {
		t.Fatalf("runnel-edge outbox: %v", err)
	}
	got := map[string]map[int64]weekResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Key     map[string]string `json:"key"`
			Start   int64             `json:"window_start"`
			Version int64             `json:"version"`
			Values  struct {
				N   int64   `json:"n"`
				Avg float64 `json:"avg"`
				Max int64   `json:"max"`
			} `json:"values"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("outbox line %q: %v", sc.Text(), err)
		}
		dev := r.Key["dev"]
		if got[dev] == nil {
			got[dev] = map[int64]weekResult{}
		}
		got[dev][r.Start] = weekResult{r.Values.N, r.Values.Avg, r.Values.Max, r.Version} // in sequence order: the latest wins
	}
	// At the cap the restarted edge's first batch of held messages waits
	// in the MQTT handler, so it does not get to "edge: ready" (the
	// SUBACK is behind that batch) until the uplink frees room.
	w.edge.Start(t)
	w.edge.WaitLog(t, "edge: serving /metrics")
	return got
}

// hubResults reads the latest version of every window of the week at the
// hub.
func (w *week) hubResults(rc runnelv1.ResultsClient) (map[string]map[int64]weekResult, error) {
	got := map[string]map[int64]weekResult{}
	req := &runnelv1.QueryResultsRequest{Pipeline: "week", Limit: 10000}
	for {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		resp, err := rc.QueryResults(ctx, req)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, r := range resp.Results {
			v := r.Values.Fields
			dev := r.Key.Fields["dev"].GetStringValue()
			if got[dev] == nil {
				got[dev] = map[int64]weekResult{}
			}
			got[dev][r.WindowStart] = weekResult{int64(v["n"].GetNumberValue()), v["avg"].GetNumberValue(), int64(v["max"].GetNumberValue()), int64(r.Version)}
		}
		if resp.NextPageToken == "" {
			return got, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// diff compares results of the week with the oracle; with prefix, only
// the windows up to the latest the results have (what an edge holding
// the rest at the broker has committed) must be there. It returns the
// differences (at most 10 and a count) and how many windows matched.
func (w *week) diff(got map[string]map[int64]weekResult, prefix bool) (diffs []string, matched int) {
	upTo := w.end
	if prefix {
		upTo = math.MinInt64
		for _, m := range got {
			for s := range m {
				if s < w.end {
					upTo = max(upTo, s+60_000)
				}
			}
		}
	}
	more := 0
	add := func(s string) {
		if len(diffs) < 10 {
			diffs = append(diffs, s)
		} else {
			more++
		}
	}
	for dev, m := range w.want {
		for s, a := range m {
			if s+60_000 > upTo {
				continue
			}
			r, ok := got[dev][s]
			switch {
			case !ok:
				add(fmt.Sprintf("%s window %s: missing (want n=%d)", dev, time.UnixMilli(s).UTC().Format(time.DateTime), a.n))
			case !w.matches(a, r):
				add(fmt.Sprintf("%s window %s: got n=%d avg=%v max=%d, want n=%d avg=%v max=%d", dev, time.UnixMilli(s).UTC().Format(time.DateTime),
					r.n, r.avg, r.max, a.n, float64(a.sum)/float64(a.n), a.max))
			default:
				matched++
			}
		}
	}
	for dev, m := range got {
		for s := range m {
			if s >= w.end {
				continue // the flush readings' windows
			}
			if _, ok := w.want[dev][s]; !ok {
				add(fmt.Sprintf("%s window %d: not in the stream", dev, s))
			}
		}
	}
	if more > 0 {
		diffs = append(diffs, fmt.Sprintf("... %d more", more))
	}
	return diffs, matched
}

// catchUp starts the hub and measures the uplink's catch-up: from the
// hub's start to the edge connected, and to its outbox empty with every
// message taken in.
type catchUp struct {
	backlog      float64 // outbox entries and bytes at the hub's start
	backlogBytes float64
	connect      time.Duration // hub ready -> uplink connected
	drain        time.Duration // hub ready -> outbox empty, everything taken in
}

func (w *week) catchUp(t testing.TB) catchUp {
	m := scrape(w.edgeHTTP)
	c := catchUp{backlog: m["runnel_edge_outbox_depth"], backlogBytes: m["runnel_edge_outbox_bytes"]}
	w.hub.Start(t)
	w.hub.WaitLog(t, "runnel-hub: ready")
	began := time.Now()
	deadline := began.Add(3 * time.Minute)
	windows := float64(w.windows())
	for {
		m := scrape(w.edgeHTTP)
		if c.connect == 0 && m["runnel_edge_uplink_connected"] == 1 {
			c.connect = time.Since(began)
		}
		// Every window of the week is applied at the hub (in event-time
		// order, each window has one version) and the outbox is empty.
		if m["runnel_edge_outbox_depth"] == 0 && scrape(w.hubHTTP)["runnel_hub_partials_total"] >= windows {
			c.drain = time.Since(began)
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 min the outbox holds %v entries, the hub applied %v of %v windows\n%s", m["runnel_edge_outbox_depth"],
				scrape(w.hubHTTP)["runnel_hub_partials_total"], windows, tail(w.edge.Logs.String(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWeekOffline: a runnel-edge whose hub and raw archive store (a real
// versitygw, stopped) are down while Mosquitto delivers 7 days of event
// time at compressed speed — 20 devices, 2 readings a device-minute,
// 1-minute count/avg/max windows, a garbage payload every 50th message —
// under a 9 MiB disk cap (RUNNEL_WEEK_FULL=1: 250 devices every 10 s
// under 1 GiB). While the week goes in: the raw lane gives up its
// segments (counted) before the cap ever holds a message; the dead
// letters stay within their bound; what the edge counts toward the cap
// never passes it; at the cap the broker holds the rest. The outbox then
// holds every window of the readings taken in, each equal to the oracle,
// with no gap. Then the hub starts: the edge catches up and the hub's
// results equal the oracle over the whole week, every window once.
func TestWeekOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("a week of readings through real processes")
	}
	shape := ciWeek
	if os.Getenv("RUNNEL_WEEK_FULL") != "" {
		shape = fullWeek
	}
	w := newWeek(t, shape)
	defer func() { w.edge.Kill() }()
	capped := w.outage(t)
	if shape.diskCap <= 64<<20 && !capped {
		t.Errorf("the %d-byte cap was not reached: the test does not see the broker hold messages", shape.diskCap)
	}
	m := scrape(w.edgeHTTP)
	t.Logf("outage over (cap reached: %v): %v of %d messages taken in, outbox %v entries / %v bytes, ingest log %v bytes, side outputs %v bytes; raw skipped %v segments (%v bytes), raw failures %v; dead letters dropped for room %v; cap waits %v",
		capped, m[`runnel_edge_records_in_total{pipeline="week"}`], w.published, m["runnel_edge_outbox_depth"], m["runnel_edge_outbox_bytes"],
		m["runnel_edge_ingest_log_bytes"], m["runnel_edge_side_output_bytes"], m["runnel_edge_raw_skipped_segments_total"], m["runnel_edge_raw_skipped_bytes_total"],
		m["runnel_edge_raw_archive_failures_total"], m[`runnel_edge_side_output_dropped_total{side="dead"}`], m["runnel_edge_disk_cap_waits_total"])

	// The lanes yield in order: the raw archive first.
	if m["runnel_edge_raw_skipped_segments_total"] == 0 {
		t.Errorf("the raw lane gave up no segment under a %d-byte cap with its store down", shape.diskCap)
	}
	if m["runnel_edge_raw_archived_segments_total"] != 0 {
		t.Errorf("%v segments archived with the store down", m["runnel_edge_raw_archived_segments_total"])
	}
	w.sampler.mu.Lock()
	firstRaw, firstCap, atCap := w.sampler.firstRawSkip, w.sampler.firstCapWait, w.sampler.atCap
	w.sampler.mu.Unlock()
	if capped {
		if firstRaw.IsZero() || firstCap.Before(firstRaw) {
			t.Errorf("the cap held messages at the broker (at %v) before the raw lane gave up a segment (at %v)", firstCap, firstRaw)
		}
		// At the cap, the raw lane holds nothing back but what the
		// checkpoints have not covered yet: the log is its active segment
		// and the one or two before it.
		if lb := atCap["runnel_edge_ingest_log_bytes"]; lb > float64(4*shape.segment) {
			t.Errorf("the cap held messages with %v bytes of ingest log (segments of %d): the raw lane kept segments the aggregates needed room for", lb, shape.segment)
		}
	}
	// Side outputs within their bound, garbage dropped oldest first.
	if m["runnel_edge_side_output_bytes"] > float64(shape.sideMax) {
		t.Errorf("side outputs hold %v bytes, bound %d", m["runnel_edge_side_output_bytes"], shape.sideMax)
	}
	if shape.garbage > 0 && int64(w.garbageSent)*80 > shape.sideMax && m[`runnel_edge_side_output_dropped_total{side="dead"}`] == 0 {
		t.Errorf("no dead letter dropped for room after %d garbage payloads under a %d-byte bound", w.garbageSent, shape.sideMax)
	}
	// Nothing lost: every window of what the edge took in is in the
	// outbox, equal to the oracle.
	ob := w.readOutbox(t)
	diffs, matched := w.diff(ob, capped)
	if len(diffs) > 0 {
		t.Fatalf("the outbox after the outage, against the oracle:\n%s", strings.Join(diffs, "\n"))
	}
	if !capped && matched != w.windows() {
		t.Fatalf("the outbox holds %d of the week's %d windows", matched, w.windows())
	}
	t.Logf("the outbox holds %d of the week's %d windows, each equal to the oracle, none missing before the last", matched, w.windows())
	// An outbox entry takes ~90 bytes of state file pages for its 46
	// bytes of value (key, leaf element, branch pages, half-full pages),
	// all counted toward the cap: 40 % of the week's windows fit in 9 MiB.
	if matched < w.windows()*2/5 {
		t.Errorf("the outbox holds only %d of %d windows at the cap: the disk went to something other than the aggregates", matched, w.windows())
	}

	time.Sleep(time.Second)
	t.Logf("the restarted edge at the cap: mqtt connected %v, /healthz %v", scrape(w.edgeHTTP)["runnel_edge_mqtt_connected"], healthz(t, w.edgeHTTP))

	// The link returns.
	linkBack := time.Now()
	c := w.catchUp(t)
	t.Logf("the MQTT source's SUBSCRIBE timed out %d times while the cap held messages (the SUBACK waits behind a held batch)",
		strings.Count(w.edge.Logs.String(), "mqtt: subscribe failed"))
	t.Logf("catch-up: backlog %v entries / %.1f MB; uplink connected %v after the hub was ready, outbox empty and every message taken in after %v",
		c.backlog, c.backlogBytes/1e6, c.connect.Round(time.Millisecond), c.drain.Round(time.Millisecond))
	w.sampler.stop()
	// The edge passes its own cap by the results of what its log already
	// holds (docs/design.md, "The disk cap and a week offline"): records
	// admitted under the cap become outbox entries (counted as the state
	// file's pages) while their segments wait for the checkpoint after.
	// The worst is in the catch-up: the uplink empties the outbox, the
	// broker's backlog fills the log to the cap at full speed, and its
	// results come before its segments go. Seen: 0.5-0.8 MB over this
	// 9 MiB cap on a quiet machine, 1.95 MB (21 %) under CI's load; a
	// third of the cap would be a new defect.
	if w.sampler.worst > float64(shape.diskCap+shape.diskCap/3) {
		a := w.sampler.atWorst
		t.Errorf("the edge counted %v bytes toward its %d-byte cap at %v (first cap wait %v): ingest log %v, outbox %v, side outputs %v; records in %v, checkpoints %v",
			w.sampler.worst, shape.diskCap, w.sampler.worstAt.Format("15:04:05.000"), w.sampler.firstCapWait.Format("15:04:05.000"), a["runnel_edge_ingest_log_bytes"],
			a["runnel_edge_outbox_bytes"], a["runnel_edge_side_output_bytes"], a[`runnel_edge_records_in_total{pipeline="week"}`], a["runnel_edge_checkpoints_total"])
	}
	a := w.sampler.atWorst
	t.Logf("disk: at most %.0f bytes counted toward the %d-byte cap (%+.0f; ingest log %v, state file %v, %v after the link returned); the data directory at most %.0f bytes, its state file %.0f (blocks allocated)",
		w.sampler.worst, shape.diskCap, w.sampler.worst-float64(shape.diskCap), a["runnel_edge_ingest_log_bytes"], a["runnel_edge_state_bytes"],
		w.sampler.worstAt.Sub(linkBack).Round(time.Millisecond), w.sampler.worstDir, w.sampler.worstState)
	// The cap counts what the state file holds (its pages less the free
	// ones), so the file grows past what the edge counted (bounded
	// above) by no more than a commit's new pages; counting the outbox's
	// values alone, it reached 15.6 MB here. (Against the cap itself, +
	// 2 segments, it failed once under CI's load: 11.96 MB, when the edge
	// may pass its cap by a third.) Its free pages it keeps (bbolt never
	// shrinks its file): the directory can pass the cap by those, never by
	// twice (docs/design.md).
	if w.sampler.worstState > w.sampler.worst+float64(2*shape.segment) {
		t.Errorf("the state file took %.0f bytes of disk, the edge counting at most %.0f toward its %d-byte cap", w.sampler.worstState, w.sampler.worst, shape.diskCap)
	}
	if w.sampler.worstDir > float64(2*shape.diskCap) {
		t.Errorf("the data directory took %.0f bytes of disk under a %d-byte cap (state file %.0f)", w.sampler.worstDir, shape.diskCap, w.sampler.worstState)
	}

	conn := dialHub(t, w.hubGRPC)
	rc := runnelv1.NewResultsClient(conn)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := w.hubResults(rc)
		if err == nil {
			diffs, matched = w.diff(got, false)
			if len(diffs) == 0 && matched == w.windows() {
				break
			}
		} else {
			diffs = []string{err.Error()}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub's results against the oracle (%d of %d windows match):\n%s\nhub log:\n%s", matched, w.windows(), strings.Join(diffs, "\n"), tail(w.hub.Logs.String(), 3000))
		}
		time.Sleep(500 * time.Millisecond)
	}
	final := scrape(w.edgeHTTP)
	if final["runnel_edge_uplink_new_epochs_total"] != 0 {
		t.Errorf("the edge started %v new epochs", final["runnel_edge_uplink_new_epochs_total"])
	}
	if v := final["runnel_edge_disk_cap_dropped_total"]; v != 0 {
		t.Errorf("%v messages dropped at the cap (policy block)", v)
	}
	t.Logf("the hub's results equal the oracle: %d windows of 7 days, every reading once", w.windows())
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func dialHub(t testing.TB, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// BenchmarkWeekCatchUp measures the uplink's catch-up after a week
// offline: a runnel-edge takes in 7 days of event time (at compressed
// speed, through Mosquitto) with its hub down and a cap (1 GiB) it does
// not reach, so the week's windows wait in its outbox; then the hub
// starts. Reported: the backlog, the time from the hub's start to the
// uplink connected (its back-off after the outage) and to the outbox
// empty with every window applied at the hub, and the rates over both
// spans: partials/s and MB/s of outbox entries. One op is one week.
func BenchmarkWeekCatchUp(b *testing.B) {
	for _, c := range []struct{ devices, perMinute int }{{20, 2}, {100, 1}} {
		b.Run(fmt.Sprintf("devices=%d", c.devices), func(b *testing.B) {
			shape := weekShape{devices: c.devices, perMinute: c.perMinute, diskCap: 1 << 30, sideMax: 16 << 20, segment: 16 << 20}
			b.ReportAllocs()
			var backlog, backlogBytes, connect, drain float64
			for b.Loop() {
				w := newWeek(b, shape)
				if w.outage(b) {
					b.Fatalf("the %d-byte cap was reached", shape.diskCap)
				}
				c := w.catchUp(b)
				w.sampler.stop()
				w.edge.Kill()
				w.hub.Kill()
				if c.backlog < float64(w.windows()) {
					b.Fatalf("backlog of %v entries for %d windows", c.backlog, w.windows())
				}
				backlog += c.backlog
				backlogBytes += c.backlogBytes
				connect += c.connect.Seconds()
				drain += c.drain.Seconds()
			}
			n := float64(b.N)
			b.ReportMetric(backlog/n, "backlog-entries")
			b.ReportMetric(backlogBytes/n/1e6, "backlog-MB")
			b.ReportMetric(connect/n, "connect-s")
			b.ReportMetric(drain/n, "drain-s")
			b.ReportMetric(backlog/drain, "partials/s")
			b.ReportMetric(backlogBytes/1e6/drain, "MB/s")
			b.ReportMetric(backlog/(drain-connect), "partials/s-connected")
			b.ReportMetric(backlogBytes/1e6/(drain-connect), "MB/s-connected")
		})
	}
}
