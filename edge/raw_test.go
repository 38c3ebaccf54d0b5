package edge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/sync/objstore"
	"github.com/runnel-io/runnel/sync/rawarchive"
)

var errDown = errors.New("object store unreachable")

// storeDown makes every call of st fail as an unreachable S3 endpoint
// does (down false: the store is back).
func storeDown(st *objstore.Mem, down bool) {
	if !down {
		st.SetFault(nil)
		return
	}
	st.SetFault(func(string, string) error { return errDown })
}

// settle waits, every 20th message sent, until the node at addr has taken
// in all of them: each round is then a group commit (a frame) of its own, a
// few KiB, and the 4 KiB segments of these tests seal as they expect, however
// the MQTT source happens to batch the messages.
func settle(t *testing.T, addr string, sent int) {
	t.Helper()
	if sent%20 == 0 {
		waitMetric(t, addr, "runnel_edge_records_in_total", func(v float64) bool { return v >= float64(sent) })
	}
}

func waitMetric(t *testing.T, addr, name string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := strconv.ParseFloat(metric(t, addr, name), 64)
		if err == nil && ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q: never reached", name, metric(t, addr, name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// messagesIn counts the message records (not clock records) of positions
// [from, ...) of a stopped node's ingest log.
func messagesIn(t *testing.T, dir string, from uint64) int {
	t.Helper()
	ctx := context.Background()
	l, _, err := ingestlog.Open(ctx, dir+"/log", &ingestlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	if uint64(l.First()) > from {
		t.Fatalf("the log starts at %d: positions %d to %d are neither archived nor on disk", l.First(), from, l.First())
	}
	r, err := l.NewReader(ingestlog.Position(from))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		rec, _, err := r.Next()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec[0] != 0 { // a topic length; control records have none
			n++
		}
	}
}

func replayCount(t *testing.T, p *operators.Pipeline, src func(context.Context, func([]byte, int64) error) error) (count int64, stats operators.Stats) {
	t.Helper()
	var res bytes.Buffer
	st, err := edge.Replay(context.Background(), edge.ReplayConfig{Pipeline: p, Records: src, Results: &res, Late: io.Discard, Dead: io.Discard})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(res.String()), "\n") {
		if !strings.Contains(line, `"dev":"a"`) {
			continue
		}
		i := strings.Index(line, `"n":`)
		if i < 0 {
			t.Fatalf("result without n: %s", line)
		}
		v, _ := strconv.ParseInt(strings.TrimRight(line[i+4:i+4+strings.IndexAny(line[i+4:], ",}")], " "), 10, 64)
		count = max(count, v)
	}
	return count, st
}

// TestRawArchiveLane: every sealed segment reaches the archive before the
// checkpoint writer deletes it; a replay of the archive plus what is left
// on disk counts every message once.
func TestRawArchiveLane(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	st := objstore.NewMem()
	cfg := edge.NodeConfig{EdgeID: "raw-1", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 20 * time.Millisecond,
		HTTPAddr: addr, NoSync: true, IngestLog: ingestlog.Options{SegmentSize: 4 << 10},
		RawArchive: &edge.RawArchive{Archive: &rawarchive.Archive{Store: st}, Interval: 10 * time.Millisecond}}
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 600
	for i := range n {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"pad":"%032d"}`, i, 1000+i, i), 1)
		settle(t, addr, i+1)
	}
	waitMetric(t, addr, "runnel_edge_records_in_total", func(v float64) bool { return v == n })
	waitMetric(t, addr, "runnel_edge_raw_archived_segments_total", func(v float64) bool { return v >= 5 })
	waitMetric(t, addr, "runnel_edge_raw_pending_bytes", func(v float64) bool { return v == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	a := &rawarchive.Archive{Store: st, Edge: "raw-1"}
	cat, err := a.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	picked, gaps := rawarchive.Range(cat, 0, 0)
	if len(gaps) != 0 || len(picked) == 0 || picked[0].First != 0 {
		t.Fatalf("archive: %d segments from %d, gaps %v; want every position from 0", len(picked), picked[0].First, gaps)
	}
	end := picked[len(picked)-1].End
	archived, _ := replayCount(t, p, edge.ArchivedRecords(a, 0, 0, nil))
	local := messagesIn(t, data, end)
	if archived+int64(local) != n || archived == 0 {
		t.Fatalf("archive counts %d messages, the log on disk %d after it: %d in all, want %d", archived, local, archived+int64(local), n)
	}
}

// TestRawArchiveYields: the raw lane never costs an aggregate. With the
// store down, segments past raw_archive.max_bytes are given up (counted,
// and a gap in the archive) while every message is counted; behind a full
// outbox it waits.
func TestRawArchiveYields(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	st := objstore.NewMem()
	storeDown(st, true)
	cfg := edge.NodeConfig{EdgeID: "raw-2", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 20 * time.Millisecond,
		HTTPAddr: addr, NoSync: true, IngestLog: ingestlog.Options{SegmentSize: 4 << 10},
		RawArchive: &edge.RawArchive{Archive: &rawarchive.Archive{Store: st}, Interval: 10 * time.Millisecond, MaxBytes: 8 << 10}}
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 600
	for i := range n {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"pad":"%032d"}`, i, 1000+i, i), 1)
		settle(t, addr, i+1)
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // closes the window
	waitMetric(t, addr, "runnel_edge_records_in_total", func(v float64) bool { return v == n+1 })
	waitMetric(t, addr, "runnel_edge_raw_skipped_segments_total", func(v float64) bool { return v >= 3 })
	waitMetric(t, addr, "runnel_edge_raw_archive_failures_total", func(v float64) bool { return v > 0 })
	if got := metric(t, addr, `runnel_edge_health{check="raw_archive"`); got == "0" {
		t.Errorf("health raw_archive ok while uploads fail")
	}
	// The store comes back: what is still on disk is archived.
	storeDown(st, false)
	waitMetric(t, addr, "runnel_edge_raw_pending_bytes", func(v float64) bool { return v == 0 })
	waitMetric(t, addr, "runnel_edge_raw_archived_segments_total", func(v float64) bool { return v >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := latestCount(t, p, data, `{"dev":"a"}`); got != n {
		t.Fatalf("counted %d, want %d: the raw lane cost aggregates", got, n)
	}
	a := &rawarchive.Archive{Store: st, Edge: "raw-2"}
	cat, err := a.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, gaps := rawarchive.Range(cat, 0, 0); len(cat) == 0 || cat[0].First == 0 && len(gaps) == 0 {
		t.Fatalf("archive %d segments from %v, no gap: the given-up segments must show", len(cat), cat)
	}
	var gaps []rawarchive.Gap
	replayCount(t, p, edge.ArchivedRecords(a, 0, 0, func(g rawarchive.Gap) { gaps = append(gaps, g) }))
	if len(gaps) == 0 && cat[0].First == 0 {
		t.Fatal("a replay over the archive reported no gap")
	}

	// Behind an outbox above the yield mark (no uplink drains it) the lane
	// waits.
	st2 := objstore.NewMem()
	cfg.DataDir, cfg.EdgeID = t.TempDir(), "raw-3"
	cfg.RawArchive = &edge.RawArchive{Archive: &rawarchive.Archive{Store: st2}, Interval: 10 * time.Millisecond, YieldOutboxBytes: 1}
	stop = runNode(t, cfg)
	for i := range 200 {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"pad":"%032d"}`, i, 5000+i, i), 1)
		settle(t, addr, i+1)
	}
	waitMetric(t, addr, "runnel_edge_raw_yielding", func(v float64) bool { return v == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if keys, _ := st2.List(context.Background(), ""); len(keys) != 0 {
		t.Fatalf("the lane uploaded %d objects while the outbox was above the yield mark", len(keys))
	}
}

// TestIdleEdgeWritesNothing: with no message, no ack and nothing to
// publish, checkpoint ticks commit nothing, and the state file and the
// ingest log stay as they are; one message makes the next tick commit.
func TestIdleEdgeWritesNothing(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	cfg := edge.NodeConfig{EdgeID: "idle", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 20 * time.Millisecond, HTTPAddr: addr}
	stop := runNode(t, cfg)
	defer stop()
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	pub.MustPublish("s/a", []byte(`{"dev":"a","seq":1,"ts":1000}`), 1)
	waitMetric(t, addr, "runnel_edge_records_in_total", func(v float64) bool { return v == 1 })
	// The clock records of an idle pipeline stop past its idle horizon;
	// then the edge is idle.
	waitMetric(t, addr, "runnel_edge_checkpoints_skipped_total", func(v float64) bool { return v >= 10 })
	before := metric(t, addr, "runnel_edge_checkpoints_total")
	stat := func() (int64, time.Time) {
		fi, err := os.Stat(filepath.Join(data, "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size(), fi.ModTime()
	}
	size, mod := stat()
	time.Sleep(300 * time.Millisecond) // 15 ticks
	if after := metric(t, addr, "runnel_edge_checkpoints_total"); after != before {
		t.Fatalf("an idle edge committed checkpoints: %s, then %s", before, after)
	}
	if s2, m2 := stat(); s2 != size || !m2.Equal(mod) {
		t.Fatalf("an idle edge wrote its state file: %d bytes at %v, then %d at %v", size, mod, s2, m2)
	}
	pub.MustPublish("s/a", []byte(`{"dev":"a","seq":2,"ts":1001}`), 1)
	waitMetric(t, addr, "runnel_edge_checkpoints_total", func(v float64) bool { b, _ := strconv.ParseFloat(before, 64); return v > b })
}

// TestRawArchiveTopics: with raw_archive.topics the archive holds only the
// matching messages: a replay of it counts device a (topic s/a) whole and
// nothing of device b (topic s/b), though the edge took both in.
func TestRawArchiveTopics(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	addr := freeAddr(t)
	st := objstore.NewMem()
	cfg := edge.NodeConfig{EdgeID: "raw-4", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 20 * time.Millisecond,
		HTTPAddr: addr, NoSync: true, IngestLog: ingestlog.Options{SegmentSize: 4 << 10},
		RawArchive: &edge.RawArchive{Archive: &rawarchive.Archive{Store: st}, Interval: 10 * time.Millisecond, Topics: []string{"s/a"}}}
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 400
	for i := range n {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d,"pad":"%032d"}`, i, 1000+i, i), 1)
		pub.MustPublish("s/b", fmt.Appendf(nil, `{"dev":"b","seq":%d,"ts":%d,"pad":"%032d"}`, 100000+i, 1000+i, i), 1) // event ids are seq alone
		settle(t, addr, 2*(i+1))
	}
	// Padding on s/a rolls every reading of the test into sealed segments.
	for i := range 200 {
		pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"pad","seq":%d,"ts":%d,"pad":"%032d"}`, 200000+i, 1000, i), 1)
		settle(t, addr, 2*n+i+1)
	}
	waitMetric(t, addr, "runnel_edge_records_in_total", func(v float64) bool { return v == 2*n+200 })
	waitMetric(t, addr, "runnel_edge_raw_pending_bytes", func(v float64) bool { return v == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	a := &rawarchive.Archive{Store: st, Edge: "raw-4"}
	var res bytes.Buffer
	if _, err := edge.Replay(context.Background(), edge.ReplayConfig{Pipeline: p, Records: edge.ArchivedRecords(a, 0, 0, nil), Results: &res, Late: io.Discard, Dead: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if out := res.String(); strings.Contains(out, `"dev":"b"`) || !strings.Contains(out, `"key":{"dev":"a"}`) {
		t.Fatalf("replay of an archive of topic s/a:\n%s", out)
	}
	if got, _ := replayCount(t, p, edge.ArchivedRecords(a, 0, 0, nil)); got != n {
		t.Fatalf("the archive replays to %d readings of device a, want %d", got, n)
	}
}
